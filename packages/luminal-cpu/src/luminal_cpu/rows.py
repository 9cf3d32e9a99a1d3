"""Kernels rendered a row of outputs at a time, with the masks a row does not need removed.

Generic rendering evaluates every mask per element, and gcc vectorises neither a loop whose
loads are masked by a condition of the outer axes (a concatenation's `c < 128`: "no vectype"
for the masked load) nor a pooling window's max with its NaN flag. Here:

- **Cases**: a mask that reads only one outer axis (a concatenation along channels) holds on
  whole intervals of that axis; each interval gets its own copy of the row loop with the
  masks folded to constants (the axis's range narrowed, `luminal.symbolic` simplifies), so
  each copy reads one input, unmasked. A concatenation along the row itself (YOLOv8's DFL
  head: three scales' anchors) splits the row into consecutive runs, one loop each, its
  reductions (at most RUN_REDUCE_MAX steps, the max as the select below) unrolled inside
  so that gcc vectorises across the row; within a case too (YOLOv8's output: box rows,
  then class rows that concatenate three scales' anchors).
- **Windows** (reductions shorter than 16 steps: pooling): each row is cut into its interior,
  where every mask along the row holds for every window step, and the two edges. The interior
  runs without those masks, its max a NaN-propagating select that gcc vectorises across the
  row (window steps unrolled); the edges keep the masks and the generic max (its NaN flag has
  no branches, the select's `||` would branch per step in scalar code). Each such mask is an
  affine comparison of the row's axis and the window steps, so it holds on the box [t, t] x
  window exactly when it holds at the box's corners, and the outputs t where all of them hold
  form one interval (found from both ends of the row). Where a padded window's rows or
  columns split into a few intervals on which every mask of that axis (and the window
  steps) takes one value per step (`masks.window_intervals`: the edge rows and columns one
  by one, then the interior), each interval gets its own loop with the axis narrowed (to a
  constant for a single row or column): the masks fold or read the window steps alone, and
  the window's loops, unrolled before vectorisation, leave no mask at all, so the edge
  rows vectorise like the interior. A row of at most MASKED_ROW_MAX columns runs whole, its
  column masks per lane (gcc's masked loads), rather than with scalar edge columns
  (YOLOv8n's SPPF pools, 32 x 32, one thread, Zen 4: 6.7 -> 3.9 ms).
"""

from __future__ import annotations

from itertools import product

from luminal_codegen import BodyWriter, Kernel, Scope, dim_names, kernel_dims
from luminal_codegen.ir import Bind, Reduce, SoftmaxSum, Value, map_exprs, walk
from luminal_codegen.render import SIMD_REDUCE_MIN
from luminal_codegen.simplify import bound_by_extents, symbolic_extents

from .dialect import C
from .epilogue import INLINE_EXP2, INLINE_EXP2_C
from .masks import (
    case_chain,
    case_intervals,
    edge_atoms,
    narrowed,
    window_intervals,
    without_atoms,
)

# longest reduction a concatenation along the row keeps inside its row loops (YOLOv8's DFL
# head: the max over 16 bins of the three scales' concatenated anchors)
RUN_REDUCE_MAX = 16
# widest row of a padded window kept in one loop with its column masks (see `windows`)
MASKED_ROW_MAX = 64


class _SelectMaxWriter(BodyWriter):
    """A float max accumulates as `acc = (x > acc || x != x) ? x : acc`: NaN propagates
    (once NaN, no comparison replaces it) without a separate flag."""

    def reduce(self, r: Reduce, scope: Scope) -> str:
        if r.op != "max" or not r.dtype.is_float:
            return super().reduce(r, scope)
        acc = self.fresh()
        inner = Scope(scope.depth + 1)
        self.scope_of[r.var.name] = inner
        x = self.emit(r.body)
        var = self.names.get(r.var.name, r.var.name)
        scope.lines += [f"float {acc} = -INFINITY;",
                        # unrolled before vectorisation: masks that read only the window
                        # steps (a pool's edge rows and columns) become constants
                        f"#pragma GCC unroll {SIMD_REDUCE_MIN}",
                        f"for (long {var} = 0; {var} < {self.expr(r.size)}; {var}++) {{",
                        *("  " + line for line in inner.lines),
                        f"  {acc} = ({x} > {acc} || {x} != {x}) ? {x} : {acc};",
                        "}"]
        result = self.fresh()
        scope.lines.append(f"float {result} = {self.d.round(r.dtype, acc)};")
        return result


def _windowed(kernel: Kernel) -> bool | None:
    """Whether the kernel reduces short windows (True), nothing (False), or is not one this
    module renders (None: long or data-dependent reductions)."""
    values = list(walk(kernel.out.value))
    if any(isinstance(v, (Bind, SoftmaxSum)) for v in values):
        return None
    reductions = [v for v in values if isinstance(v, Reduce)]
    if not all(r.size.is_const and r.size.value < SIMD_REDUCE_MIN for r in reductions):
        return None
    return bool(reductions)


def _short(kernel: Kernel) -> bool:
    """Whether every reduction of the kernel is at most RUN_REDUCE_MAX constant steps (none
    data-dependent): unrolled inside a row's loop, they vectorise across the row."""
    values = list(walk(kernel.out.value))
    return not any(isinstance(v, (Bind, SoftmaxSum)) for v in values) and all(
        r.size.is_const and r.size.value <= RUN_REDUCE_MAX
        for r in values if isinstance(r, Reduce))


