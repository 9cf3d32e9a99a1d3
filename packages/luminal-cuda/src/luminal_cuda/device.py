"""Finding CuPy, the NVIDIA driver and a device, and saying exactly why when one is missing.

CuPy is imported here and only here, inside functions: `luminal plugins` and `luminal
backends` must stay fast and must work on machines without CuPy, a driver or a GPU.
`LUMINAL_CUDA_DEVICE` picks the device by ordinal (default 0).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from luminal.backend import BackendStatus

ENV_DEVICE = "LUMINAL_CUDA_DEVICE"
INSTALL_HINT = (
    "pip install 'luminal-cuda[cuda12]' (CUDA 12 driver) or 'luminal-cuda[cuda13]' "
    "(CUDA 13 driver)"
)
LIBS_HINT = ("install the CUDA toolkit, or the libraries from pip: pip install "
             "'cupy-cuda12x[ctk]' (or cupy-cuda13x[ctk])")


class CudaUnavailableError(RuntimeError):
    """CuPy, the driver or the device is missing; the message says which and what to do."""


def import_cupy() -> Any:
    """The `cupy` module, or CudaUnavailableError naming the pip command that installs it."""
    try:
        import cupy
    except ImportError as e:
        raise CudaUnavailableError(f"cupy is not installed ({e}): {INSTALL_HINT}") from e
    except Exception as e:  # a broken install can fail with anything while loading its libraries
        raise CudaUnavailableError(f"cupy failed to import ({type(e).__name__}: {e})") from e
    return cupy


def device_ordinal() -> int:
    """The device `LUMINAL_CUDA_DEVICE` names (default 0)."""
    raw = os.environ.get(ENV_DEVICE, "0").strip() or "0"
    if not raw.isdigit():
        raise CudaUnavailableError(f"{ENV_DEVICE}={raw!r} is not a device ordinal (0, 1, ...)")
    return int(raw)


@dataclass(frozen=True)
class DeviceInfo:
    """What kernels are compiled for and what `luminal backends` prints."""

    ordinal: int
    name: str
    arch: str  # "sm_90"
    driver_version: int  # e.g. 12040 for CUDA 12.4
    runtime_version: int
    cublas_version: int  # e.g. 120402 for 12.4.2
    total_memory: int

    def describe(self) -> str:
        def ver(v: int) -> str:
            return f"{v // 1000}.{v % 1000 // 10}"

        cublas = f"{self.cublas_version // 10000}.{self.cublas_version // 100 % 100}"
        return (f"{self.name} [{self.ordinal}] {self.arch}, "
                f"{self.total_memory / 2**30:.0f} GiB, driver CUDA {ver(self.driver_version)}, "
                f"runtime {ver(self.runtime_version)}, cuBLAS {cublas}")


def open_device(cupy: Any) -> DeviceInfo:
    """Check driver, device and NVRTC; describe the chosen device. Raises CudaUnavailableError
    with the reason (no driver, driver too old for this CuPy, no device, no NVRTC)."""
    runtime = cupy.cuda.runtime
    try:
        count = runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver, or one older than CuPy's runtime
        text = str(e)
        if "InsufficientDriver" in text:
            why = ("the NVIDIA driver is missing or older than the CUDA runtime of this CuPy "
                   f"wheel ({text}); install the driver, or the CuPy wheel for its CUDA major "
                   f"version: {INSTALL_HINT}")
        elif "NoDevice" in text:
            why = f"no CUDA device is visible ({text}); check CUDA_VISIBLE_DEVICES"
        else:
            why = f"the CUDA runtime cannot start ({type(e).__name__}: {text})"
        raise CudaUnavailableError(why) from e
    if count == 0:
        raise CudaUnavailableError("the NVIDIA driver reports no CUDA device")
    ordinal = device_ordinal()
    if ordinal >= count:
        raise CudaUnavailableError(f"{ENV_DEVICE}={ordinal} but only {count} device(s) exist")
    props = runtime.getDeviceProperties(ordinal)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    # NVRTC and cuBLAS come from the CUDA toolkit or from pip wheels, not with CuPy itself
    try:
        cupy.cuda.nvrtc.getVersion()
    except Exception as e:
        raise CudaUnavailableError(
            f"NVRTC (the CUDA runtime compiler) cannot be loaded ({e}): {LIBS_HINT}") from e
    try:
        with cupy.cuda.Device(ordinal):
            cublas_version = cupy.cuda.cublas.getVersion(cupy.cuda.get_cublas_handle())
    except Exception as e:
        raise CudaUnavailableError(f"cuBLAS cannot be loaded ({e}): {LIBS_HINT}") from e
    return DeviceInfo(
        ordinal=ordinal,
        name=name,
        arch=f"sm_{props['major']}{props['minor']}",
        driver_version=runtime.driverGetVersion(),
        runtime_version=runtime.runtimeGetVersion(),
        cublas_version=int(cublas_version),
        total_memory=int(props["totalGlobalMem"]),
    )


def probe() -> BackendStatus:
    """Available with the device's description, or unavailable with the reason."""
    try:
        info = open_device(import_cupy())
    except CudaUnavailableError as e:
        return BackendStatus(False, reason=str(e))
    return BackendStatus(True, device=info.describe())
