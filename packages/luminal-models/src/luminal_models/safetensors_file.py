"""Reading safetensors files into NumPy.

Before anything is allocated the header is checked as the reference reader (the ``safetensors``
crate) checks it: the length field against the file size and safetensors' 100 MB cap; the
header is a JSON object without NaN/Infinity constants or deep nesting; ``__metadata__`` maps
strings to strings; every entry has a known dtype, a shape of non-negative integers and
integer offsets whose span matches the shape; and the entries, sorted by offset, tile the data
section exactly (no gap, no overlap, nothing past the end). A corrupt or truncated file fails
with a :class:`~luminal_models.errors.SafetensorsError` naming the file, tensor and offset.

Tensors are read with ``pread`` into new arrays (:mod:`luminal_models.file_reads`), so a file
truncated after it was opened gives an error, never a crash; BF16, which NumPy lacks, is
widened to float32 (exact). The format holds only JSON and raw numbers; nothing is ever
unpickled.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SafetensorsError
from .file_reads import read_exact

__all__ = ["SafetensorInfo", "SafetensorsError", "SafetensorsFile"]

# The reference implementation refuses larger headers too (MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000

_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8,
}  # fmt: skip

# safetensors dtype -> NumPy dtype of the stored bytes (little-endian; BF16 and F8 are special)
_NUMPY = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype("u1"), "I8": np.dtype("i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
}  # fmt: skip


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _shorten(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class SafetensorInfo:
    """One tensor of a safetensors file.

    Attributes:
        name: the tensor's name.
        shape: its shape (row-major, as stored).
        dtype: the safetensors dtype string (``"F32"``, ``"BF16"``, ...).
        offset: absolute byte offset of its data in the file.
        nbytes: size of its data.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    nbytes: int


