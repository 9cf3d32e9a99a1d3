"""Reading CTranslate2 `model.bin` files (the format faster-whisper models ship in) into NumPy.

The format, version 6 (CTranslate2's `ModelSpec` serialisation): a little-endian u32 format
version, the spec name (e.g. ``WhisperSpec``), a u32 spec revision, a u32 variable count, then
each variable as its name, a u8 rank, one u32 per dim, a u8 dtype code, a u32 byte count and the
raw bytes; last, a u32 alias count and (alias, target) name pairs. Strings are a u16 length that
counts a trailing NUL. Nothing in it is executable, so nothing is ever unpickled.

The file is memory-mapped once; every variable is a read-only NumPy view of the map. Every
length and offset is checked against the file size before it is used, and a variable's byte
count against its dims and dtype, so a corrupt or truncated file fails with a
:class:`~luminal_models.errors.CT2Error` naming the file, the variable and the byte offset.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CT2Error

__all__ = ["CT2Error", "CT2File", "CT2Variable"]

SUPPORTED_VERSIONS = (6,)
# CTranslate2's DataType enum as serialised; bfloat16 is widened on read (NumPy lacks it).
_DTYPES = {
    0: np.dtype("<f4"), 1: np.dtype("i1"), 2: np.dtype("<i2"), 3: np.dtype("<i4"),
    4: np.dtype("<f2"), 5: np.dtype("<u2"),
}  # fmt: skip
_BFLOAT16 = 5
# No real model has a rank above 4 or this many variables; larger values mean garbage.
_MAX_RANK = 8
_MAX_VARIABLES = 1_000_000


@dataclass(frozen=True)
class CT2Variable:
    """One variable of a CTranslate2 model.

    Attributes:
        name: its name (``"encoder/layer_0/self_attention/linear_0/weight"``).
        shape: its shape, row-major (an empty tuple for a scalar).
        dtype: the stored NumPy dtype (bfloat16 shows as ``uint16``).
        offset: absolute byte offset of its data in the file.
        nbytes: size of its data.
        bfloat16: whether the stored 16-bit values are bfloat16.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int
    nbytes: int
    bfloat16: bool = False


