"""Matmul kernels for GPUs: a local-memory tiled GEMM and work-group GEMVs.

- `gemm`: 64x64 output tiles per 16x16 work-group, 4x4 outputs per work-item, K in steps of
  16 through local memory. Tiles are loaded so that neighbouring work-items read neighbouring
  addresses whichever of the operand's two strides is 1 (A row-major, B as W[n, k] for
  `x @ W.T` or as W[k, n] for `x @ W`).
- `gemv`: a matrix-vector product is bound by reading B once, so the kernel follows B's
  layout. Rows of B contiguous in k: one 64-wide work-group per output, each work-item summing
  a strided part of the row, then a tree in local memory; quantized rows are decoded a block
  (32 weights, one scale) at a time. Otherwise one work-item per output, walking k, so that a
  work-group reads consecutive n together.

These kernels are valid OpenCL on any device; the tests run them on PoCL too.
"""

from __future__ import annotations

from luminal.quant import BLOCK_BYTES
from luminal_codegen import QuantOperand, kernel_dims
from luminal_codegen.matmul import MatmulCtx, batch_size, function

from .launch import LaunchSpec, ceil_to
from .matmul import b_row_fast, unit

TILE, WPT, TK = 64, 4, 16  # output tile, outputs per work-item per axis, K step
GROUP = TILE // WPT  # 16: work-group side
GEMV_GROUP = 64


def _tile_load(dst: str, row_fast: bool, origin: str, limit: str, load) -> list[str]:
    """Statements filling `dst[TK][TILE]` from rows `origin..origin+TILE`, k in `k0..k0+TK`."""
    per_item = TILE * TK // (GROUP * GROUP)
    r, c = (f"e % {TILE}", f"e / {TILE}") if row_fast else (f"e / {TK}", f"e % {TK}")
    return [
        f"for (int l = 0; l < {per_item}; l++) {{",
        f"  const int e = tid + {GROUP * GROUP} * l, r = {r}, c = {c};",
        f"  const long gr = {origin} + r, gc = k0 + c;",
        f"  {dst}[c][r] = (gr < {limit} && gc < K) ? {load('gr', 'gc')} : 0.0f;",
        "}",
    ]


