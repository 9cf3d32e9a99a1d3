"""Kernels for matmuls whose right operand is a GGUF block-quantized weight (`QuantOperand`).

The weight stays in its file layout, rows of GGUF blocks (`luminal.quant`'s table: ggml's
`Q8_0` `{f16 d; i8 qs[32]}`, `Q4_0` `{f16 d; u8 qs[16]}`, `Q4_1` `{f16 d; f16 m; u8 qs[16]}`,
whose low nibbles are elements 0..15 and high nibbles 16..31; Q5_0; and the 256-element
K-quants Q4_K, Q5_K, Q6_K), and is dequantized in registers:

- `qmatvec`: a few activation rows (decode) times W^T. One warp per output column (8 per
  thread block of 256, the block size of every kernel, so qmatvecs can share a launch with
  other kernels); each lane takes whole blocks (lane, lane + 32, ...), reads a block with
  16-bit loads and dots it with its 32 activations, so a row of a decode-sized matrix is one
  round trip to memory: the kernel is latency-bound at these sizes, and every byte of W is
  read once per activation row. Q8_0/Q4_0/Q4_1 blocks have hand-written dots over 16-bit
  words; Q5_0 and the K-quants are read as 32-element chunks of their blocks, element by
  element (`_ELEMENT`: the values of core's decomposition).
- `dequant`: W expanded into a scratch matrix, then cuBLAS; for prefill (many rows), where the
  expansion is amortised over the rows, and for the rarer W (not W^T) products.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.dtypes import float32
from luminal.quant import BLOCK_FORMATS
from luminal.symbolic import Expr
from luminal_codegen.indexing import unravel
from luminal_codegen.ir import Matmul, MatOperand, Param, QuantOperand, kernel_dims
from luminal_codegen.render import dim_names

from .dialect import CUDA, THREADS, KernelFunction, dim_loads, kernel_function
from .matmul import CUDA_R

BLOCK = 32  # elements a lane decodes per step (a whole block, or a chunk of a K-quant's)
WARPS = THREADS // 32  # output columns per qmatvec block
# At most this many activation rows (batch x m) go through qmatvec; more dequantize + cuBLAS.
QMATVEC_MAX_ROWS = 8
STAGED_MAX_K = 8192  # activation rows up to this long go through shared memory (32 KiB)


def _half(at: int) -> str:
    return f"lm_h2f((lm_half)(q[{at}] | (q[{at + 1}] << 8)))"


def _k_scale_min(j: str) -> tuple[str, str]:
    """Q4_K/Q5_K's 6-bit scale and min of sub-block `j` (ggml's get_scale_min_k4)."""
    s = "q[4 + {}]".format
    scale = f"({j} < 4 ? ({s(j)} & 63) : (({s(f'{j} + 4')} & 15) | (({s(f'{j} - 4')} >> 6) << 4)))"
    low = f"({j} < 4 ? ({s(f'{j} + 4')} & 63) : (({s(f'{j} + 4')} >> 4) | (({s(j)} >> 6) << 4)))"
    return scale, low


def _k_quant(qs: int, high_bits: str) -> str:
    j, l = "(e >> 5)", "(e & 31)"
    byte = f"q[{qs} + 32 * ({j} >> 1) + {l}]"
    nibble = f"(({j} & 1) ? ({byte} >> 4) : ({byte} & 15))"
    scale, low = _k_scale_min(j)
    return (f"(d * (float){scale} * (float)({nibble}{high_bits}) - "
            f"{_half(2)} * (float){low})")


# element `e` (0 .. block size - 1) of the block at byte pointer `q`, as float; `d` is the
# block's f16 scale (at `_SCALE_AT`). Each is luminal.quant's value, rounded the same way.
_ELEMENT = {
    "q8_0": "((float)(signed char)q[2 + e] * d)",
    "q4_0": "((float)((e < 16 ? (q[2 + (e & 15)] & 15) : (q[2 + (e & 15)] >> 4)) - 8) * d)",
    "q4_1": "((float)(e < 16 ? (q[4 + (e & 15)] & 15) : (q[4 + (e & 15)] >> 4)) * d"
            " + lm_h2f((lm_half)(q[2] | (q[3] << 8))))",
    "q5_0": "((float)(((e < 16 ? (q[6 + (e & 15)] & 15) : (q[6 + (e & 15)] >> 4))"
            " | (((q[2 + (e >> 3)] >> (e & 7)) & 1) << 4)) - 16) * d)",
    "q4_k": _k_quant(16, ""),
    "q5_k": _k_quant(48, " + (((q[16 + (e & 31)] >> (e >> 5)) & 1) << 4)"),
    # half h = e >> 7, group g = (e >> 5) & 3, l = e & 31: low (g < 2) or high nibble of
    # ql[64h + 32(g & 1) + l], bits 2g, 2g+1 of qh[32h + l], scale 8h + 2g + l / 16
    "q6_k": "(d * (float)(signed char)q[192 + 8 * (e >> 7) + 2 * ((e >> 5) & 3) + ((e & 31) >> 4)]"
            " * (float)((((((e >> 5) & 3) >> 1)"
            " ? (q[64 * (e >> 7) + 32 * ((e >> 5) & 1) + (e & 31)] >> 4)"
            " : (q[64 * (e >> 7) + 32 * ((e >> 5) & 1) + (e & 31)] & 15))"
            " | (((q[128 + 32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3) << 4)) - 32))",
}
_SCALE_AT = {"q6_k": 208}  # where `d` is, if not at byte 0
# the formats these kernels decode (the others run core's decomposition)
QUANT_KERNELS = frozenset(_ELEMENT)
TYPE_SIZE = {q: BLOCK_FORMATS[q].type_size for q in QUANT_KERNELS}
BLOCK_SIZE = {q: BLOCK_FORMATS[q].block_size for q in QUANT_KERNELS}
_WORD_DOTS = ("q8_0", "q4_0", "q4_1")  # formats with a hand-written dot over 16-bit words


def _scale(qtype: str) -> str:
    return f"const float d = {_half(_SCALE_AT.get(qtype, 0))};"


def _chunk_dot(qtype: str, ts: int) -> list[str]:
    """Lines adding chunk `blk` (32 elements) of a row, dotted with activations `x[32]`, to
    `acc`: a whole block of the 32-element formats, an eighth of a K-quant block."""
    if qtype in _WORD_DOTS:
        return [f"const unsigned short *w = (const unsigned short *)(row + blk * {ts});",
                *_block_dot(qtype)]
    per_block = BLOCK_SIZE[qtype] // BLOCK
    return [f"const unsigned char *q = row + blk / {per_block} * {ts};", _scale(qtype),
            f"const int e0 = (int)(blk % {per_block}) * {BLOCK};", "float s = 0.0f;",
            "#pragma unroll", f"for (int t = 0; t < {BLOCK}; t++) {{",
            "  const int e = e0 + t;", f"  s += {_ELEMENT[qtype]} * x[t];", "}", "acc += s;"]


def _block_dot(qtype: str) -> list[str]:
    """Lines adding block `w` (16-bit words) dotted with activations `x[32]` to `acc`; ggml's
    layouts: Q8_0 `qs[j]` is element j; Q4_x byte j holds element j (low nibble) and j + 16."""
    if qtype == "q8_0":
        lines = ["float s = 0.0f;"]
        for j in range(16):
            lines.append(f"s += (float)(signed char)(w[{1 + j}] & 255) * x[{2 * j}]"
                         f" + (float)(signed char)(w[{1 + j}] >> 8) * x[{2 * j + 1}];")
        return [*lines, "acc += lm_h2f(w[0]) * s;"]
    first = 1 if qtype == "q4_0" else 2  # word of the first quants (after d, or d and m)
    lines = ["float s = 0.0f, sx = 0.0f;", "#pragma unroll",
             "for (int e = 0; e < 32; e++) sx += x[e];"]
    for j in range(8):
        v = f"w[{first + j}]"
        lines.append(f"s += (float)({v} & 15) * x[{2 * j}] + (float)(({v} >> 4) & 15) * "
                     f"x[{2 * j + 16}] + (float)(({v} >> 8) & 15) * x[{2 * j + 1}] + "
                     f"(float)({v} >> 12) * x[{2 * j + 17}];")
    if qtype == "q4_0":
        return [*lines, "acc += lm_h2f(w[0]) * (s - 8.0f * sx);"]
    return [*lines, "acc += lm_h2f(w[0]) * s + lm_h2f(w[1]) * sx;"]


@dataclass(frozen=True)
class QuantKernels:
    """The sources for one quantized `Matmul` and the plain `Matmul` over the dequantized
    scratch buffer (param 2 of `dequantized`) that the dequant path hands to cuBLAS."""

    qmatvec: KernelFunction | None  # None when W is read untransposed (no k-contiguous rows)
    dequant: KernelFunction
    dequantized: Matmul


def scratch_dtype(mm: Matmul):
    """Element type of the dequantized weight: the activations' when cuBLAS can pair them."""
    a_dt = mm.params[1].dtype
    return a_dt if a_dt.name in CUDA_R else float32


