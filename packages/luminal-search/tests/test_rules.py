"""Each rule of luminal-search's rule sets on its own.

For every rule a case builds its left side and its right side as graphs over the same inputs.
The test checks (1) that the rule alone makes egglog prove the two terms equal, and (2) that the
two graphs agree on the reference backend on random inputs and, where the rule holds for them,
on inputs with NaN and infinities."""

from __future__ import annotations

import re
from importlib.resources import files

import luminal as lm
import numpy as np
import pytest
from luminal.passes import GenericCompiler
from luminal_search import egraph, measure, terms
from luminal_search.regions import find_regions, leaves, views_and_extents

RULE = re.compile(r"^\(rewrite .*$", re.M)


def rules(name: str) -> list[str]:
    return RULE.findall(files("luminal_search").joinpath(f"rules/{name}.egg").read_text())


# rule head -> (left side, right side) over inputs x, y, z of shape (4, 8)
CASES = {
    "(Add a b) (Add b a)": (lambda x, y, z: x + y, lambda x, y, z: y + x),
    "(Mul a b) (Mul b a)": (lambda x, y, z: x * y, lambda x, y, z: y * x),
    "(Add a (Add b c)) (Add (Add a b) c)": (lambda x, y, z: x + (y + z),
                                            lambda x, y, z: (x + y) + z),
    "(Mul a (Mul b c)) (Mul (Mul a b) c)": (lambda x, y, z: x * (y * z),
                                            lambda x, y, z: (x * y) * z),
    "(Mul (Exp2 a) (Exp2 b)) (Exp2 (Add a b))": (lambda x, y, z: x.exp2() * y.exp2(),
                                                 lambda x, y, z: (x + y).exp2()),
    "(Exp2 (Add a b)) (Mul (Exp2 a) (Exp2 b))": (lambda x, y, z: (x + y).exp2(),
                                                 lambda x, y, z: x.exp2() * y.exp2()),
    "(Mul (Recip a) (Recip b)) (Recip (Mul a b))": (
        lambda x, y, z: x.reciprocal() * y.reciprocal(), lambda x, y, z: (x * y).reciprocal()),
    "(Add (Sum k n a) (Sum k n b)) (Sum k n (Add a b))": (
        lambda x, y, z: x.sum(1) + y.sum(1), lambda x, y, z: (x + y).sum(1)),
    "(Sum k n (Add a b)) (Add (Sum k n a) (Sum k n b))": (
        lambda x, y, z: (x + y).sum(0), lambda x, y, z: x.sum(0) + y.sum(0)),
    "(Add (Mul a b) (Mul a c)) (Mul a (Add b c))": (lambda x, y, z: x * y + x * z,
                                                    lambda x, y, z: x * (y + z)),
    "(Add (Mul b a) (Mul c a)) (Mul (Add b c) a)": (lambda x, y, z: y * x + z * x,
                                                    lambda x, y, z: (y + z) * x),
    "(Mul a (Add b c)) (Add (Mul a b) (Mul a c))": (lambda x, y, z: x * (y + z),
                                                    lambda x, y, z: x * y + x * z),
}
# rules that do not hold for infinities (see rules/factoring.egg)
FINITE_ONLY = {"(Add (Mul a b) (Mul a c)) (Mul a (Add b c))",
               "(Add (Mul b a) (Mul c a)) (Mul (Add b c) a)",
               "(Mul a (Add b c)) (Add (Mul a b) (Mul a c))"}

ALL_RULES = [rule for name in ("algebra", "factoring") for rule in rules(name)]


def head(rule: str) -> str:
    return next(h for h in CASES if rule.startswith(f"(rewrite {h}"))


def test_every_rule_has_a_case():
    assert sorted(head(r) for r in ALL_RULES) == sorted(CASES)


def both_sides(case):
    g = lm.Graph()
    x, y, z = (g.tensor((4, 8), name=n) for n in "xyz")
    left, right = (side(x, y, z).retrieve() for side in case)
    GenericCompiler().compile(g)
    assert g.resolve(left.id) != g.resolve(right.id)
    return g, g.resolve(left.id), g.resolve(right.id)


def egglog_proves(rule: str, g, left: int, right: int) -> bool:
    regions = [r for r in find_regions(g) if r.root in (left, right)]
    leaf_ids = list(dict.fromkeys(n for r in regions for n in leaves(g, r)))
    views, extents = [], []
    for r in regions:
        v, e = views_and_extents(g, r, leaf_ids)
        views += [x for x in v if x not in views]
        extents += [x for x in e if x not in extents]
    lhs = terms.encode(g, left, leaf_ids, views, extents, prefix="l")
    rhs = terms.encode(g, right, leaf_ids, views, extents, prefix="r")
    rule = re.sub(r":ruleset \w+", ":ruleset one", rule)
    text = "\n".join([terms.language(lambda n: 1), "(ruleset one)", rule, lhs.text, rhs.text,
                      "(run-schedule (repeat 2 (run one)))",
                      f"(check (= {lhs.root} {rhs.root}))"])
    return egraph.holds(text)


@pytest.mark.parametrize("rule", ALL_RULES, ids=[head(r) for r in ALL_RULES])
def test_rule(rule):
    g, left, right = both_sides(CASES[head(rule)])
    assert egglog_proves(rule, g, left, right)
    rng = np.random.default_rng(1)
    for specials in (False, True):
        data = measure.random_inputs(g, rng, specials)
        want = measure.run(g, data, left)
        got = measure.run(g, data, right)
        if specials and head(rule) in FINITE_ONLY:
            ok = np.isfinite(want) & np.isfinite(got)
            np.testing.assert_allclose(got[ok], want[ok], rtol=1e-5, atol=1e-5)
        else:
            assert measure.agrees(got, want), (got, want)


def test_a_rule_does_not_prove_what_it_does_not_state():
    """The proof check can fail: exp2-product does not make x*y equal to x+y."""
    g, left, right = both_sides((lambda x, y, z: x * y, lambda x, y, z: x + y))
    assert not egglog_proves(rules("algebra")[4], g, left, right)


def test_factoring_is_not_sound_for_infinities():
    """Why factoring is its own rule set: inf*2 + inf*(-1) is NaN, inf*(2 + -1) is inf."""
    g, left, right = both_sides(CASES["(Add (Mul a b) (Mul a c)) (Mul a (Add b c))"])
    ids = {t.op.label_name: t.id for t in g.input_nodes()}
    data = {ids["x"]: np.full((4, 8), np.inf, np.float32),
            ids["y"]: np.full((4, 8), 2.0, np.float32),
            ids["z"]: np.full((4, 8), -1.0, np.float32)}
    assert np.isnan(measure.run(g, data, left)).all()
    assert np.isposinf(measure.run(g, data, right)).all()