class CT2File:
    """A memory-mapped CTranslate2 ``model.bin``.

    Attributes:
        path: the file.
        version: the format version; `spec` and `revision`: the model spec's name and revision.
        variables: name -> :class:`CT2Variable`, in file order.
        aliases: alias name -> the variable name it stands for (tied weights).

    Raises:
        CT2Error: the file is missing, truncated, of an unsupported version, or malformed.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise CT2Error(f"{self.path}: empty file, not a CTranslate2 model")
                self._map: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise CT2Error(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise CT2Error(f"{self.path}: is a directory, not a model.bin file") from None
        except OSError as e:
            raise CT2Error(f"{self.path}: cannot read: {e.strerror or e}") from e
        self._pos = 0
        self.version = self._u32("the format version")
        if self.version not in SUPPORTED_VERSIONS:
            raise CT2Error(f"{self.path}: CTranslate2 format version {self.version} is not "
                           f"supported (this reader knows {SUPPORTED_VERSIONS}); not a "
                           "model.bin, or one from another CTranslate2 release")
        self.spec = self._string("the spec name")
        self.revision = self._u32("the spec revision")
        count = self._u32("the variable count")
        if count > _MAX_VARIABLES:
            raise CT2Error(f"{self.path}: header claims {count} variables; corrupt file")
        self.variables: dict[str, CT2Variable] = {}
        for _ in range(count):
            var = self._variable()
            self.variables[var.name] = var
        self.aliases: dict[str, str] = {}
        for _ in range(self._u32("the alias count")):
            alias = self._string("an alias name")
            target = self._string(f"the target of alias {alias!r}")
            if target not in self.variables:
                raise CT2Error(f"{self.path}: alias {alias!r} names {target!r}, which is not a "
                               "variable of the file")
            self.aliases[alias] = target

    # ----- header parsing ---------------------------------------------------------------------
    def _take(self, n: int, what: str) -> memoryview:
        start, end = self._pos, self._pos + n
        assert self._map is not None
        if end > len(self._map):
            raise CT2Error(f"{self.path}: truncated file: {what} needs bytes {start}..{end} but "
                           f"the file has only {len(self._map)} bytes")
        self._pos = end
        return memoryview(self._map)[start:end]

    def _u32(self, what: str) -> int:
        return struct.unpack("<I", self._take(4, what))[0]

    def _string(self, what: str) -> str:
        (n,) = struct.unpack("<H", self._take(2, what))
        raw = bytes(self._take(n, what))
        if not raw.endswith(b"\0"):
            raise CT2Error(f"{self.path}: {what} at byte {self._pos - n} is not NUL-terminated; "
                           "corrupt file")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise CT2Error(f"{self.path}: {what} at byte {self._pos - n} is not UTF-8") from None

    def _variable(self) -> CT2Variable:
        at = self._pos
        name = self._string(f"a variable name (at byte {at})")
        where = f"variable {name!r} (header at byte {at})"
        (rank,) = struct.unpack("<B", self._take(1, f"the rank of {where}"))
        if rank > _MAX_RANK:
            raise CT2Error(f"{self.path}: {where} has rank {rank}; corrupt file")
        shape = struct.unpack(f"<{rank}I", self._take(4 * rank, f"the dims of {where}"))
        (code,) = struct.unpack("<B", self._take(1, f"the dtype of {where}"))
        if code not in _DTYPES:
            raise CT2Error(f"{self.path}: {where} has unknown dtype code {code}")
        nbytes = self._u32(f"the byte count of {where}")
        dtype = _DTYPES[code]
        if nbytes != prod(shape) * dtype.itemsize:
            raise CT2Error(f"{self.path}: {where}: shape {shape} of {dtype} needs "
                           f"{prod(shape) * dtype.itemsize} bytes but the file says {nbytes}")
        offset = self._pos
        self._take(nbytes, f"the data of {where}")
        return CT2Variable(name, tuple(shape), dtype, offset, nbytes, code == _BFLOAT16)

    # ----- reading ----------------------------------------------------------------------------
    def resolve(self, name: str) -> str:
        """The variable `name` stands for (itself, or an alias's target)."""
        return self.aliases.get(name, name)

    def info(self, name: str) -> CT2Variable:
        """The :class:`CT2Variable` of `name` (aliases followed); CT2Error if absent."""
        var = self.variables.get(self.resolve(name))
        if var is None:
            raise CT2Error(f"{self.path}: no variable named {name!r}")
        return var

    def __contains__(self, name: str) -> bool:
        return self.resolve(name) in self.variables

    def tensor(self, name: str) -> np.ndarray:
        """A variable as a read-only NumPy view of the file (bfloat16: a new float32 array)."""
        var = self.info(name)
        if self._map is None:
            raise CT2Error(f"{self.path}: variable {name!r}: the file has been closed")
        flat = np.frombuffer(self._map, dtype=var.dtype, count=prod(var.shape),
                             offset=var.offset)
        if var.bfloat16:
            flat = (flat.astype(np.uint32) << 16).view(np.float32)
        return flat.reshape(var.shape)

    def scalar(self, name: str) -> Any:
        """A scalar variable (e.g. ``encoder/num_heads``) as a Python number."""
        value = self.tensor(name)
        if value.size != 1:
            raise CT2Error(f"{self.path}: variable {name!r} has shape {value.shape}, expected "
                           "a scalar")
        return value.reshape(()).item()

    def close(self) -> None:
        """Drop this object's reference to the map (arrays already returned keep it alive)."""
        self._map = None

    def __enter__(self) -> CT2File:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"CT2File({str(self.path)!r}, {self.spec} rev {self.revision}, "
                f"{len(self.variables)} variables)")
