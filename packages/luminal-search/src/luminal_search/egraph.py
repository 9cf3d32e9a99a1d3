"""Saturating a region's e-graph under limits and extracting candidate rewrites from it.

Each cost profile is one extraction: the same rules and limits, different constructor costs,
so the candidates differ where the profiles disagree (fewer transcendentals, fewer reductions,
fewer ops). egglog is driven through its text program API, which egglog 13.2 (Python 3.11)
and 14 (Python 3.12+) share.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from luminal.graph import Graph

from . import terms
from .regions import Region, leaves, views_and_extents

TRANSCENDENTAL = ("Log2", "Exp2", "Sin")

# name -> cost of each constructor
PROFILES: dict[str, dict[str, int]] = {
    "ops": {},
    "flops": {"Log2": 8, "Exp2": 8, "Sin": 8, "Sqrt": 4, "Recip": 4, "Sum": 16, "Max": 16},
    "transcendentals": {"Log2": 100, "Exp2": 100, "Sin": 100, "Sqrt": 20, "Recip": 20,
                        "Sum": 40, "Max": 40},
}


@dataclass(frozen=True)
class Limits:
    """Bounds on saturation: rounds of every rule set, matches per rule before back-off,
    regions larger than `max_nodes` are not rewritten."""

    rounds: int = 6
    match_limit: int = 2000
    max_nodes: int = 300


@dataclass
class Rewrite:
    """An extracted term for a region: its profile, its cost under that profile, its steps."""

    profile: str
    cost: int
    steps: terms.Steps


@dataclass
class Saturation:
    rewrites: list[Rewrite]
    seconds: float


def program(encoded: terms.Encoded, rulesets: Sequence[tuple[str, str]],
            costs: dict[str, int], limits: Limits) -> str:
    """The whole egglog program for one region and one cost profile."""
    parts = [terms.language(lambda name: costs.get(name, 1))]
    for name, text in rulesets:
        parts += [f"(ruleset {name})", text]
    parts.append(encoded.text)
    if rulesets:
        parts.append(run_schedule(rulesets, limits))
    parts.append(f"(extract {encoded.root})")
    return "\n".join(parts)


def holds(program: str) -> bool:
    """Whether an egglog program runs to its end: every `check` in it holds (how a rule's
    test asks egglog to prove its two sides equal)."""
    from egglog.bindings import EggSmolError, EGraph

    egraph = EGraph()
    try:
        egraph.run_program(*egraph.parse_program(program))
    except EggSmolError:
        return False
    return True


def run_schedule(rulesets: Sequence[tuple[str, str]], limits: Limits) -> str:
    """Every rule set in turn, `limits.rounds` times, under egglog's back-off scheduler."""
    runs = " ".join(f"(run-with bo {name})" for name, _ in rulesets)
    return (f"(run-schedule (let-scheduler bo (back-off :match-limit {limits.match_limit})) "
            f"(repeat {limits.rounds} (seq {runs})))")


def saturate(graph: Graph, region: Region, rulesets: Sequence[tuple[str, str]],
             limits: Limits | None = None, profiles: dict[str, dict[str, int]] | None = None,
             ) -> Saturation:
    """Rewrites of `region` found by `rulesets`, one per cost profile, duplicates dropped
    (the unchanged region is not among them)."""
    from egglog.bindings import EGraph

    t0 = time.perf_counter()
    limits = limits or Limits()
    modelled = [n for n in region.nodes if n not in region.inputs]
    if len(modelled) > limits.max_nodes or not rulesets:
        return Saturation([], 0.0)
    leaf_ids = leaves(graph, region)
    if region.root in leaf_ids:
        return Saturation([], 0.0)
    views, extents = views_and_extents(graph, region, leaf_ids)
    encoded = terms.encode(graph, region.root, leaf_ids, views, extents)
    identity = None
    found: dict[str, Rewrite] = {}
    # every rule set together, then each alone: a candidate from one set is not lost when
    # another set's rewrite on top of it fails the check
    combos = [list(rulesets)] + ([[r] for r in rulesets] if len(rulesets) > 1 else [])
    for combo in combos:
        for name, costs in (profiles or PROFILES).items():
            egraph = EGraph()
            out = egraph.run_program(*egraph.parse_program(
                program(encoded, combo, costs, limits)))[-1]
            steps = terms.steps_from_termdag(out.termdag, out.term)
            if identity is None:
                identity = _identity_steps(encoded, costs, limits)
            key = json.dumps(steps)
            if key != identity and key not in found:
                found[key] = Rewrite(f"{'+'.join(r for r, _ in combo)}/{name}", out.cost, steps)
    return Saturation(sorted(found.values(), key=lambda r: r.cost), time.perf_counter() - t0)


def _identity_steps(encoded: terms.Encoded, costs: dict[str, int], limits: Limits) -> str:
    """The region itself as steps (extracted with no rules run), to recognise no-op rewrites."""
    from egglog.bindings import EGraph

    egraph = EGraph()
    out = egraph.run_program(*egraph.parse_program(program(encoded, (), costs, limits)))[-1]
    return json.dumps(terms.steps_from_termdag(out.termdag, out.term))
