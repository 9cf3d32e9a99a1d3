"""Cheap hardware probes for test markers: no vendor SDK or Python package is imported.

`cuda` asks the NVIDIA driver API (libcuda) for a device, `rocm` the AMD HIP runtime
(libamdhip64), `metal` looks for the Metal framework on macOS. `LUMINAL_REQUIRE_HW` (a comma
list of these names, or `all`) says which hardware must be present: there, a missing device
fails a test instead of skipping it, so a GPU runner that lost its driver cannot pass.
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


@functools.cache
def has_rocm() -> bool:
    return _device_count(("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"), None,
                         "hipGetDeviceCount") > 0


@functools.cache
def has_metal() -> bool:
    return sys.platform == "darwin" and ctypes.util.find_library("Metal") is not None


PROBES: dict[str, Callable[[], bool]] = {"cuda": has_cuda, "rocm": has_rocm, "metal": has_metal}


def required_hardware() -> set[str]:
    """Names in `LUMINAL_REQUIRE_HW` (`all` stands for every probe)."""
    names = {n.strip() for n in os.environ.get("LUMINAL_REQUIRE_HW", "").split(",") if n.strip()}
    return set(PROBES) | names if "all" in names else names
