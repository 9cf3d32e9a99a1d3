"""Kernels for matmuls whose right operand is a GGUF block-quantized weight (`QuantOperand`).

The weight stays in its file layout, rows of 32-element blocks (ggml's `Q8_0` `{f16 d; i8
qs[32]}`, `Q4_0` `{f16 d; u8 qs[16]}`, `Q4_1` `{f16 d; f16 m; u8 qs[16]}`; low nibbles are
elements 0..15, high nibbles 16..31), and is dequantized in registers:

- `qmatvec`: a few activation rows (decode) times W^T. One warp per output column; each lane
  takes 4 consecutive elements of one of 4 blocks in flight, so a warp streams 4 blocks per
  step and every byte of W is read once per activation row. This is the memory-bound kernel
  that decides decode speed (weight bytes/s against the memory bandwidth).
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

BLOCK = 32
# the formats these kernels decode (the others run core's decomposition)
QUANT_KERNELS = frozenset({"q8_0", "q4_0", "q4_1"})
TYPE_SIZE = {q: BLOCK_FORMATS[q].type_size for q in QUANT_KERNELS}
WARPS = 4  # output columns per qmatvec block
# At most this many activation rows (batch x m) go through qmatvec; more dequantize + cuBLAS.
QMATVEC_MAX_ROWS = 8

# element `e` (0..31) of the block at byte pointer `q`, as float; `d` is the block scale
_ELEMENT = {
    "q8_0": "((float)(signed char)q[2 + e] * d)",
    "q4_0": "((float)((e < 16 ? (q[2 + (e & 15)] & 15) : (q[2 + (e & 15)] >> 4)) - 8) * d)",
    "q4_1": "((float)(e < 16 ? (q[4 + (e & 15)] & 15) : (q[4 + (e & 15)] >> 4)) * d"
            " + lm_h2f((lm_half)(q[2] | (q[3] << 8))))",
}


def _scale() -> str:
    return "const float d = lm_h2f((lm_half)(q[0] | (q[1] << 8)));"


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
  const unsigned char *q = p1 + (lm_gid >> 5) * {TYPE_SIZE[q.qtype]};
  const int e = (int)(lm_gid & 31);
  {_scale()}
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
    ts = TYPE_SIZE[q.qtype]
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
  const long nblk = {(q.cols // BLOCK).render_c(names)};
  const unsigned char *row = p2 + _n * nblk * {ts};
  float acc = 0.0f;
  for (long blk = lane >> 3; blk < nblk; blk += 4) {{
    const unsigned char *q = row + blk * {ts};
    {_scale()}
    #pragma unroll
    for (int t = 0; t < 4; t++) {{
      const int e = e0 + t;
      const long _k = blk * {BLOCK} + e;
      acc += {_ELEMENT[q.qtype]} * {CUDA.load(a_dt, "p1", a_index)};
    }}
  }}
  acc = lm_warp_sum(acc);
  if (lane == 0) p0[{out_index}] = {CUDA.store(out_dt, "acc")};
}}
"""
    return src, dims
