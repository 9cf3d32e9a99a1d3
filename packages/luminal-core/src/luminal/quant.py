"""Quantized weights that stay quantized in memory: GGUF block formats as raw bytes.

`FORMATS` is the one table of the GGUF element and block formats luminal knows: name, GGUF
(ggml) type id, elements per block, bytes per block and, for block formats, the decomposition
of one block's bytes into float values with primitive ops. The GGUF reader (luminal-models) and
the backends' quantized kernels read it; a backend fuses only the formats it has a kernel for
(`luminal_codegen.lower(..., quant_kernels=...)`) and runs the decomposition for the rest.

A quantized matrix is an input of dtype `uint8` holding its GGUF bytes, shape
(rows, row_bytes). `dequantize` turns it into the float32 matrix (rows, cols) using primitive
ops only (so every backend can run it), and tags its output node with
`node.dequantized` (a `luminal.ir.Dequantized`): backends recognise `x @ W.T` and `x @ W` on
such a tensor and use a quantized matmul kernel that decodes blocks in registers, after which
the decomposition is dead code and the weight is never expanded in memory.

Block layouts (little-endian, exactly as ggml's `ggml-common.h`; f16 is an IEEE half):

| format | elems | bytes | layout                                              |
|--------|-------|-------|-----------------------------------------------------|
| q8_0   | 32    | 34    | f16 d; int8 qs[32]: qs[i] * d                       |
| q4_0   | 32    | 18    | f16 d; u8 qs[16]: (nibble_i - 8) * d                |
| q4_1   | 32    | 20    | f16 d; f16 m; u8 qs[16]: nibble_i * d + m           |
| q5_0   | 32    | 22    | f16 d; u32 qh; u8 qs[16]: (nibble_i + 16 bit_i(qh) - 16) * d |
| q4_k   | 256   | 144   | f16 d, dmin; u8 scales[12]; u8 qs[128]              |
| q5_k   | 256   | 176   | f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]   |
| q6_k   | 256   | 210   | u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d       |

In the 32-element formats the low nibbles of qs hold elements 0..15 and the high nibbles
16..31. Q4_K and Q5_K are 8 sub-blocks of 32 with 6-bit scales and mins packed into 12 bytes;
sub-block s is `d * scale_s * q - dmin * min_s`, q the nibbles of qs[32 (s // 2) ...] (low for
even s, high for odd) plus, in Q5_K, 16 times bit s of qh. Q6_K is 16 sub-blocks of 16 with
int8 scales: 6-bit values (4 from ql, 2 from qh) minus 32, times `d * scale`.
Scales that are infinite or NaN are not supported (GGUF files never contain them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .dtypes import float32, uint8
from .hl_ops.movement import cat
from .ir import Dequantized
from .ops import Input
from .symbolic import Expr

if TYPE_CHECKING:
    from .tensor import GraphTensor

# (..., blocks, type_size) bytes as float32 values 0..255 -> (..., blocks, block_size) values
BlockDecoder = Callable[["GraphTensor"], "GraphTensor"]


@dataclass(frozen=True)
class QuantFormat:
    """One GGUF element or block format.

    Attributes:
        name: ggml's name (`"Q4_K"`); lookups through `quant_format` ignore case.
        ggml_type: the `ggml_type` number stored in GGUF tensor infos.
        block_size: elements per block (1 for plain element types).
        type_size: bytes per block.
        decode: the primitive-op decomposition of a block format (None for plain types).
    """

    name: str
    ggml_type: int
    block_size: int
    type_size: int
    decode: BlockDecoder | None = None

    @property
    def is_quantized(self) -> bool:
        """True for block formats (anything that is not a plain element type)."""
        return self.block_size > 1

    @property
    def key(self) -> str:
        """The lower-case name backends and `Dequantized.qtype` use (`"q4_k"`)."""
        return self.name.lower()

    def row_bytes(self, cols: int) -> int:
        """Bytes of one row of `cols` elements (a multiple of the block size)."""
        return cols // self.block_size * self.type_size

    def __str__(self) -> str:
        return self.name


def _bits(x: GraphTensor, shift: int, width: int) -> GraphTensor:
    """`(x >> shift) & (2**width - 1)` of exact small integers held in float32."""
    if shift:
        x = (x - x.fmod(float(1 << shift))) * (1.0 / (1 << shift))
    return x.fmod(float(1 << width))


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


def _half_at(b: GraphTensor, at: int) -> GraphTensor:
    """The f16 at byte `at` of each block, shaped (..., blocks, 1)."""
    return _half(b[..., at], b[..., at + 1]).unsqueeze(-1)


def _signed(byte: GraphTensor) -> GraphTensor:
    """int8 from its byte."""
    return byte - (byte > 127.5).to(float32) * 256


def _nibbles(qs: GraphTensor) -> GraphTensor:
    """(..., n) bytes -> (..., 2n): low nibbles then high nibbles."""
    low = qs.fmod(16.0)
    high = (qs - low) * 0.0625
    return cat([low, high], -1)


def _bit_planes(x: GraphTensor, count: int, width: int = 1) -> GraphTensor:
    """(..., n) -> (..., count, n): plane j holds `_bits(x, j * width, width)`."""
    return cat([_bits(x, j * width, width).unsqueeze(-2) for j in range(count)], -2)


def _decode_q8_0(b: GraphTensor) -> GraphTensor:
    return _signed(b[..., 2:]) * _half_at(b, 0)


def _decode_q4_0(b: GraphTensor) -> GraphTensor:
    return (_nibbles(b[..., 2:]) - 8) * _half_at(b, 0)


def _decode_q4_1(b: GraphTensor) -> GraphTensor:
    return _nibbles(b[..., 4:]) * _half_at(b, 0) + _half_at(b, 2)


def _decode_q5_0(b: GraphTensor) -> GraphTensor:
    # bit i of the little-endian u32 qh is bit (i % 8) of byte i // 8
    high = _bit_planes(b[..., 2:6], 8).transpose(-1, -2).reshape(*b.shape[:-1], 32)
    return (_nibbles(b[..., 6:]) + high * 16 - 16) * _half_at(b, 0)


def _k_scales(s: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
    """The 8 six-bit scales and mins packed in Q4_K/Q5_K's 12 bytes (ggml get_scale_min_k4)."""
    a, b, c = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    scales = cat([_bits(a, 0, 6), _bits(c, 0, 4) + _bits(a, 6, 2) * 16], -1)
    mins = cat([_bits(b, 0, 6), _bits(c, 4, 4) + _bits(b, 6, 2) * 16], -1)
    return scales, mins


