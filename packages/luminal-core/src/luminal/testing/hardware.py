"""Cheap hardware probes for test markers: no vendor SDK or Python package is imported.

`cuda` asks the NVIDIA driver API (libcuda) for a device. `rocm` asks the AMD HIP runtime
(libamdhip64) or, failing that, the OpenCL ICD loader for any OpenCL device: the rocm backend
runs on OpenCL, so PoCL on a CPU counts, which is how CI tests it for real. `metal` looks for
the Metal framework on macOS. `LUMINAL_REQUIRE_HW` (a comma list of these names, or `all`) says
which hardware must be present: there, a missing device fails a test instead of skipping it,
so a GPU runner that lost its driver cannot pass.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable


def _device_count(libs: tuple[str, ...], init: str | None, count: str) -> int:
    """Devices reported by the first loadable library of `libs` (0 when none loads)."""
    for name in libs:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if init is not None and getattr(lib, init)(0) != 0:
            return 0
        n = ctypes.c_int(0)
        return n.value if getattr(lib, count)(ctypes.byref(n)) == 0 else 0
    return 0


@functools.cache
def has_cuda() -> bool:
    return _device_count(("libcuda.so.1", "libcuda.so", "nvcuda.dll"), "cuInit",
                         "cuDeviceGetCount") > 0


def _opencl_device_count() -> int:
    """Devices on the first OpenCL platform that has any (0 without an ICD loader)."""
    for name in ("libOpenCL.so.1", "libOpenCL.so", "OpenCL.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        n_platforms = ctypes.c_uint(0)
        if lib.clGetPlatformIDs(0, None, ctypes.byref(n_platforms)) != 0 or not n_platforms.value:
            return 0
        platforms = (ctypes.c_void_p * n_platforms.value)()
        if lib.clGetPlatformIDs(n_platforms.value, platforms, None) != 0:
            return 0
        all_devices = ctypes.c_ulonglong(0xFFFFFFFF)
        for platform in platforms:
            n = ctypes.c_uint(0)
            if lib.clGetDeviceIDs(ctypes.c_void_p(platform), all_devices, 0, None,
                                  ctypes.byref(n)) == 0 and n.value:
                return n.value
        return 0
    return 0


@functools.cache
def has_rocm() -> bool:
    hip = _device_count(("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"), None,
                        "hipGetDeviceCount")
    return hip > 0 or _opencl_device_count() > 0


@functools.cache
def has_metal() -> bool:
    return sys.platform == "darwin" and ctypes.util.find_library("Metal") is not None


PROBES: dict[str, Callable[[], bool]] = {"cuda": has_cuda, "rocm": has_rocm, "metal": has_metal}


def required_hardware() -> set[str]:
    """Names in `LUMINAL_REQUIRE_HW` (`all` stands for every probe)."""
    names = {n.strip() for n in os.environ.get("LUMINAL_REQUIRE_HW", "").split(",") if n.strip()}
    return set(PROBES) | names if "all" in names else names
