"""Direct convolution: a stride-1 or 2 convolution's implicit GEMM without packing its input.

An implicit GEMM (`implicit_gemm`) gathers the im2col panels of B before the micro-kernel
reads them. Where the window moves one element per output column (stride 1), a row of 32
output positions reads 32 consecutive input elements for every tap (c, kh, kw): the
micro-kernel can load them straight from the input, masked at the padded edges, and the
gather (which costs more than the multiply-adds when there are few output channels: each
gathered element is used M times) disappears. A tile is 8 output channels x 32 output
columns of one output row; the weights are broadcast straight from the matmul's left operand.

`match(g)` accepts a `GatherMatmul` whose gather is one masked load from an input, affine in
the five axes (c, kh, kw | oh, ow) with kw moving one element and ow one or two, whose masks
each read only (kh, oh) or only the input column (kw, ow), with constant sizes and float32
operands; or a 1 x 1 convolution's (k | n) gather of B as it is (`implicit_gemm._pointwise`),
one tap over a single row of N columns. The rendered kernel keeps the implicit GEMM for
compilers without AVX-512.

The input is read one row per channel at a time, a stream per channel (64 channels: 64
streams), more than the hardware prefetchers follow: once the input is past the L2 cache the
kernel waited on memory (64 channels of 128 x 128, 4 MiB, ran 8% slower than the gather). The
first tile of each output row therefore prefetches, for every (c, kh), the input row that
the output row PREFETCH_ROWS below will read: 6.3 -> 4.8 ms on those layers, faster than the
gather on every stride-1 convolution of YOLOv8n (Zen 5, one thread).

Stride 2 (`_double_stride`): a tile's 32 outputs read 2 * 31 + kw_n input columns; they are
loaded once per (c, kh), split into even and odd columns with two-source permutes, and tap
kw is one of those shifted by kw // 2 lanes. On YOLOv8n's seven stride-2 convolutions
(Zen 5, one thread, thread CPU time) 25 -> 17 ms against the gather (the 16 -> 32 channel
one at 512 x 512 6.5 -> 3.6 ms, the stem 3.8 -> 1.9). An earlier try loaded each tap on its
own (two loads and a permute per 16 outputs, without the prefetch) and was 1.5x slower than
the gather. The split costs about as much as the tile's multiply-adds leave room for (on Zen
4, whose 512-bit FMAs take both halves of the FP pipes, the stride-2 layers ran at 67-78
GFLOP/s where stride 1 ran at 95-108): the tiles of the other output channels over the
same columns, which follow on the same thread, reload the taps' vectors the first one split
(a per-thread array up to SPLIT_CACHE_BYTES) instead of splitting again; YOLOv8n's three
64-256-channel stride-2 layers 24.0-26.5 -> 20.4 ms (Zen 4, one thread, thread CPU
time, shared machine).

A 1 x 1 convolution without an epilogue over a whole image copies each column tile's inputs
into a per-thread strip for its output-channel tiles (`_unit_stride`): its input rows sit a
power of two apart, in one set of the L1 cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr, logical_and
from luminal_codegen.ir import Load, affine

from .masks import atoms

TILE_M = 8  # output channels per tile (accumulator rows)
TILE_N = 32  # output columns per tile (two 16-lane vectors)
MAX_KW = 16  # widest stride-2 window (its shifts are lane rotations of at most 15)
PREFETCH_ROWS = 2  # output rows ahead whose input the first tile of a row prefetches into L2
# multiply-adds per nanosecond on one core (AVX-512, Zen 4: ~100 GFLOP/s), for the team's
# chunk sizes (`lm_for_begin_work`)
MACS_PER_NS = 50
# most bytes of split input vectors (stride 2) a thread keeps for the next tile over the same
# columns: a local array, so within any thread's stack
SPLIT_CACHE_BYTES = 192 << 10


@dataclass(frozen=True)
class DirectConv:
    """The pieces of a matched convolution: `load` (the gather's value), its masks split into
    `rows` (read kh, oh) and `cols` (read kw, ow), and how many input columns one output
    column moves (`stride`, 1 or 2)."""

    load: Load
    rows: Expr
    cols: Expr
    stride: int


def match(g) -> DirectConv | None:
    """The direct form of `g` (an `implicit_gemm.GatherMatmul`), or None (module docstring)."""
    k, mm = g.gather, g.matmul
    v = k.out.value
    if not isinstance(v, Load) or (g.split, len(k.domain)) not in ((3, 5), (1, 2)):
        return None
    if not all(e.is_const for e in (*k.domain, mm.m, mm.n, mm.k, mm.a.offset, mm.a.stride_row,
                                    mm.a.stride_k, mm.out_offset, mm.out_stride)):
        return None
    if (mm.a.stride_k.value != 1 or v.dtype.name != "float32"
            or any(p.dtype.name != "float32" for p in (*mm.params[:2], k.params[v.buf]))):
        return None
    split = affine(v.index, k.loop_vars)
    if split is None or not all(e.is_const for e in (*split[0], split[1])):
        return None
    if len(k.domain) == 2:  # a 1 x 1 convolution (`implicit_gemm._pointwise`): rows of B
        if split[0][1].value != 1 or not v.valid.is_const or v.valid.value != 1:
            return None
        return DirectConv(v, Expr.const(1), Expr.const(1), 1)
    _, kh, kw, oh, ow = k.loop_vars
    stride = split[0][4].value
    if split[0][2].value != 1 or stride not in (1, 2) or k.domain[2].value > MAX_KW:
        return None
    rows, cols = [], []
    for atom in atoms(v.valid) if not v.valid.is_const else ():
        if atom.op != "lt" or affine(atom.args[0] - atom.args[1], k.loop_vars) is None:
            return None
        if atom.free_vars <= {kh.name, oh.name}:
            rows.append(atom)
        elif atom.free_vars <= {kw.name, ow.name}:
            # stride 2 reads a span of input columns once for every kw: its masks must be
            # masks of the input column (stride * ow + kw) alone
            coefs = affine(atom.args[0] - atom.args[1], k.loop_vars)[0]
            if not (coefs[2].is_const and coefs[4].is_const
                    and coefs[4].value == stride * coefs[2].value):
                return None
            cols.append(atom)
        else:
            return None
    if v.valid.is_const and v.valid.value == 0:
        return None
    return DirectConv(v, logical_and(*rows), logical_and(*cols), stride)


def _fma(k: str) -> list[str]:
    """Accumulate the tile's products with input vectors lm_b0, lm_b1 at weight column `k`."""
    return [f"for (int lm_i = 0; lm_i < {TILE_M}; lm_i++) {{",
            f"  const __m512 lm_x = _mm512_set1_ps(lm_a[lm_i][{k}]);",
            "  lm_acc[lm_i][0] = _mm512_fmadd_ps(lm_x, lm_b0, lm_acc[lm_i][0]);",
            "  lm_acc[lm_i][1] = _mm512_fmadd_ps(lm_x, lm_b1, lm_acc[lm_i][1]);",
            "}"]


def _prefetch(ahead: int, floats: int) -> list[str]:
    """The input of the row PREFETCH_ROWS below (`ahead` elements on) into L2, by the first
    tile of a row: an address maybe past the input (a prefetch never faults; integer
    arithmetic keeps C's pointer rules)."""
    return ["if (lm_m0 == 0)",
            f"  for (long lm_l = 0; lm_l < {floats}; lm_l += 16)",
            "    _mm_prefetch((const char *)((unsigned long)lm_b + "
            f"sizeof(float) * ({ahead} + lm_l)), _MM_HINT_T1);"]


def _unit_stride(conv: DirectConv, names: tuple[str, ...], sizes: tuple[int, ...], g_buf: str,
                 ahead: int, strip: bool) -> tuple[list[str], list[str], list[str]]:
    """Stride 1: per kw, two masked loads of the tile's 32 input columns; a 1 x 1 with
    `strip` reads them from a per-thread copy. Returns the declarations before the tile loop
    (none, or the strip), the tile's mask set-up and the body of the (c, kh) loop."""
    c, kh, kw, _, ow = names
    n_c, n_kh, n_kw, _, n_ow = sizes
    cols = conv.cols.render_c()
    # lane masks per kw: the outputs inside the row whose input column is inside the input
    # (affine: they hold on the whole run when they hold at its ends)
    masks = [
        f"__mmask16 lm_cm[{n_kw}][2];",
        f"for (long {kw} = 0; {kw} < {n_kw}; {kw}++) {{",
        "  int lm_whole;",
        f"  {{ const long {ow} = lm_w0; lm_whole = {cols}; }}",
        f"  {{ const long {ow} = lm_w0 + {TILE_N - 1}; "
        f"lm_whole = lm_whole && {ow} < {n_ow} && {cols}; }}",
        "  unsigned lm_bits = lm_whole ? 0xffffffffu : 0;",
        f"  for (int lm_l = 0; lm_l < {TILE_N} && !lm_whole; lm_l++) {{",
        f"    const long {ow} = lm_w0 + lm_l;",
        f"    lm_bits |= (unsigned)(({ow} < {n_ow}) && {cols}) << lm_l;",
        "  }",
        f"  lm_cm[{kw}][0] = (__mmask16)lm_bits, lm_cm[{kw}][1] = (__mmask16)(lm_bits >> 16);",
        "}",
    ]
    body = [
        f"for (long {kw} = 0; {kw} < {n_kw}; {kw}++) {{",
        f"  const long {ow} = lm_w0;",
        f"  const float *lm_b = {g_buf} + {conv.load.index.render_c()};",
        f"  if ({kw} == 0) {{",
        *("    " + x for x in _prefetch(ahead, TILE_N + 16)),
        "  }",
        f"  const __m512 lm_b0 = _mm512_maskz_loadu_ps(lm_cm[{kw}][0], lm_b);",
        f"  const __m512 lm_b1 = _mm512_maskz_loadu_ps(lm_cm[{kw}][1], lm_b + 16);",
        *("  " + x for x in _fma(f"({c} * {n_kh} + {kh}) * {n_kw} + {kw}")),
        "}",
    ]
    if strip and 4 * TILE_N * n_c <= SPLIT_CACHE_BYTES:
        # 1 x 1 over a whole image: a tile's input rows sit a power of two apart, in one set
        # of the L1 cache, which keeps 8 of them, and the next output-channel tiles read
        # them again. The first tile over the columns copies them into a per-thread strip,
        # the others read that (YOLOv8n's 64 -> 11 class heads at 128 x 128: 0.87 -> 0.58
        # ms; 64 -> 64 without an epilogue 1.98 -> 1.67; Zen 4, one thread). With an
        # epilogue, measured no faster (32-64 channels at 256 x 256: -0.2 to +0.4 ms), so
        # `render` asks for it only without one.
        pre = [f"_Alignas(64) float lm_strip[{TILE_N * n_c}];", "long lm_strip_at = -1;"]
        masks += ["const int lm_fresh = lm_w0 != lm_strip_at;", "lm_strip_at = lm_w0;",
                  f"if (lm_fresh) for (long {c} = 0; {c} < {n_c}; {c}++) {{",
                  f"  const long {ow} = lm_w0;",
                  f"  const float *lm_b = {g_buf} + {conv.load.index.render_c()};",
                  *("  " + x for x in _prefetch(ahead, TILE_N + 16)),
                  f"  _mm512_store_ps(lm_strip + {TILE_N} * {c}, "
                  "_mm512_maskz_loadu_ps(lm_cm[0][0], lm_b));",
                  f"  _mm512_store_ps(lm_strip + {TILE_N} * {c} + 16, "
                  "_mm512_maskz_loadu_ps(lm_cm[0][1], lm_b + 16));",
                  "}"]
        body = [f"const __m512 lm_b0 = _mm512_load_ps(lm_strip + {TILE_N} * {c});",
                f"const __m512 lm_b1 = _mm512_load_ps(lm_strip + {TILE_N} * {c} + 16);",
                *_fma(c)]
        return pre, masks, body
    return [], masks, body


def _double_stride(conv: DirectConv, names: tuple[str, ...], sizes: tuple[int, ...],
                   g_buf: str, ahead: int) -> tuple[list[str], list[str], list[str]]:
    """Stride 2: the span of input columns the tile reads (2 * 31 + kw_n of them) is loaded
    once per (c, kh), split into its even and odd columns (two-source permutes), and tap kw
    is those shifted by kw // 2 lanes (lane rotations). The loads are masked by input
    column, which the masks read alone (`match`). The taps' vectors are kept, per thread,
    for the tiles of the other output channels over the same columns (`SPLIT_CACHE_BYTES`).
    Returns the declarations before the tile loop, the tile's mask set-up and the body of
    the (c, kh) loop."""
    c, kh, kw, oh, ow = names
    n_c, n_kh, n_kw, _, n_ow = sizes
    cols = conv.cols.render_c()
    span = 2 * (TILE_N - 1) + n_kw  # input columns the tile reads
    vecs = -(-span // 16)
    shifted = n_kw > 2  # some tap starts past the first even / odd column
    halves = 3 if shifted else 2  # vectors of even (odd) columns the taps need
    parities = ("e", "o") if n_kw > 1 else ("e",)
    masks = [
        # whole: every output column and every tap inside (affine masks: checked at the ends)
        f"int lm_whole = lm_w0 + {TILE_N - 1} < {n_ow};",
        f"for (long {kw} = 0; {kw} < {n_kw}; {kw}++) {{",
        f"  {{ const long {ow} = lm_w0; lm_whole = lm_whole && {cols}; }}",
        f"  {{ const long {ow} = lm_w0 + {TILE_N - 1}; lm_whole = lm_whole && {cols}; }}",
        "}",
        f"__mmask16 lm_sm[{vecs}];",
        f"for (int lm_j = 0; lm_j < {vecs}; lm_j++) lm_sm[lm_j] = lm_whole ? 0xffff : 0;",
        f"if (lm_whole) lm_sm[{vecs - 1}] = (__mmask16)((1u << {span - 16 * (vecs - 1)}) - 1);",
        f"else for (long {kw} = 0; {kw} < {n_kw}; {kw}++)",
        f"  for (int lm_l = 0; lm_l < {TILE_N}; lm_l++) {{",
        f"    const long {ow} = lm_w0 + lm_l;",
        f"    if ({ow} < {n_ow} && {cols}) lm_sm[(2 * lm_l + {kw}) / 16] |= "
        f"(__mmask16)(1u << (2 * lm_l + {kw}) % 16);",
        "  }",
    ]
    split = [
        f"const long {kw} = 0, {ow} = lm_w0;",
        f"const float *lm_b = {g_buf} + {conv.load.index.render_c()};",
        *_prefetch(ahead, 16 * vecs),
        f"__m512 lm_v[{2 * halves}];",
        f"for (int lm_j = 0; lm_j < {2 * halves}; lm_j++)",
        f"  lm_v[lm_j] = lm_j < {vecs} ? _mm512_maskz_loadu_ps(lm_sm[lm_j], lm_b + 16 * lm_j) "
        ": _mm512_setzero_ps();",
        *(f"const __m512i lm_{p}{h} = _mm512_castps_si512(_mm512_permutex2var_ps("
          f"lm_v[{2 * h}], lm_{p}idx, lm_v[{2 * h + 1}]));"
          for p in parities for h in range(halves)),
    ]
    taps = []  # per tap, its two input vectors
    for tap in range(n_kw):
        p, q = parities[tap % 2], tap // 2
        taps.append([f"_mm512_castsi512_ps(lm_{p}{h})" if q == 0 else
                     f"_mm512_castsi512_ps(_mm512_alignr_epi32(lm_{p}{h + 1}, lm_{p}{h}, {q}))"
                     for h in range(2)])
    consts = ["const __m512i lm_eidx = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, "
              "10, 8, 6, 4, 2, 0);",
              "const __m512i lm_oidx = _mm512_add_epi32(lm_eidx, _mm512_set1_epi32(1));"]
    per_row = 2 * n_kw  # vectors one (c, kh) keeps
    pre: list[str] = []
    if 64 * per_row * n_c * n_kh <= SPLIT_CACHE_BYTES:
        # the tiles of one output row's columns run one after the other (output channels
        # innermost), mostly on one thread: the first of them splits, the others reload
        pre = [f"__m512 lm_split[{per_row * n_c * n_kh}];", "long lm_split_at = -1;"]
        consts += [f"const long lm_here = {oh} * {n_ow} + lm_w0;",
                   "const int lm_fresh = lm_here != lm_split_at;",
                   "lm_split_at = lm_here;"]
        body = [f"__m512 *lm_cv = lm_split + ({c} * {n_kh} + {kh}) * {per_row};",
                "if (lm_fresh) {",
                *("  " + x for x in split),
                *(f"  lm_cv[{2 * tap + h}] = {v};" for tap, pair in enumerate(taps)
                  for h, v in enumerate(pair)),
                "}"]
        taps = [[f"lm_cv[{2 * tap + h}]" for h in range(2)] for tap in range(n_kw)]
    else:
        body = split
    for tap, (b0, b1) in enumerate(taps):
        body += [
            "{",
            f"  const __m512 lm_b0 = {b0};",
            f"  const __m512 lm_b1 = {b1};",
            *("  " + x for x in _fma(f"({c} * {n_kh} + {kh}) * {n_kw} + {tap}")),
            "}",
        ]
    return pre, consts + masks, body


def render(g, conv: DirectConv, name: str) -> list[str]:
    """The AVX-512 body of `g`'s kernel function (`name`): tiles of TILE_M x TILE_N."""
    k, mm = g.gather, g.matmul
    names = tuple(v.name for v in k.loop_vars)
    sizes = tuple(e.value for e in k.domain)
    if len(sizes) == 2:  # 1 x 1: one window tap, one row of N columns
        names = (names[0], "lm_kh", "lm_kw", "lm_oh", names[1])
        sizes = (sizes[0], 1, 1, 1, sizes[1])
    c, kh, _, oh, _ = names
    n_c, n_kh, n_kw, n_oh, n_ow = sizes
    m_total = mm.m.value
    m_blocks = -(-m_total // TILE_M)
    w_blocks = -(-n_ow // TILE_N)
    lda = mm.a.stride_row.value
    # how far the input index moves PREFETCH_ROWS output rows down (1 x 1: tiles on)
    ahead = (PREFETCH_ROWS * TILE_N if len(k.domain) == 2
             else affine(conv.load.index, k.loop_vars)[0][3].value * PREFETCH_ROWS)
    g_buf = f"g{conv.load.buf - 1}"
    # a 1 x 1 convolution's (k | n) gather: one row of columns, no masks (`_unit_stride`)
    strip = len(k.domain) == 2 and m_blocks > 1 and g.epilogue is None
    pre, masks, body = (_unit_stride(conv, names, sizes, g_buf, ahead, strip)
                        if conv.stride == 1 else _double_stride(conv, names, sizes, g_buf, ahead))
    out = f"p0 + {mm.out_offset.value} + lm_m0 * {mm.out_stride.value} + {oh} * {n_ow} + lm_w0"
    store = [f"    float *lm_c = {out};",
             "    for (int lm_i = 0; lm_i < lm_mr; lm_i++) {",
             f"      _mm512_mask_storeu_ps(lm_c + lm_i * {mm.out_stride.value}, lm_s0, "
             "lm_acc[lm_i][0]);",
             f"      _mm512_mask_storeu_ps(lm_c + lm_i * {mm.out_stride.value} + 16, lm_s1, "
             "lm_acc[lm_i][1]);",
             "    }"]
    if g.epilogue is not None:  # the tile through the epilogue (`epilogue`), then stored
        inputs = "".join(f", e{i}" for i in range(len(g.epilogue.inputs)))
        store = [f"    _Alignas(64) float lm_tile[{TILE_M}][{TILE_N}];",
                 "    for (int lm_i = 0; lm_i < lm_mr; lm_i++) {",
                 "      _mm512_store_ps(lm_tile[lm_i], lm_acc[lm_i][0]);",
                 "      _mm512_store_ps(lm_tile[lm_i] + 16, lm_acc[lm_i][1]);",
                 "    }",
                 f"    {name}_epi(&lm_tile[0][0], {TILE_N}, {out}, {mm.out_stride.value}, lm_m0, "
                 f"lm_mr, {oh} * {n_ow} + lm_w0, lm_left < {TILE_N} ? lm_left : {TILE_N}"
                 f"{inputs});"]
    return [
        *("  " + x for x in pre),
        f"  lm_for_begin_work({m_blocks * n_oh * w_blocks}, "
        f"{m_total * n_c * n_kh * n_kw * n_oh * n_ow // MACS_PER_NS});",
        "  for (long lm_lo, lm_hi; lm_for_next(&lm_lo, &lm_hi);)",
        "  for (long lm_t = lm_lo; lm_t < lm_hi; lm_t++) {",
        f"    const long lm_m0 = lm_t % {m_blocks} * {TILE_M};",
        f"    const long {oh} = lm_t / {m_blocks} / {w_blocks};",
        f"    const long lm_w0 = lm_t / {m_blocks} % {w_blocks} * {TILE_N};",
        f"    const long lm_mr = {m_total} - lm_m0 < {TILE_M} ? {m_total} - lm_m0 : {TILE_M};",
        f"    const float *lm_a[{TILE_M}];",
        f"    for (int lm_i = 0; lm_i < {TILE_M}; lm_i++)",
        f"      lm_a[lm_i] = p1 + {mm.a.offset.value} + "
        f"(lm_m0 + (lm_i < lm_mr ? lm_i : lm_mr - 1)) * {lda};",
        *("    " + x for x in masks),
        f"    __m512 lm_acc[{TILE_M}][2];",
        f"    for (int lm_i = 0; lm_i < {TILE_M}; lm_i++)",
        "      lm_acc[lm_i][0] = lm_acc[lm_i][1] = _mm512_setzero_ps();",
        f"    for (long {c} = 0; {c} < {n_c}; {c}++)",
        f"    for (long {kh} = 0; {kh} < {n_kh}; {kh}++) {{",
        f"      if (!({conv.rows.render_c()})) continue;",
        *("      " + x for x in body),
        "    }",
        f"    const long lm_left = {n_ow} - lm_w0;",
        "    const __mmask16 lm_s0 = lm_left >= 16 ? 0xffff : (__mmask16)((1u << lm_left) - 1);",
        "    const __mmask16 lm_s1 = lm_left >= 32 ? 0xffff : lm_left <= 16 ? 0 : "
        "(__mmask16)((1u << (lm_left - 16)) - 1);",
        *store,
        "  }",
    ]
