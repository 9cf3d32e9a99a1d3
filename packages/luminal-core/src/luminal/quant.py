"""Quantized weights that stay quantized in memory: GGUF block formats as raw bytes.

A quantized matrix is an input of dtype `uint8` holding its GGUF bytes, shape
(rows, row_bytes). `dequantize` turns it into the float32 matrix (rows, cols) using primitive
ops only (so every backend can run it), and tags its output node with
`node.dequantized` (a `luminal.ir.Dequantized`): backends recognise `x @ W.T` and `x @ W` on
such a tensor and use a quantized matmul kernel that decodes blocks in registers, after which
the decomposition is dead code and the weight is never expanded in memory.

Block layouts (little-endian, exactly as GGUF / ggml):

| qtype | bytes | layout                            | value of element i             |
|-------|-------|-----------------------------------|--------------------------------|
| q8_0  | 34    | f16 d; int8 qs[32]                | qs[i] * d                      |
| q4_0  | 18    | f16 d; uint8 qs[16]               | (nibble_i - 8) * d             |
| q4_1  | 20    | f16 d; f16 m; uint8 qs[16]        | nibble_i * d + m               |

For the 4-bit formats the low nibbles of qs hold elements 0..15 and the high nibbles 16..31.
Scales that are infinite or NaN are not supported (GGUF files never contain them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .dtypes import float32, uint8
from .hl_ops.movement import cat
from .ir import Dequantized
from .ops import Input
from .symbolic import Expr

if TYPE_CHECKING:
    from .tensor import GraphTensor

BLOCK = 32
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}


def row_bytes(qtype: str, cols: int) -> int:
    """Bytes of one quantized row of `cols` elements."""
    return cols // BLOCK * BLOCK_BYTES[qtype]


def _half(lo: GraphTensor, hi: GraphTensor) -> GraphTensor:
    """IEEE half from its two bytes (as float32 values 0..255), exactly, for finite halves."""
    sign = (hi > 127.5).to(float32)
    hi7 = hi - sign * 128
    low2 = hi7.fmod(4.0)
    exponent = (hi7 - low2) * 0.25
    mantissa = low2 * 256 + lo
    normal = (exponent > 0.5).to(float32)
    # normal: (1024 + m) * 2^(e - 25); subnormal (e == 0): m * 2^-24 = m * 2^(1 - 25)
    magnitude = (mantissa + normal * 1024) * (exponent + (1 - normal) - 25).exp2()
    return magnitude * (1 - sign * 2)


def _nibbles(qs: GraphTensor) -> GraphTensor:
    """(..., 16) bytes -> (..., 32): low nibbles then high nibbles."""
    low = qs.fmod(16.0)
    high = (qs - low) * 0.0625
    return cat([low, high], -1)


def dequantize(raw: GraphTensor, qtype: str, shape: tuple[int | Expr, int]) -> GraphTensor:
    """The float32 matrix `shape` = (rows, cols) stored in GGUF `qtype` blocks in `raw`
    (uint8, shape (rows, row_bytes(qtype, cols))). See the module docstring."""
    qtype = qtype.lower()
    if qtype not in BLOCK_BYTES:
        raise ValueError(f"dequantize: unknown qtype {qtype!r}; expected one of "
                         f"{', '.join(BLOCK_BYTES)}")
    rows, cols = shape
    # rows may be symbolic: the rows an embedding lookup gathered from a quantized table
    rows, cols = (rows if isinstance(rows, Expr) else int(rows)), int(cols)
    if cols % BLOCK:
        raise ValueError(f"dequantize: cols={cols} is not a multiple of the block size {BLOCK}")
    want = (rows, row_bytes(qtype, cols))
    if raw.dtype != uint8 or tuple(raw.shape) != want:
        raise ValueError(f"dequantize: {qtype} data for shape {(rows, cols)} must be uint8 of "
                         f"shape {want}, got {raw.dtype.name}{tuple(raw.shape)}")
    nb, bb = cols // BLOCK, BLOCK_BYTES[qtype]
    b = raw.reshape(rows, nb, bb).to(float32)
    d = _half(b[..., 0], b[..., 1]).unsqueeze(-1)
    if qtype == "q8_0":
        q = b[..., 2:]
        values = (q - (q > 127.5).to(float32) * 256) * d
    elif qtype == "q4_0":
        values = (_nibbles(b[..., 2:]) - 8) * d
    else:
        m = _half(b[..., 2], b[..., 3]).unsqueeze(-1)
        values = _nibbles(b[..., 4:]) * d + m
    out = values.reshape(rows, cols)
    if isinstance(raw.node.op, Input) and raw.layout.is_contiguous and (
            tuple(raw.layout.shape) == tuple(raw.node.shape)):
        # backends read the input's bytes directly, so only a whole, unviewed input qualifies
        out.node.dequantized = Dequantized(qtype, raw.id, rows, cols)
    return out
