"""Parsing and validating a GGUF header (metadata and tensor table) before anything is allocated.

The rules are llama.cpp's (``gguf.cpp``) and are checked as the bytes are read, so every error
names the file, the key or tensor, and the byte offset:

- magic ``GGUF``, little-endian, version 2 or 3;
- every count and length is checked against the bytes left in the file before it is used
  (an array of ``n`` elements needs at least ``n`` times its element's smallest size), so a
  file costs time and memory proportional to its size;
- keys are non-empty UTF-8, unique, at most ``MAX_KEY_BYTES``; strings are UTF-8; value and
  array element types are known; arrays do not nest; bools are 0 or 1;
- ``general.alignment``, when present, is a u32 power of two;
- tensor names are non-empty UTF-8, unique, shorter than 64 bytes (ggml's ``GGML_MAX_NAME``);
  1 to 4 dims, each >= 0; a known ggml type whose block size divides the row length; the data
  offset equals the running total of the previous tensors' sizes, each padded to the
  alignment (so tensors are aligned, in order, and never overlap); all data lies inside the
  file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any, BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import GGUFError

__all__ = ["GGUFHeader", "TensorEntry", "parse_header"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_KEY_BYTES = 65_536
MAX_NAME_BYTES = 63  # ggml's GGML_MAX_NAME is 64 including the terminating NUL
MAX_DIMS = 4

_STRING, _ARRAY = 8, 9
# value type -> (struct format, size); strings and arrays are handled apart
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<B", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}  # fmt: skip
_TYPE_NAMES = {
    0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool",
    8: "string", 9: "array", 10: "u64", 11: "i64", 12: "f64",
}  # fmt: skip
_BOOL = 7
_U32 = 4
_FIRST_READ = 1 << 20


@dataclass(frozen=True)
class TensorEntry:
    """One row of the tensor table: ggml dims (``ne``, innermost first), absolute offset."""

    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorEntry]
    data_start: int


class _Cursor:
    """Reads the header front to back, pulling bytes from the file only as far as needed."""

    def __init__(self, f: BinaryIO, size: int, path: object):
        self.f, self.size, self.path = f, size, path
        self.buf = bytearray()
        self.pos = 0

    def need(self, n: int, what: Callable[[], str]) -> None:
        end = self.pos + n
        if end > self.size:
            raise GGUFError(f"{self.path}: truncated file: {what()} needs bytes {self.pos}..{end} "
                            f"but the file has only {self.size} bytes")
        if end > len(self.buf):
            want = min(self.size, max(end, 2 * len(self.buf), _FIRST_READ)) - len(self.buf)
            self.f.seek(len(self.buf))
            chunk = self.f.read(want)
            if len(chunk) != want:
                raise GGUFError(f"{self.path}: the file shrank while it was being read")
            self.buf += chunk

    def scalar(self, fmt: str, size: int, what: Callable[[], str]) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, what: Callable[[], str]) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: Callable[[], str]) -> int:
        return self.scalar("<Q", 8, what)

    def left(self) -> int:
        return self.size - self.pos

    def string(self, what: Callable[[], str], limit: int | None = None) -> str:
        start = self.pos
        n = self.u64(what)
        if limit is not None and n > limit:
            raise GGUFError(f"{self.path}: {what()} at byte {start}: length {n} exceeds the "
                            f"limit of {limit} bytes")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError(f"{self.path}: {what()} at byte {start} is not UTF-8: {e}") from None


def _value(cur: _Cursor, vtype: int, what: Callable[[], str]) -> Any:
    if vtype == _STRING:
        return cur.string(what)
    fmt, size = _SCALARS[vtype]
    start = cur.pos
    value = cur.scalar(fmt, size, what)
    if vtype == _BOOL:
        if value not in (0, 1):
            raise GGUFError(f"{cur.path}: {what()} at byte {start}: bool byte is {value}, "
                            "expected 0 or 1")
        return bool(value)
    return value


def _type_of(cur: _Cursor, what: Callable[[], str], in_array: bool) -> int:
    start = cur.pos
    vtype = cur.u32(what)
    if vtype not in _TYPE_NAMES:
        raise GGUFError(f"{cur.path}: {what()} at byte {start}: unknown value type {vtype}")
    if in_array and vtype == _ARRAY:
        raise GGUFError(f"{cur.path}: {what()} at byte {start}: nested arrays are not allowed")
    return vtype


def _array(cur: _Cursor, what: Callable[[], str]) -> list[Any]:
    etype = _type_of(cur, what, in_array=True)
    start = cur.pos
    count = cur.u64(what)
    smallest = 8 if etype == _STRING else _SCALARS[etype][1]
    if count * smallest > cur.left():
        raise GGUFError(f"{cur.path}: {what()} at byte {start}: {count} {_TYPE_NAMES[etype]} "
                        f"elements need at least {count * smallest} bytes but only "
                        f"{cur.left()} remain in the file")
    if etype in (_STRING, _BOOL):
        return [_value(cur, etype, what) for _ in range(count)]
    fmt, size = _SCALARS[etype]
    cur.need(count * size, what)
    values = list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, cur.pos))
    cur.pos += count * size
    return values


def _metadata(cur: _Cursor, kv_count: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for k in range(kv_count):
        start = cur.pos
        key = cur.string(lambda k=k: f"metadata key #{k}", limit=MAX_KEY_BYTES)
        if not key:
            raise GGUFError(f"{cur.path}: metadata key #{k} at byte {start} is empty")
        if key in metadata:
            raise GGUFError(f"{cur.path}: metadata key {key!r} at byte {start} is duplicated")

        def what(key: str = key) -> str:
            return f"metadata key {key!r}"

        vtype = _type_of(cur, what, in_array=False)
        metadata[key] = _array(cur, what) if vtype == _ARRAY else _value(cur, vtype, what)
        if key == "general.alignment":
            alignment = metadata[key]
            if vtype != _U32 or alignment == 0 or alignment & (alignment - 1):
                raise GGUFError(f"{cur.path}: metadata key 'general.alignment' at byte {start} "
                                f"must be a u32 power of two, got {_TYPE_NAMES[vtype]} "
                                f"{alignment!r}")
    return metadata


def _tensor_infos(cur: _Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], Any, int, int]]:
    infos = []
    names: set[str] = set()
    for t in range(n_tensors):
        start = cur.pos
        name = cur.string(lambda t=t: f"tensor info #{t} name", limit=MAX_NAME_BYTES)
        where = f"{cur.path}: tensor {name!r} (tensor info at byte {start})"

        def what(name: str = name) -> str:
            return f"tensor info {name!r}"

        if not name:
            raise GGUFError(f"{where}: empty tensor name")
        if name in names:
            raise GGUFError(f"{where}: duplicate tensor name")
        names.add(name)
        n_dims = cur.u32(what)
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"{where}: {n_dims} dims (GGUF allows 1 to {MAX_DIMS})")
        ne = tuple(cur.scalar("<q", 8, what) for _ in range(n_dims))
        if any(d < 0 for d in ne):
            raise GGUFError(f"{where}: negative dim in {list(ne)}")
        raw_type = cur.u32(what)
        try:
            ggml_type = GGMLQuantizationType(raw_type)
        except ValueError:
            raise GGUFError(f"{where}: unknown tensor type {raw_type}") from None
        offset = cur.u64(what)
        infos.append((name, ne, ggml_type, offset, start))
    return infos


def parse_header(f: BinaryIO, size: int, path: object) -> GGUFHeader:
    """Parse and validate the header of the GGUF file open as ``f`` (``size`` bytes).

    Raises:
        GGUFError: any rule of the module docstring is broken; the message names the file,
            the key or tensor and the byte offset.
    """
    cur = _Cursor(f, size, path)
    cur.need(min(size, 4), lambda: "the magic")
    magic = bytes(cur.buf[:4])
    if magic and len(magic) < len(MAGIC) and MAGIC.startswith(magic):
        raise GGUFError(f"{path}: truncated file ({size} bytes)")
    if magic != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (starts with {magic!r}, expected {MAGIC!r})")
    cur.pos = 4
    version = cur.u32(lambda: "the version")
    if version not in VERSIONS:
        hint = " (a big-endian file?)" if version.to_bytes(4, "big")[0] else ""
        raise GGUFError(f"{path}: GGUF version {version} is not supported "
                        f"(supported: {', '.join(map(str, VERSIONS))}){hint}")
    n_tensors = cur.u64(lambda: "the tensor count")
    kv_count = cur.u64(lambda: "the metadata count")
    # each metadata entry takes at least 12 bytes (key length, type), each tensor info 28
    if kv_count * 12 + n_tensors * 28 > cur.left():
        raise GGUFError(f"{path}: header declares {kv_count} metadata entries and {n_tensors} "
                        f"tensors, more than the {size} bytes of the file can hold")
    metadata = _metadata(cur, kv_count)
    infos = _tensor_infos(cur, n_tensors)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    data_start = -(-cur.pos // alignment) * alignment
    tensors = []
    expected = 0
    for name, ne, ggml_type, offset, start in infos:
        where = f"{path}: tensor {name!r} (tensor info at byte {start})"
        block_size, type_size = GGML_QUANT_SIZES[ggml_type]
        if ne[0] % block_size:
            raise GGUFError(f"{where}: type {ggml_type.name} needs the row length to be a "
                            f"multiple of {block_size}, got ggml dims {list(ne)}")
        nbytes = prod(ne) // block_size * type_size
        if offset != expected:
            raise GGUFError(f"{where}: data offset {offset} is misaligned, out of order or "
                            f"overlapping: expected {expected} (previous tensors padded to "
                            f"{alignment} bytes)")
        end = data_start + offset + nbytes
        if end > size:
            raise GGUFError(f"{where}: truncated file: its data spans bytes "
                            f"{data_start + offset}..{end} but the file has only {size} bytes")
        tensors.append(TensorEntry(name, ne, ggml_type, data_start + offset, nbytes))
        expected += -(-nbytes // alignment) * alignment
    return GGUFHeader(version, metadata, tensors, data_start)
