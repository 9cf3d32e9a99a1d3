"""Padding masks that a run of outputs can drop: where a loop walks a row of outputs, the
masks of its loads (a padded input's edges) hold for the whole run except near the edges, and
code without them vectorises (masked strided loads and lane-indexed gathers do not)."""

from __future__ import annotations

from luminal.codegen.ir import Load, Value, Where, affine, map_exprs, walk
from luminal.symbolic import Expr, logical_and


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
