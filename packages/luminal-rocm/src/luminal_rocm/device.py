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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .kernels import KernelSource

ENV_DEVICE = "LUMINAL_OPENCL_DEVICE"
# Most kernels `Device.build_all` puts in one OpenCL program: a driver's build has a large fixed
# cost (PoCL: 0.1-0.2 s) and a small one per kernel (a few ms), while a failed batch is rebuilt
# kernel by kernel, so batches stay moderate.
BUILD_BATCH = 64


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


@dataclass(frozen=True)
class BuiltKernels:
    """Where the kernel functions of one `KernelSource` live: the built `pyopencl.Program`
    and, when it was built together with other kernels, the names they were renamed to."""

    program: Any
    names: Mapping[str, str] = field(default_factory=dict)

    def kernel(self, cl: Any, name: str) -> Any:
        """A new `pyopencl.Kernel` for the kernel function the source calls `name`."""
        return cl.Kernel(self.program, self.names.get(name, name))


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
        # kernel arguments are buffer handles and `long` dims, 8 bytes each, within the
        # device's parameter space (at least 1024 bytes: 128 arguments); `lower` splits larger
        self.max_kernel_args = int(self.device.max_parameter_size) // 8
        # IEEE division and sqrt where the driver offers them: the reference computes both
        # exactly, and the default (2.5 ulp) would show up in comparisons
        exact = self.device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
        self.build_options = "-cl-fp32-correctly-rounded-divide-sqrt" if exact else ""
        # PoCL caches what it compiles on disk itself (`~/.cache/pocl`, keyed by source and
        # options), and asking it for a program's binary makes it compile every kernel for a
        # generic work-group size first (about 0.15 s a kernel on a CPU, more than the build;
        # the launch compiles a specialised one anyway): there, luminal's cache stays off.
        self.binary_cache = "portable computing language" not in choice.platform.name.lower()
        self._built: dict[str, BuiltKernels] = {}
        self._build_lock = threading.Lock()
        self.batch_failures = 0  # batches a driver rejected (then built kernel by kernel)

    @property
    def cache_key(self) -> str:
        """Identifies compiled binaries: same platform, device, and driver build."""
        d, p = self.device, self.choice.platform
        return "|".join(s.strip() for s in (p.name, p.version, d.name, d.version,
                                            d.driver_version))

    def build_all(self, sources: Sequence[KernelSource],
                  batch: int = BUILD_BATCH) -> list[BuiltKernels]:
        """The built kernels of every source, in order. Each distinct source is built once per
        process, through the disk cache (`luminal_rocm.cache`) across processes. The distinct
        sources are taken `batch` at a time, and a batch with any source not built yet is built
        as one OpenCL program: the same sources always give the same programs, so their disk
        cache entries (and the driver's own cache) are found again by the next process."""
        with self._build_lock:
            unique = list({s.source: s for s in sources}.values())
            for start in range(0, len(unique), batch):
                group = unique[start:start + batch]
                if any(s.source not in self._built for s in group):
                    self._build_batch(group)
            return [self._built[s.source] for s in sources]

    def _build(self, source: str) -> Any:
        """Build one OpenCL program, through luminal's disk cache where it is on."""
        if self.binary_cache:
            from .cache import build_program

            return build_program(self, source, self.build_options).program
        return self.cl.Program(self.context, source).build(options=self.build_options)

    def _build_batch(self, group: Sequence[KernelSource]) -> None:
        if len(group) > 1:
            chunks: dict[str, None] = {}  # the helpers once each, in first-use order
            bodies, renames = [], []
            for i, ks in enumerate(group):
                names = {spec.name: f"lm{i}_{spec.name}" for spec in ks.launches}
                chunks.update(dict.fromkeys(ks.prelude))
                bodies.append(ks.renamed(names))
                renames.append(names)
            source = "".join(chunks) + "".join(bodies)
            try:
                prg = self._build(source)
            except self.cl.Error:
                self.batch_failures += 1  # one bad kernel: build each alone, below
            else:
                for ks, names in zip(group, renames):
                    # a kernel built before keeps its program (the driver may have
                    # compiled it for launch already)
                    self._built.setdefault(ks.source, BuiltKernels(prg, names))
                return
        for ks in group:
            if ks.source not in self._built:
                prg = self._build(ks.source)
                self._built[ks.source] = BuiltKernels(prg)


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
