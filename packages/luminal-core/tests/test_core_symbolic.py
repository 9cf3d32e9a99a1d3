"""Symbolic expressions: every simplification is checked by brute force against plain Python
integer arithmetic over the declared ranges of the variables (and against C, when a C compiler
is installed, for the rendered source)."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from luminal.symbolic import (
    Expr,
    UnboundDimError,
    add,
    evaluator,
    floordiv,
    logical_and,
    lt,
    mod,
    smax,
    smin,
)

A = Expr.var("a", 0, 7)  # index variables with a range
B = Expr.var("b", -3, 4)
N = Expr.var("n")  # a shape dim: 1 ..
RANGES = {"a": range(0, 8), "b": range(-3, 5), "n": range(1, 7)}


def envs():
    for values in itertools.product(*RANGES.values()):
        yield dict(zip(RANGES, values))


# An expression tree as (Expr built through the simplifying constructors, the same tree as a
# plain Python function): the two must agree everywhere in RANGES.
leaves = st.sampled_from(
    [(A, lambda e: e["a"]), (B, lambda e: e["b"]), (N, lambda e: e["n"])]
) | st.integers(-6, 6).map(lambda c: (Expr.const(c), lambda e, c=c: c))


def _combine(children):
    pairs = st.tuples(children, children)
    nonzero = st.integers(-5, 5).filter(bool)
    return st.one_of(
        pairs.map(lambda p: (p[0][0] + p[1][0], lambda e, p=p: p[0][1](e) + p[1][1](e))),
        pairs.map(lambda p: (p[0][0] - p[1][0], lambda e, p=p: p[0][1](e) - p[1][1](e))),
        pairs.map(lambda p: (p[0][0] * p[1][0], lambda e, p=p: p[0][1](e) * p[1][1](e))),
        st.tuples(children, nonzero).map(
            lambda p: (p[0][0] // p[1], lambda e, p=p: p[0][1](e) // p[1])),
        st.tuples(children, nonzero).map(
            lambda p: (p[0][0] % p[1], lambda e, p=p: p[0][1](e) % p[1])),
        children.map(lambda c: (c[0] // N, lambda e, c=c: c[1](e) // e["n"])),
        children.map(lambda c: (c[0] % N, lambda e, c=c: c[1](e) % e["n"])),
        # a digit sum, which the simplifier recombines: k*c*(x // c) + k*(x % c) == k*x
        st.tuples(children, st.integers(1, 5), nonzero).map(lambda p: (
            p[0][0] // p[1] * (p[1] * p[2]) + p[0][0] % p[1] * p[2],
            lambda e, p=p: (p[0][1](e) // p[1] * p[1] + p[0][1](e) % p[1]) * p[2])),
        pairs.map(lambda p: (smin(p[0][0], p[1][0]), lambda e, p=p: min(p[0][1](e), p[1][1](e)))),
        pairs.map(lambda p: (smax(p[0][0], p[1][0]), lambda e, p=p: max(p[0][1](e), p[1][1](e)))),
        pairs.map(lambda p: (lt(p[0][0], p[1][0]), lambda e, p=p: int(p[0][1](e) < p[1][1](e)))),
        st.tuples(pairs, pairs).map(lambda q: (
            logical_and(lt(q[0][0][0], q[0][1][0]), lt(q[1][0][0], q[1][1][0])),
            lambda e, q=q: int(q[0][0][1](e) < q[0][1][1](e) and q[1][0][1](e) < q[1][1][1](e)),
        )),
    )


trees = st.recursive(leaves, _combine, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_simplified_expressions_evaluate_like_python(tree):
    expr, fn = tree
    for env in envs():
        assert expr.evaluate(env) == fn(env), (str(expr), env)


@settings(max_examples=100, deadline=None)
@given(trees)
def test_numpy_evaluation_matches_scalar_evaluation(tree):
    expr, fn = tree
    grid = list(envs())
    arrays = {k: np.array([e[k] for e in grid]) for k in RANGES}
    got = np.broadcast_to(np.asarray(expr.numpy_fn(arrays)), (len(grid),))
    assert got.tolist() == [fn(e) for e in grid], str(expr)


@settings(max_examples=100, deadline=None)
@given(trees, st.integers(0, 7))
def test_substitute_then_evaluate(tree, a):
    expr, fn = tree
    partial = expr.substitute({"a": a})
    assert "a" not in partial.free_vars
    for env in envs():
        if env["a"] == a:
            assert partial.evaluate(env) == fn(env)


@pytest.mark.parametrize(
    ("expr", "simplified"),
    [
        (A + 0, A),
        (A * 1, A),
        (A - A, Expr.const(0)),
        (A * 3 + A * 2, A * 5),
        ((A * 4 + 3) // 4, A),  # the remainder 3 < 4 vanishes
        ((A * 4 + B) // 4, A + B // 4),
        ((A * 6) % 3, Expr.const(0)),
        ((A + 8) % 8, A),  # 0 <= a < 8
        ((A % 8) // 4, (A // 4) % 2),
        ((A // 2) // 4, A // 8),
        ((A + 16) // 8, Expr.const(2)),  # one quotient over a's range (16 <= a + 16 < 24)
        ((A + 8 * B + 40) // 8, B + 5),
        ((B - 5) // 8, Expr.const(-1)),  # -8 <= b - 5 <= -1: floor semantics
        ((A + 16) % 8, A),  # one quotient over a's range: a + 16 - 8 * 2
        ((B - 5) % 8, B + 3),  # -8 <= b - 5 <= -1: floor semantics
        (N * 6 // (N * 3), Expr.const(2)),
        ((N * N * 4 + N * 2) // (N * 2), N * 2 + 1),
        ((N * 4) % (N * 2), Expr.const(0)),
        (smin(N, 1), Expr.const(1)),  # a shape dim is at least 1
        ((N * 6 - 12) // (N * 3 - 6), Expr.const(2)),  # a sum divides its multiples
        ((N * 6 - 12) % (N * 3 - 6), Expr.const(0)),
        ((N - 2) * (N * 2 - 4) * 9, (N - 2) * (N - 2) * 18),  # sums give up their content
        ((A * (N * 3 - 6)) // 3, A * (N - 2)),
        (smax(N, smin(N, 2)), N),  # absorption
        (smin(N, smax(N, A)), N),
        (smax(N, 0), N),
        (smin(N - 1, N), N - 1),  # operands a constant apart: a decode step's last position
        (smax(N - 1, N + 2, A), smax(N + 2, A)),
        (smin(A, 9), A),
        (smax(smin(A, 3), 0), smin(A, 3)),
        (N - smin(N - 1, N), Expr.const(1)),  # unbounded operands, bounded difference
        (smax(N - 1, N + 2, N), N + 2),
        (lt(A, 8), Expr.const(1)),
        (lt(A, 0), Expr.const(0)),
        (lt(N, 1), Expr.const(0)),
        (logical_and(lt(A, 9), lt(B, 2)), lt(B, 2)),
        (floordiv(7, 2), Expr.const(3)),
        (mod(-7, 3), Expr.const(2)),  # floor semantics, like Python
        (floordiv(-7, 2), Expr.const(-4)),
    ],
    ids=str,
)
def test_simplifier_identities(expr, simplified):
    assert expr is simplified
    for env in envs():
        assert expr.evaluate(env) == simplified.evaluate(env)


X = Expr.var("x", -40, 40)


@pytest.mark.parametrize(("c", "d", "k"), [(1, 1, 1), (2, 3, 1), (4, 4, -2), (7, 3, 3),
                                           (16, 16, 1), (3, 50, 1)])
def test_digit_sums_recombine(c, d, k):
    """What reshapes and transposes write, c*(x // c) + x % c, folds back into x, in any
    term order, scaled, nested in a larger sum or with a middle digit; checked by brute force
    over a range of x that crosses zero and every digit boundary."""
    x = X + N
    two = [k * c * (x // c), k * (x % c), N * 3, Expr.const(5)]
    three = [k * c * d * (x // (c * d)), k * c * ((x // c) % d), k * (x % c)]
    for terms in itertools.permutations(two):
        assert add(*terms) is k * x + N * 3 + 5
    for terms in itertools.permutations(three):
        assert add(*terms) is k * x
    middle = k * c * ((x // c) % d) + k * (x % c)
    assert middle is k * (x % (c * d))
    unequal = k * (c + 1) * (x // c) + k * (x % c)  # coefficients that do not match stay
    for xv, n in itertools.product(range(-40, 41), range(1, 4)):
        xn = xv + n
        env = {"x": xv, "n": n}
        assert middle.evaluate(env) == k * (xn // c % d * c + xn % c)
        assert unequal.evaluate(env) == k * ((c + 1) * (xn // c) + xn % c)


def test_hash_consing_and_equality():
    assert Expr.var("seq") is Expr.var("seq")
    assert (A + 1) is (1 + A)
    assert A * 2 == A * 2 and A * 2 != A * 3 and Expr.const(3) == 3
    assert {A + 1: "x"}[1 + A] == "x"
    with pytest.raises(TypeError, match="truth value"):
        bool(lt(A, B))


def test_evaluate_reports_unbound_names():
    with pytest.raises(UnboundDimError, match="'n'"):
        (A + N).evaluate({"a": 1})


def test_division_by_zero_is_rejected():
    with pytest.raises(ZeroDivisionError):
        A // 0
    with pytest.raises(ZeroDivisionError):
        A % 0


def test_pretty_printing():
    assert str(N * 2 - 1) == "((2 * n) - 1)"
    assert str(A // 4) == "(a // 4)"
    assert str(N - 2) == "(n - 2)"
    assert str(2 - N) == "(2 - n)"
    assert str(-N - A) == "(-a - n)"
    assert str(N * 3 - 6) == "((3 * n) - 6)"


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@settings(max_examples=3, deadline=None)
@given(st.lists(trees, min_size=30, max_size=30))
def test_rendered_c_evaluates_like_python(tmp_path_factory, exprs):
    """Render a batch of random expressions to C, compile, run over the whole grid."""
    # the C helpers (floor division, modulo) that rendered expressions call
    helper_functions = pytest.importorskip("luminal_codegen").helper_functions
    names = {"a": "a", "b": "b", "n": "n"}
    body = "\n".join(
        f'        printf("%ld\\n", (long)({e.render_c(names)}));' for e, _ in exprs
    )
    src = f"""#include <stdio.h>
{helper_functions('static inline')}
int main(void) {{
    for (long a = 0; a < 8; a++) for (long b = -3; b < 5; b++) for (long n = 1; n < 7; n++) {{
{body}
    }}
    return 0;
}}
"""
    tmp = tmp_path_factory.mktemp("c")
    (tmp / "exprs.c").write_text(src)
    exe = tmp / "exprs"
    subprocess.run(["cc", "-O0", "-o", str(exe), str(tmp / "exprs.c")], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    want = [str(fn(env)) for env in envs() for _, fn in exprs]
    assert len(out) == len(want) == 30 * 8 * 8 * 6 and out == want


def test_evaluator_evaluates_many_expressions_in_one_call():
    n, m = Expr.var("n"), Expr.var("m")
    exprs = [n * 2, Expr.const(3), n * 2, (n + m) // 2, smax(n, m) - smin(n, m)]
    evaluate = evaluator(exprs)
    for env in ({"n": 3, "m": 5}, {"n": 10, "m": 1}):
        assert evaluate(env) == tuple(e.evaluate(env) for e in exprs)
    with pytest.raises(UnboundDimError, match="'m'"):
        evaluate({"n": 1})
    assert evaluator([])({}) == ()
