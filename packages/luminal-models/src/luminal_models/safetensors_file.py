"""Reading safetensors files into NumPy, memory-mapped.

The file is mapped read-only once (``mmap``) and each tensor is a NumPy view of the map at the
byte offsets its header entry gives (``np.frombuffer``): reading a tensor copies nothing and
touches only the pages it uses. BF16, which NumPy lacks, is widened to a new float32 array
(exact). Before anything is allocated the header is checked by hand: its length field is
compared with the file size (and safetensors' own 100 MB cap), and every tensor's byte range is
checked against the file, at open and again at read, so a corrupt or truncated file fails with a
:class:`~luminal_models.errors.SafetensorsError` naming the file, tensor and offset. The format
holds only JSON and raw numbers; nothing is ever unpickled.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SafetensorsError

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
    """A memory-mapped safetensors file.

    Attributes:
        path: the file.
        metadata: the header's ``__metadata__`` (str -> str), empty if absent.
        tensors: name -> :class:`SafetensorInfo`, in file order.

    Raises:
        SafetensorsError: the file is missing, truncated, or its header is malformed.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._map: mmap.mmap | None = None
        self._file: Any = None
        header, data_start, size = self._read_header()
        self.metadata: dict[str, str] = dict(header.pop("__metadata__", None) or {})
        self.tensors: dict[str, SafetensorInfo] = {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry, data_start, size)

    def _read_header(self) -> tuple[dict[str, Any], int, int]:
        try:
            # kept open to see the file's current size at each read: touching mapped pages
            # past the end of a file truncated since would kill the process (SIGBUS)
            self._file = open(self.path, "rb")  # noqa: SIM115
            size = os.fstat(self._file.fileno()).st_size
            if size < 8:
                self.close()
                raise SafetensorsError(
                    f"{self.path}: truncated file ({size} bytes; a safetensors file starts "
                    "with an 8-byte header length)"
                )
            self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise SafetensorsError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise SafetensorsError(f"{self.path}: is a directory, not a safetensors file") from None
        except OSError as e:
            self.close()
            raise SafetensorsError(f"{self.path}: cannot read: {e.strerror or e}") from e
        size = len(self._map)
        (n,) = struct.unpack_from("<Q", self._map, 0)
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise SafetensorsError(
                f"{self.path}: header length field says {n} bytes but the file has "
                f"{size - 8} bytes after it (limit {MAX_HEADER_BYTES}); not a safetensors "
                "file, or a corrupt one"
            )
        try:
            header = json.loads(self._map[8 : 8 + n].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SafetensorsError(
                f"{self.path}: header (bytes 8..{8 + n}) is not valid JSON: {e}"
            ) from e
        if not isinstance(header, dict):
            raise SafetensorsError(f"{self.path}: header is not a JSON object")
        return header, 8 + n, size

    def _check_entry(self, name: str, entry: Any, data_start: int, size: int) -> SafetensorInfo:
        where = f"{self.path}: tensor {name!r}"
        try:
            dtype = str(entry["dtype"])
            shape = tuple(int(s) for s in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{where}: malformed header entry {entry!r}") from None
        if dtype not in _ITEMSIZE:
            raise SafetensorsError(f"{where}: unknown dtype {dtype!r}")
        if any(s < 0 for s in shape) or not 0 <= begin <= end:
            raise SafetensorsError(f"{where}: invalid shape {shape} or offsets {begin}..{end}")
        if end - begin != prod(shape) * _ITEMSIZE[dtype]:
            raise SafetensorsError(
                f"{where}: {dtype} shape {shape} needs {prod(shape) * _ITEMSIZE[dtype]} bytes but "
                f"its offsets {begin}..{end} span {end - begin}"
            )
        if data_start + end > size:
            raise SafetensorsError(
                f"{where}: truncated file: its data spans bytes {data_start + begin}.."
                f"{data_start + end} but the file has only {size} bytes"
            )
        return SafetensorInfo(name, shape, dtype, data_start + begin, end - begin)

    def info(self, name: str) -> SafetensorInfo:
        """The :class:`SafetensorInfo` for ``name``; SafetensorsError if absent."""
        try:
            return self.tensors[name]
        except KeyError:
            raise SafetensorsError(f"{self.path}: no tensor named {name!r}") from None

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as a NumPy array of its stored dtype.

        The array is a read-only view of the file's memory map (no copy); BF16, which NumPy
        lacks, is widened (exactly) to a new float32 array.

        Raises:
            SafetensorsError: no such tensor, the file was closed, its data lies past the end
                of the mapped file, or a dtype NumPy cannot represent (F8).
        """
        info = self.info(name)
        if info.dtype.startswith("F8"):
            raise SafetensorsError(
                f"{self.path}: tensor {name!r} has dtype {info.dtype}, which NumPy cannot hold"
            )
        if self._map is None:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: the file has been closed")
        try:
            size = min(len(self._map), os.fstat(self._file.fileno()).st_size)
        except (OSError, ValueError) as e:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: cannot read: {e}") from e
        if info.offset + info.nbytes > size:
            raise SafetensorsError(
                f"{self.path}: tensor {name!r}: truncated file: its data spans bytes "
                f"{info.offset}..{info.offset + info.nbytes} but the file has only {size} bytes"
            )
        dtype = _NUMPY[info.dtype]
        if info.nbytes == 0:
            return np.zeros(info.shape, np.float32 if info.dtype == "BF16" else dtype)
        flat = np.frombuffer(self._map, dtype=dtype, count=info.nbytes // dtype.itemsize,
                             offset=info.offset)
        if info.dtype == "BF16":
            return (flat.astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        return flat.reshape(info.shape)

    def close(self) -> None:
        """Drop this object's reference to the memory map (arrays already returned keep it
        alive until they are gone too)."""
        self._map = None
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
