"""The system C compiler: finding it, building shared libraries, and the on-disk cache.

A graph's library is one translation unit (`build`); the runtime library is several, compiled
at the same time by one compiler process each and then linked (`build_units`).

Libraries are cached under `$LUMINAL_CACHE/cpu` (default `~/.cache/luminal/cpu`), named by a
hash of the source, the compiler's version, the flags and the host CPU (`-march=native`
depends on it). Each `.so` has a `.sha256` beside it and its key compiled in; a library
whose checksum does not match, that was built for another key (an entry copied or renamed),
that is cut short (checked against its ELF headers before it is mapped), or that fails to
load, is rebuilt, never trusted.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import ctypes
import functools
import hashlib
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .device import cpu_signature

# -ffast-math is deliberately absent: it breaks inf/nan semantics. -fno-math-errno lets libm
# calls inline; -ffp-contract=off keeps a*b+c rounded twice, as the reference computes it.
BASE_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared")
OPENMP_FLAG = "-fopenmp"
CANDIDATES = ("gcc", "clang", "cc")


class CompileError(RuntimeError):
    """The C compiler rejected generated code (a luminal bug: please report it)."""


# glibc's vector math library (libmvec, glibc >= 2.35 on x86-64): declaring these functions
# `simd` lets gcc vectorise loops that call them (results within 4 ulp; inf/nan exact).
VECTOR_MATH = "".join(
    f'__attribute__((__simd__("notinbranch"))) float {fn}(float);\n'
    for fn in ("exp2f", "log2f", "sinf")
)
_PROBE = "#include <math.h>\n" + VECTOR_MATH + """
void lm_probe(const float *restrict x, float *restrict y, long n) {
  #pragma omp parallel for
  for (long i = 0; i < n; i++) y[i] = exp2f(x[i]) + log2f(x[i]) + sinf(x[i]);
}
"""


@dataclass(frozen=True)
class Compiler:
    """A C compiler command (argv prefix), its identity and what it supports here."""

    argv: tuple[str, ...]
    version: str
    openmp: bool
    vector_math: bool = False
    error: str = ""  # why it cannot build shared libraries here (empty: it can)

    @property
    def flags(self) -> tuple[str, ...]:
        return BASE_FLAGS + ((OPENMP_FLAG,) if self.openmp else ())

    @property
    def libs(self) -> tuple[str, ...]:
        return ("-lmvec", "-lm") if self.vector_math else ("-lm",)


def find_compiler() -> tuple[str, ...] | None:
    """The first working C compiler among $CC, gcc, clang and cc, or None."""
    names = []
    if os.environ.get("CC"):
        names.append(shlex.split(os.environ["CC"]))
    names += [[c] for c in CANDIDATES]
    for argv in names:
        if argv and shutil.which(argv[0]):
            return (shutil.which(argv[0]), *argv[1:])
    return None


def _link_error(argv: tuple[str, ...], flags: tuple[str, ...], libs: tuple[str, ...]) -> str:
    """The compiler's complaint when it cannot build the probe library, else ""."""
    # GNU ld accepts a shared library with unresolved symbols unless told otherwise
    strict = ("-Wl,--no-undefined",) if sys.platform.startswith("linux") else ()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [*argv, *flags, *strict, "-x", "c", "-", "-o", f"{tmp}/probe.so", *libs],
            input=_PROBE, capture_output=True, text=True, errors="replace", check=False,
        )
    return "" if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


@functools.lru_cache(maxsize=8)
def _identify(argv: tuple[str, ...]) -> Compiler:
    out = subprocess.run([*argv, "--version"], capture_output=True, text=True, check=False)
    version = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""
    # the best configuration that builds and links here: OpenMP and vector math, or less
    for openmp, vector_math in ((True, True), (True, False), (False, False)):
        cc = Compiler(argv, version, openmp, vector_math)
        error = _link_error(argv, cc.flags, cc.libs)
        if not error:
            return cc
    return Compiler(argv, version, openmp=False, error=error.splitlines()[-1])


