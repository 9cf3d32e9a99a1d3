"""A region's kernel choices as an e-graph: the schedule search space in egglog.

A plan is a `Kernel` term: `(Plan r)`, the default plan of region r, or `(With k choice)`,
plan k with one more choice on top, so choices compose (store a node *and* lanes=16; a matmul
as loops *and* its rows split across threads). `(Run r k)` is the region's value computed by
plan k; every `Run` of a region is one e-class. The rule set "schedule" (`rules/schedule.egg`)
adds the plans the backend honours from facts about the default plan and the backend's
`schedule_space`, under bounds: at most `Facts.depth` choices per plan, built in one canonical
order (each set of choices once, one value per setting). Rewrites found by the algebraic rule
sets join as `(With (Plan r) (Rewrite k))` and take nothing on top (they replace the region's
nodes). The candidates are the e-class's variants, extracted from the e-graph and ordered by
the constructors' costs (`COSTS`): the default plan first, then single choices, then pairs...
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .egraph import Limits, run_schedule

# the cost model of the extraction: the default plan first, then the choices that change a
# kernel's structure, then the region rewritten, then tunable settings; a plan costs the sum of
# its choices
COSTS = {"Plan": 0, "MatmulAs": 1, "Store": 2, "Inline": 2, "Rewrite": 3, "Tune": 4}

EXTRA = 64
DEPTH = 3  # choices one plan may compose
MAX_PLANS = 256  # plans extracted per region at most (the cap on combinations)

LANGUAGE = f"""\
(datatype Lowering (Loops))  ; the default plan is the micro-kernel
(datatype Choice
  (MatmulAs Lowering :cost {COSTS["MatmulAs"]})
  (Store i64 :cost {COSTS["Store"]})
  (Inline i64 :cost {COSTS["Inline"]})
  (Rewrite i64 :cost {COSTS["Rewrite"]})
  (Tune String i64 :cost {COSTS["Tune"]}))
(datatype Kernel
  (Plan i64 :cost {COSTS["Plan"]})
  (With Kernel Choice :cost 0))
