"""Reading GGUF files (llama.cpp's weight format) into NumPy.

Built on ``gguf.GGUFReader``, which memory-maps the file: opening a file parses only its header,
and tensor bytes are read from the map when asked for. The reader is wrapped so that every
failure (missing file, wrong magic, truncation, unknown tensor type) surfaces as one
:class:`~luminal_models.errors.GGUFError` whose message names the file and, where it applies, the
tensor and byte offset. GGUF holds no executable content, so nothing here ever unpickles.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from .errors import GGUFError
from .quants import QUANT_TYPES, QuantType
from .quants import dequantize as _dequantize  # GGUFFile.tensor has a parameter of that name

__all__ = ["GGUFError", "GGUFFile", "TensorInfo"]

_MAGIC = b"GGUF"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file.

    Attributes:
        name: the tensor's name (``"blk.0.attn_q.weight"``).
        shape: NumPy row-major shape, i.e. ggml's ``ne`` reversed: a ``[576, 49152]`` ggml
            embedding is ``(49152, 576)`` here, and blocks run along the last axis.
        qtype: its storage format; ``qtype.name in QUANT_TYPES`` tells whether it can be
            dequantized.
        offset: absolute byte offset of its data in the file.
        raw: its bytes, a flat read-only ``uint8`` view of the memory map (no copy).
    """

    name: str
    shape: tuple[int, ...]
    qtype: QuantType
    offset: int
    raw: np.ndarray = field(repr=False)

    @property
    def nbytes(self) -> int:
        """Size of the tensor's data in the file."""
        return int(self.raw.size)

    @property
    def n_elements(self) -> int:
        """Number of (dequantized) elements."""
        return prod(self.shape)


def _describe_type(ggml_type: GGMLQuantizationType) -> QuantType:
    """The :class:`QuantType` for a ggml type, including ones we can only carry as raw bytes."""
    known = QUANT_TYPES.get(ggml_type.name)
    if known is not None:
        return known
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    return QuantType(ggml_type.name, int(ggml_type), block_size, type_size)


class _CheckedReader(GGUFReader):
    """``GGUFReader`` that refuses to read past the end of the file.

    The stock reader slices its memory map, so a read past the end quietly returns a short array
    and fails later with an unrelated error, or loops over an array length read from garbage.
    Checking every read turns all of that into one error that gives the offset.
    """

    def __init__(self, path: Path):
        self._path = path
        super().__init__(path, "r")

    _itemsize: dict[Any, int] = {}

    def _get(self, offset: Any, dtype: Any, count: Any = 1, override_order: Any = None) -> Any:
        # Called once per header value (about 100k times for a 49k-token vocabulary): keep cheap.
        size = self._itemsize.get(dtype)
        if size is None:
            size = self._itemsize[dtype] = np.dtype(dtype).itemsize
        end = int(offset) + size * int(count)
        if end > self.data.size:
            raise GGUFError(
                f"{self._path}: truncated file: the header needs bytes {int(offset)}..{end} "
                f"but the file has only {self.data.size} bytes"
            )
        return super()._get(offset, dtype, count, override_order)

    def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
        # Validate what the stock reader trusts, so the error can name the tensor.
        for info_field in fields:
            _name_len, name_data, _n_dims, dims, raw_dtype, offset_tensor = info_field.parts
            name = bytes(name_data).decode("utf-8", "replace")
            where = f"{self._path}: tensor {name!r} (tensor info at byte {info_field.offset})"
            try:
                ggml_type = GGMLQuantizationType(int(raw_dtype[0]))
            except ValueError:
                raise GGUFError(f"{where}: unknown tensor type {int(raw_dtype[0])}") from None
            block_size, type_size = GGML_QUANT_SIZES[ggml_type]
            ne = [int(d) for d in dims]
            if ne and ne[0] % block_size:
                raise GGUFError(
                    f"{where}: type {ggml_type.name} needs the row length to be a multiple of "
                    f"{block_size}, got ggml dims {ne}"
                )
            start = start_offs + int(offset_tensor[0])
            end = start + prod(ne) // block_size * type_size
            if end > self.data.size:
                raise GGUFError(
                    f"{where}: truncated file: its data spans bytes {start}..{end} "
                    f"but the file has only {self.data.size} bytes"
                )
        super()._build_tensors(start_offs, fields)


def _field_value(kv: Any) -> Any:
    """A reader field as a plain Python value: str, int, float, bool or a list of those."""
    if not kv.types:
        return None
    main = kv.types[0]
    if main == GGUFValueType.STRING:
        return bytes(kv.parts[-1]).decode("utf-8")
    if main != GGUFValueType.ARRAY:
        return kv.parts[-1][0].item()
    if not kv.data:
        return []
    if kv.types[-1] == GGUFValueType.STRING:
        return [bytes(kv.parts[i]).decode("utf-8") for i in kv.data]
    return np.concatenate([kv.parts[i] for i in kv.data]).tolist()


