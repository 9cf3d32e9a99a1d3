"""`Device.build_all`: distinct kernels built together as one OpenCL program, each once."""

from __future__ import annotations

import numpy as np
import pytest
from luminal_rocm.cache import ENV_CACHE
from luminal_rocm.device import Device, choose_device
from luminal_rocm.kernels import KernelSource
from luminal_rocm.launch import LaunchSpec

PRELUDE = "inline float lm_twice(float x) { return 2.0f * x; }\n"


def source(value: str, name: str = "k") -> KernelSource:
    def body(function: str) -> str:
        return (f"__kernel void {function}(__global float *out, long n) {{\n"
                f"  long i = get_global_id(0); if (i < n) out[i] = lm_twice((float)i) + {value};"
                "\n}\n")

    return KernelSource((PRELUDE,), body(name), (LaunchSpec(name, (), (8,), (8,)),),
                        lambda names: body(names[name]))


@pytest.fixture
def device(opencl_backend, tmp_path, monkeypatch) -> Device:
    """A private device object (its own context and build table) with a private disk cache."""
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    import pyopencl as cl

    return Device(cl, choose_device(cl, opencl_backend.device_spec))


def run(device: Device, built, name: str = "k") -> np.ndarray:
    cl = device.cl
    out = np.empty(8, np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, out.nbytes)
    built.kernel(cl, name)(device.queue, (8,), None, buf, np.int64(8))
    cl.enqueue_copy(device.queue, out, buf)
    return out


def test_rocm_build_all_batches_distinct_sources(device):
    sources = [source("1.0f"), source("2.0f"), source("1.0f"), source("3.0f", name="k_v")]
    built = device.build_all(sources)
    assert built[0] is built[2]  # the same source is built once
    assert len({id(b.program) for b in built}) == 1  # one program for all of them
    # renamed apart within the program
    assert [b.names for b in built] == [{"k": "lm0_k"}, {"k": "lm1_k"}, {"k": "lm0_k"},
                                        {"k_v": "lm2_k_v"}]
    for b, (s, want) in zip(built, [("k", 1), ("k", 2), ("k", 1), ("k_v", 3)]):
        np.testing.assert_array_equal(run(device, b, s), np.arange(8) * 2.0 + want)
    assert device.build_all([sources[1]])[0] is built[1]  # found again, not rebuilt
    assert device.batch_failures == 0


def test_rocm_build_all_small_batches(device):
    sources = [source(f"{v}.0f") for v in range(5)]
    built = device.build_all(sources, batch=2)
    assert len({id(b.program) for b in built}) == 3  # 2 + 2 + 1 (alone: its own name)
    assert built[4].names == {}
    for v, b in enumerate(built):
        np.testing.assert_array_equal(run(device, b), np.arange(8) * 2.0 + v)


def test_rocm_build_all_keeps_kernels_built_before(device):
    (first,) = device.build_all([source("5.0f")])
    again, new = device.build_all([source("5.0f"), source("6.0f")])
    assert again is first  # a kernel may already be compiled for launch: it is kept
    np.testing.assert_array_equal(run(device, new), np.arange(8) * 2.0 + 6)


def test_rocm_build_all_bad_kernel_is_built_alone(device):
    good, bad, other = source("7.0f"), source("undefined_name"), source("8.0f")
    with pytest.raises(device.cl.Error):
        device.build_all([good, bad, other])
    assert device.batch_failures == 1
    (built,) = device.build_all([good])  # built on its own before the bad one failed
    np.testing.assert_array_equal(run(device, built), np.arange(8) * 2.0 + 7)


def test_rocm_binary_cache_is_off_on_pocl(device, tmp_path):
    device.build_all([source("9.0f"), source("10.0f")])
    written = list((tmp_path / "opencl").glob("*.bin")) if (tmp_path / "opencl").exists() else []
    if "Portable Computing Language" in device.choice.platform.name:
        # PoCL keeps its own kernel cache; fetching binaries would compile every kernel twice
        assert not device.binary_cache and written == []
    else:
        assert device.binary_cache and len(written) == 1
