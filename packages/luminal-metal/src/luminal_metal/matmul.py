"""MSL for the IR's `Matmul`: `out[b, m, n] = sum_k A[b, m, k] * B[b, n, k]` over strided or
GGUF block-quantized (Q8_0, Q4_0, Q4_1) operands, accumulated in float32.

Three kernel functions, one chosen per call:

- `gemm`: a threadgroup of four simdgroups computes a 32x32 tile of the output with
  `simdgroup_float8x8` multiply-accumulates (Apple's matrix hardware). Tiles of A and B are
  staged in threadgroup memory as float32, which is where any stride, dtype or quantized
  block is decoded and the ragged edges read zeros, so the matrix units always see dense
  8x8 blocks;
- `gemv`: for few rows (LLM decode): each simdgroup owns one output column, its 32 lanes walk
  K side by side (for a quantized row: one 32-element block per step) and `simd_sum` combines
  them;
- `per_thread`: one thread per output element walks K alone, for short reductions (K below a
  simdgroup's width), where the other two would leave most lanes idle.

With a symbolic row count both `gemv` and `gemm` are rendered and the runtime picks one by the
value of `m` (`MatmulKernel.variants`).
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr, lt
from luminal_codegen import Matmul, dim_names, kernel_dims
from luminal_codegen.matmul import MatmulCtx, batch_size, function

from .dialect import GROUP_ARGS, METAL, THREAD_ARGS

GEMV_MAX_ROWS = 4  # a GEMV re-reads B once per row of A: worth it only for a few rows
GEMV_COLUMNS = 8  # simdgroups (output columns) per GEMV threadgroup
TILE = 32  # output tile of a GEMM threadgroup (four simdgroups of 16x16)
TILE_K = 16
GEMM_THREADS = 128
SIMD_WIDTH = 32
# reductions up to this long run one thread per output: a simdgroup would leave lanes idle
PER_THREAD_MAX_K = SIMD_WIDTH - 1

# the formats the kernels below decode in registers (others run core's decomposition)
QUANT_KERNELS = frozenset({"q8_0", "q4_0", "q4_1"})
QUANT_PRELUDE = """\
static inline float lm_q_scale(device const uchar *w, long at) {
  return (float)*((device const half *)(w + at));
}
static inline float lm_deq_q8_0(device const uchar *w, long blk, int j) {
  return lm_q_scale(w, blk * 34) * (float)((device const char *)w)[blk * 34 + 2 + j];
}
static inline float lm_deq_q4_0(device const uchar *w, long blk, int j) {
  uchar q = w[blk * 18 + 2 + (j & 15)];
  return lm_q_scale(w, blk * 18) * (float)((int)(j < 16 ? q & 15 : q >> 4) - 8);
}
static inline float lm_deq_q4_1(device const uchar *w, long blk, int j) {
  uchar q = w[blk * 20 + 4 + (j & 15)];
  return lm_q_scale(w, blk * 20) * (float)(j < 16 ? q & 15 : q >> 4) + lm_q_scale(w, blk * 20 + 2);
}
"""


@dataclass(frozen=True)
class Variant:
    """One kernel function of a matmul and its dispatch, launched where `when` is nonzero:
    `size` threads where `per_thread`, else `size` threadgroups of `threads` threads."""

    name: str
    source: str
    size: Expr
    threads: int
    when: Expr
    per_thread: bool = False


@dataclass(frozen=True)
class MatmulKernel:
    dims: tuple[str, ...]
    variants: tuple[Variant, ...]
    quantized: bool


def per_thread(ctx: MatmulCtx, name: str) -> str:
    """One thread per output element (see the module docstring)."""
    body = [
        "const long lm_gid = (long)lm_tid;",
        *ctx.header(f"(lm_gid / ({ctx.expr(ctx.mm.m)} * {ctx.expr(ctx.mm.n)}))"),
        "if (lm_gid >= " + ctx.expr(batch_size(ctx.mm) * ctx.mm.m * ctx.mm.n) + ") return;",
        "const long m = (lm_gid / N) % M, n = lm_gid % N;",
        "float acc = 0.0f;",
        f"for (long k = 0; k < K; k++) acc += {ctx.load_a('m', 'k')} * {ctx.load_b('n', 'k')};",
        ctx.store(ctx.out_index("m", "n"), "acc"),
    ]
    return function(ctx.signature(name, THREAD_ARGS), body)


def gemv(ctx: MatmulCtx, name: str) -> str:
    """Each simdgroup one output column n for every row m (at most `GEMV_MAX_ROWS`)."""
    col_groups = f"(({ctx.expr(ctx.mm.n)} + {GEMV_COLUMNS - 1}) / {GEMV_COLUMNS})"
    rows = range(GEMV_MAX_ROWS)
    body = [
        *ctx.header(f"((long)lm_group / {col_groups})"),
        f"const long n = ((long)lm_group % {col_groups}) * {GEMV_COLUMNS} + lm_sg;",
        "if (n >= N) return;",  # a whole simdgroup leaves: simd_sum needs only its own lanes
        f"float acc[{GEMV_MAX_ROWS}] = {{{', '.join('0.0f' for _ in rows)}}};",
        f"for (long k = lm_lane; k < K; k += {SIMD_WIDTH}) {{",
        f"  const float w = {ctx.load_b('n', 'k')};",
        f"  for (int m = 0; m < {GEMV_MAX_ROWS}; m++) if (m < M) acc[m] += {ctx.load_a('m', 'k')}"
        " * w;",
        "}",
        f"for (int m = 0; m < {GEMV_MAX_ROWS}; m++) {{",
        "  const float total = simd_sum(acc[m]);",
        f"  if (m < M && lm_lane == 0) {ctx.store(ctx.out_index('m', 'n'), 'total')}",
        "}",
    ]
    return function(ctx.signature(name, GROUP_ARGS), body)


def gemm(ctx: MatmulCtx, name: str) -> str:
    """A 32x32 output tile per threadgroup on simdgroup matrices (see the module docstring)."""
    mm = ctx.mm
    tiles_m = f"(({ctx.expr(mm.m)} + {TILE - 1}) / {TILE})"
    tiles_n = f"(({ctx.expr(mm.n)} + {TILE - 1}) / {TILE})"
    body = [
        f"threadgroup float lm_a[{TILE * TILE_K}], lm_b[{TILE_K * TILE}], lm_c[{TILE * TILE}];",
        *ctx.header(f"((long)lm_group / ({tiles_m} * {tiles_n}))"),
        f"const long tile = (long)lm_group % ({tiles_m} * {tiles_n});",
        f"const long m0 = (tile / {tiles_n}) * {TILE}, n0 = (tile % {tiles_n}) * {TILE};",
        # each simdgroup owns a 16x16 quarter of the tile: 2x2 blocks of 8x8
        "const uint sm = (lm_sg / 2) * 16, sn = (lm_sg % 2) * 16;",
        "simdgroup_float8x8 c00 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f), c01 = c00,"
        " c10 = c00, c11 = c00;",
        f"for (long k0 = 0; k0 < K; k0 += {TILE_K}) {{",
        f"  for (uint e = lm_lid; e < {TILE * TILE_K}; e += {GEMM_THREADS}) {{",
        f"    const long r = e / {TILE_K}, k = k0 + e % {TILE_K};",
        f"    lm_a[e] = (m0 + r < M && k < K) ? {ctx.load_a('m0 + r', 'k')} : 0.0f;",
        f"    const long kb = k0 + e / {TILE}, c = n0 + e % {TILE};",
        f"    lm_b[e] = (c < N && kb < K) ? {ctx.load_b('c', 'kb')} : 0.0f;",
        "  }",
        "  threadgroup_barrier(mem_flags::mem_threadgroup);",
        f"  for (uint kk = 0; kk < {TILE_K}; kk += 8) {{",
        "    simdgroup_float8x8 a0, a1, b0, b1;",
        f"    simdgroup_load(a0, lm_a + sm * {TILE_K} + kk, {TILE_K});",
        f"    simdgroup_load(a1, lm_a + (sm + 8) * {TILE_K} + kk, {TILE_K});",
        f"    simdgroup_load(b0, lm_b + kk * {TILE} + sn, {TILE});",
        f"    simdgroup_load(b1, lm_b + kk * {TILE} + sn + 8, {TILE});",
        "    simdgroup_multiply_accumulate(c00, a0, b0, c00);",
        "    simdgroup_multiply_accumulate(c01, a0, b1, c01);",
        "    simdgroup_multiply_accumulate(c10, a1, b0, c10);",
        "    simdgroup_multiply_accumulate(c11, a1, b1, c11);",
        "  }",
        "  threadgroup_barrier(mem_flags::mem_threadgroup);",
        "}",
        f"simdgroup_store(c00, lm_c + sm * {TILE} + sn, {TILE});",
        f"simdgroup_store(c01, lm_c + sm * {TILE} + sn + 8, {TILE});",
        f"simdgroup_store(c10, lm_c + (sm + 8) * {TILE} + sn, {TILE});",
        f"simdgroup_store(c11, lm_c + (sm + 8) * {TILE} + sn + 8, {TILE});",
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
        f"for (uint e = lm_lid; e < {TILE * TILE}; e += {GEMM_THREADS}) {{",
        f"  const long r = m0 + e / {TILE}, c = n0 + e % {TILE};",
        f"  if (r < M && c < N) {ctx.store(ctx.out_index('r', 'c'), 'lm_c[e]')}",
        "}",
    ]
    return function(ctx.signature(name, GROUP_ARGS), body)


def render_matmul(mm: Matmul, name: str, per_thread_only: bool = False) -> MatmulKernel:
    """The kernel functions of `mm` (named `name`, `name_v`, ...), each with its dispatch.
    `per_thread_only` renders only the one-thread-per-output kernel (what runs on a CPU)."""
    ctx = MatmulCtx(mm, METAL, dim_names(kernel_dims(mm)))
    batch = batch_size(mm)
    outputs = batch * mm.m * mm.n
    if per_thread_only or (mm.k.is_const and mm.k.value <= PER_THREAD_MAX_K):
        variants = (Variant(name, per_thread(ctx, name), outputs, 256, Expr.const(1), True),)
    else:
        small = lt(mm.m, GEMV_MAX_ROWS + 1)
        variants = ()
        if not (small.is_const and small.value == 0):
            columns = (mm.n + GEMV_COLUMNS - 1) // GEMV_COLUMNS
            variants += (Variant(f"{name}_v", gemv(ctx, f"{name}_v"), batch * columns,
                                 GEMV_COLUMNS * SIMD_WIDTH, small),)
        if not (small.is_const and small.value == 1):
            tiles = ((mm.m + TILE - 1) // TILE) * ((mm.n + TILE - 1) // TILE)
            variants += (Variant(name, gemm(ctx, name), batch * tiles, GEMM_THREADS,
                                 1 - small),)
    return MatmulKernel(kernel_dims(mm), variants, ctx.quant is not None)