def quant_kernels(mm: Matmul, name: str, slots: dict[str, int]) -> QuantKernels:
    """Render the kernels of quantized matmul `mm`; functions are `{name}_qmv`, `{name}_deq`;
    `slots` gives each dim's index in the program's `lm_dims` array."""
    q = mm.b
    assert isinstance(q, QuantOperand)
    sdt = scratch_dtype(mm)
    zero, one = Expr.const(0), Expr.const(1)
    # the scratch is W row-major: W[n, k] for x @ W.T, W[k, n] for x @ W
    scratch = (MatOperand(2, zero, q.cols, one) if q.k_contiguous
               else MatOperand(2, zero, one, q.cols))
    dequantized = replace(mm, params=(*mm.params[:2], Param(sdt)), b=scratch)
    qmv = _qmatvec_source(mm, f"{name}_qmv", slots) if q.k_contiguous else None
    return QuantKernels(qmv, _dequant_source(q, sdt, f"{name}_deq", slots), dequantized)


def _dims_of(exprs: list[Expr]) -> tuple[str, ...]:
    names: set[str] = set()
    for e in exprs:
        names |= e.free_vars
    return tuple(sorted(n for n in names if not n.startswith("_")))


def _function(name: str, params: list[tuple[str, str, bool]], dims: tuple[str, ...],
              slots: dict[str, int], body: str) -> KernelFunction:
    lines = [*dim_loads(dims, slots), *body.strip("\n").split("\n")]
    return kernel_function(name, params, list(dim_names(dims).values()), lines)


