"""Reading safetensors files into NumPy.

Tensors are read through ``safetensors.safe_open(..., framework="numpy")``, which memory-maps
the file. Before that the header is checked by hand: its length field is compared with the file
size (and safetensors' own 100 MB cap) before anything is allocated, and every tensor's byte range
is checked against the file, so a corrupt or truncated file fails with a
:class:`~luminal_models.errors.SafetensorsError` naming the file, tensor and offset. The format
holds only JSON and raw numbers; nothing is ever unpickled.
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
from safetensors import SafetensorError, safe_open

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
        header, data_start, size = self._read_header()
        self.metadata: dict[str, str] = dict(header.pop("__metadata__", None) or {})
        self.tensors: dict[str, SafetensorInfo] = {}
        for name, entry in header.items():
            self.tensors[name] = self._check_entry(name, entry, data_start, size)
        try:
            self._handle: Any = safe_open(str(self.path), framework="numpy")
        except SafetensorError as e:
            raise SafetensorsError(f"{self.path}: {e}") from e

    def _read_header(self) -> tuple[dict[str, Any], int, int]:
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                prefix = f.read(8)
                if len(prefix) < 8:
                    raise SafetensorsError(
                        f"{self.path}: truncated file ({size} bytes; a safetensors file starts "
                        "with an 8-byte header length)"
                    )
                (n,) = struct.unpack("<Q", prefix)
                if n > min(size - 8, MAX_HEADER_BYTES):
                    raise SafetensorsError(
                        f"{self.path}: header length field says {n} bytes but the file has "
                        f"{size - 8} bytes after it (limit {MAX_HEADER_BYTES}); not a safetensors "
                        "file, or a corrupt one"
                    )
                raw = f.read(n)
        except FileNotFoundError:
            raise SafetensorsError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise SafetensorsError(f"{self.path}: is a directory, not a safetensors file") from None
        except OSError as e:
            raise SafetensorsError(f"{self.path}: cannot read: {e.strerror or e}") from e
        try:
            header = json.loads(raw.decode("utf-8"))
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
        """Read a tensor as a NumPy array of its stored dtype.

        BF16, which NumPy lacks, is widened (exactly) to float32.

        Raises:
            SafetensorsError: no such tensor, or a dtype NumPy cannot represent (F8).
        """
        info = self.info(name)
        if info.dtype == "BF16":
            bits = np.fromfile(self.path, dtype="<u2", count=info.nbytes // 2, offset=info.offset)
            return (bits.astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
        if info.dtype.startswith("F8"):
            raise SafetensorsError(
                f"{self.path}: tensor {name!r} has dtype {info.dtype}, which NumPy cannot hold"
            )
        try:
            return self._handle.get_tensor(name)
        except (SafetensorError, TypeError, ValueError) as e:
            raise SafetensorsError(f"{self.path}: tensor {name!r}: {e}") from e

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self.path)!r}, {len(self.tensors)} tensors)"
