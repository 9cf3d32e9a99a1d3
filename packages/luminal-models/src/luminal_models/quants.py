"""GGUF (ggml) block quantization formats in NumPy.

The formats are those of :data:`luminal.quant.FORMATS`: F32, F16 and BF16 (plain element types,
block size 1) and the block formats Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and Q6_K. This module
decodes and encodes the first three block formats itself, laid out exactly as in ggml:

- ``Q8_0``: ``{f16 d; int8 qs[32]}`` (34 bytes), value = ``qs[i] * d``.
- ``Q4_0``: ``{f16 d; uint8 qs[16]}`` (18 bytes), value = ``(nibble - 8) * d``; the low nibbles
  of ``qs`` hold elements 0..15 and the high nibbles elements 16..31.
- ``Q4_1``: ``{f16 d; f16 m; uint8 qs[16]}`` (20 bytes), value = ``nibble * d + m``, same nibble
  order as Q4_0.

Blocks run along the last (contiguous) axis of a tensor, so its length must be a multiple of the
block size. Everything works on raw little-endian bytes (``uint8`` arrays), which is what a GGUF
file stores; :func:`split_blocks` turns them into planar arrays for native kernels.
"""

from __future__ import annotations

from math import prod

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize
from luminal.quant import FORMATS, QuantFormat, quant_format

__all__ = [
    "BF16",
    "F16",
    "F32",
    "Q4_0",
    "Q4_1",
    "Q8_0",
    "QUANT_TYPES",
    "QuantType",
    "dequantize",
    "nbytes",
    "quant_type",
    "quantize",
    "quantize_q4_0",
    "quantize_q4_1",
    "quantize_q8_0",
    "split_blocks",
]


# One table for every GGUF format luminal knows: `luminal.quant.FORMATS` (name, ggml type id,
# block size, bytes per block); this module adds NumPy encoders and decoders by name.
QuantType = QuantFormat

F32, F16, BF16 = FORMATS["f32"], FORMATS["f16"], FORMATS["bf16"]
Q8_0, Q4_0, Q4_1 = FORMATS["q8_0"], FORMATS["q4_0"], FORMATS["q4_1"]

QUANT_TYPES: dict[str, QuantType] = {q.name: q for q in FORMATS.values()}


def quant_type(key: QuantType | str | int) -> QuantType:
    """Look up a supported format by :class:`QuantType`, name (``"Q8_0"``) or ggml type number.

    Raises:
        KeyError: the format is not one luminal implements.
    """
    return quant_format(key)


def nbytes(qtype: QuantType | str | int, shape: tuple[int, ...]) -> int:
    """Bytes that a tensor of ``shape`` (NumPy row-major order) takes in format ``qtype``.

    Raises:
        ValueError: the last dimension is not a multiple of the block size.
    """
    q = quant_type(qtype)
    shape = tuple(int(s) for s in shape)
    last = shape[-1] if shape else 1
    if last % q.block_size:
        raise ValueError(
            f"{q.name} needs the last dimension to be a multiple of {q.block_size}, "
            f"got shape {shape}"
        )
    return prod(shape) // q.block_size * q.type_size


def _blocks(raw: np.ndarray, q: QuantType, shape: tuple[int, ...] | None) -> np.ndarray:
    """View ``raw`` as ``(n_blocks, type_size)`` bytes, checking its size against ``shape``."""
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise TypeError(f"raw {q.name} data must be a uint8 array, got {raw.dtype}")
    if shape is not None:
        expected = nbytes(q, shape)
        if raw.size != expected:
            raise ValueError(
                f"{q.name} tensor of shape {tuple(shape)} needs {expected} bytes, got {raw.size}"
            )
    elif raw.size % q.type_size:
        raise ValueError(f"{raw.size} bytes is not a whole number of {q.name} blocks")
    return np.ascontiguousarray(raw).reshape(-1, q.type_size)


