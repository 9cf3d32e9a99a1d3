"""Masks that a run of outputs can drop: where a loop walks a row of outputs, the masks of
its loads (a padded input's edges) hold for the whole run except near the edges, and a mask
of an outer axis alone (a concatenation's `channel < 128`) is constant over whole intervals of
that axis. Code without them vectorises (masked strided loads, lane-indexed gathers and loads
masked by a loop-invariant condition do not, with gcc 12)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import product

from luminal.symbolic import Expr, logical_and
from luminal_codegen.ir import Load, Value, Where, affine, map_exprs, walk

# axes longer than this are not split into cases (each point is evaluated at compile time)
_CASE_AXIS_MAX = 1 << 16
_CASES_MAX = 8  # copies of a loop one kernel may get
# longest axis split into a window's edges and interior (every point's masks are evaluated
# at every window step at compile time)
_WINDOW_AXIS_MAX = 1 << 12


def atoms(cond: Expr) -> tuple[Expr, ...]:
    return cond.args if cond.op == "and" else (cond,)


def edge_atoms(value: Value, variables: tuple[Expr, ...]) -> tuple[Expr, ...] | None:
    """The comparisons in `value`'s masks that read any of `variables`, or None when one is
    not affine in them. An affine comparison holds on a half-space of `variables`, so all of
    them hold on a convex set: along a run of one variable, on one interval."""
    names = {v.name for v in variables}
    found: set[Expr] = set()
    for x in walk(value):
        cond = x.valid if isinstance(x, Load) else x.cond if isinstance(x, Where) else None
        for atom in atoms(cond) if cond is not None else ():
            if not names & atom.free_vars:
                continue
            if atom.op != "lt" or affine(atom.args[0] - atom.args[1], variables) is None:
                return None
            found.add(atom)
    return tuple(sorted(found, key=str))


def without_atoms(value: Value, dropped: tuple[Expr, ...]) -> Value:
    """`value` with the comparisons `dropped` taken as true in every mask."""
    drop = set(dropped)

    def cond(e: Expr) -> Expr:
        if e.op not in ("and", "lt"):
            return e
        return logical_and(*(a for a in atoms(e) if a not in drop))

    return map_exprs(value, cond)


def _masks(value: Value) -> set[Expr]:
    out: set[Expr] = set()
    for x in walk(value):
        cond = x.valid if isinstance(x, Load) else x.cond if isinstance(x, Where) else None
        if cond is not None:
            out.update(atoms(cond))
    return out


def case_intervals(value: Value, axes: Iterable[tuple[Expr, Expr]]
                   ) -> tuple[Expr, list[tuple[int, int]]] | None:
    """The first of `axes` (loop variable, extent) whose masks in `value` (reading it alone)
    split it into a few intervals, each with every such mask constant, and those intervals."""
    masks = _masks(value)
    for var, extent in axes:
        own = [m for m in masks if m.free_vars == {var.name}]
        if not own or not extent.is_const or extent.value > _CASE_AXIS_MAX:
            continue
        intervals: list[tuple[int, int]] = []
        previous = None
        for i in range(extent.value):
            truth = tuple(m.evaluate({var.name: i}) for m in own)
            if truth != previous:
                intervals.append((i, i))
                previous = truth
            intervals[-1] = (intervals[-1][0], i)
        if 1 < len(intervals) <= _CASES_MAX:
            return var, intervals
    return None


def case_chain(var: Expr, intervals: list[tuple[int, int]], value: Value,
               code: Callable[[Value], list[str]]) -> list[str]:
    """`if (var <= hi0) {...} else if ... else {...}`: `code(value)` per interval, with `var`'s
    range narrowed to it (the symbolic simplifier folds the masks that read it alone)."""
    lines: list[str] = []
    for k, (lo, hi) in enumerate(intervals):
        head = ("if" if k == 0 else "} else if") + f" ({var.name} <= {hi}) {{"
        lines += [head if k < len(intervals) - 1 else "} else {",
                  *("  " + x for x in code(narrowed(value, var, lo, hi)))]
    return [*lines, "}"]


def narrowed(value: Value, var: Expr, lo: int, hi: int) -> Value:
    """`value` with `var`'s range narrowed to [lo, hi] (a constant where lo == hi): the
    symbolic simplifier folds the masks that read it alone (and divisions with one quotient
    there)."""
    env = {var.name: Expr.const(lo) if lo == hi else Expr.var(var.name, lo, hi)}
    return map_exprs(value, lambda e: e.substitute(env))


def window_intervals(value: Value, var: Expr, extent: Expr, steps: dict[str, int]
                     ) -> list[tuple[int, int]] | None:
    """Intervals of `var` (extent `extent`) on which every mask of `value` that reads `var`
    and window steps alone (`steps`: each reduction variable's step count) takes the same
    value at every step: a padded pool's edge rows or columns, each a single point, and its
    interior. Narrowed to one (`narrowed`), such a mask folds away or reads the steps alone,
    a constant per step once the window's loops are unrolled. None: fewer than two intervals
    or more than _CASES_MAX."""
    if not extent.is_const or extent.value > _WINDOW_AXIS_MAX:
        return None
    own = [m for m in _masks(value)
           if var.name in m.free_vars and m.free_vars <= {var.name, *steps}]
    if not own:
        return None
    envs = [[dict(zip(used, point)) for point in product(*(range(steps[v]) for v in used))]
            for used in (sorted(m.free_vars - {var.name}) for m in own)]
    intervals: list[tuple[int, int]] = []
    previous = None
    for i in range(extent.value):
        truth = tuple(m.evaluate({var.name: i, **env}) for m, at in zip(own, envs) for env in at)
        if truth != previous:
            if len(intervals) == _CASES_MAX:
                return None
            intervals.append((i, i))
            previous = truth
        intervals[-1] = (intervals[-1][0], i)
    return intervals if len(intervals) > 1 else None
