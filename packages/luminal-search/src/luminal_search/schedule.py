"""A region's kernel choices as an e-graph: the schedule search space in egglog.

A region is the term `(Plan r)` (its default plan). The rule set "schedule"
(`rules/schedule.egg`) adds the alternatives the backend honours to that e-class as
`(Sched r choice)` terms, from facts about the default plan and the backend's
`schedule_space`; rewrites found by the algebraic rule sets join the same e-class as
`(Sched r (Rewrite k))`. The candidates are the e-class's variants, extracted from the e-graph
and ordered by the constructors' costs (`COSTS`), the default plan first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .egraph import Limits, run_schedule

# the cost model of the extraction: the default plan first, then the choices that change a
# kernel's structure, then the region rewritten, then tunable settings
COSTS = {"Plan": 0, "MatmulAs": 1, "Store": 2, "Rewrite": 3, "Tune": 4}

EXTRA = 64

LANGUAGE = f"""\
(datatype Lowering (Loops))  ; the default plan is the micro-kernel
(datatype Choice
  (MatmulAs Lowering :cost {COSTS["MatmulAs"]})
  (Store i64 :cost {COSTS["Store"]})
  (Rewrite i64 :cost {COSTS["Rewrite"]})
  (Tune String i64 :cost {COSTS["Tune"]}))
(datatype Kernel
  (Plan i64 :cost {COSTS["Plan"]})
  (Sched i64 Choice :cost 0))
(relation MicroKernel (i64))
(relation Generated (i64))
(relation Recomputed (i64 i64))
(relation Tunable (String i64))"""


def is_schedule_rules(text: str) -> bool:
    """Whether a rule set rewrites kernel choices (it names `Plan` or `Sched`): it runs in the
    schedule e-graph, the others in the term e-graph."""
    return bool(re.search(r"\((Plan|Sched)\s", text))


@dataclass(frozen=True)
class Choice:
    """One extracted schedule choice: `kind` is "default", "loops", "store" (node `position`
    of the region), "rewrite" (rewrite number `position`) or "tune" (`setting`)."""

    kind: str
    position: int = 0
    setting: tuple[str, int] = ("", 0)


@dataclass(frozen=True)
class Facts:
    """What the schedule rules start from, for one region."""

    matmul: bool
    recomputed: Sequence[int] = ()  # positions in the region's nodes
    rewrites: int = 0  # rewrites the algebraic rule sets found
    space: dict[str, tuple[int, ...]] | None = None  # the backend's schedule_space


def program(facts: Facts, rulesets: Sequence[tuple[str, str]], limits: Limits) -> str:
    """The egglog program for one region: its facts, the rule sets, then every variant of
    its e-class extracted."""
    parts = [LANGUAGE]
    for name, text in rulesets:
        parts += [f"(ruleset {name})", text]
    parts += ["(let $k (Plan 0))",
              "(MicroKernel 0)" if facts.matmul else "(Generated 0)"]
    parts += [f"(Recomputed 0 {p})" for p in facts.recomputed]
    for name, values in (facts.space or {}).items():
        if not name.isidentifier():
            raise ValueError(f"schedule setting {name!r} is not an identifier")
        parts += [f'(Tunable "{name}" {int(v)})' for v in values]
    parts += [f"(union $k (Sched 0 (Rewrite {k})))" for k in range(facts.rewrites)]
    if rulesets:
        parts.append(run_schedule(rulesets, limits))
    parts.append(f"(extract $k {_bound(facts)})")
    return "\n".join(parts)


def _bound(facts: Facts) -> int:
    """How many variants to extract: every one the facts can give, and up to `EXTRA` more
    that other rule sets add from conditions of their own."""
    tunes = sum(len(v) for v in (facts.space or {}).values())
    return 2 + len(facts.recomputed) + facts.rewrites + tunes + EXTRA


def choices(facts: Facts, rulesets: Sequence[tuple[str, str]],
            limits: Limits | None = None) -> list[Choice]:
    """The region's kernel choices, extracted from its e-graph, in cost order (ties in the
    order of the facts: recomputed nodes, rewrites and settings as given; a choice another
    rule set made from no fact after them)."""
    from egglog.bindings import EGraph

    egraph = EGraph()
    out = egraph.run_program(*egraph.parse_program(
        program(facts, rulesets, limits or Limits())))[-1]
    found = [_decode(out.termdag, t) for t in out.terms]
    order = _ranks(facts)
    return sorted(set(found), key=lambda c: (COSTS[_CTOR[c.kind]], order.get(c, len(order)),
                                             c.position, c.setting))


_CTOR = {"default": "Plan", "loops": "MatmulAs", "store": "Store", "rewrite": "Rewrite",
         "tune": "Tune"}


def _ranks(facts: Facts) -> dict[Choice, int]:
    ranks = {Choice("default"): 0, Choice("loops"): 0}
    ranks |= {Choice("store", p): k for k, p in enumerate(facts.recomputed)}
    ranks |= {Choice("rewrite", k): k for k in range(facts.rewrites)}
    settings = [(n, v) for n, vs in (facts.space or {}).items() for v in vs]
    ranks |= {Choice("tune", setting=s): k for k, s in enumerate(settings)}
    return ranks


def _decode(termdag, tid: int) -> Choice:
    app = termdag.get(tid)
    if app.name == "Plan":
        return Choice("default")
    choice = termdag.get(app.args[1])
    lits = [termdag.get(a).value.value for a in choice.args
            if type(termdag.get(a)).__name__ == "TermLit"]
    if choice.name == "MatmulAs" and termdag.get(choice.args[0]).name == "Loops":
        return Choice("loops")
    if choice.name == "Store":
        return Choice("store", int(lits[0]))
    if choice.name == "Rewrite":
        return Choice("rewrite", int(lits[0]))
    if choice.name == "Tune":
        return Choice("tune", setting=(str(lits[0]), int(lits[1])))
    raise ValueError(f"unknown schedule choice {choice.name} extracted")