def _k_sub_blocks(q: GraphTensor, b: GraphTensor) -> GraphTensor:
    """`d * scale * q - dmin * min` over (..., 8, 32) sub-block values `q` of blocks `b`."""
    scales, mins = _k_scales(b[..., 4:16])
    step = (_half_at(b, 0) * scales).unsqueeze(-1)
    offset = (_half_at(b, 2) * mins).unsqueeze(-1)
    out = step * q - offset
    return out.reshape(*b.shape[:-1], 256)


def _k_nibbles(qs: GraphTensor) -> GraphTensor:
    """Q4_K/Q5_K's 128 bytes -> (..., 8, 32): sub-block 2j is the low nibbles of bytes
    32j..32j+31, sub-block 2j+1 their high nibbles."""
    chunks = qs.reshape(*qs.shape[:-1], 4, 32)
    low = chunks.fmod(16.0)
    high = (chunks - low) * 0.0625
    return cat([low.unsqueeze(-2), high.unsqueeze(-2)], -2).reshape(*qs.shape[:-1], 8, 32)


def _decode_q4_k(b: GraphTensor) -> GraphTensor:
    return _k_sub_blocks(_k_nibbles(b[..., 16:144]), b)


def _decode_q5_k(b: GraphTensor) -> GraphTensor:
    q = _k_nibbles(b[..., 48:176]) + _bit_planes(b[..., 16:48], 8) * 16
    return _k_sub_blocks(q, b)


def _decode_q6_k(b: GraphTensor) -> GraphTensor:
    lead = tuple(b.shape[:-1])
    # two halves of 128 elements; in half n, group g (32 elements) takes the low (g < 2) or
    # high nibbles of ql[64n + 32 (g % 2) + l] and bits 2g, 2g+1 of qh[32n + l]
    ql = b[..., 0:128].reshape(*lead, 2, 2, 32)
    low = ql.fmod(16.0)
    high = (ql - low) * 0.0625
    q = cat([low, high], -2) + _bit_planes(b[..., 128:192].reshape(*lead, 2, 32), 4, 2) * 16 - 32
    scales = _signed(b[..., 192:208]) * _half_at(b, 208)  # one per 16 elements, in order
    return (scales.unsqueeze(-1) * q.reshape(*lead, 16, 16)).reshape(*lead, 256)


