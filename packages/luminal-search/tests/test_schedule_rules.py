"""The schedule rule set (rules/schedule.egg): each rule on its own, and the candidates
extracted from a region's schedule e-graph."""

from __future__ import annotations

import re
from importlib.resources import files

import luminal as lm
import pytest
from luminal_search import egraph, schedule
from luminal_search.egraph import Limits

RULE = re.compile(r"^\(rule .*?:ruleset schedule\)$", re.M | re.S)
RULES = RULE.findall(files("luminal_search").joinpath("rules/schedule.egg").read_text())

# rule -> (the facts it needs, the choice it adds, a fact set without which it must not fire)
CASES = {
    "MicroKernel": ("(MicroKernel 0)", "(MatmulAs (Loops))", "(Generated 0)"),
    "Recomputed": ("(Recomputed 0 3)", "(Store 3)", "(Recomputed 1 3)"),
    "Tunable": ('(Generated 0) (Tunable "lanes" 16)', '(Tune "lanes" 16)',
                '(MicroKernel 0) (Tunable "lanes" 16)'),
}


def case(rule: str) -> tuple[str, str, str]:
    return next(c for name, c in CASES.items() if f"({name} " in rule.splitlines()[0])


def proves(rule: str, facts: str, choice: str) -> bool:
    """Whether `rule` alone makes egglog put `(Sched 0 choice)` in the e-class of `(Plan 0)`."""
    text = "\n".join([schedule.LANGUAGE, "(ruleset schedule)", rule, "(let $k (Plan 0))",
                      facts, "(run-schedule (repeat 2 (run schedule)))",
                      f"(check (= $k (Sched 0 {choice})))"])
    return egraph.holds(text)


def test_every_rule_has_a_case():
    assert len(RULES) == len(CASES) == len({case(r) for r in RULES})


@pytest.mark.parametrize("rule", RULES, ids=list(CASES))
def test_rule(rule):
    facts, choice, without = case(rule)
    assert proves(rule, facts, choice)
    assert not proves(rule, without, choice)


def rulesets():
    """The registered rule sets that run in the schedule e-graph."""
    return [(r.name, r.program) for r in lm.plugins.rulesets()
            if schedule.is_schedule_rules(r.program)]


def test_rule_sets_split_between_the_two_e_graphs():
    assert [name for name, _ in rulesets()] == ["schedule"]
    assert not schedule.is_schedule_rules("(rewrite (Add a b) (Add b a) :ruleset mine)")


def test_candidates_come_from_the_backend_in_cost_order():
    """What the e-graph yields for a generated kernel: the default plan first, stores, then
    rewrites, then every setting of the backend's schedule space, in that space's order."""
    space = lm.backend("cpu").schedule_space
    assert space
    got = schedule.choices(schedule.Facts(False, (4, 2), 2, space), rulesets(), Limits())
    want = ([schedule.Choice("default"), schedule.Choice("store", 4),
             schedule.Choice("store", 2), schedule.Choice("rewrite", 0),
             schedule.Choice("rewrite", 1)]
            + [schedule.Choice("tune", setting=(n, v)) for n, vs in space.items() for v in vs])
    assert got == want


def test_matmul_candidates_take_no_settings():
    space = lm.backend("cpu").schedule_space
    got = schedule.choices(schedule.Facts(True, (1,), 0, space), rulesets(), Limits())
    assert got == [schedule.Choice("default"), schedule.Choice("loops"),
                   schedule.Choice("store", 1)]


def test_without_the_schedule_rules_only_the_default_and_rewrites_remain():
    got = schedule.choices(schedule.Facts(True, (1,), 1, {"lanes": (8,)}), [], Limits())
    assert got == [schedule.Choice("default"), schedule.Choice("rewrite", 0)]


def test_a_setting_name_never_reaches_the_program_as_text():
    with pytest.raises(ValueError, match="not an identifier"):
        schedule.program(schedule.Facts(False, space={'x") (evil': (1,)}), rulesets(), Limits())


def test_a_plugin_rule_set_adds_choices_from_its_own_conditions():
    """A rule set of another plugin, naming `Plan`/`Sched`, runs in the schedule e-graph: here
    it offers the backend's settings to matmul micro-kernels too."""
    mine = ("mine", "(rule ((= k (Plan r)) (MicroKernel r) (Tunable name value))\n"
                    "      ((union k (Sched r (Tune name value)))) :ruleset mine)")
    assert schedule.is_schedule_rules(mine[1])
    stores = ("stores", "(rule ((= k (Plan r)) (MicroKernel r))\n"
                        "      ((union k (Sched r (Store 9))) (union k (Sched r (Store 7))))"
                        " :ruleset stores)")
    facts = schedule.Facts(True, (), 0, {"lanes": (16,)})
    assert schedule.choices(facts, [*rulesets(), mine, stores], Limits()) == [
        schedule.Choice("default"), schedule.Choice("loops"), schedule.Choice("store", 7),
        schedule.Choice("store", 9), schedule.Choice("tune", setting=("lanes", 16))]