def compiler() -> Compiler | None:
    """The compiler builds use (identified once per process), or None when there is none."""
    argv = find_compiler()
    return None if argv is None else _identify(argv)


def cache_dir() -> Path:
    root = os.environ.get("LUMINAL_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "luminal"
    return base / "cpu"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_key(source: str, cc: Compiler, links: tuple[Path, ...] = ()) -> str:
    # argv too: $CC may carry flags of its own ("gcc -mno-avx512f" builds other code)
    ident = "\0".join((cc.version, " ".join(cc.argv + cc.flags + cc.libs), cpu_signature(),
                       *map(str, links)))
    return _digest(f"{ident}\0{source}".encode())[:40]


# GCC 12's SLP vectorizer crashes on some kernels ("internal compiler error: in
# vectorizable_live_operation"); such a source is compiled again without that pass
ICE_RETRY_FLAGS = ("-fno-tree-slp-vectorize",)


def _compile(source: str, cc: Compiler, args: tuple[str, ...], what: str = "") -> None:
    """Runs the compiler on `source` with its flags and `args` (what to make of it), again
    without the pass that crashed when it crashes; `what` names the source in the error."""
    # the source goes in on stdin, so no temporary file name ends up in the library
    def run(extra: tuple[str, ...]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*cc.argv, *cc.flags, *extra, "-x", "c", "-", *args],
            input=source, capture_output=True, text=True, errors="replace", check=False,
        )

    proc = run(())
    if proc.returncode != 0 and "internal compiler error" in proc.stderr:
        proc = run(ICE_RETRY_FLAGS)
    if proc.returncode != 0:
        on = f" on {what}" if what else ""
        raise CompileError(f"C compiler failed{on} ({' '.join(cc.argv)}):\n{proc.stderr[-4000:]}")


def _key_marker(key: str) -> bytes:
    return f"luminal-cache-key:{key}".encode()


def _with_key(source: str, key: str) -> str:
    """The source with its cache key compiled in, so an entry proves which source it was built
    from: a library of another graph copied under this key (with its checksum) is refused."""
    marker = _key_marker(key).decode()
    return f'{source}\n__attribute__((used)) const char lm_cache_key[] = "{marker}";\n'


