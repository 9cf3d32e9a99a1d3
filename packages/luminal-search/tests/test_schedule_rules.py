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

# the default plan of region 0, with two more choices allowed
PLAN = "(let $k (Plan 0)) (let $v (Run 0 $k)) (set (Last $k) -1) (set (Left $k) 2)"

# rule -> (the facts it needs, what it must make hold, facts without which it must not)
CASES = {
    "MicroKernel": ("(MicroKernel 0)", "(= $v (Run 0 (With $k (MatmulAs (Loops)))))",
                    "(Generated $k)"),
    "Recomputed": ("(Recomputed 0 3)", "(= $v (Run 0 (With $k (Store 3))))", "(Recomputed 1 3)"),
    "Cheap": ("(Cheap 0 5)", "(= $v (Run 0 (With $k (Inline 5))))", "(Cheap 1 5)"),
    "Tunable": ('(Generated $k) (Tunable "lanes" 16) (Setting "lanes" 0)',
                '(= $v (Run 0 (With $k (Tune "lanes" 16))))',
                '(MicroKernel 0) (Tunable "lanes" 16) (Setting "lanes" 0)'),
    "With": ("(Generated $k) (With $k (Store 3))", "(Generated (With $k (Store 3)))",
             "(MicroKernel 0) (With $k (Store 3))"),
    # a quantized matmul call takes the call's settings, generated loops do not
    "Library": ('(Library $k) (Tunable "quant_activations" 1) (CallSetting "quant_activations" 5)',
                '(= $v (Run 0 (With $k (Tune "quant_activations" 1))))',
                '(Generated $k) (Tunable "quant_activations" 1) '
                '(CallSetting "quant_activations" 5)'),
}


def case(rule: str) -> tuple[str, str, str]:
    return next(c for name, c in CASES.items() if f"({name} " in rule.splitlines()[0])


def proves(rules: str, facts: str, claim: str, plan: str = PLAN) -> bool:
    """Whether `rules` make egglog's e-graph of `plan` with `facts` satisfy `claim`."""
    text = "\n".join([schedule.LANGUAGE, "(ruleset schedule)", rules, plan, facts,
                      "(run-schedule (repeat 6 (run schedule)))", f"(check {claim})"])
    return egraph.holds(text)


def test_every_rule_has_a_case():
    assert len(RULES) == len(CASES) == len({case(r) for r in RULES})


@pytest.mark.parametrize("rule", RULES, ids=list(CASES))
def test_rule(rule):
    facts, claim, without = case(rule)
    assert proves(rule, facts, claim)
    assert not proves(rule, without, claim)


ALL = "\n".join(RULES)


def test_choices_compose_on_alternatives():
    """A plan's choice takes more on top: the matmul as loops, then lowered as generated loops,
    takes a setting; a stored node and a setting."""
    facts = '(MicroKernel 0) (Tunable "lanes" 16) (Setting "lanes" 0)'
    claim = '(= $v (Run 0 (With (With $k (MatmulAs (Loops))) (Tune "lanes" 16))))'
    assert proves(ALL, facts, claim)
    # without the rule that a loops plan is generated, no setting reaches it
    no_loops_generated = "\n".join(RULES[1:])
    assert not proves(no_loops_generated, facts, claim)
    facts = '(Generated $k) (Recomputed 0 3) (Tunable "lanes" 16) (Setting "lanes" 0)'
    assert proves(ALL, facts, '(= $v (Run 0 (With (With $k (Store 3)) (Tune "lanes" 16))))')


def test_a_setting_takes_one_value_per_plan():
    facts = '(Generated $k) (Tunable "lanes" 16) (Tunable "lanes" 256) (Setting "lanes" 0)'
    one = '(= $v (Run 0 (With $k (Tune "lanes" 256))))'
    both = '(= $v (Run 0 (With (With $k (Tune "lanes" 16)) (Tune "lanes" 256))))'
    assert proves(ALL, facts, one) and not proves(ALL, facts, both)


def test_choices_are_added_in_one_order_and_bounded_by_left():
    facts = "(Recomputed 0 3) (Recomputed 0 4)"
    ascending = "(= $v (Run 0 (With (With $k (Store 3)) (Store 4))))"
    descending = "(= $v (Run 0 (With (With $k (Store 4)) (Store 3))))"
    assert proves(ALL, facts, ascending) and not proves(ALL, facts, descending)
    one_left = PLAN.replace("(Left $k) 2", "(Left $k) 1")
    assert not proves(ALL, facts, ascending, one_left)
    assert proves(ALL, facts, "(= $v (Run 0 (With $k (Store 4))))", one_left)


