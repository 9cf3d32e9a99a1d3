"""Kernels for matmuls whose right operand is a GGUF block-quantized weight (`QuantOperand`).

The weight stays in its file layout, rows of GGUF blocks (`luminal.quant`'s table: Q8_0, Q4_0,
Q4_1, Q5_0 with 32 elements, Q4_K, Q5_K, Q6_K with 256), and is dequantized in registers, one
element at a time from its block (`_ELEMENT`, the same values as core's decomposition):

- `qmatvec`: a few activation rows (decode) times W^T. One warp per output column; each lane
  takes 4 consecutive elements of one of 4 chunks of 32 in flight, so a warp streams 128
  elements per step and every byte of W is read once per activation row. This is the
  memory-bound kernel that decides decode speed (weight bytes/s against the memory bandwidth).
- `dequant`: W expanded into a scratch matrix, then cuBLAS; for prefill (many rows), where the
  expansion is amortised over the rows, and for the rarer W (not W^T) products.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.codegen.indexing import unravel
from luminal.codegen.ir import Matmul, MatOperand, Param, QuantOperand, kernel_dims
from luminal.codegen.render import dim_names
from luminal.dtypes import float32
from luminal.quant import BLOCK_FORMATS
from luminal.symbolic import Expr

from .dialect import CUDA, dim_loads
from .matmul import CUDA_R

CHUNK = 32  # elements a qmatvec warp decodes per step (every block size is a multiple)
WARPS = 4  # output columns per qmatvec block
# At most this many activation rows (batch x m) go through qmatvec; more dequantize + cuBLAS.
QMATVEC_MAX_ROWS = 8


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


def _scale(qtype: str) -> str:
    return f"const float d = {_half(_SCALE_AT.get(qtype, 0))};"


@dataclass(frozen=True)
class QuantKernels:
    """The sources for one quantized `Matmul` and the plain `Matmul` over the dequantized
    scratch buffer (param 2 of `dequantized`) that the dequant path hands to cuBLAS."""

    qmatvec: str | None  # None when W is read untransposed (no k-contiguous rows)
    dequant: str
    dequantized: Matmul
    qmatvec_uses_dims: bool  # whether each takes the `lm_dims` array after its buffers
    dequant_uses_dims: bool


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
    deq, deq_dims = _dequant_source(q, sdt, f"{name}_deq", slots)
    qmv, qmv_dims = (_qmatvec_source(mm, f"{name}_qmv", slots) if q.k_contiguous else (None, ()))
    return QuantKernels(qmv, deq, dequantized, bool(qmv_dims), bool(deq_dims))


def _dims_of(exprs: list[Expr]) -> tuple[str, ...]:
    names: set[str] = set()
    for e in exprs:
        names |= e.free_vars
    return tuple(sorted(n for n in names if not n.startswith("_")))


def _signature(name: str, params: list[tuple[str, str, bool]], dims: tuple[str, ...],
               slots: dict[str, int]) -> str:
    """The kernel's first lines: signature and dim loads."""
    head = CUDA.signature(name, params, list(dim_names(dims).values())) + " {"
    return "\n  ".join([head, *dim_loads(dims, slots)])


def _dequant_source(q: QuantOperand, sdt, name: str,
                    slots: dict[str, int]) -> tuple[str, tuple[str, ...]]:
    dims = _dims_of([q.rows, q.cols])
    names = dim_names(dims)
    total = (q.rows * q.cols).render_c(names)
    params = [(CUDA.storage_type(sdt), "p0", True), ("unsigned char", "p1", False)]
    src = f"""{_signature(name, params, dims, slots)}
  const long lm_gid = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (lm_gid >= {total}) return;
  const unsigned char *q = p1 + (lm_gid / {BLOCK_SIZE[q.qtype]}) * {TYPE_SIZE[q.qtype]};
  const int e = (int)(lm_gid % {BLOCK_SIZE[q.qtype]});
  {_scale(q.qtype)}
  p0[lm_gid] = {CUDA.store(sdt, _ELEMENT[q.qtype])};
}}
"""
    return src, dims


def _qmatvec_source(mm: Matmul, name: str, slots: dict[str, int]) -> tuple[str, tuple[str, ...]]:
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
    ts, per_block = TYPE_SIZE[q.qtype], BLOCK_SIZE[q.qtype] // CHUNK
    params = [(CUDA.storage_type(out_dt), "p0", True), (CUDA.storage_type(a_dt), "p1", False),
              ("unsigned char", "p2", False)]
    body = "\n  ".join(decl)
    src = f"""{_signature(name, params, dims, slots)}
  /* grid (ceil(n / {WARPS}), m, batch), block (32, {WARPS}): warp threadIdx.y owns column _n */
  const long _n = (long)blockIdx.x * {WARPS} + threadIdx.y;
  const long _m = blockIdx.y;
  const long lm_b = blockIdx.z;
  {body}
  if (_n >= {mm.n.render_c(names)}) return;
  const int lane = threadIdx.x, e0 = (lane & 7) * 4;
  /* a warp decodes 4 chunks of {CHUNK} elements per step: lanes 8c..8c+7, 4 elements each */
  const long nchunk = {(q.cols // CHUNK).render_c(names)};
  const unsigned char *row = p2 + _n * (nchunk / {per_block}) * {ts};
  float acc = 0.0f;
  for (long chunk = lane >> 3; chunk < nchunk; chunk += 4) {{
    const unsigned char *q = row + chunk / {per_block} * {ts};
    {_scale(q.qtype)}
    #pragma unroll
    for (int t = 0; t < 4; t++) {{
      const int e = (int)(chunk % {per_block}) * {CHUNK} + e0 + t;
      const long _k = chunk * {CHUNK} + e0 + t;
      acc += {_ELEMENT[q.qtype]} * {CUDA.load(a_dt, "p1", a_index)};
    }}
  }}
  acc = lm_warp_sum(acc);
  if (lane == 0) p0[{out_index}] = {CUDA.store(out_dt, "acc")};
}}
"""
    return src, dims