def _dequant_source(q: QuantOperand, sdt, name: str, slots: dict[str, int]) -> KernelFunction:
    dims = _dims_of([q.rows, q.cols])
    names = dim_names(dims)
    total = (q.rows * q.cols).render_c(names)
    params = [(CUDA.storage_type(sdt), "p0", True), ("unsigned char", "p1", False)]
    return _function(name, params, dims, slots, f"""
const long lm_gid = lm_block * blockDim.x + threadIdx.x;
if (lm_gid >= {total}) return;
const unsigned char *q = p1 + (lm_gid / {BLOCK_SIZE[q.qtype]}) * {TYPE_SIZE[q.qtype]};
const int e = (int)(lm_gid % {BLOCK_SIZE[q.qtype]});
{_scale(q.qtype)}
p0[lm_gid] = {CUDA.store(sdt, _ELEMENT[q.qtype])};
""")


def _qmatvec_source(mm: Matmul, name: str, slots: dict[str, int]) -> KernelFunction:
    q, a = mm.b, mm.a
    assert isinstance(q, QuantOperand)
    dims = kernel_dims(mm)
    names = dim_names(dims)
    out_dt, a_dt = mm.params[0].dtype, mm.params[1].dtype
    bvars = mm.batch_vars
    decl = [f"const long {v.name} = {e.render_c(names)};"
            for v, e in zip(bvars, unravel(Expr.var("lm_b", 0, 1 << 62), mm.batch))]
    m, n, k = Expr.var("_m", 0, 1 << 62), Expr.var("_n", 0, 1 << 62), Expr.var("_k", 0, 1 << 62)
    a_index = (a.offset + m * a.stride_row + k * a.stride_k).render_c(names)
    out_index = (mm.out_offset + m * mm.out_stride + n).render_c(names)
    ts = TYPE_SIZE[q.qtype]
    params = [(CUDA.storage_type(out_dt), "p0", True), (CUDA.storage_type(a_dt), "p1", False),
              ("unsigned char", "p2", False)]
    body = "\n".join(decl)
    dot = "\n  ".join(_chunk_dot(q.qtype, ts))
    load = CUDA.load(a_dt, "p1", a_index)
    if q.cols.is_const and q.cols.value <= STAGED_MAX_K:
        # The block's 8 columns share one activation row: staged once, coalesced, in shared
        # memory with a pad word every 32 (lane L reads word 33 L + e: no bank conflicts),
        # instead of 32 scattered loads per lane.
        size = q.cols.value + q.cols.value // BLOCK
        stage = (f"__shared__ float lm_x[{size}];\n"
                 f"for (long _k = threadIdx.x; _k < {q.cols.value}; _k += blockDim.x) "
                 f"lm_x[_k + (_k >> 5)] = {load};\n__syncthreads();")
        activation = "x[e] = lm_x[blk * 33 + e];"
    else:
        stage, activation = "", f"const long _k = blk * {BLOCK} + e; x[e] = {load};"
    n_cols = mm.n.render_c(names)
    # the grid is (column blocks x m x batch) flattened; m and n are exact dims (see dims.py)
    return _function(name, params, dims, slots, f"""
const long lm_nb = ({n_cols} + {WARPS - 1}) / {WARPS}, lm_rows = {mm.m.render_c(names)};
const long _n = (lm_block % lm_nb) * {WARPS} + (threadIdx.x >> 5);
const long _m = (lm_block / lm_nb) % lm_rows;
const long lm_b = lm_block / (lm_nb * lm_rows);
{body}
{stage}
if (_n >= {n_cols}) return;
const int lane = threadIdx.x & 31;
const long nblk = {(q.cols // BLOCK).render_c(names)};  /* chunks of {BLOCK} elements */
const unsigned char *row = p2 + _n * (nblk / {BLOCK_SIZE[q.qtype] // BLOCK}) * {ts};
float acc = 0.0f;
for (long blk = lane; blk < nblk; blk += 32) {{
  float x[{BLOCK}];
  #pragma unroll
  for (int e = 0; e < {BLOCK}; e++) {{
    {activation}
  }}
  {dot}
}}
acc = lm_warp_sum(acc);
if (lane == 0) p0[{out_index}] = {CUDA.store(out_dt, "acc")};
""")