def _elf_complete(data: bytes) -> bool:
    """Whether every segment the loader maps and the section table lie inside `data`: a
    library cut short would otherwise be mapped past its end and crash on first use (SIGBUS)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return False
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    word = "Q" if wide else "I"
    ph_off, sh_off = struct.unpack_from(f"{order}{word}{word}", data, 0x20 if wide else 0x1C)
    ph_size, ph_num, sh_size, sh_num = struct.unpack_from(f"{order}4H", data,
                                                          0x36 if wide else 0x2A)
    if ph_off + ph_size * ph_num > len(data) or sh_off + sh_size * sh_num > len(data):
        return False
    offset_at, filesz_at = (8, 32) if wide else (4, 16)  # p_offset, p_filesz
    for k in range(ph_num):
        at = ph_off + k * ph_size
        (offset,) = struct.unpack_from(order + word, data, at + offset_at)
        (filesz,) = struct.unpack_from(order + word, data, at + filesz_at)
        if offset + filesz > len(data):
            return False
    return True


def _load_verified(so: Path, checksum: Path, key: str) -> ctypes.CDLL | None:
    """The cached library, if its checksum matches, it was built for `key`, and (on ELF
    systems) it is complete; else None (and the entry is rebuilt)."""
    try:
        data = so.read_bytes()
        if checksum.read_text().strip() != _digest(data) or _key_marker(key) not in data:
            return None
        if sys.platform.startswith("linux") and not _elf_complete(data):
            return None
        return ctypes.CDLL(str(so))
    except OSError:  # missing, unreadable, a directory, or rejected by the loader
        return None


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@functools.lru_cache(maxsize=1)
def _private_dir() -> Path:
    """Where libraries go when the cache cannot hold them (removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="luminal-cpu-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@dataclass(frozen=True)
class Library:
    """A loaded shared library and whether it came from the cache."""

    handle: ctypes.CDLL
    path: Path
    cached: bool


def _cached(key: str, source: str, make: Callable[[Path], None]) -> Library:
    """The library of cache entry `key` when a verified copy exists, else made by `make(out)`
    (which writes it to `out`, in a temporary directory it may use too) and stored with its
    `source` (replacing a corrupt entry). When the cache cannot be written (read-only, full, or
    an entry's path taken by a directory), the library goes to a private temporary directory
    instead, with a warning."""
    directory = cache_dir()
    so, checksum = directory / f"{key}.so", directory / f"{key}.sha256"
    lib = _load_verified(so, checksum, key)
    if lib is not None:
        return Library(lib, so, cached=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "lib.so"
        make(built)
        data = built.read_bytes()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(directory / f"{key}.c", source.encode())
        _write_atomic(so, data)
        _write_atomic(checksum, _digest(data).encode())
    except OSError as e:
        warnings.warn(f"luminal-cpu: cannot store a compiled library in the cache {directory} "
                      f"({e.strerror or e}); using an uncached copy", RuntimeWarning,
                      stacklevel=3)
        so = _private_dir() / f"{key}.so"
        so.write_bytes(data)
    return Library(ctypes.CDLL(str(so)), so, cached=False)


def build(source: str, cc: Compiler, links: tuple[Path, ...] = ()) -> Library:
    """The shared library for `source` (linked to the libraries `links`), cached (`_cached`)."""
    key = cache_key(source, cc, links)
    source = _with_key(source, key)
    # linked libraries are named by absolute path, which the loader then opens directly
    return _cached(key, source, lambda out: _compile(
        source, cc, ("-x", "none", *map(str, links), "-o", str(out), *cc.libs)))


def _unit_header(name: str) -> str:
    return f"/* ---- translation unit {name} ---- */\n"


def build_units(units: Sequence[tuple[str, str]], cc: Compiler, announce: str = "") -> Library:
    """One shared library from the translation units `units` ((name, source) pairs), cached
    (`_cached`) under a key that covers every unit, their names and order. Each unit is
    compiled to an object by a compiler process of its own, at most one per CPU at once, then
    the objects are linked in the order given: the build takes about as long as its longest
    unit where there are cores enough. A unit the compiler rejects is named in the
    CompileError. `announce`: a line written to stderr before compiling (a long build that the
    caller would otherwise wait on in silence); nothing is written when the cache has it."""
    key = cache_key("".join(_unit_header(name) + text for name, text in units), cc)
    # the key goes into the first unit, so the library proves which sources it was built from
    units = [(name, _with_key(text, key) if k == 0 else text)
             for k, (name, text) in enumerate(units)]

    def make(out: Path) -> None:
        if announce:
            print(announce, file=sys.stderr, flush=True)
        objects = [out.with_name(f"unit{k}.o") for k in range(len(units))]
        workers = min(len(units), os.cpu_count() or 1)
        # threads only wait on the compiler processes, which do the work in parallel
        pool = concurrent.futures.ThreadPoolExecutor(workers)
        try:
            compiling = [pool.submit(_compile, text, cc, ("-c", "-o", str(obj)), name)
                         for (name, text), obj in zip(units, objects)]
            for job in compiling:
                job.result()
        finally:  # after an error, units not yet started are not compiled
            pool.shutdown(cancel_futures=True)
        proc = subprocess.run([*cc.argv, *cc.flags, *map(str, objects), "-o", str(out), *cc.libs],
                              capture_output=True, text=True, errors="replace", check=False)
        if proc.returncode != 0:
            raise CompileError(f"linking the units {', '.join(name for name, _ in units)} "
                               f"failed ({' '.join(cc.argv)}):\n{proc.stderr[-4000:]}")

    return _cached(key, "".join(_unit_header(name) + text for name, text in units), make)
