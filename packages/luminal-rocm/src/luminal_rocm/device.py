"""Finding, describing and opening the OpenCL device luminal runs on.

`LUMINAL_OPENCL_DEVICE` chooses: `"P:D"` is device D of platform P (the indices `luminal
backends` prints), anything else is a case-insensitive substring of "platform name / device
name". Without it, the first GPU wins, because an OpenCL CPU device (PoCL) is slower than
luminal-cpu on the same cores; any other device is the fallback so the backend still runs (and
is tested) on machines without a GPU.

pyopencl is imported inside the functions, never at module import: the plugin must load on
machines without it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

ENV_DEVICE = "LUMINAL_OPENCL_DEVICE"


class NoDeviceError(RuntimeError):
    """No usable OpenCL device; the message says why and what to install or set."""


@dataclass(frozen=True)
class DeviceChoice:
    """A device found by enumeration, with the indices `LUMINAL_OPENCL_DEVICE` accepts."""

    platform_index: int
    device_index: int
    platform: Any  # pyopencl.Platform (or a test double with the same attributes)
    device: Any  # pyopencl.Device

    def describe(self) -> str:
        """One line for `luminal backends`: name, platform, OpenCL version, indices."""
        d, p = self.device, self.platform
        return (f"{d.name.strip()} [{self.platform_index}:{self.device_index}] on "
                f"{p.name.strip()} ({d.version.strip()}, driver {d.driver_version.strip()})")


def import_pyopencl() -> Any:
    """pyopencl, or NoDeviceError explaining how to get it."""
    try:
        import pyopencl
    except ImportError as e:  # also covers a missing libOpenCL.so behind pyopencl
        raise NoDeviceError(f"pyopencl is not importable ({e}): pip install pyopencl") from e
    return pyopencl


def list_devices(cl: Any) -> list[DeviceChoice]:
    """Every device of every platform, in enumeration order."""
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise NoDeviceError(
            f"no OpenCL platform ({e}): install an ICD such as ROCm's OpenCL runtime "
            f"(rocm-opencl-runtime) or PoCL (pocl-opencl-icd)"
        ) from e
    if not platforms:
        raise NoDeviceError("no OpenCL platform: install an ICD such as ROCm's OpenCL "
                            "runtime (rocm-opencl-runtime) or PoCL (pocl-opencl-icd)")
    found = []
    for pi, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
            devices = []
        found.extend(DeviceChoice(pi, di, platform, d) for di, d in enumerate(devices))
    if not found:
        names = ", ".join(p.name.strip() for p in platforms)
        raise NoDeviceError(f"OpenCL platforms ({names}) report no device")
    return found


def choose_device(cl: Any, spec: str | None = None) -> DeviceChoice:
    """The device `spec` (or `LUMINAL_OPENCL_DEVICE`) names; without either, the first GPU,
    else the first device of any kind."""
    devices = list_devices(cl)
    spec = (os.environ.get(ENV_DEVICE, "") if spec is None else spec).strip()
    if not spec:
        gpus = [c for c in devices if c.device.type & cl.device_type.GPU]
        return (gpus or devices)[0]
    parts = spec.split(":")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        want = (int(parts[0]), int(parts[1]))
        matches = [c for c in devices if (c.platform_index, c.device_index) == want]
    else:
        needle = spec.lower()
        matches = [c for c in devices
                   if needle in f"{c.platform.name} / {c.device.name}".lower()]
    if not matches:
        listing = "; ".join(f"{c.platform_index}:{c.device_index} {c.device.name.strip()}"
                            for c in devices)
        raise NoDeviceError(f"{ENV_DEVICE}={spec!r} matches no OpenCL device (devices: "
                            f"{listing})")
    return matches[0]


class Device:
    """An opened device: context, one in-order queue, and the features kernels depend on."""

    def __init__(self, cl: Any, choice: DeviceChoice):
        self.cl = cl
        self.choice = choice
        self.device = choice.device
        self.context = cl.Context([self.device])
        # In-order queue: kernels run in submission order, so no events are needed in a run.
        self.queue = cl.CommandQueue(self.context)
        extensions = self.device.extensions.split()
        self.has_fp16 = "cl_khr_fp16" in extensions
        # matmul kernel family (luminal_rocm.matmul): register-blocked vectors on CPU devices
        self.matmul_cpu = bool(self.device.type & cl.device_type.CPU)
        self.max_work_group = int(self.device.max_work_group_size)
        # IEEE division and sqrt where the driver offers them: the reference computes both
        # exactly, and the default (2.5 ulp) would show up in comparisons
        exact = self.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        self.build_options = "-cl-fp32-correctly-rounded-divide-sqrt" if exact else ""
        self._programs: dict[str, Any] = {}
        self._build_lock = threading.Lock()

    @property
    def cache_key(self) -> str:
        """Identifies compiled binaries: same platform, device, and driver build."""
        d, p = self.device, self.choice.platform
        return "|".join(s.strip() for s in (p.name, p.version, d.name, d.version,
                                            d.driver_version))

    def build(self, source: str) -> Any:
        """The built `pyopencl.Program` of `source`: once per process, through the disk cache
        (`luminal_rocm.cache`) across processes."""
        from .cache import build_program

        with self._build_lock:
            prg = self._programs.get(source)
            if prg is None:
                prg = build_program(self, source, self.build_options).program
                self._programs[source] = prg
            return prg


_open: dict[str, Device] = {}
_open_lock = threading.Lock()


def open_device(spec: str | None = None) -> Device:
    """The process-wide `Device` for `spec` / `LUMINAL_OPENCL_DEVICE` (contexts are costly,
    and buffers of one graph must share a context)."""
    cl = import_pyopencl()
    choice = choose_device(cl, spec)
    key = f"{choice.platform_index}:{choice.device_index}"
    with _open_lock:
        dev = _open.get(key)
        if dev is None:
            dev = _open[key] = Device(cl, choice)
        return dev