(datatype Value (Run i64 Kernel :cost 0))
(function Last (Kernel) i64 :merge (min old new))
(function Left (Kernel) i64 :merge (min old new))
(relation MicroKernel (i64))
(relation Generated (Kernel))
(relation Recomputed (i64 i64))
(relation Cheap (i64 i64))
(relation Tunable (String i64))
(relation Setting (String i64))
(relation Library (Kernel))
(relation CallSetting (String i64))"""


def is_schedule_rules(text: str) -> bool:
    """Whether a rule set rewrites kernel choices (it names `Plan`, `With` or `Run`): it runs
    in the schedule e-graph, the others in the term e-graph."""
    return bool(re.search(r"\((Plan|With|Run)\s", text))


@dataclass(frozen=True)
class Choice:
    """One choice of a plan: `kind` is "loops", "store" or "inline" (node `position` of the
    region), "rewrite" (rewrite number `position`) or "tune" (`setting`). A plan is a tuple of
    choices; the default plan is `()`."""

    kind: str
    position: int = 0
    setting: tuple[str, int] = ("", 0)


Plan = tuple[Choice, ...]


@dataclass(frozen=True)
class Facts:
    """What the schedule rules start from, for one region."""

    matmul: bool  # the default plan is a matmul micro-kernel (else generated loops)
    recomputed: Sequence[int] = ()  # positions in the region's nodes
    rewrites: int = 0  # rewrites the algebraic rule sets found
    space: dict[str, tuple[int, ...]] | None = None  # the backend's schedule_space
    cheap: Sequence[int] = ()  # positions of stored nodes the region may inline
    depth: int = DEPTH
    # the default plan is the backend's quantized matmul call, which takes the settings of
    # `space` named in `calls` (generated kernels take the others)
    library: bool = False
    calls: frozenset[str] = frozenset()
    loops: bool = True  # the micro-kernel may be lowered as generated loops instead


def program(facts: Facts, rulesets: Sequence[tuple[str, str]], limits: Limits) -> str:
    """The egglog program for one region: its facts, the rule sets, then every variant of
    its e-class extracted."""
    parts = [LANGUAGE]
    for name, text in rulesets:
        parts += [f"(ruleset {name})", text]
    parts += ["(let $k (Plan 0))", "(let $v (Run 0 $k))",
              f"(set (Last $k) -1) (set (Left $k) {int(facts.depth)})",
              "" if facts.matmul else "(Generated $k)"]
    if facts.matmul and facts.loops:
        parts.append("(MicroKernel 0)")
    if facts.library:
        parts.append("(Library $k)")
    parts += [f"(Recomputed 0 {int(p)})" for p in facts.recomputed]
    parts += [f"(Cheap 0 {int(p)})" for p in facts.cheap]
    for rank, (name, values) in enumerate((facts.space or {}).items()):
        if not name.isidentifier():
            raise ValueError(f"schedule setting {name!r} is not an identifier")
        parts.append(f'({"CallSetting" if name in facts.calls else "Setting"} "{name}" {rank})')
        parts += [f'(Tunable "{name}" {int(v)})' for v in values]
    parts += [f"(union $v (Run 0 (With $k (Rewrite {k}))))" for k in range(facts.rewrites)]
    if rulesets:
        parts.append(run_schedule(rulesets, limits))
    parts.append(f"(extract $v {_bound(facts)})")
    return "\n".join(parts)


def _bound(facts: Facts) -> int:
    """How many variants to extract: every single choice the facts can give and up to `EXTRA`
    more, at least `MAX_PLANS` in all (composed plans), never more."""
    tunes = sum(len(v) for v in (facts.space or {}).values())
    singles = 2 + len(facts.recomputed) + len(facts.cheap) + facts.rewrites + tunes
    return max(singles + EXTRA, MAX_PLANS)


def choices(facts: Facts, rulesets: Sequence[tuple[str, str]],
            limits: Limits | None = None) -> list[Plan]:
    """The region's plans, extracted from its e-graph, in cost order: the default plan `()`
    first, then by number of choices, then by cost, ties in the order of the facts (loops,
    recomputed nodes, cheap nodes, rewrites and settings as given; a choice another rule set
    made from no fact after them)."""
    from egglog.bindings import EGraph

    egraph = EGraph()
    out = egraph.run_program(*egraph.parse_program(
        program(facts, rulesets, limits or Limits())))[-1]
    found = {_decode(out.termdag, t) for t in out.terms}
    order = _ranks(facts)

    def key(plan: Plan):
        return (len(plan), sum(COSTS[_CTOR[c.kind]] for c in plan),
                [(COSTS[_CTOR[c.kind]], list(_CTOR).index(c.kind), order.get(c, len(order)),
                  c.position, c.setting) for c in plan])
    return sorted(found, key=key)


_CTOR = {"loops": "MatmulAs", "store": "Store", "inline": "Inline", "rewrite": "Rewrite",
         "tune": "Tune"}


def _ranks(facts: Facts) -> dict[Choice, int]:
    ranks = {Choice("loops"): 0}
    ranks |= {Choice("store", p): k for k, p in enumerate(facts.recomputed)}
    ranks |= {Choice("inline", p): k for k, p in enumerate(facts.cheap)}
    ranks |= {Choice("rewrite", k): k for k in range(facts.rewrites)}
    settings = [(n, v) for n, vs in (facts.space or {}).items() for v in vs]
    ranks |= {Choice("tune", setting=s): k for k, s in enumerate(settings)}
    return ranks


def _decode(termdag, tid: int) -> Plan:
    """The choices of an extracted `(Run r k)`."""
    plan: list[Choice] = []
    app = termdag.get(termdag.get(tid).args[1])
    while app.name == "With":
        plan.append(_decode_choice(termdag, termdag.get(app.args[1])))
        app = termdag.get(app.args[0])
    if app.name != "Plan":
        raise ValueError(f"unknown schedule plan {app.name} extracted")
    # a plan is a set of choices: one canonical order, whatever order a rule set added them in
    return tuple(sorted(plan, key=lambda c: (list(_CTOR).index(c.kind), c.position,
                                             c.setting)))


def _decode_choice(termdag, choice) -> Choice:
    lits = [termdag.get(a).value.value for a in choice.args
            if type(termdag.get(a)).__name__ == "TermLit"]
    if choice.name == "MatmulAs" and termdag.get(choice.args[0]).name == "Loops":
        return Choice("loops")
    if choice.name in ("Store", "Inline", "Rewrite"):
        return Choice(choice.name.lower(), int(lits[0]))
    if choice.name == "Tune":
        return Choice("tune", setting=(str(lits[0]), int(lits[1])))
    raise ValueError(f"unknown schedule choice {choice.name} extracted")
