"""What CPU this is: its name for `luminal backends`, and a signature for the build cache."""

from __future__ import annotations

import functools
import hashlib
import os
import platform
from pathlib import Path

_ISAS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("asimd", "NEON"), ("sse4_2", "SSE4.2"))


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in info:
            info[key.strip()] = value.strip()
    return info


def cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def isa() -> str:
    """The widest SIMD extension the CPU reports (e.g. "AVX-512 + VNNI")."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    for flag, name in _ISAS:
        if flag in flags:
            if flag == "avx512f" and "avx512_vnni" in flags:
                return name + " + VNNI"
            return name
    return platform.machine()


def cpu_name() -> str:
    info = _cpuinfo()
    return info.get("model name") or platform.processor() or platform.machine() or "CPU"


def description() -> str:
    """e.g. "AMD EPYC, 2 cores, AVX-512 + VNNI"."""
    return f"{cpu_name()}, {cores()} cores, {isa()}"


def cpu_signature() -> str:
    """Identifies the instruction set `-march=native` targets here (part of cache keys)."""
    info = _cpuinfo()
    raw = "|".join((platform.machine(), info.get("model name", ""), info.get("flags", "")))
    return hashlib.sha256(raw.encode()).hexdigest()[:16]
