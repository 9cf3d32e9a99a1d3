"""The on-disk binary cache: hits, and rebuilding entries that are corrupt or rejected."""

from __future__ import annotations

import numpy as np
import pytest
from luminal_rocm.cache import ENV_CACHE, build_program, cache_dir, entry_key, write_entry
from luminal_rocm.device import open_device

SOURCE = """__kernel void k(__global float *out, long n) {
  long i = get_global_id(0); if (i < n) out[i] = (float)i * 0.5f + %s;
}"""


@pytest.fixture
def device(opencl_backend, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    return open_device()


def _run(device, prg) -> np.ndarray:
    cl = device.cl
    out = np.empty(8, np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, out.nbytes)
    cl.Kernel(prg, "k")(device.queue, (8,), None, buf, np.int64(8))
    cl.enqueue_copy(device.queue, out, buf)
    return out


def test_rocm_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    assert cache_dir() == tmp_path / "opencl"


def test_rocm_cache_key_covers_source_options_and_driver():
    base = entry_key("src", "", "AMD|gfx1100|driver 1")
    assert base != entry_key("src2", "", "AMD|gfx1100|driver 1")
    assert base != entry_key("src", "-O3", "AMD|gfx1100|driver 1")
    assert base != entry_key("src", "", "AMD|gfx1100|driver 2")


def test_rocm_cache_hit_after_first_build(device):
    source = SOURCE % "1.0f"
    first = build_program(device, source)
    assert first.origin == "source" and first.path.exists()
    again = build_program(device, source)
    assert again.origin == "cache"
    np.testing.assert_array_equal(_run(device, again.program), np.arange(8) * 0.5 + 1)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_rocm_cache_corrupt_entry_is_rebuilt(device, damage):
    source = SOURCE % ("2.0f" if damage == "flip" else "3.0f")
    path = build_program(device, source).path
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
    else:
        raw = raw[: len(raw) // 3]
    path.write_bytes(bytes(raw))
    rebuilt = build_program(device, source)
    assert rebuilt.origin == "rebuilt"
    np.testing.assert_array_equal(_run(device, rebuilt.program),
                                  np.arange(8) * 0.5 + float(source[-8:-5]))
    assert build_program(device, source).origin == "cache"  # the rebuild was stored again


def test_rocm_cache_entry_rejected_by_driver_is_rebuilt(device):
    source = SOURCE % "4.0f"
    path = build_program(device, source).path
    write_entry(path, path.stem, b"not a device binary, but with a valid checksum")
    rebuilt = build_program(device, source)
    assert rebuilt.origin == "rebuilt"
    np.testing.assert_array_equal(_run(device, rebuilt.program), np.arange(8) * 0.5 + 4)


def test_rocm_cache_entry_of_another_source_is_not_trusted(device):
    first, second = SOURCE % "5.0f", SOURCE % "6.0f"
    built_first, built_second = build_program(device, first), build_program(device, second)
    built_first.path.write_bytes(built_second.path.read_bytes())  # valid entry, wrong key
    again = build_program(device, first)
    assert again.origin == "rebuilt"
    np.testing.assert_array_equal(_run(device, again.program), np.arange(8) * 0.5 + 5)
