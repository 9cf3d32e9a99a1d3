"""On-disk cache of OpenCL program binaries, so a graph is compiled by the driver only once.

Drivers compile OpenCL C with LLVM (ROCm's comgr, PoCL): hundreds of milliseconds per program,
which dominates the compile time of small graphs. Entries live in `$LUMINAL_CACHE/opencl/`
(default `~/.cache/luminal/opencl/`), keyed by the SHA-256 of the source, the build options
and the device identity including its driver version, so a driver upgrade never loads stale
code. Each file carries a magic tag and the SHA-256 of its payload: a truncated or corrupt
entry fails the check, or the driver rejects it, and is rebuilt from source, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_CACHE = "LUMINAL_CACHE"
_MAGIC = b"LMCLBIN1"


def cache_dir() -> Path:
    """Where binaries are stored: `$LUMINAL_CACHE/opencl` or `~/.cache/luminal/opencl`."""
    root = os.environ.get(ENV_CACHE)
    base = Path(root) if root else Path.home() / ".cache" / "luminal"
    return base / "opencl"


def entry_key(source: str, options: str, device_key: str) -> str:
    h = hashlib.sha256()
    for part in (source, options, device_key):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def read_entry(path: Path) -> bytes | None:
    """The binary stored at `path`, or None when missing or failing its checksum."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + 32
    if len(raw) <= head or not raw.startswith(_MAGIC):
        return None
    digest, payload = raw[len(_MAGIC):head], raw[head:]
    return payload if hashlib.sha256(payload).digest() == digest else None


def write_entry(path: Path, binary: bytes) -> None:
    """Store atomically (write a temp file, rename), so concurrent processes never see half
    an entry. A read-only or full disk only costs the cache, never the build."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(binary).digest() + binary)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


@dataclass
class BuiltProgram:
    """A built `pyopencl.Program` and where it came from: "cache", "source" (no entry) or
    "rebuilt" (an entry was corrupt or rejected by the driver)."""

    program: Any
    origin: str
    path: Path


def build_program(device: Any, source: str, options: str = "") -> BuiltProgram:
    """Build `source` for `device` (a `luminal_rocm.device.Device`), through the disk cache."""
    cl = device.cl
    path = cache_dir() / f"{entry_key(source, options, device.cache_key)}.bin"
    binary = read_entry(path)
    origin = "source"
    if binary is not None:
        try:
            prg = cl.Program(device.context, [device.device], [binary]).build(options=options)
            return BuiltProgram(prg, "cache", path)
        except cl.Error:
            origin = "rebuilt"
    elif path.exists():
        origin = "rebuilt"
    prg = cl.Program(device.context, source).build(options=options)
    binaries = prg.get_info(cl.program_info.BINARIES)
    if binaries and binaries[0]:
        write_entry(path, bytes(binaries[0]))
    return BuiltProgram(prg, origin, path)
