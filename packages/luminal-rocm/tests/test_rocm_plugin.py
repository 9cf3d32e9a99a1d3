"""Registration, the lazy import of pyopencl, device selection and probe messages.

Selection and probe logic run against fake pyopencl modules, so every branch (no pyopencl, no
ICD, no device, a GPU next to a CPU, a bad `LUMINAL_OPENCL_DEVICE`) is tested on any machine.
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from luminal_rocm import ENV_DEVICE, OpenCLBackend
from luminal_rocm.device import NoDeviceError, choose_device


def test_rocm_plugin_registers_backend():
    from luminal_rocm import plugin

    got = []
    plugin.luminal_register_backends(got.append)
    (backend,) = got
    assert isinstance(backend, OpenCLBackend)
    assert (backend.name, backend.aliases, backend.priority) == ("rocm", ("opencl",), 150)
    assert {"float32", "float16", "int32", "bool"} <= set(backend.dtypes)


def test_rocm_plugin_import_does_not_import_pyopencl():
    code = ("import sys, luminal_rocm.plugin as p; p.luminal_register_backends(lambda b: None); "
            "print('pyopencl' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# ----- fakes ---------------------------------------------------------------------------------
class _Error(Exception):
    pass


class _Device:
    def __init__(self, name: str, kind: int):
        self.name, self.type = name, kind
        self.version, self.driver_version = "OpenCL 2.0", "1.0"


class _Platform:
    def __init__(self, name: str, devices: list[_Device] | None):
        self.name, self._devices = name, devices

    def get_devices(self):
        if self._devices is None:
            raise _Error("DEVICE_NOT_FOUND")
        return self._devices


def fake_cl(platforms) -> types.SimpleNamespace:
    """A stand-in for the pyopencl module: `platforms` is a list or an exception to raise."""

    def get_platforms():
        if isinstance(platforms, Exception):
            raise platforms
        return platforms

    return types.SimpleNamespace(
        Error=_Error, get_platforms=get_platforms,
        device_type=types.SimpleNamespace(GPU=4, CPU=2),
    )


CPU, GPU = 2, 4
MACHINE = [
    _Platform("Portable Computing Language", [_Device("pthread-znver3", CPU)]),
    _Platform("AMD Accelerated Parallel Processing",
              [_Device("gfx1100", GPU), _Device("gfx90a", GPU)]),
]


# ----- selection -----------------------------------------------------------------------------
def test_rocm_default_prefers_gpu(monkeypatch):
    monkeypatch.delenv(ENV_DEVICE, raising=False)
    got = choose_device(fake_cl(MACHINE))
    assert (got.platform_index, got.device_index, got.device.name) == (1, 0, "gfx1100")


def test_rocm_default_falls_back_to_any_device(monkeypatch):
    monkeypatch.delenv(ENV_DEVICE, raising=False)
    got = choose_device(fake_cl(MACHINE[:1]))
    assert got.device.name == "pthread-znver3"


@pytest.mark.parametrize(("spec", "want"), [
    ("1:1", "gfx90a"), ("0:0", "pthread-znver3"), ("GFX90A", "gfx90a"),
    ("portable", "pthread-znver3"),
])
def test_rocm_env_var_selects_device(monkeypatch, spec, want):
    monkeypatch.setenv(ENV_DEVICE, spec)
    assert choose_device(fake_cl(MACHINE)).device.name == want


def test_rocm_env_var_without_match_lists_devices(monkeypatch):
    monkeypatch.setenv(ENV_DEVICE, "2:0")
    with pytest.raises(NoDeviceError, match=r"matches no OpenCL device.*1:1 gfx90a"):
        choose_device(fake_cl(MACHINE))


def test_rocm_describe_names_device_platform_and_indices(monkeypatch):
    monkeypatch.setenv(ENV_DEVICE, "1:1")
    text = choose_device(fake_cl(MACHINE)).describe()
    assert text.startswith("gfx90a [1:1] on AMD Accelerated Parallel Processing")


# ----- probe messages ------------------------------------------------------------------------
def _probe_with(monkeypatch, module) -> str:
    monkeypatch.setitem(sys.modules, "pyopencl", module)
    status = OpenCLBackend().probe()
    assert not status.available
    return status.reason


def test_rocm_probe_without_pyopencl(monkeypatch):
    assert "pip install pyopencl" in _probe_with(monkeypatch, None)


def test_rocm_probe_without_icd(monkeypatch):
    reason = _probe_with(monkeypatch, fake_cl(_Error("PLATFORM_NOT_FOUND_KHR")))
    assert "no OpenCL platform" in reason and "pocl-opencl-icd" in reason


def test_rocm_probe_without_devices(monkeypatch):
    reason = _probe_with(monkeypatch, fake_cl([_Platform("Empty", None)]))
    assert reason == "OpenCL platforms (Empty) report no device"


@pytest.mark.parametrize(("spec", "priority"), [("1:0", None), ("0:0", 50)])
def test_rocm_probe_ranks_a_cpu_device_below_luminal_cpu(monkeypatch, spec, priority):
    # On a GPU rocm outranks luminal-cpu (100); on PoCL's CPU device it must not.
    monkeypatch.setitem(sys.modules, "pyopencl", fake_cl(MACHINE))
    status = OpenCLBackend(device=spec).probe()
    assert status.available and status.priority == priority


def test_rocm_probe_bad_env_var(monkeypatch):
    monkeypatch.setenv(ENV_DEVICE, "no-such-device")
    assert "no-such-device" in _probe_with(monkeypatch, fake_cl(MACHINE))


# ----- the real device -----------------------------------------------------------------------
def test_rocm_probe_reports_real_device(opencl_backend, monkeypatch):
    status = opencl_backend.probe()
    assert status.available and "[" in status.device and " on " in status.device
    monkeypatch.setenv(ENV_DEVICE, "0:0")
    assert "[0:0]" in OpenCLBackend().probe().device
    monkeypatch.setenv(ENV_DEVICE, "99:0")
    assert "matches no OpenCL device" in OpenCLBackend().probe().reason


def test_rocm_compile_uses_selected_device(opencl_backend, monkeypatch):
    import luminal as lm
    import numpy as np

    g = lm.Graph()
    x = g.tensor((4,), name="x").set(np.arange(4, dtype=np.float32))
    y = (x * 2).retrieve()
    g.compile((lm.GenericCompiler(), OpenCLBackend(device="0:0")))
    g.execute()
    assert y.numpy().tolist() == [0, 2, 4, 6]
    monkeypatch.setenv(ENV_DEVICE, "no-such-device")
    with pytest.raises(NoDeviceError, match="no-such-device"):
        g.compile((lm.GenericCompiler(), OpenCLBackend()))
