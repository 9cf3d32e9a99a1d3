"""What `luminal backends` says about CUDA on machines without CuPy, a driver or a GPU, and
that nothing else breaks there."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import luminal as lm
import pytest
from luminal_cuda import CudaBackend, CudaUnavailableError, plugin
from luminal_cuda.device import open_device, probe


class _RuntimeError(RuntimeError):
    pass


def fake_cupy_with(count=None, error: str | None = None, nvrtc: bool = True,
                   cublas: bool = True):
    """A CuPy whose runtime reports `count` devices, or raises `error`."""

    def get_count():
        if error is not None:
            raise _RuntimeError(error)
        return count

    def nvrtc_version():
        if not nvrtc:
            raise OSError("libnvrtc.so.12: cannot open shared object file")
        return (12, 4)

    runtime = SimpleNamespace(
        getDeviceCount=get_count,
        getDeviceProperties=lambda i: {"name": b"NVIDIA H100 80GB HBM3", "major": 9,
                                       "minor": 0, "totalGlobalMem": 80 * 2**30},
        driverGetVersion=lambda: 12040,
        runtimeGetVersion=lambda: 12020,
    )
    def cublas_version(handle):
        if not cublas:
            raise ImportError('Failure finding "libcublasLt.so.12"')
        return 120400

    class Device:
        def __init__(self, ordinal):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    return SimpleNamespace(cuda=SimpleNamespace(
        runtime=runtime, nvrtc=SimpleNamespace(getVersion=nvrtc_version), Device=Device,
        cublas=SimpleNamespace(getVersion=cublas_version), get_cublas_handle=lambda: 1))


def test_cuda_probe_without_cupy_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    status = probe()
    assert not status.available
    assert "cupy is not installed" in status.reason
    assert "pip install 'luminal-cuda[cuda12]'" in status.reason


def test_cuda_compile_without_cupy_raises_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    g = lm.Graph()
    (g.tensor((2,), name="x") * 2).retrieve()
    with pytest.raises(CudaUnavailableError, match="pip install"):
        g.compile(CudaBackend())


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"error": "cudaErrorInsufficientDriver: CUDA driver version is insufficient"},
     "driver is missing or older"),
    ({"error": "cudaErrorNoDevice: no CUDA-capable device is detected"},
     "no CUDA device is visible"),
    ({"error": "cudaErrorUnknown"}, "cannot start"),
    ({"count": 0}, "reports no CUDA device"),
    ({"count": 1, "nvrtc": False}, "NVRTC"),
    ({"count": 1, "cublas": False}, "cuBLAS cannot be loaded.*ctk"),
])
def test_cuda_probe_reasons(kwargs, expected):
    with pytest.raises(CudaUnavailableError, match=expected):
        open_device(fake_cupy_with(**kwargs))


def test_cuda_probe_describes_the_device():
    info = open_device(fake_cupy_with(count=1))
    assert info.arch == "sm_90"
    assert info.describe() == ("NVIDIA H100 80GB HBM3 [0] sm_90, 80 GiB, driver CUDA 12.4, "
                               "runtime 12.2, cuBLAS 12.4")


def test_cuda_device_choice_from_environment(monkeypatch):
    monkeypatch.setenv("LUMINAL_CUDA_DEVICE", "3")
    with pytest.raises(CudaUnavailableError, match="only 1 device"):
        open_device(fake_cupy_with(count=1))
    monkeypatch.setenv("LUMINAL_CUDA_DEVICE", "gpu")
    with pytest.raises(CudaUnavailableError, match="not a device ordinal"):
        open_device(fake_cupy_with(count=1))


def test_cuda_plugin_registers_the_backend():
    backends = []
    plugin.luminal_register_backends(backends.append)
    (backend,) = backends
    assert backend.name == "cuda" and backend.priority == 200


def test_cuda_import_does_not_import_cupy():
    code = ("import sys, luminal_cuda, luminal_cuda.plugin; "
            "luminal_cuda.plugin.luminal_register_backends(lambda b: None); "
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env())
    assert out.stdout.strip() == "False"


def _env() -> dict[str, str]:
    import os

    paths = [p for p in sys.path if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
