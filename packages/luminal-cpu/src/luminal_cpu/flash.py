"""Tiled attention: a `SoftmaxSum` kernel shaped like prefill attention, rendered as
flash-attention tiles instead of one query-key step at a time.

The kernel IR's `SoftmaxSum` (luminal-search derives it from attention's primitives, and
`attention.fuse` builds it from the default compile's calls) computes,
per output, `sum_key softmax_key(logit) * body`. When its logit is an elementwise function of
one dot product `sum_c a * b` (a reading the query, not the key; b the key, not the query) and
its body (the values) does not read the query, the kernel is rendered here, per tile of
`LM_FQ` queries of one outer point (a batch and head), walking the keys `LM_FK` at a time:

1. the queries' factors `a` packed once per tile; the keys' factors `b` (transposed) and the
   values packed once per outer point by each thread that works on it, block by block, into
   a per-thread buffer (any views, validity and dtype conversions of the IR apply);
2. a block that provably has only zero weights is skipped whole: the logit's own float
   operations evaluated at the ends of |dot| <= sum|a| * max|b| bound every logit of the block
   (`_upper_bound`), and a bound 150 below every row's running max, with finite values, means
   zero weights and an unchanged max (a causal mask's upper triangle); a logit masked by a
   condition (`Select(cond, x, -inf)`, `_mask`) decides it from the condition instead, for
   the tile's queries and the block's keys, and multiplies only the runs of 32 keys that some
   query sees;
3. the block's scores by a register-blocked micro-kernel (`csrc/flash.h`);
4. the rest of the logit (scale, mask: whatever the IR computes from the dot product, the
   query and the key) elementwise over the block, -inf past the last key;
5. the rows' online-softmax step (`lm_fa_softmax`: the arithmetic of core's `OnlineSoftmax`,
   so NaN and infinities behave as in the primitive decomposition), each row's max and sum
   reduced in registers, its weights `lm_exp2`'s arithmetic around one vector exp2f call per
   16 lanes;
6. the weighted values added by a second micro-kernel, the rows rescaled in the same pass
   (skipped too when every weight is zero and the values are finite).

Tiles are shared among the threads like the GEMM's. Memory is linear in the sequence: the
output, a few KB of tiles per thread, and per thread one head's packed keys and values (kept
between calls, grown for longer sequences). Everything else keeps the generic renderer.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal_codegen import (
    BodyWriter,
    Kernel,
    OnlineSoftmax,
    dim_names,
    kernel_dims,
    row_softmax,
    unravel_declarations,
)
from luminal_codegen.ir import Binary, Const, Reduce, Select, SoftmaxSum, Value, exprs_of, walk

from .dialect import C

HEAD_LIMIT = 256  # longest dot product (and row of values) a tile holds
MIN_QUERIES = 8  # fewer queries (decode) keep the row-wise form: a tile would be mostly padding


@dataclass(frozen=True)
class Attention:
    """How a kernel matches: its `SoftmaxSum`, the dot product in the logit and its factors,
    and the domain axis of the queries."""

    softmax: SoftmaxSum
    dot: Reduce
    query_factor: Value
    key_factor: Value
    query_axis: int


def _reads(v: Value) -> set[str]:
    names: set[str] = set()
    for e in exprs_of(v):
        names |= e.free_vars
    return names


def match(kernel: Kernel) -> Attention | None:
    """The attention shape of `kernel`, or None when it is anything else."""
    s = row_softmax(kernel)
    if s is None:
        return None
    dots = [v for v in walk(s.logit) if isinstance(v, Reduce)]
    if (len(dots) != 1 or dots[0].op != "sum" or not isinstance(dots[0].body, Binary)
            or dots[0].body.op != "mul" or not dots[0].size.is_const
            or dots[0].size.value > HEAD_LIMIT):
        return None
    if any(isinstance(v, (Reduce, SoftmaxSum)) for v in walk(s.body)):
        return None
    dot, key = dots[0], s.var.name
    factors = (dot.body.a, dot.body.b)
    if any(isinstance(v, (Reduce, SoftmaxSum)) for f in factors for v in walk(f)):
        return None
    body_reads = _reads(s.body)
    axes = [k for k, (v, e) in enumerate(zip(kernel.loop_vars[:-1], kernel.domain[:-1]))
            if v.name not in body_reads and (not e.is_const or e.value >= MIN_QUERIES)]
    for q, k in (factors, factors[::-1]):
        q_reads, k_reads = _reads(q), _reads(k)
        if key in q_reads:
            continue
        candidates = [a for a in axes if kernel.loop_vars[a].name in q_reads
                      and kernel.loop_vars[a].name not in k_reads]
        if candidates:
            # the longest such axis (a symbolic one counts as long)
            axis = max(candidates, key=lambda a: (not kernel.domain[a].is_const,
                                                   kernel.domain[a].value
                                                   if kernel.domain[a].is_const else 0))
            return Attention(s, dot, q, k, axis)
    return None


def _upper_bound(logit: Value, dot: Reduce, writer: BodyWriter) -> str | None:
    """C for an upper bound of `logit` over every dot product in [lm_dlo, lm_dhi] (statements
    appended to `writer`'s root, the bound's name returned), or None when the logit is not
    built from the dot product by float32 adds and multiplications with one side free of it.
    The bound evaluates the logit's own float operations at an end of the interval: rounding
    to nearest is monotone, so it bounds the computed logit, not only the exact one; a NaN
    anywhere makes it NaN."""
    on_path = {id(v) for v in walk(logit) if dot in set(walk(v))}
    lines = writer.root.lines

    def go(v: Value) -> tuple[str, str] | None:
        if v == dot:
            return "lm_dlo", "lm_dhi"
        if id(v) not in on_path:
            x = writer.emit(v)
            return x, x
        if not (isinstance(v, Binary) and v.op in ("add", "mul") and v.dtype.name == "float32"):
            return None
        if v.op == "mul" and id(v.a) in on_path and id(v.b) in on_path:
            return None
        a, b = go(v.a), go(v.b)
        if a is None or b is None:
            return None
        lo, hi = writer.fresh(), writer.fresh()
        if v.op == "add":
            lines.append(f"const float {lo} = {a[0]} + {b[0]}, {hi} = {a[1]} + {b[1]};")
        else:
            (p, _), (ilo, ihi) = (a, b) if id(v.b) in on_path else (b, a)
            lines.append(f"const float {lo} = {p} >= 0.0f ? {p} * {ilo} : {p} * {ihi};")
            lines.append(f"const float {hi} = {p} >= 0.0f ? {p} * {ihi} : {p} * {ilo};")
        return lo, hi

    got = go(logit)
    return None if got is None else got[1]


def _mask(logit: Value, dot: Reduce) -> Value | None:
    """A bool value false only where `logit` is -inf whatever the dot product: the condition of
    a `Select(cond, x, -inf)` (cond not reading the dot product), which the logit may scale by
    a positive constant or offset by a finite one (a mask, then softmax's change of base);
    None for any other logit."""
    v = logit
    while isinstance(v, Binary) and v.op in ("add", "mul") and v.dtype.name == "float32":
        for x, c in ((v.a, v.b), (v.b, v.a)):
            if (isinstance(c, Const) and abs(c.value) < float("inf")
                    and (v.op == "add" or c.value > 0)):
                v = x
                break
        else:
            return None
    if (isinstance(v, Select) and isinstance(v.y, Const) and v.y.value == float("-inf")
            and dot not in set(walk(v.cond))):
        return v.cond
    return None


def _writer(names: dict[str, str], bound: tuple[str, ...], first: int) -> BodyWriter:
    """A body writer emitting everything at its root (the caller's loop), where the loop
    variables `bound` are declared."""
    w = BodyWriter(C, names, reduce_pragmas=False, first=first)
    for v in bound:
        w.scope_of[v] = w.root
    return w


def render(kernel: Kernel, att: Attention, name: str) -> str:
    """The C function computing `kernel` tile by tile (see the module docstring)."""
    names = dim_names(kernel_dims(kernel))
    s, dot = att.softmax, att.dot
    ex = lambda e: e.render_c(names)  # noqa: E731
    loop = [v.name for v in kernel.loop_vars]
    extents = [ex(e) for e in kernel.domain]
    query, lane = loop[att.query_axis], loop[-1]
    outer = [k for k in range(len(loop) - 1) if k != att.query_axis]
    width = kernel.domain[-1].value
    head = dot.size.value
    key_var, c_var = s.var.name, dot.var.name
    bound = (key_var, c_var)

    def emit(v: Value, first: int, extra: dict | None = None) -> tuple[list[str], str, int]:
        w = _writer(names, bound, first)
        w.root.names.update(extra or {})
        got = w.emit(v)
        return w.root.lines, got, w.count

    count = 0
    q_lines, q_val, count = emit(att.query_factor, count)
    k_lines, k_val, count = emit(att.key_factor, count)
    v_lines, v_val, count = emit(s.body, count)
    x_lines, x_val, count = emit(s.logit, count, {dot: "lm_dot"})
    bounder = _writer(names, bound, count)
    upper = _upper_bound(s.logit, dot, bounder)
    count = bounder.count
    mask = _mask(s.logit, dot)
    masker = _writer(names, bound, count)
    live = masker.emit(mask) if mask is not None else None
    count = masker.count
    o = OnlineSoftmax(C, "lm_r")
    result = C.round(s.dtype, o.result("lm_acc[lm_i * LM_DP + lm_d]"))
    out_lines, out_val, count = emit(kernel.out.value, count, {s: "lm_o"})
    out_dt = kernel.params[kernel.out.buf].dtype
    store = C.store_statement(out_dt, f"p{kernel.out.buf}", ex(kernel.out.index), out_val)
    size = ex(s.size)
    nq = extents[att.query_axis]
    tiles = " * ".join([*(f"({extents[k]})" for k in outer), "lm_qblocks"])

    def indent(lines: list[str], depth: int) -> list[str]:
        return ["  " * depth + x for x in lines]

    # A block of finite values whose every logit is provably at least 150 below its row's
    # running max (a causal mask's upper triangle) has only zero weights and leaves the max
    # unchanged: skipped whole, scores included. |dot| <= sum |q| * max |k| bounds the dot
    # products (both rounded up by LM_FA_SLACK, more than the dot product's rounding).
    skip_lines = [
        "  int lm_skip = !lm_kbad[lm_b];",
        "  for (long lm_i = 0; lm_i < lm_nq && lm_skip; lm_i++) {",
        f"    const long {query} = lm_q0 + lm_i;",
        "    const float lm_dhi = lm_qn[lm_i] * lm_knorm[lm_b], lm_dlo = -lm_dhi;",
        "    const float lm_mi = lm_m[lm_i];",
        "    int lm_far = 1;",
        "    #pragma omp simd reduction(&:lm_far)",
        "    for (long lm_j = 0; lm_j < lm_nk; lm_j++) {",
        f"      const long {key_var} = lm_k0 + lm_j;",
        *indent([*bounder.root.lines, f"lm_far &= {upper} - lm_mi < -150.0f;"], 3),
        "    }",
        "    lm_skip = lm_far;",
        "  }",
        "  if (lm_skip) continue;",
    ] if upper is not None else []
    # With a mask (`_mask`): the block's keys that some query of the tile sees, from the
    # mask alone (one pass over its condition); none: the block's weights are all zero and the
    # max unchanged, skipped whole; else only the runs of 32 keys holding them are multiplied
    # (the logits of the others are -inf whatever their scores, their weights zero). Values
    # that are not finite keep every key (0 * inf = NaN).
    mask_lines = [
        "  if (!lm_kbad[lm_b]) {",
        # which keys some query sees: a byte per key, or-ed row by row (a loop the compiler
        # vectorises; first/last-index reductions it left scalar, a tenth of the kernel)
        "    unsigned char lm_seen[LM_FK] = {0};",
        "    for (long lm_i = 0; lm_i < lm_nq; lm_i++) {",
        f"      const long {query} = lm_q0 + lm_i;",
        "      #pragma omp simd",
        "      for (long lm_j = 0; lm_j < lm_nk; lm_j++) {",
        f"        const long {key_var} = lm_k0 + lm_j;",
        *indent([*masker.root.lines, f"lm_seen[lm_j] |= ({live}) != 0;"], 4),
        "      }",
        "    }",
        "    long lm_jl = 0, lm_jh = lm_nk;",
        "    while (lm_jl < lm_nk && !lm_seen[lm_jl]) lm_jl++;",
        "    if (lm_jl == lm_nk) continue;",
        "    while (!lm_seen[lm_jh - 1]) lm_jh--;",
        "    lm_h0 = lm_jl / 32 * 32;",
        "    lm_h1 = (lm_jh + 31) / 32 * 32;",
        "  }",
    ] if live is not None else []

    body = [
        "const long lm_outer = lm_t / lm_qblocks;",
        *unravel_declarations("lm_outer", [extents[k] for k in outer],
                              [loop[k] for k in outer]),
        "const long lm_q0 = lm_t % lm_qblocks * LM_FQ;",
        f"const long lm_nq = ({nq}) - lm_q0 < LM_FQ ? ({nq}) - lm_q0 : LM_FQ;",
        "const long lm_panels = (lm_nq + LM_FR - 1) / LM_FR;",
        "float lm_m[LM_FQ], lm_l[LM_FQ], lm_c[LM_FQ];",
        "int lm_nan[LM_FQ];",
        "float lm_qn[LM_FQ];  /* the queries' sums of magnitudes, rounded up */",
        "for (long lm_i = 0; lm_i < LM_FQ; lm_i++) {",
        "  lm_m[lm_i] = -INFINITY; lm_l[lm_i] = 0.0f; lm_nan[lm_i] = 0;",
        "}",
        "memset(lm_acc, 0, sizeof(float) * LM_FQ * LM_DP);",
        # the queries' factors, c-major in panels of LM_FR queries, zero past the last query
        "for (long lm_i = 0; lm_i < lm_panels * LM_FR; lm_i++) {",
        f"  const long {query} = lm_q0 + lm_i;",
        "  float *lm_qi = lm_qp + lm_i / LM_FR * LM_HEAD * LM_FR + lm_i % LM_FR;",
        "  if (lm_i >= lm_nq) {",
        "    for (long lm_c2 = 0; lm_c2 < LM_HEAD; lm_c2++) lm_qi[lm_c2 * LM_FR] = 0.0f;",
        "    continue;",
        "  }",
        "  float lm_sq = 0.0f;",
        f"  for (long {c_var} = 0; {c_var} < LM_HEAD; {c_var}++) {{",
        *indent([*q_lines, f"lm_qi[{c_var} * LM_FR] = {q_val};",
                 f"lm_sq += fabsf({q_val});"], 2),
        "  }",
        "  lm_qn[lm_i] = lm_sq * LM_FA_SLACK;",
        "}",
        # the keys' factors c-major (keys side by side) and the values row by row, block by
        # block, zero past the last key and the last column, once per outer point (a thread
        # walks consecutive tiles, so the query tiles of one head share them); `lm_bad[b]`:
        # block b holds a value that is not finite
        "if (lm_outer != lm_packed) {",
        "  lm_packed = lm_outer;",
        "  for (long lm_b = 0; lm_b < lm_kblocks; lm_b++) {",
        "    const long lm_k0 = lm_b * LM_FK;",
        f"    const long lm_nk = {size} - lm_k0 < LM_FK ? {size} - lm_k0 : LM_FK;",
        "    float *lm_kt = lm_kp + lm_b * LM_HEAD * LM_FK, *lm_v = lm_vp + lm_b * LM_FK * LM_DP;",
        "    int lm_bad = 0, lm_knan = 0;",
        "    float lm_kmax = 0.0f;",
        "    for (long lm_j = 0; lm_j < LM_FK; lm_j++) {",
        f"      const long {key_var} = lm_k0 + lm_j;",
        "      if (lm_j >= lm_nk) {",
        "        for (long lm_c2 = 0; lm_c2 < LM_HEAD; lm_c2++)",
        "          lm_kt[lm_c2 * LM_FK + lm_j] = 0.0f;",
        "        memset(lm_v + lm_j * LM_DP, 0, sizeof(float) * LM_DP);",
        "        continue;",
        "      }",
        # the magnitudes' max and a NaN flag as reductions the compiler vectorises (a max
        # that kept a NaN was a branch per element on a chain through the running max: a
        # fifth of the kernel's time packing Gemma 3's keys)
        "      #pragma omp simd reduction(max:lm_kmax) reduction(|:lm_knan)",
        f"      for (long {c_var} = 0; {c_var} < LM_HEAD; {c_var}++) {{",
        *indent([*k_lines, f"lm_kt[{c_var} * LM_FK + lm_j] = {k_val};",
                 f"lm_kmax = fabsf({k_val}) > lm_kmax ? fabsf({k_val}) : lm_kmax;",
                 f"lm_knan |= {k_val} != {k_val};"], 4),
        "      }",
        "      #pragma omp simd reduction(|:lm_bad)",
        f"      for (long {lane} = 0; {lane} < LM_DP; {lane}++) {{",
        f"        if ({lane} >= {width}) {{ lm_v[lm_j * LM_DP + {lane}] = 0.0f; continue; }}",
        *indent([*v_lines, f"lm_v[lm_j * LM_DP + {lane}] = {v_val};",
                 f"lm_bad |= ({v_val} - {v_val}) != 0.0f;"], 4),
        "      }",
        "    }",
        "    lm_kbad[lm_b] = lm_bad;",
        "    lm_knorm[lm_b] = lm_knan ? NAN : lm_kmax * LM_FA_SLACK;",
        "  }",
        "}",
        "for (long lm_b = 0; lm_b < lm_kblocks; lm_b++) {",
        "  const long lm_k0 = lm_b * LM_FK;",
        f"  const long lm_nk = {size} - lm_k0 < LM_FK ? {size} - lm_k0 : LM_FK;",
        "  const float *lm_kt = lm_kp + lm_b * LM_HEAD * LM_FK;",
        "  const float *lm_v = lm_vp + lm_b * LM_FK * LM_DP;",
        "  long lm_h0 = 0, lm_h1 = LM_FK;  /* the keys multiplied */",
        *(mask_lines or skip_lines),
        "  for (long lm_p = 0; lm_p < lm_panels; lm_p++)",
        "    lm_fa_scores(LM_HEAD, lm_qp + lm_p * LM_HEAD * LM_FR, lm_kt, "
        "lm_s + lm_p * LM_FR * LM_FK, lm_h0, lm_h1);",
        # the logits, elementwise (-inf past the last key: a weight of 0), then the rows'
        # online-softmax step
        "  for (long lm_i = 0; lm_i < lm_nq; lm_i++) {",
        f"    const long {query} = lm_q0 + lm_i;",
        "    float *lm_x = lm_s + lm_i * LM_FK;",
        "    #pragma omp simd",
        "    for (long lm_j = 0; lm_j < lm_nk; lm_j++) {",
        f"      const long {key_var} = lm_k0 + lm_j;",
        "      const float lm_dot = lm_x[lm_j];",
        *indent([*x_lines, f"lm_x[lm_j] = {x_val};"], 3),
        "    }",
        "    for (long lm_j = lm_nk; lm_j < LM_FK; lm_j++) lm_x[lm_j] = -INFINITY;",
        "  }",
        "  const int lm_any = lm_fa_softmax(lm_nq, lm_s, lm_ws, lm_m, lm_l, lm_c, lm_nan);",
        # all weights zero: every row's max is unchanged (scale 1), so a finite block adds
        # nothing; values that are not finite must still make 0 * inf = NaN
        "  if (!lm_any && !lm_kbad[lm_b]) continue;",
        "  for (long lm_i = lm_nq; lm_i < lm_panels * LM_FR; lm_i++) {",
        "    lm_c[lm_i] = 1.0f;",
        "    for (long lm_j = 0; lm_j < LM_FK; lm_j++) lm_ws[lm_i * LM_FK + lm_j] = 0.0f;",
        "  }",
        "  for (long lm_p = 0; lm_p < lm_panels; lm_p++)",
        "    lm_fa_values(LM_DP, lm_ws + lm_p * LM_FR * LM_FK, lm_v, lm_c + lm_p * LM_FR, "
        "lm_acc + lm_p * LM_FR * LM_DP, lm_h0, lm_h1);",
        "}",
        "for (long lm_i = 0; lm_i < lm_nq; lm_i++) {",
        f"  const long {query} = lm_q0 + lm_i;",
        f"  float {o.m} = lm_m[lm_i], {o.l} = lm_l[lm_i]; int {o.nan} = lm_nan[lm_i];",
        f"  for (long lm_d = 0; lm_d < {width}; lm_d++) {{",
        f"    const long {lane} = lm_d;",
        f"    const float lm_o = {result};",
        *indent([*out_lines, store], 2),
        "  }",
        "}",
    ]
    params = [(C.storage_type(p.dtype), f"p{k}", p.output) for k, p in enumerate(kernel.params)]
    lines = [
        C.signature(name, params, [names[d] for d in kernel_dims(kernel)]) + " {",
        # the dot product's length; a row of values padded to whole micro-kernel passes
        f"  enum {{ LM_HEAD = {head}, LM_DP = ({width} + LM_FV - 1) / LM_FV * LM_FV }};",
        f"  const long lm_qblocks = (({nq}) + LM_FQ - 1) / LM_FQ;",
        f"  const long lm_kblocks = (({size}) + LM_FK - 1) / LM_FK;",
        "  _Alignas(64) float lm_qp[LM_FQ * LM_HEAD], lm_acc[LM_FQ * LM_DP];",
        # one head's packed keys and values, and a flag per block of them (per thread)
        "  float *lm_kp = lm_fa_scratch(lm_kblocks * (LM_HEAD * LM_FK + LM_FK * LM_DP + 2));",
        "  float *lm_vp = lm_kp + lm_kblocks * LM_HEAD * LM_FK;",
        # per block: the largest magnitude of its keys' factors (NaN if one is NaN)
        "  float *lm_knorm = lm_vp + lm_kblocks * LM_FK * LM_DP;",
        "  int *lm_kbad = (int *)(lm_knorm + lm_kblocks);",
        "  long lm_packed = -1;",
        "  _Alignas(64) float lm_s[LM_FQ * LM_FK], lm_ws[LM_FQ * LM_FK];",
        f"  lm_for_begin({tiles});",
        "  for (long lm_lo, lm_hi; lm_for_next(&lm_lo, &lm_hi);)",
        "    for (long lm_t = lm_lo; lm_t < lm_hi; lm_t++) {",
        *indent(body, 3),
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"
