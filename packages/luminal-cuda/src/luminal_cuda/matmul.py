"""Matmuls on cuBLAS: `cublasGemmStridedBatchedEx` calls planned from the operands' views.

A `Matmul` of the kernel IR reads `a[b, m, k]` and `b[b, n, k]` at `offset + row*stride_row +
k*stride_k` and writes `out[b, m, n]` at `out_offset + m*out_stride + n`. cuBLAS is
column-major, so that row-major `out` is computed as the column-major
`out^T (n x m, leading dim out_stride) = op(B) (n x k) . op(A) (k x m)`; whether each
operand needs a transpose, and its leading dimension, follow from which of its strides is 1.
No operand is ever copied: permuted, sliced and broadcast views go to cuBLAS as they are.

Batch axes fold into cuBLAS's batch where their strides nest (a contiguous batch, or a
broadcast one with stride 0); the remaining outer axes become separate calls. A view cuBLAS
cannot take (no unit stride, overlapping rows, a mixed-precision pair it has no kernel for)
runs the generated fallback kernel `matmul_kernel` instead. Products accumulate in float32
(`CUBLAS_COMPUTE_32F`), also for float16 and bfloat16 operands.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from luminal.dtypes import DType, float32
from luminal.symbolic import Expr
from luminal_codegen.ir import (
    Binary,
    Cast,
    Kernel,
    Load,
    Matmul,
    MatOperand,
    Reduce,
    Store,
    affine,
    loop_var,
    reduce_var,
)

# cudaDataType and cuBLAS enums (cublas_api.h, library_types.h)
CUDA_R = {"float32": 0, "float16": 2, "bfloat16": 14}
COMPUTE_32F = 68
COMPUTE_32F_FAST_TF32 = 77
GEMM_DEFAULT = -1
OP_N, OP_T = 0, 1


@dataclass(frozen=True)
class GemmCall:
    """One `cublasGemmStridedBatchedEx` in cuBLAS's terms (first operand = our `b`); offsets
    and strides count elements of each buffer."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    offset_a: int
    offset_b: int
    offset_c: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int


def cublas_types(mm: Matmul) -> tuple[int, int, int] | None:
    """cudaDataType of (our b, our a, out), or None when cuBLAS has no such kernel."""
    out, a, b = (p.dtype for p in mm.params)
    if not isinstance(mm.b, MatOperand) or a != b or a.name not in CUDA_R:
        return None
    if out != a and out != float32:
        return None
    return CUDA_R[b.name], CUDA_R[a.name], CUDA_R[out.name]


def _op_layout(stride_row: int, stride_k: int, rows: int, k: int,
               k_major: int, row_major: int) -> tuple[int, int] | None:
    """(cuBLAS op, leading dim) presenting a `rows x k` operand to cuBLAS, or None.

    `k_major` is the op when elements along k are adjacent (ld = row stride, ld >= k),
    `row_major` the op when rows are adjacent (ld = k stride, ld >= rows)."""
    if stride_k == 1 or k == 1:
        ld = stride_row if rows > 1 else max(k, 1)
        if ld >= max(k, 1):
            return k_major, ld
    if stride_row == 1 or rows == 1:
        ld = stride_k if k > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return row_major, ld
    return None


def _fold(extents: list[int], strides: list[list[int]]) -> int:
    """First batch axis from which every operand's batch strides nest into one stride."""
    start = len(extents)
    while start > 0:
        t = start - 1
        if t < len(extents) - 1 and not all(
            s[t] == s[t + 1] * extents[t + 1] for s in strides
        ):
            break
        start = t
    return start