FORMATS: dict[str, QuantFormat] = {f.key: f for f in (
    QuantFormat("F32", 0, 1, 4),
    QuantFormat("F16", 1, 1, 2),
    QuantFormat("Q4_0", 2, 32, 18, _decode_q4_0),
    QuantFormat("Q4_1", 3, 32, 20, _decode_q4_1),
    QuantFormat("Q5_0", 6, 32, 22, _decode_q5_0),
    QuantFormat("Q8_0", 8, 32, 34, _decode_q8_0),
    QuantFormat("Q4_K", 12, 256, 144, _decode_q4_k),
    QuantFormat("Q5_K", 13, 256, 176, _decode_q5_k),
    QuantFormat("Q6_K", 14, 256, 210, _decode_q6_k),
    QuantFormat("BF16", 30, 1, 2),
)}
# the block formats `dequantize` decodes, by lower-case name
BLOCK_FORMATS: dict[str, QuantFormat] = {k: f for k, f in FORMATS.items() if f.is_quantized}
BLOCK_BYTES: dict[str, int] = {k: f.type_size for k, f in BLOCK_FORMATS.items()}
_BY_GGML_TYPE: dict[int, QuantFormat] = {f.ggml_type: f for f in FORMATS.values()}


def quant_format(key: QuantFormat | str | int) -> QuantFormat:
    """A format of `FORMATS` by name (any case) or GGUF type id.

    Raises:
        KeyError: not a format luminal implements (the message lists those it does).
    """
    found = (FORMATS.get(key.key) if isinstance(key, QuantFormat) else
             FORMATS.get(key.lower()) if isinstance(key, str) else _BY_GGML_TYPE.get(int(key)))
    if found is None or (isinstance(key, QuantFormat) and found != key):
        shown = key.name if isinstance(key, QuantFormat) else key
        raise KeyError(f"unsupported tensor type {shown!r} "
                       f"(supported: {', '.join(f.name for f in FORMATS.values())})")
    return found


def block_format(qtype: str) -> QuantFormat:
    """The block format named `qtype` (any case); ValueError naming the known ones if not."""
    found = BLOCK_FORMATS.get(qtype.lower())
    if found is None:
        raise ValueError(f"unknown quantized format {qtype!r}; expected one of "
                         f"{', '.join(BLOCK_FORMATS)}")
    return found


def row_bytes(qtype: str, cols: int) -> int:
    """Bytes of one quantized row of `cols` elements."""
    return block_format(qtype).row_bytes(cols)


def dequantize(raw: GraphTensor, qtype: str, shape: tuple[int | Expr, int]) -> GraphTensor:
    """The float32 matrix `shape` = (rows, cols) stored in GGUF `qtype` blocks in `raw`
    (uint8, shape (rows, row_bytes(qtype, cols))). See the module docstring."""
    fmt = block_format(qtype)
    rows, cols = shape
    # rows may be symbolic: the rows an embedding lookup gathered from a quantized table
    rows, cols = (rows if isinstance(rows, Expr) else int(rows)), int(cols)
    if cols % fmt.block_size:
        raise ValueError(f"dequantize: cols={cols} is not a multiple of the block size "
                         f"{fmt.block_size} of {fmt.name}")
    want = (rows, fmt.row_bytes(cols))
    if raw.dtype != uint8 or tuple(raw.shape) != want:
        raise ValueError(f"dequantize: {fmt.key} data for shape {(rows, cols)} must be uint8 "
                         f"of shape {want}, got {raw.dtype.name}{tuple(raw.shape)}")
    assert fmt.decode is not None
    blocks = raw.reshape(rows, cols // fmt.block_size, fmt.type_size).to(float32)
    out = fmt.decode(blocks).reshape(rows, cols)
    if isinstance(raw.node.op, Input) and raw.layout.is_contiguous and (
            tuple(raw.layout.shape) == tuple(raw.node.shape)):
        # backends read the input's bytes directly, so only a whole, unviewed input qualifies
        out.node.dequantized = Dequantized(fmt.key, raw.id, rows, cols)
    return out