class SafetensorsFile:
    """A safetensors file, open for reading.

    Attributes:
        path: the file.
        metadata: the header's ``__metadata__`` (str -> str), empty if absent.
        tensors: name -> :class:`SafetensorInfo`, in file order.

    Raises:
        SafetensorsError: the file is missing, truncated, or its header is malformed.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file: Any = None
        header, data_start, size = self._read_header()
        self.metadata: dict[str, str] = self._check_metadata(header.pop("__metadata__", {}))
        self.tensors: dict[str, SafetensorInfo] = {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry, data_start)
        self._check_layout(data_start, size)

    def _read_header(self) -> tuple[dict[str, Any], int, int]:
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 (kept open for tensor reads)
            size = os.fstat(self._file.fileno()).st_size
        except FileNotFoundError:
            raise SafetensorsError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise SafetensorsError(f"{self.path}: is a directory, not a safetensors file") from None
        except OSError as e:
            self.close()
            raise SafetensorsError(f"{self.path}: cannot read: {e.strerror or e}") from e
        try:
            return self._parse_header(size)
        except BaseException:
            self.close()
            raise

    def _parse_header(self, size: int) -> tuple[dict[str, Any], int, int]:
        if size < 8:
            raise SafetensorsError(
                f"{self.path}: truncated file ({size} bytes; a safetensors file starts "
                "with an 8-byte header length)"
            )
        (n,) = struct.unpack("<Q", self._file.read(8))
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise SafetensorsError(
                f"{self.path}: header length field says {n} bytes but the file has "
                f"{size - 8} bytes after it (limit {MAX_HEADER_BYTES}); not a safetensors "
                "file, or a corrupt one"
            )
        text = self._file.read(n)
        if len(text) != n:
            raise SafetensorsError(f"{self.path}: the file shrank while its header was read")
        try:
            header = json.loads(text.decode("utf-8"), parse_constant=_reject_constant,
                                object_pairs_hook=_unique_keys)
        except (UnicodeDecodeError, ValueError) as e:
            raise SafetensorsError(
                f"{self.path}: header (bytes 8..{8 + n}) is not valid JSON: {e}"
            ) from e
        except RecursionError:
            raise SafetensorsError(
                f"{self.path}: header (bytes 8..{8 + n}) nests JSON too deeply"
            ) from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{self.path}: header is not a JSON object")
        return header, 8 + n, size

    def _check_metadata(self, metadata: Any) -> dict[str, str]:
        if not isinstance(metadata, dict) or not all(
                isinstance(v, str) for v in metadata.values()):
            raise SafetensorsError(f"{self.path}: __metadata__ must map strings to strings, got "
                                   f"{_shorten(metadata)}")
        return metadata

    def _check_entry(self, name: str, entry: Any, data_start: int) -> SafetensorInfo:
        where = f"{self.path}: tensor {name!r}"
        try:
            dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            begin, end = offsets
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{where}: malformed header entry {_shorten(entry)}") from None
        if not isinstance(dtype, str) or dtype not in _ITEMSIZE:
            raise SafetensorsError(f"{where}: unknown dtype {_shorten(dtype)}")
        if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
            raise SafetensorsError(f"{where}: shape must be a list of non-negative integers, "
                                   f"got {_shorten(shape)}")
        if not (_is_count(begin) and _is_count(end) and begin <= end):
            raise SafetensorsError(f"{where}: invalid data_offsets {_shorten(offsets)}")
        shape = tuple(shape)
        if end - begin != prod(shape) * _ITEMSIZE[dtype]:
            raise SafetensorsError(
                f"{where}: {dtype} shape {shape} needs {prod(shape) * _ITEMSIZE[dtype]} bytes but "
                f"its offsets {begin}..{end} span {end - begin}"
            )
        return SafetensorInfo(name, shape, dtype, data_start + begin, end - begin)

    def _check_layout(self, data_start: int, size: int) -> None:
        """The tensors, in offset order, must cover the data section exactly once."""
        expected = data_start
        for info in sorted(self.tensors.values(), key=lambda i: (i.offset, i.nbytes)):
            if info.offset != expected:
                what = "overlaps the previous tensor" if info.offset < expected else (
                    f"leaves a gap after byte {expected}")
                raise SafetensorsError(
                    f"{self.path}: tensor {info.name!r}: its data at bytes {info.offset}.."
                    f"{info.offset + info.nbytes} {what}")
            expected += info.nbytes
            if expected > size:
                raise SafetensorsError(
                    f"{self.path}: tensor {info.name!r}: truncated file: its data spans bytes "
                    f"{info.offset}..{expected} but the file has only {size} bytes")
        if expected != size:
            raise SafetensorsError(f"{self.path}: the tensors end at byte {expected} but the "
                                   f"file has {size - expected} more bytes after them")

    def info(self, name: str) -> SafetensorInfo:
        """The :class:`SafetensorInfo` for ``name``; SafetensorsError if absent."""
        try:
            return self.tensors[name]
        except KeyError:
            raise SafetensorsError(f"{self.path}: no tensor named {name!r}") from None

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as a NumPy array of its stored dtype.

        The array is a new read-only copy of the stored bytes; BF16, which NumPy lacks, is
        widened (exactly) to float32.

        Raises:
            SafetensorsError: no such tensor, the file was closed or truncated since it was
                opened, or a dtype NumPy cannot represent (F8).
        """
        info = self.info(name)
        if info.dtype.startswith("F8"):
            raise SafetensorsError(
                f"{self.path}: tensor {name!r} has dtype {info.dtype}, which NumPy cannot hold"
            )
        if self._file is None:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: the file has been closed")
        dtype = _NUMPY[info.dtype]
        raw = read_exact(self._file.fileno(), info.offset, info.nbytes,
                         f"{self.path}: tensor {name!r}", SafetensorsError)
        if info.dtype == "BF16":
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        return raw.view(dtype).reshape(info.shape)

    def close(self) -> None:
        """Close the file (arrays already returned are copies and stay valid)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self.tensors)} tensors)"
