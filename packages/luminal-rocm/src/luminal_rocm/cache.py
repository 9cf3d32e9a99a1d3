"""On-disk cache of OpenCL program binaries, so a graph is compiled by the driver only once.

Drivers compile OpenCL C with LLVM (ROCm's comgr, PoCL): hundreds of milliseconds per program,
which dominates the compile time of small graphs. Entries live in `$LUMINAL_CACHE/opencl/`
(default `~/.cache/luminal/opencl/`), keyed by the SHA-256 of the source, the build options
and the device identity including its driver version, so a driver upgrade never loads stale
code. Each file carries a magic tag, its own key and the SHA-256 of its payload: a truncated
or corrupt entry, or one built for another key (copied or renamed), fails the check, or the
driver rejects it, and is rebuilt from source, never trusted.
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
_MAGIC = b"LMCLBIN2"


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


def read_entry(path: Path, key: str) -> bytes | None:
    """The binary stored at `path` for `key`, or None when missing, built for another key or
    failing its checksum."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    tag = _MAGIC + bytes.fromhex(key)
    head = len(tag) + 32
    if len(raw) <= head or not raw.startswith(tag):
        return None
    digest, payload = raw[len(tag):head], raw[head:]
    return payload if hashlib.sha256(payload).digest() == digest else None


def write_entry(path: Path, key: str, binary: bytes) -> None:
    """Store atomically (write a temp file, rename), so concurrent processes never see half
    an entry. A read-only or full disk only costs the cache, never the build."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + bytes.fromhex(key) + hashlib.sha256(binary).digest() + binary)
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
    key = entry_key(source, options, device.cache_key)
    path = cache_dir() / f"{key}.bin"
    binary = read_entry(path, key)
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
        write_entry(path, key, bytes(binaries[0]))
    return BuiltProgram(prg, origin, path)