def plan_gemm(mm: Matmul, dims: dict[str, int]) -> list[GemmCall] | None:
    """The cuBLAS calls computing `mm` for these dim values, or None when cuBLAS cannot take
    the operands' views (run the fallback kernel then). An empty list: nothing to compute."""
    assert isinstance(mm.b, MatOperand)

    def ev(e: Expr) -> int:
        return e.evaluate(dims)

    bvars = mm.batch_vars
    offsets = []
    for offset in (mm.a.offset, mm.b.offset, mm.out_offset):
        split = affine(offset, bvars)
        if split is None:
            return None
        coefs, rest = split
        offsets.append(([ev(c) for c in coefs], ev(rest)))
    (ca, ra), (cb, rb), (cc, rc) = offsets
    sa_row, sa_k, sb_row, sb_k = (ev(e) for e in (mm.a.stride_row, mm.a.stride_k,
                                                  mm.b.stride_row, mm.b.stride_k))
    m, n, k = ev(mm.m), ev(mm.n), ev(mm.k)
    extents = [ev(d) for d in mm.batch]
    if m == 0 or n == 0 or 0 in extents:
        return []
    if k == 0:
        return None  # cuBLAS may leave C untouched: the fallback kernel writes the zeros
    # out(b, m, n) is at out_offset(b) + m*ldc + n: column-major n x m with leading dim ldc
    ldc = ev(mm.out_stride) if m > 1 else n
    opa = _op_layout(sb_row, sb_k, n, k, OP_T, OP_N)
    opb = _op_layout(sa_row, sa_k, m, k, OP_N, OP_T)
    if opa is None or opb is None or ldc < n or min(ra, rb, rc, sa_row, sa_k, sb_row, sb_k) < 0:
        return None
    if any(s < 0 for s in (*ca, *cb, *cc)):
        return None
    keep = [j for j, e in enumerate(extents) if e != 1]  # unit axes never move the offset
    ext = [extents[j] for j in keep]
    strides = [[ca[j] for j in keep], [cb[j] for j in keep], [cc[j] for j in keep]]
    start = _fold(ext, strides)
    inner = 1
    for e in ext[start:]:
        inner *= e
    last = len(ext) - 1
    sa, sb, sc = ((s[last] if start <= last else 0) for s in strides)
    calls = []
    for outer in itertools.product(*(range(e) for e in ext[:start])):
        oa = ra + sum(i * s for i, s in zip(outer, strides[0]))
        ob = rb + sum(i * s for i, s in zip(outer, strides[1]))
        oc = rc + sum(i * s for i, s in zip(outer, strides[2]))
        calls.append(GemmCall(opa[0], opb[0], n, m, k, opa[1], opb[1], ldc, ob, oa, oc,
                              sb, sa, sc, inner))
    return calls


def matmul_kernel(mm: Matmul) -> Kernel:
    """`mm` as a generated kernel (one output element per thread, float32 products): the
    fallback for operands cuBLAS cannot take, and the reference of the cuBLAS path."""
    assert isinstance(mm.b, MatOperand)
    domain = (*mm.batch, mm.m, mm.n)
    loops = tuple(loop_var(j, d) for j, d in enumerate(domain))
    bvars, mvar, nvar = loops[:-2], loops[-2], loops[-1]
    env = {v.name: lv for v, lv in zip(mm.batch_vars, bvars)}
    r = reduce_var(0, mm.k)
    out_dt, a_dt, b_dt = (p.dtype for p in mm.params)

    def load(op: MatOperand, row: Expr, dt: DType) -> Load:
        index = op.offset.substitute(env) + row * op.stride_row + r * op.stride_k
        return Load(op.buf, index, Expr.const(1), dt)

    prod = Binary("mul", _f32(load(mm.a, mvar, a_dt)), _f32(load(mm.b, nvar, b_dt)), float32)
    value = Reduce("sum", r, mm.k, prod, float32)
    if out_dt != float32:
        value = Cast(value, out_dt)
    index = mm.out_offset.substitute(env) + mvar * mm.out_stride + nvar
    return Kernel(mm.params, domain, Store(mm.out, index, value))


def _f32(v: Load) -> Load | Cast:
    return v if v.dtype == float32 else Cast(v, float32)
