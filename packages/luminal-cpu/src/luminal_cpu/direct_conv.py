"""Direct convolution: a stride-1 convolution's implicit GEMM without packing its input.

An implicit GEMM (`implicit_gemm`) gathers the im2col panels of B before the micro-kernel
reads them. Where the window moves one element per output column (stride 1), a row of 32
output positions reads 32 consecutive input elements for every tap (c, kh, kw): the
micro-kernel can load them straight from the input, masked at the padded edges, and the
gather (which costs more than the multiply-adds when there are few output channels: each
gathered element is used M times) disappears. A tile is 8 output channels x 32 output
columns of one output row; the weights are broadcast straight from the matmul's left operand.

`match(g)` accepts a `GatherMatmul` whose gather is one masked load from an input, affine in
the five axes (c, kh, kw | oh, ow) with kw and ow both moving one element, whose masks each
read only (kh, oh) or only (kw, ow), with constant sizes and float32 operands. The rendered
kernel keeps the implicit GEMM for compilers without AVX-512.

The input is read one row per channel at a time, a stream per channel (64 channels: 64
streams), more than the hardware prefetchers follow: once the input is past the L2 cache the
kernel waited on memory (64 channels of 128 x 128, 4 MiB, ran 8% slower than the gather). The
first tile of each output row therefore prefetches, for every (c, kh), the input row that
the output row PREFETCH_ROWS below will read: 6.3 -> 4.8 ms on those layers, faster than the
gather on every stride-1 convolution of YOLOv8n (Zen 5, one thread).

Tried and dropped: stride 2 along rows (two loads and a permute per 16 outputs), 1.5x slower
than the gather on YOLOv8n's stride-2 convolutions (the packed panel is read from L1, the
direct loads from a streamed input, again for every 8 output channels).
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr, logical_and
from luminal_codegen.ir import Load, affine

from .masks import atoms

TILE_M = 8  # output channels per tile (accumulator rows)
TILE_N = 32  # output columns per tile (two 16-lane vectors)
PREFETCH_ROWS = 2  # output rows ahead whose input the first tile of a row prefetches into L2


@dataclass(frozen=True)
class DirectConv:
    """The pieces of a matched convolution: `load` (the gather's value), its masks split into
    `rows` (read kh, oh) and `cols` (read kw, ow)."""

    load: Load
    rows: Expr
    cols: Expr


def match(g) -> DirectConv | None:
    """The direct form of `g` (an `implicit_gemm.GatherMatmul`), or None (module docstring)."""
    k, mm = g.gather, g.matmul
    v = k.out.value
    if g.split != 3 or len(k.domain) != 5 or not isinstance(v, Load):
        return None
    if not all(e.is_const for e in (*k.domain, mm.m, mm.n, mm.k, mm.a.offset, mm.a.stride_row,
                                    mm.a.stride_k, mm.out_offset, mm.out_stride)):
        return None
    if (mm.a.stride_k.value != 1 or v.dtype.name != "float32"
            or any(p.dtype.name != "float32" for p in (*mm.params[:2], k.params[v.buf]))):
        return None
    _, kh, kw, oh, ow = k.loop_vars
    split = affine(v.index, k.loop_vars)
    if split is None or not all(e.is_const for e in (*split[0], split[1])):
        return None
    if split[0][2].value != 1 or split[0][4].value != 1:
        return None
    rows, cols = [], []
    for atom in atoms(v.valid) if not v.valid.is_const else ():
        if atom.op != "lt" or affine(atom.args[0] - atom.args[1], k.loop_vars) is None:
            return None
        if atom.free_vars <= {kh.name, oh.name}:
            rows.append(atom)
        elif atom.free_vars <= {kw.name, ow.name}:
            cols.append(atom)
        else:
            return None
    if v.valid.is_const and v.valid.value == 0:
        return None
    return DirectConv(v, logical_and(*rows), logical_and(*cols))


def render(g, conv: DirectConv, name: str) -> list[str]:
    """The AVX-512 body of `g`'s kernel function (`name`): tiles of TILE_M x TILE_N."""
    k, mm = g.gather, g.matmul
    c, kh, kw, oh, ow = (v.name for v in k.loop_vars)
    n_c, n_kh, n_kw, n_oh, n_ow = (e.value for e in k.domain)
    m_total = mm.m.value
    m_blocks = -(-m_total // TILE_M)
    w_blocks = -(-n_ow // TILE_N)
    lda = mm.a.stride_row.value
    load = conv.load
    # how far the input index moves PREFETCH_ROWS output rows down
    ahead = affine(load.index, k.loop_vars)[0][3].value * PREFETCH_ROWS
    cols = conv.cols.render_c()
    return [
        f"  lm_for_begin({m_blocks * n_oh * w_blocks});",
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
        # lane masks per kw: the outputs inside the row whose input column is inside the
        # input (affine: they hold on the whole run when they hold at its ends)
        f"    __mmask16 lm_cm[{n_kw}][2];",
        f"    for (long {kw} = 0; {kw} < {n_kw}; {kw}++) {{",
        "      int lm_whole;",
        f"      {{ const long {ow} = lm_w0; lm_whole = {cols}; }}",
        f"      {{ const long {ow} = lm_w0 + {TILE_N - 1}; "
        f"lm_whole = lm_whole && {ow} < {n_ow} && {cols}; }}",
        "      unsigned lm_bits = lm_whole ? 0xffffffffu : 0;",
        f"      for (int lm_l = 0; lm_l < {TILE_N} && !lm_whole; lm_l++) {{",
        f"        const long {ow} = lm_w0 + lm_l;",
        f"        lm_bits |= (unsigned)(({ow} < {n_ow}) && {cols}) << lm_l;",
        "      }",
        f"      lm_cm[{kw}][0] = (__mmask16)lm_bits, lm_cm[{kw}][1] = (__mmask16)(lm_bits >> 16);",
        "    }",
        f"    __m512 lm_acc[{TILE_M}][2];",
        f"    for (int lm_i = 0; lm_i < {TILE_M}; lm_i++)",
        "      lm_acc[lm_i][0] = lm_acc[lm_i][1] = _mm512_setzero_ps();",
        f"    for (long {c} = 0; {c} < {n_c}; {c}++)",
        f"    for (long {kh} = 0; {kh} < {n_kh}; {kh}++) {{",
        f"      if (!({conv.rows.render_c()})) continue;",
        f"      for (long {kw} = 0; {kw} < {n_kw}; {kw}++) {{",
        f"        const long {ow} = lm_w0;",
        f"        const long lm_src = {load.index.render_c()};",
        f"        const long lm_k = ({c} * {n_kh} + {kh}) * {n_kw} + {kw};",
        f"        const float *lm_b = g{load.buf - 1} + lm_src;",
        # the input of a later row, into L2 (an address, maybe past the input: a prefetch
        # never faults, and integer arithmetic keeps C's pointer rules)
        f"        if ({kw} == 0 && lm_m0 == 0)",
        f"          for (long lm_l = 0; lm_l < {TILE_N + 16}; lm_l += 16)",
        "            _mm_prefetch((const char *)((unsigned long)lm_b + "
        f"sizeof(float) * ({ahead} + lm_l)), _MM_HINT_T1);",
        f"        const __m512 lm_b0 = _mm512_maskz_loadu_ps(lm_cm[{kw}][0], lm_b);",
        f"        const __m512 lm_b1 = _mm512_maskz_loadu_ps(lm_cm[{kw}][1], lm_b + 16);",
        f"        for (int lm_i = 0; lm_i < {TILE_M}; lm_i++) {{",
        "          const __m512 lm_x = _mm512_set1_ps(lm_a[lm_i][lm_k]);",
        "          lm_acc[lm_i][0] = _mm512_fmadd_ps(lm_x, lm_b0, lm_acc[lm_i][0]);",
        "          lm_acc[lm_i][1] = _mm512_fmadd_ps(lm_x, lm_b1, lm_acc[lm_i][1]);",
        "        }",
        "      }",
        "    }",
        f"    const long lm_left = {n_ow} - lm_w0;",
        "    const __mmask16 lm_s0 = lm_left >= 16 ? 0xffff : (__mmask16)((1u << lm_left) - 1);",
        "    const __mmask16 lm_s1 = lm_left >= 32 ? 0xffff : lm_left <= 16 ? 0 : "
        "(__mmask16)((1u << (lm_left - 16)) - 1);",
        "    for (int lm_i = 0; lm_i < lm_mr; lm_i++) {",
        f"      float *lm_c = p0 + {mm.out_offset.value} + (lm_m0 + lm_i) * {mm.out_stride.value}"
        f" + {oh} * {n_ow} + lm_w0;",
        "      _mm512_mask_storeu_ps(lm_c, lm_s0, lm_acc[lm_i][0]);",
        "      _mm512_mask_storeu_ps(lm_c + 16, lm_s1, lm_acc[lm_i][1]);",
        "    }",
        "  }",
    ]