def test_a_rewrite_takes_nothing_on_top():
    facts = "(Recomputed 0 3) (union $v (Run 0 (With $k (Rewrite 0))))"
    assert not proves(ALL, facts, "(= $v (Run 0 (With (With $k (Rewrite 0)) (Store 3))))")


def rulesets():
    """The registered rule sets that run in the schedule e-graph."""
    return [(r.name, r.program) for r in lm.plugins.rulesets()
            if schedule.is_schedule_rules(r.program)]


def test_rule_sets_split_between_the_two_e_graphs():
    assert [name for name, _ in rulesets()] == ["schedule"]
    assert not schedule.is_schedule_rules("(rewrite (Add a b) (Add b a) :ruleset mine)")


def tune(name, value):
    return schedule.Choice("tune", setting=(name, value))


def test_candidates_come_from_the_backend_in_cost_order():
    """What the e-graph yields for a generated kernel: the default plan first, then single
    choices (stores, inlines, rewrites, then every setting of the backend's schedule space in
    that space's order), then pairs, then triples, each set of choices once."""
    space = lm.backend("cpu").schedule_space
    assert space
    store = [schedule.Choice("store", p) for p in (4, 2)]
    inline = schedule.Choice("inline", 7)
    rewrites = [schedule.Choice("rewrite", k) for k in range(2)]
    settings = [tune(n, v) for n, vs in space.items() for v in vs]
    got = schedule.choices(schedule.Facts(False, (4, 2), 2, space, (7,)), rulesets(), Limits())
    singles = [(c,) for c in [*store, inline, *rewrites, *settings]]
    assert got[: 1 + len(singles)] == [(), *singles]
    rest = got[1 + len(singles):]
    assert [len(p) for p in rest] == sorted(len(p) for p in rest) and max(map(len, rest)) == 3
    assert len({frozenset(p) for p in got}) == len(got)
    assert (store[1], store[0]) in got and (store[0], inline, settings[0]) in got
    for plan in got:  # one value per setting, never on top of a rewrite
        names = [c.setting[0] for c in plan if c.kind == "tune"]
        assert len(names) == len(set(names))
        assert len(plan) == 1 or not any(c.kind == "rewrite" for c in plan)


def test_matmul_candidates_take_settings_only_as_loops():
    space = lm.backend("cpu").schedule_space
    got = schedule.choices(schedule.Facts(True, (1,), 0, space), rulesets(), Limits())
    loops, store = schedule.Choice("loops"), schedule.Choice("store", 1)
    assert got[:4] == [(), (loops,), (store,), (loops, store)]
    name, values = next(iter(space.items()))
    assert (loops, tune(name, values[0])) in got
    assert all(loops in p for p in got if any(c.kind == "tune" for c in p))


def test_the_depth_bounds_the_plans():
    space = lm.backend("cpu").schedule_space
    for depth in (1, 2):
        got = schedule.choices(schedule.Facts(False, (4, 2), 0, space, depth=depth),
                               rulesets(), Limits())
        assert max(len(p) for p in got) == depth


def test_without_the_schedule_rules_only_the_default_and_rewrites_remain():
    got = schedule.choices(schedule.Facts(True, (1,), 1, {"lanes": (8,)}), [], Limits())
    assert got == [(), (schedule.Choice("rewrite", 0),)]


def test_a_setting_name_never_reaches_the_program_as_text():
    with pytest.raises(ValueError, match="not an identifier"):
        schedule.program(schedule.Facts(False, space={'x") (evil': (1,)}), rulesets(), Limits())


def test_a_plugin_rule_set_adds_choices_from_its_own_conditions():
    """A rule set of another plugin, naming `Run`/`With`, runs in the schedule e-graph: here
    it offers the backend's settings to matmul micro-kernels too, and two stores at once."""
    mine = ("mine", "(rule ((= v (Run r k)) (= k (Plan r)) (MicroKernel r) (Tunable name value))"
                    "\n      ((union v (Run r (With k (Tune name value))))) :ruleset mine)")
    assert schedule.is_schedule_rules(mine[1])
    stores = ("stores", "(rule ((= v (Run r k)) (= k (Plan r)) (MicroKernel r))\n"
                        "      ((union v (Run r (With (With k (Store 9)) (Store 7)))))"
                        " :ruleset stores)")
    facts = schedule.Facts(True, (), 0, {"lanes": (16,)})
    loops = schedule.Choice("loops")
    assert schedule.choices(facts, [*rulesets(), mine, stores], Limits()) == [
        (), (loops,), (tune("lanes", 16),),
        (schedule.Choice("store", 7), schedule.Choice("store", 9)), (loops, tune("lanes", 16))]
