"""OpenCL C for the IR's `Matmul`: `out[b, m, n] = sum_k A[b, m, k] * B[b, n, k]` over strided
(or GGUF block-quantized) operands, accumulated in float32.

Two kernel families, chosen by device type, because what is fast differs:

- GPUs (`matmul_gpu`): work-groups cooperating through local memory, a tiled GEMM and
  work-group GEMVs;
- CPU devices such as PoCL (`matmul_cpu`): one work-item owns a register block and walks K
  with explicit 16-wide vectors (what a CPU OpenCL compiler turns into AVX-512/AVX2 code;
  its implicit vectorisation across work-items fails on these loops, at ~1 GFLOP/s).

Each family has a GEMV for few rows (LLM decode) and a GEMM; with a symbolic row count both
are built and each call picks one by the value of `m` at run time (`kernels.py`). This module
holds what both families share.
"""

from __future__ import annotations

from luminal.symbolic import Expr
from luminal_codegen import Matmul, QuantOperand

GEMV_MAX_ROWS = 4  # a GEMV re-reads B once per row of A: worth it only for a few rows
# the `luminal.quant` formats QUANT_PRELUDE decodes (the others run core's decomposition)
QUANT_KERNELS = frozenset({"q8_0", "q4_0", "q4_1"})

QUANT_PRELUDE = """\
inline float lm_q_scale(__global const uchar *w, long at) {
  return vload_half(0, (__global const half *)(w + at));
}
inline float lm_deq_q8_0(__global const uchar *w, long blk, int j) {
  return lm_q_scale(w, blk * 34) * (float)((__global const char *)w)[blk * 34 + 2 + j];
}
inline float lm_deq_q4_0(__global const uchar *w, long blk, int j) {
  uchar q = w[blk * 18 + 2 + (j & 15)];
  return lm_q_scale(w, blk * 18) * (float)((int)(j < 16 ? q & 15 : q >> 4) - 8);
}
inline float lm_deq_q4_1(__global const uchar *w, long blk, int j) {
  uchar q = w[blk * 20 + 4 + (j & 15)];
  return lm_q_scale(w, blk * 20) * (float)(j < 16 ? q & 15 : q >> 4) + lm_q_scale(w, blk * 20 + 2);
}
"""


def unit(e: Expr) -> bool:
    """Whether a stride is the constant 1."""
    return e.is_const and e.value == 1


def b_row_fast(mm: Matmul) -> bool:
    """Whether neighbouring n (rather than neighbouring k) are adjacent in B's memory."""
    b = mm.b
    if isinstance(b, QuantOperand):
        return not b.k_contiguous
    return unit(b.stride_row) and not unit(b.stride_k)