def render(kernel: Kernel, name: str) -> str | None:
    """`kernel` as a C function rendered a row at a time, or None when neither cases nor
    windows apply (the generic renderer then renders it)."""
    if not isinstance(kernel, Kernel) or len(kernel.domain) < 2:  # rows of outputs
        return None
    windowed = _windowed(kernel)
    cases = (case_intervals(kernel.out.value, zip(kernel.loop_vars[:-1], kernel.domain[:-1]))
             if windowed is not None else None)
    # a concatenation along the row itself: consecutive runs of the row
    runs = (case_intervals(kernel.out.value, [(kernel.loop_vars[-1], kernel.domain[-1])])
            if not windowed and cases is None and _short(kernel) else None)
    if runs is None and (windowed is None or (not windowed and cases is None)):
        return None
    dims = kernel_dims(kernel)
    names = dim_names(dims)
    extents = [e.render_c(names) for e in kernel.domain]
    axes = [v.name for v in kernel.loop_vars]
    last, n = axes[-1], extents[-1]
    out_dt = kernel.params[kernel.out.buf].dtype
    extents_of = symbolic_extents(kernel)

    def loop(value: Value, lo: str, hi: str, writer_type: type[BodyWriter] = BodyWriter
             ) -> list[str]:
        writer = writer_type(INLINE_EXP2_C, names, reduce_pragmas=False)
        # a case's narrowed range can settle divisions by symbolic extents (a concatenation
        # of halves of a reshaped axis: RoPE's rotated half)
        v = writer.emit(map_exprs(value, lambda e: bound_by_extents(e, extents_of)))
        store = C.store_statement(out_dt, f"p{kernel.out.buf}", writer.expr(kernel.out.index), v)
        return [f"for (long {last} = {lo}; {last} < {hi}; {last}++) {{",
                *("  " + x for x in [*writer.root.lines, store]), "}"]

    def row(value: Value) -> list[str]:
        reductions = [v for v in walk(value) if isinstance(v, Reduce)]
        edges = edge_atoms(value, (kernel.loop_vars[-1], *(r.var for r in reductions)))
        if not reductions or edges is None:
            return loop(value, "0", n)
        steps = {r.var.name: r.size.value - 1 for r in reductions}
        corners = []  # every edge mask at every corner of the window
        for atom in edges:
            used = sorted(steps.keys() & atom.free_vars)
            for corner in product(*((0, steps[v]) for v in used)):
                corners.append(atom.substitute(dict(zip(used, corner))).render_c(names))
        inside = " && ".join(f"({c})" for c in dict.fromkeys(corners)) or "1"
        return [f"long lm_a = 0, lm_b = {n};",
                f"for (; lm_a < lm_b; lm_a++) {{ const long {last} = lm_a; if ({inside}) break; }}",
                f"for (; lm_b > lm_a; lm_b--) {{ const long {last} = lm_b - 1; "
                f"if ({inside}) break; }}",
                *loop(value, "0", "lm_a"),
                *loop(without_atoms(value, edges), "lm_a", "lm_b", _SelectMaxWriter),
                *loop(value, "lm_b", n)]

    def windows(value: Value) -> list[str]:
        """A padded window's rows and columns split into edges and interior (masks.
        window_intervals), each interval's loop with the masks that read its axis folded;
        `row` where neither axis splits."""
        reductions = [v for v in walk(value) if isinstance(v, Reduce)]
        steps = {r.var.name: r.size.value for r in reductions}
        row_var, row_n = kernel.loop_vars[-2], kernel.domain[-2]
        row_cases = window_intervals(value, row_var, row_n, steps)
        col_cases = window_intervals(value, kernel.loop_vars[-1], kernel.domain[-1], steps)
        if row_cases is None and col_cases is None:
            return row(value)

        def columns(v: Value) -> list[str]:
            width = kernel.domain[-1]
            if width.is_const and width.value <= MASKED_ROW_MAX:
                # the column masks per lane (masked loads): scalar edge columns would cost
                # more than the whole row (measured on SPPF's 32 columns: 1.87 -> 1.33 ms)
                return loop(v, "0", n, _SelectMaxWriter)
            if col_cases is None:
                return row(v)
            return [line for lo, hi in col_cases
                    for line in loop(narrowed(v, kernel.loop_vars[-1], lo, hi), str(lo),
                                     str(hi + 1), _SelectMaxWriter)]

        if row_cases is None:
            return columns(value)
        return case_chain(row_var, row_cases, value, columns)

    def row_runs(value: Value) -> list[str]:
        """A row cut into its runs where it concatenates along itself (within a case too:
        YOLOv8's output rows, the class scores of three scales' anchors), else `row`."""
        cut = (case_intervals(value, [(kernel.loop_vars[-1], kernel.domain[-1])])
               if _short(kernel) else None)
        if cut is None:
            return row(value)
        var, intervals = cut
        return [line for lo, hi in intervals
                for line in loop(narrowed(value, var, lo, hi), str(lo), str(hi + 1),
                                 _SelectMaxWriter)]

    if runs is not None:
        body = row_runs(kernel.out.value)
    elif cases is None:
        body = (windows if windowed else row)(kernel.out.value)
    else:
        var, intervals = cases
        body = case_chain(var, intervals, kernel.out.value, windows if windowed else row_runs)
    params = [(C.storage_type(p.dtype), f"p{k}", p.output) for k, p in enumerate(kernel.params)]
    dialect = C.tuned(kernel.tuning) if kernel.tuning else C  # a searched schedule's split
    # exp2 inline (`epilogue.INLINE_EXP2`): a concatenation's bias + SiLU branch ran at 0.99
    # ns per element with libmvec's exp2f, 0.44 inline (Zen 4, one thread, in cache)
    prelude = [INLINE_EXP2] if any("lm_epi_exp2" in x for x in body) else []
    return "\n".join([*prelude, C.signature(name, params, [names[d] for d in dims]) + " {",
                      *("  " + x for x in dialect.domain(extents[:-1], axes[:-1], body,
                                                              row=extents[-1])),
                      "}"]) + "\n"