class GGUFFile:
    """A memory-mapped GGUF file.

    Attributes:
        path: the file.
        metadata: the key/value pairs, as plain Python values (strings decoded, arrays as lists).
        tensors: name -> :class:`TensorInfo`, in file order.

    Raises:
        GGUFError: the file is missing, is not a GGUF, is truncated or malformed, is big-endian,
            or declares a tensor type ggml does not define.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._check_magic()
        try:
            reader = _CheckedReader(self.path)
        except GGUFError:
            raise
        except (ValueError, KeyError, IndexError, OverflowError, TypeError, MemoryError) as e:
            raise GGUFError(f"{self.path}: malformed GGUF header: {e}") from e
        if reader.byte_order != "I":
            raise GGUFError(f"{self.path}: big-endian GGUF files are not supported")
        self._reader = reader
        self.metadata: dict[str, Any] = self._read_metadata(reader)
        self.tensors: dict[str, TensorInfo] = {}
        for t in reader.tensors:
            n_bytes = int(t.n_bytes)
            self.tensors[t.name] = TensorInfo(
                name=t.name,
                shape=tuple(int(d) for d in reversed(t.shape.tolist())),
                qtype=_describe_type(t.tensor_type),
                offset=int(t.data_offset),
                raw=reader.data[t.data_offset : t.data_offset + n_bytes],
            )

    def _check_magic(self) -> None:
        try:
            with open(self.path, "rb") as f:
                head = f.read(4)
        except FileNotFoundError:
            raise GGUFError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise GGUFError(f"{self.path}: is a directory, not a GGUF file") from None
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot read: {e.strerror or e}") from e
        if head and len(head) < len(_MAGIC) and _MAGIC.startswith(head):
            raise GGUFError(f"{self.path}: truncated file ({len(head)} bytes)")
        if head != _MAGIC:
            raise GGUFError(
                f"{self.path}: not a GGUF file (starts with {head!r}, expected {_MAGIC!r})"
            )

    def _read_metadata(self, reader: GGUFReader) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        for key, kv in reader.fields.items():
            if key.startswith("GGUF."):  # header counters the reader adds; not file metadata
                continue
            try:
                metadata[key] = _field_value(kv)
            except UnicodeDecodeError as e:
                raise GGUFError(
                    f"{self.path}: metadata key {key!r} (at byte {kv.offset}) "
                    f"holds a string that is not UTF-8: {e}"
                ) from e
        return metadata

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` (``"llama"``), or None if the file does not say."""
        return self.metadata.get("general.architecture")

    def info(self, name: str) -> TensorInfo:
        """The :class:`TensorInfo` for ``name``; a GGUFError suggests near names if absent."""
        try:
            return self.tensors[name]
        except KeyError:
            close = difflib.get_close_matches(name, self.tensors, n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise GGUFError(f"{self.path}: no tensor named {name!r}{hint}") from None

    def tensor(self, name: str, dequantize: bool = True) -> np.ndarray:
        """Read a tensor.

        Args:
            name: the tensor's name.
            dequantize: True (default) decodes to a new float32 array of ``info.shape``. False
                returns the stored bytes without copying: a read-only ``uint8`` view shaped
                ``(*shape[:-1], bytes_per_row)``, one row of blocks per row of the tensor,
                which :func:`luminal_models.quants.split_blocks` turns into planar arrays.

        Raises:
            GGUFError: no such tensor, or (when dequantizing) a type we cannot decode.
        """
        info = self.info(name)
        if not dequantize:
            return info.raw.reshape((*info.shape[:-1], -1))
        if QUANT_TYPES.get(info.qtype.name) != info.qtype:
            raise GGUFError(
                f"{self.path}: tensor {name!r} has type {info.qtype.name}, which luminal_models "
                f"cannot dequantize (supported: {', '.join(QUANT_TYPES)})"
            )
        return _dequantize(info.raw, info.qtype, info.shape)

    def expect_shape(self, name: str, shape: Sequence[int | None]) -> TensorInfo:
        """Check that tensor ``name`` has ``shape`` (NumPy order; None matches any size).

        Returns its :class:`TensorInfo`, so loaders can check and fetch in one step.

        Raises:
            GGUFError: no such tensor, or its shape differs.
        """
        info = self.info(name)
        want = tuple(shape)
        if len(want) != len(info.shape) or any(
            w is not None and int(w) != s for w, s in zip(want, info.shape)
        ):
            shown = tuple("?" if w is None else int(w) for w in want)
            raise GGUFError(
                f"{self.path}: tensor {name!r} has shape {info.shape}, expected {shown}"
            )
        return info

    def close(self) -> None:
        """Drop this object's references to the memory map.

        Arrays already returned by ``tensor(..., dequantize=False)`` keep the map alive
        until they are gone too.
        """
        self.tensors = {}
        self._reader = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, {len(self.tensors)} tensors)"
