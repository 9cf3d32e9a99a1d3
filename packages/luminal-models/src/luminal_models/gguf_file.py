"""Reading GGUF files (llama.cpp's weight format) into NumPy.

Opening a file parses and validates its header (:mod:`luminal_models.gguf_header`: the rules
llama.cpp enforces, checked before anything is allocated); tensor bytes are read when asked
for, with ``pread`` into a new array (:mod:`luminal_models.file_reads`), so a file truncated or
rewritten after it was opened gives an error, never a crash. Every failure (missing file, wrong
magic, truncation, malformed header, unknown tensor type) surfaces as one
:class:`~luminal_models.errors.GGUFError` whose message names the file and, where it applies, the
key or tensor and the byte offset. GGUF holds no executable content, so nothing here ever
unpickles.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import GGUFError
from .file_reads import read_exact
from .gguf_header import parse_header
from .quants import QUANT_TYPES, QuantType
from .quants import dequantize as _dequantize  # GGUFFile.tensor has a parameter of that name

__all__ = ["GGUFError", "GGUFFile", "TensorInfo"]


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
        nbytes: size of its data in the file.
    """

    name: str
    shape: tuple[int, ...]
    qtype: QuantType
    offset: int
    nbytes: int

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


class GGUFFile:
    """A GGUF file, open for reading.

    Attributes:
        path: the file.
        metadata: the key/value pairs, as plain Python values (strings decoded, arrays as lists).
        tensors: name -> :class:`TensorInfo`, in file order.

    Raises:
        GGUFError: the file is missing, is not a GGUF, is truncated or malformed, is big-endian,
            or declares a tensor type ggml does not define (see :mod:`.gguf_header` for the
            rules checked).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file: Any = None
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 (kept open for tensor reads)
            size = os.fstat(self._file.fileno()).st_size
        except FileNotFoundError:
            raise GGUFError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise GGUFError(f"{self.path}: is a directory, not a GGUF file") from None
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot read: {e.strerror or e}") from e
        try:
            header = parse_header(self._file, size, self.path)
        except BaseException:
            self.close()
            raise
        self.version = header.version
        self.metadata: dict[str, Any] = header.metadata
        self.tensors: dict[str, TensorInfo] = {
            t.name: TensorInfo(
                name=t.name,
                shape=tuple(reversed(t.ne)),
                qtype=_describe_type(t.ggml_type),
                offset=t.offset,
                nbytes=t.nbytes,
            )
            for t in header.tensors
        }

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
                returns the stored bytes: a new read-only ``uint8`` array shaped
                ``(*shape[:-1], bytes_per_row)``, one row of blocks per row of the tensor,
                which :func:`luminal_models.quants.split_blocks` turns into planar arrays.

        Raises:
            GGUFError: no such tensor, the file was closed or has been truncated since it was
                opened, or (when dequantizing) a type we cannot decode.
        """
        info = self.info(name)
        if dequantize and QUANT_TYPES.get(info.qtype.name) != info.qtype:
            raise GGUFError(
                f"{self.path}: tensor {name!r} has type {info.qtype.name}, which luminal_models "
                f"cannot dequantize (supported: {', '.join(QUANT_TYPES)})"
            )
        if self._file is None:
            raise GGUFError(f"{self.path}: tensor {name!r}: the file has been closed")
        raw = read_exact(self._file.fileno(), info.offset, info.nbytes,
                         f"{self.path}: tensor {name!r}", GGUFError)
        if not dequantize:
            return raw.reshape((*info.shape[:-1], -1))
        return _dequantize(raw, info.qtype, info.shape)

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
        """Close the file (arrays already returned are copies and stay valid)."""
        self.tensors = {}
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, {len(self.tensors)} tensors)"