def gemm(ctx: MatmulCtx, name: str) -> tuple[str, LaunchSpec]:
    mm = ctx.mm
    a_row_fast = unit(mm.a.stride_row) and not unit(mm.a.stride_k)
    body = [
        *ctx.header("(long)get_global_id(2)"),
        f"const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * {GROUP} + tx;",
        f"const long m0 = (long)get_group_id(1) * {TILE}, n0 = (long)get_group_id(0) * {TILE};",
        f"__local float As[{TK}][{TILE + 1}], Bs[{TK}][{TILE + 1}];",
        f"float acc[{WPT}][{WPT}];",
        f"for (int i = 0; i < {WPT}; i++) for (int j = 0; j < {WPT}; j++) acc[i][j] = 0.0f;",
        f"for (long k0 = 0; k0 < K; k0 += {TK}) {{",
        *("  " + s for s in _tile_load("As", a_row_fast, "m0", "M", ctx.load_a)),
        *("  " + s for s in _tile_load("Bs", b_row_fast(mm), "n0", "N", ctx.load_b)),
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        f"  for (int kk = 0; kk < {TK}; kk++) {{",
        f"    float a[{WPT}], b[{WPT}];",
        f"    for (int i = 0; i < {WPT}; i++) a[i] = As[kk][ty + {GROUP} * i];",
        f"    for (int j = 0; j < {WPT}; j++) b[j] = Bs[kk][tx + {GROUP} * j];",
        f"    for (int i = 0; i < {WPT}; i++) for (int j = 0; j < {WPT}; j++) "
        "acc[i][j] += a[i] * b[j];",
        "  }",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
        f"for (int i = 0; i < {WPT}; i++) for (int j = 0; j < {WPT}; j++) {{",
        f"  const long r = m0 + ty + {GROUP} * i, c = n0 + tx + {GROUP} * j;",
        f"  if (r < M && c < N) {{ {ctx.store(ctx.out_index('r', 'c'), 'acc[i][j]')} }}",
        "}",
    ]
    attr = f"__attribute__((reqd_work_group_size({GROUP}, {GROUP}, 1)))"
    size = (ceil_to(mm.n, TILE) // WPT, ceil_to(mm.m, TILE) // WPT, batch_size(mm))
    spec = LaunchSpec(name, kernel_dims(mm), size, (GROUP, GROUP, 1))
    return function(ctx.signature(name, attr), body), spec


def _quant_row_dot(ctx: MatmulCtx, q: QuantOperand) -> list[str]:
    """Partial dot product of A's row `m` with quantized row `n`, one block per step."""
    size = BLOCK_BYTES[q.qtype]
    blocks = f"({ctx.expr(q.cols)} / 32)"
    a = ctx.load_a("m", "kb + j")
    lines = [
        f"for (long blk = t; blk < {blocks}; blk += {GEMV_GROUP}) {{",
        "  const long kb = blk * 32;",
        f"  __global const uchar *q = p{q.buf} + (n * {blocks} + blk) * {size};",
        "  const float d = vload_half(0, (__global const half *)q);",
    ]
    if q.qtype == "q8_0":
        lines += ["  float s8 = 0.0f;",
                  f"  for (int j = 0; j < 32; j++) s8 += {a} * (float)((__global const char *)q)"
                  "[2 + j];",
                  "  s += d * s8;"]
    else:
        lo, hi = ("q[2 + j] & 15", "q[2 + j] >> 4") if q.qtype == "q4_0" else (
            "q[4 + j] & 15", "q[4 + j] >> 4")
        a_hi = ctx.load_a("m", "kb + 16 + j")
        lines += ["  float sq = 0.0f, sa = 0.0f;",
                  "  for (int j = 0; j < 16; j++) {",
                  f"    const float x0 = {a}, x1 = {a_hi};",
                  f"    sq += x0 * (float)({lo}) + x1 * (float)({hi});",
                  "    sa += x0 + x1;",
                  "  }"]
        lines.append("  s += d * (sq - 8.0f * sa);" if q.qtype == "q4_0" else
                     "  s += d * sq + vload_half(0, (__global const half *)(q + 2)) * sa;")
    return [*lines, "}"]


def gemv(ctx: MatmulCtx, name: str) -> tuple[str, LaunchSpec]:
    """Matrix-vector kernel; see the module docstring for the two layouts."""
    mm = ctx.mm
    rows = batch_size(mm) * mm.m
    if b_row_fast(mm):
        body = [
            *ctx.header("((long)get_global_id(1) / M)"),
            "const long n = get_global_id(0), m = (long)get_global_id(1) % M;",
            "if (n >= N) return;",
            "float s = 0.0f;",
            f"for (long k = 0; k < K; k++) s += {ctx.load_a('m', 'k')} * {ctx.load_b('n', 'k')};",
            f"{ctx.store(ctx.out_index('m', 'n'), 's')}",
        ]
        spec = LaunchSpec(name, kernel_dims(mm), (ceil_to(mm.n, GEMV_GROUP), rows),
                          (GEMV_GROUP, 1))
        return function(ctx.signature(name), body), spec
    quant = ctx.quant
    if quant is not None:
        dot = _quant_row_dot(ctx, quant)
    else:
        dot = [f"for (long k = t; k < K; k += {GEMV_GROUP}) "
               f"s += {ctx.load_a('m', 'k')} * {ctx.load_b('n', 'k')};"]
    body = [
        *ctx.header("((long)get_group_id(1) / M)"),
        "const long n = get_group_id(0), m = (long)get_group_id(1) % M;",
        "const int t = get_local_id(0);",
        f"__local float part[{GEMV_GROUP}];",
        "float s = 0.0f;",
        *dot,
        "part[t] = s;",
        "barrier(CLK_LOCAL_MEM_FENCE);",
        f"for (int w = {GEMV_GROUP // 2}; w > 0; w >>= 1) {{",
        "  if (t < w) part[t] += part[t + w];",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
        f"if (t == 0) {{ {ctx.store(ctx.out_index('m', 'n'), 'part[0]')} }}",
    ]
    attr = f"__attribute__((reqd_work_group_size({GEMV_GROUP}, 1, 1)))"
    spec = LaunchSpec(name, kernel_dims(mm), (mm.n * GEMV_GROUP, rows), (GEMV_GROUP, 1))
    return function(ctx.signature(name, attr), body), spec