def _f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    """The little-endian f16 at byte ``start`` of every block, as an ``(n_blocks, 1)`` array."""
    # A two-byte slice of a C-contiguous row is contiguous along its last axis, so it can be
    # reinterpreted in place without copying the (possibly memory-mapped) blocks.
    return blocks[:, start : start + 2].view("<f2")


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """Unpack ``(n, 16)`` packed bytes into ``(n, 32)`` values 0..15 in ggml element order."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def dequantize(raw: np.ndarray, qtype: QuantType | str | int, shape: tuple[int, ...]) -> np.ndarray:
    """Decode raw GGUF bytes into a float32 array of ``shape``.

    Args:
        raw: the tensor's bytes as a ``uint8`` array (any shape; a memory map is fine).
        qtype: the format (:class:`QuantType`, name or ggml type number).
        shape: the tensor shape in NumPy (row-major) order; blocks run along the last axis.

    Returns:
        A new C-contiguous float32 array (F32 input is copied too, so the result never aliases
        a read-only memory map).

    Raises:
        KeyError: unsupported format. ValueError / TypeError: ``raw`` does not fit ``shape``.
    """
    q = quant_type(qtype)
    shape = tuple(int(s) for s in shape)
    blocks = _blocks(raw, q, shape)
    if q is F32:
        out = blocks.view("<f4").astype(np.float32)
    elif q is F16:
        out = blocks.view("<f2").astype(np.float32)
    elif q is BF16:
        # bf16 is the top half of an f32, so widening is a shift; exact for every value.
        out = (blocks.view("<u2").astype(np.uint32) << 16).view(np.float32)
    elif q is Q8_0:
        d = _f16_field(blocks, 0).astype(np.float32)
        out = blocks[:, 2:].view(np.int8).astype(np.float32)
        out *= d
    elif q is Q4_0:
        d = _f16_field(blocks, 0).astype(np.float32)
        out = _nibbles(blocks[:, 2:]).astype(np.float32)
        out -= 8.0
        out *= d
    elif q is Q4_1:
        d = _f16_field(blocks, 0).astype(np.float32)
        m = _f16_field(blocks, 2).astype(np.float32)
        out = _nibbles(blocks[:, 4:]).astype(np.float32)
        # Two separate float32 roundings (multiply, then add), as ggml's reference does.
        out *= d
        out += m
    else:
        # Q5_0 and the K-quants: the gguf package's reference decoders (luminal's own decoding
        # of them is the graph decomposition in luminal.quant, tested against these)
        out = gguf_dequantize(blocks, GGMLQuantizationType(q.ggml_type)).astype(np.float32)
    return out.reshape(shape)


def split_blocks(raw: np.ndarray, qtype: QuantType | str | int) -> dict[str, np.ndarray]:
    """Split raw block-quantized bytes into planar arrays, one entry per block field.

    Returns a dict of new C-contiguous arrays whose first axis is the block index:

    - ``Q8_0``: ``d`` float16 ``(n,)``, ``qs`` int8 ``(n, 32)`` in element order.
    - ``Q4_0``: ``d`` float16 ``(n,)``, ``qs`` uint8 ``(n, 16)`` still packed as in ggml.
    - ``Q4_1``: ``d`` and ``m`` float16 ``(n,)``, ``qs`` uint8 ``(n, 16)`` packed.

    Scales stay float16 so nothing is rounded; widen with ``.astype(np.float32)`` if needed.

    Raises:
        ValueError: ``qtype`` is not a block format or ``raw`` is not whole blocks.
    """
    q = quant_type(qtype)
    blocks = _blocks(raw, q, None)
    if q is Q8_0:
        return {
            "d": _f16_field(blocks, 0)[:, 0].astype(np.float16),
            "qs": np.ascontiguousarray(blocks[:, 2:]).view(np.int8),
        }
    if q is Q4_0:
        return {
            "d": _f16_field(blocks, 0)[:, 0].astype(np.float16),
            "qs": np.ascontiguousarray(blocks[:, 2:]),
        }
    if q is Q4_1:
        return {
            "d": _f16_field(blocks, 0)[:, 0].astype(np.float16),
            "m": _f16_field(blocks, 2)[:, 0].astype(np.float16),
            "qs": np.ascontiguousarray(blocks[:, 4:]),
        }
    raise ValueError(f"{q.name} is not a block-quantized format")


def _as_blocks(x: np.ndarray, block_size: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """``x`` as float32 ``(n_blocks, block_size)``, checking that blocks tile the last axis."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % block_size:
        raise ValueError(
            f"last dimension must be a multiple of {block_size} to quantize, got shape {x.shape}"
        )
    return np.ascontiguousarray(x).reshape(-1, block_size), x.shape


