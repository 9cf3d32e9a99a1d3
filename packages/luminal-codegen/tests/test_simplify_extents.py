"""`bound_by_extents`: divisions, remainders and comparisons that symbolic loop extents settle
are decided, and every rewritten expression equals the original at every point of the loops."""

from __future__ import annotations

from itertools import product

import pytest
from luminal.symbolic import INF, Expr
from luminal_codegen.simplify import bound_by_extents

D = Expr.var("d0")
E = Expr.var("d1")
H = Expr.var("_i0", 0, 3)  # a constant extent: 4
S = Expr.var("_i1", 0, INF)  # extent d0
C = Expr.var("_i2", 0, 127)  # a constant extent: 128
R = Expr.var("_r0", 0, INF)  # extent d1
EXTENTS = {"_i1": D, "_r0": E}

# Gemma 3's RoPE on the queries: (seq, 4 * 256) read as (4, seq, 256), first half of a head
ROPE = 1024 * ((H * D + S) % D) + 256 * (((128 * H * D + 128 * S + C) // (128 * D)) % 4) + C


def _points(e: Expr, dims: dict[str, int]):
    ranges = {"_i0": range(4), "_i1": range(dims["d0"]), "_i2": range(0, 128, 9),
              "_r0": range(dims["d1"])}
    names = sorted(v for v in e.free_vars if v.startswith("_"))
    for values in product(*(ranges[n] for n in names)):
        yield {**dims, **dict(zip(names, values))}


@pytest.mark.parametrize("e, want", [
    (ROPE, 1024 * S + 256 * H + C),
    ((H * D + S) % D, S),
    ((H * D + S) // D, H),
    ((128 * S + C) // (128 * D), Expr.const(0)),
    (S.lt(D), Expr.const(1)),
    ((D * R + 3 * S) % (D * E + D), None),  # 3 * s may reach d0: undecided
    ((S + 1) % D, None),  # s + 1 reaches d0
    ((S + R) // D, None),  # r0 is bounded by d1, not d0
    ((2 * S - C) // D, None),  # negative terms: no upper bound taken
    (S.lt(D + -1), None),
])
def test_decided_where_the_extents_settle_it_and_equal_everywhere(e, want):
    got = bound_by_extents(e, EXTENTS)
    if want is None:
        assert got is e
    else:
        assert got is want
    for dims in ({"d0": 1, "d1": 1}, {"d0": 3, "d1": 5}, {"d0": 7, "d1": 2}):
        for env in _points(e, dims):
            assert got.evaluate(env) == e.evaluate(env), env


def test_without_symbolic_extents_nothing_changes():
    assert bound_by_extents(ROPE, {}) is ROPE
