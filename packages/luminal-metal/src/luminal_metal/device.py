"""Finding and opening the Metal device, and compiling libraries through a disk cache.

Metal needs macOS on Apple silicon (Intel Macs' GPUs lack the SIMD-group matrix operations the
GEMM uses) and PyObjC's Metal bindings, which pip installs only on macOS. `check_platform`
answers "can this machine run it" without importing anything; PyObjC is imported only by
`import_metal`, so the plugin loads everywhere.

Compiled code is cached on disk as one `MTLBinaryArchive` per library source and device
(`~/.cache/luminal/metal`, or `LUMINAL_METAL_CACHE`): Metal compiles MSL itself with
`newLibraryWithSource`, and the archive holds the GPU binaries of the library's pipelines, so a
later process skips the backend compiler. An archive that fails to load is deleted and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any

APPLE_SILICON_REQUIRED = "macOS with Apple silicon required"
ENV_CACHE = "LUMINAL_METAL_CACHE"
SHARED = 0  # MTLResourceStorageModeShared: CPU and GPU see the same (unified) memory


class NoDeviceError(RuntimeError):
    """No usable Metal device; the message says why."""


def check_platform(system: str | None = None, machine: str | None = None) -> None:
    """Raise NoDeviceError unless this is macOS on Apple silicon."""
    system = sys.platform if system is None else system
    machine = platform.machine() if machine is None else machine
    if system != "darwin" or machine != "arm64":
        raise NoDeviceError(f"{APPLE_SILICON_REQUIRED} (this machine: {system}, {machine})")


def import_metal() -> Any:
    """PyObjC's `Metal` module, or NoDeviceError saying what is missing."""
    check_platform()
    try:
        import Metal
    except ImportError as e:
        raise NoDeviceError(f"PyObjC's Metal bindings are missing ({e}): "
                            "pip install pyobjc-framework-Metal") from e
    return Metal


def cache_dir() -> Path:
    configured = os.environ.get(ENV_CACHE)
    return Path(configured) if configured else Path.home() / ".cache" / "luminal" / "metal"


class Device:
    """The system's default Metal device, its command queue, and compiled pipelines."""

    def __init__(self, metal: Any):
        self.metal = metal
        self.device = metal.MTLCreateSystemDefaultDevice()
        if self.device is None:
            raise NoDeviceError("MTLCreateSystemDefaultDevice() found no Metal device")
        self.name = str(self.device.name())
        self.queue = self.device.newCommandQueue()
        self._pipelines: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        return f"{self.name} (unified memory {self.device.hasUnifiedMemory()})"

    def pipelines(self, source: str, functions: list[str]) -> dict[str, Any]:
        """A compute pipeline per kernel function of the library `source` (compiled once per
        process, through the disk cache across processes)."""
        with self._lock:
            key = hashlib.sha256(f"{self.name}\n{platform.mac_ver()[0]}\n{source}".encode())
            digest = key.hexdigest()
            got = self._pipelines.get(digest)
            if got is None:
                got = self._pipelines[digest] = self._build(source, functions, digest)
            return got

    def _build(self, source: str, functions: list[str], digest: str) -> dict[str, Any]:
        mtl = self.metal
        options = mtl.MTLCompileOptions.alloc().init()
        options.setFastMathEnabled_(False)  # luminal's semantics are IEEE float32
        library, error = self.device.newLibraryWithSource_options_error_(source, options, None)
        if library is None:
            raise RuntimeError(f"Metal rejected the generated library: {error}")
        path = cache_dir() / f"{digest}.binarchive"
        archive = self._archive(path)
        built = {}
        for name in functions:
            desc = mtl.MTLComputePipelineDescriptor.alloc().init()
            desc.setComputeFunction_(library.newFunctionWithName_(name))
            if archive is not None:
                desc.setBinaryArchives_([archive])
            new_state = self.device.newComputePipelineStateWithDescriptor_options_reflection_error_
            state, _, error = new_state(desc, 0, None, None)
            if state is None:
                raise RuntimeError(f"Metal could not build kernel {name}: {error}")
            if archive is not None:
                archive.addComputePipelineFunctionsWithDescriptor_error_(desc, None)
            built[name] = state
        if archive is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            archive.serializeToURL_error_(_file_url(str(path)), None)
        return built

    def _archive(self, path: Path) -> Any:
        """The binary archive at `path` (a new, empty one where there is none or it is
        unreadable), or None where this OS offers no binary archives."""
        mtl = self.metal
        if not hasattr(mtl, "MTLBinaryArchiveDescriptor"):
            return None
        desc = mtl.MTLBinaryArchiveDescriptor.alloc().init()
        if path.exists():
            desc.setUrl_(_file_url(str(path)))
            archive, _ = self.device.newBinaryArchiveWithDescriptor_error_(desc, None)
            if archive is not None:
                return archive
            path.unlink(missing_ok=True)  # corrupt or from another OS build: rebuild
            desc = mtl.MTLBinaryArchiveDescriptor.alloc().init()
        archive, _ = self.device.newBinaryArchiveWithDescriptor_error_(desc, None)
        return archive

    # ----- buffers ------------------------------------------------------------------------
    def buffer(self, nbytes: int) -> Any:
        """A new shared-memory buffer of at least `nbytes` (Metal buffers cannot be empty)."""
        return self.device.newBufferWithLength_options_(max(nbytes, 4), SHARED)

    def upload(self, host: Any) -> Any:
        """A shared buffer holding the flat array `host`: the array's own memory, not a copy,
        where it is page-aligned (a memory-mapped weight file), else a copy."""
        page = int(os.sysconf("SC_PAGE_SIZE"))
        address = host.__array_interface__["data"][0]
        if host.nbytes and address % page == 0 and host.nbytes % page == 0:
            buf = self.device.newBufferWithBytesNoCopy_length_options_deallocator_(
                host, host.nbytes, SHARED, None)
            if buf is not None:
                return buf
        buf = self.buffer(host.nbytes)
        if host.nbytes:
            view(buf, host.nbytes)[:] = host.view("uint8").reshape(-1)
        return buf


def view(buf: Any, nbytes: int) -> Any:
    """The first `nbytes` of a shared buffer as a writable uint8 NumPy array (no copy)."""
    import numpy as np

    return np.frombuffer(buf.contents().as_buffer(buf.length()), dtype=np.uint8, count=nbytes)


def _file_url(path: str) -> Any:
    from Foundation import NSURL

    return NSURL.fileURLWithPath_(path)


_open: Device | None = None
_open_lock = threading.Lock()


def open_device() -> Device:
    """The process-wide `Device` (buffers of one graph must share a device)."""
    global _open
    metal = import_metal()
    with _open_lock:
        if _open is None:
            _open = Device(metal)
        return _open