def _reciprocal(d: np.ndarray) -> np.ndarray:
    """``1/d``, with 0 where ``d`` is 0 (an all-zero block), as ggml does."""
    safe = np.where(d == 0, np.float32(1), d)
    return np.where(d == 0, np.float32(0), np.float32(1) / safe).astype(np.float32)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C ``roundf``: halves go away from zero (``np.round`` sends them to even)."""
    a = np.abs(v)
    whole = np.floor(a)
    # floor(a + 0.5) would be wrong just below 0.5, where the float32 sum rounds up to 1;
    # doubling the exact fractional part decides the half without rounding.
    return np.copysign(whole + np.floor(2 * (a - whole)), v)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_nibbles`: ``(n, 32)`` values 0..15 into ``(n, 16)`` bytes."""
    q = q.astype(np.uint8)
    return q[:, :16] | (q[:, 16:] << 4)


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype("<f2").reshape(-1, 1).view(np.uint8)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """Quantize float data to Q8_0, bit-identical to ggml's reference ``quantize_row_q8_0_ref``.

    Returns the raw bytes as a flat ``uint8`` array (``nbytes(Q8_0, x.shape)`` long).
    """
    b, _ = _as_blocks(x, Q8_0.block_size)
    d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
    v = b * _reciprocal(d)
    qs = _roundf(v).astype(np.int8)
    return np.concatenate([_f16_bytes(d), qs.view(np.uint8)], axis=1).reshape(-1)


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """Quantize float data to Q4_0, bit-identical to ggml's reference ``quantize_row_q4_0_ref``.

    The scale is the signed element of largest magnitude divided by -8, so that element maps to
    nibble 0 exactly. Returns the raw bytes as a flat ``uint8`` array.
    """
    b, _ = _as_blocks(x, Q4_0.block_size)
    signed_max = np.take_along_axis(b, np.abs(b).argmax(axis=1, keepdims=True), axis=1)
    d = signed_max / np.float32(-8)
    # ggml truncates toward zero after adding 8.5 (all values are >= 0.5 here), then clamps.
    q = np.minimum(np.trunc(b * _reciprocal(d) + np.float32(8.5)), 15)
    return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=1).reshape(-1)


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    """Quantize float data to Q4_1, bit-identical to ggml's reference ``quantize_row_q4_1_ref``.

    Each block stores its minimum ``m`` and step ``d = (max - min) / 15``. Returns the raw bytes as
    a flat ``uint8`` array.
    """
    b, _ = _as_blocks(x, Q4_1.block_size)
    lo = b.min(axis=1, keepdims=True)
    d = (b.max(axis=1, keepdims=True) - lo) / np.float32(15)
    q = np.minimum(np.trunc((b - lo) * _reciprocal(d) + np.float32(0.5)), 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles(q)], axis=1).reshape(-1)


def _bf16_bytes(x: np.ndarray) -> np.ndarray:
    """Round float32 to bf16 (nearest even, NaNs kept quiet) as ggml_compute_fp32_to_bf16 does."""
    u = np.ascontiguousarray(x, dtype=np.float32).reshape(-1).view(np.uint32).astype(np.uint64)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    quiet_nan = (u >> 16) | 0x40
    return np.where(is_nan, quiet_nan, rounded).astype("<u2").view(np.uint8)


def quantize(x: np.ndarray, qtype: QuantType | str | int) -> np.ndarray:
    """Encode float data in any supported format; returns raw bytes as a flat ``uint8`` array."""
    q = quant_type(qtype)
    if q is F32:
        return np.ascontiguousarray(x, dtype="<f4").reshape(-1).view(np.uint8)
    if q is F16:
        return np.ascontiguousarray(x, dtype="<f2").reshape(-1).view(np.uint8)
    if q is BF16:
        return _bf16_bytes(x)
    encoders = {"Q8_0": quantize_q8_0, "Q4_0": quantize_q4_0, "Q4_1": quantize_q4_1}
    if q.name not in encoders:
        raise ValueError(f"encoding {q.name} is not implemented (only decoding); encodable: "
                         f"F32, F16, BF16, {', '.join(encoders)}")
    return encoders[q.name](x)
