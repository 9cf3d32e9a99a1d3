"""The chosen plan as JSON (what the cache stores) and back.

A plan holds, per distinct region, the search result (for `explain`), and for every region
instance whose choice is not the default plan, where it sits in the graph: node positions in
`Graph.toposort()` order, so a warm compile rebuilds it without lowering the graph again.
"""

from __future__ import annotations

from typing import Any

from luminal.graph import Graph

from . import terms
from .candidates import Candidate, RegionResult, WholeGraph
from .regions import Region, leaves, views_and_extents


def to_json(results: dict[str, RegionResult], regions: list[Region], whole: WholeGraph,
            order: list[int]) -> dict[str, Any]:
    position = {n: k for k, n in enumerate(order)}
    instances = [{"signature": r.signature, "root": position[r.root], "matmul": r.matmul,
                  "quantized": r.quantized,
                  "fused": r.fused, "group": r.group, "cheap": r.cheap,
                  "nodes": [position[n] for n in r.nodes],
                  "inputs": [position[n] for n in r.inputs]}
                 for r in regions if results[r.signature].choice.kind != "default"]
    return {"regions": {sig: r.as_json() for sig, r in results.items()},
            "instances": instances, "whole": whole.as_json()}


def from_json(graph: Graph, plan: dict[str, Any], order: list[int], space: dict[str, Any],
              calls: frozenset[str] = frozenset()
              ) -> tuple[dict[str, RegionResult], list[Region], WholeGraph]:
    """The plan for `graph` (`space`: the backend's `schedule_space`, `calls`: those of its
    settings the quantized matmul call takes); raises ValueError (or KeyError, TypeError,
    IndexError) when it does not fit the graph."""
    results = {str(sig): RegionResult.from_json(r) for sig, r in plan["regions"].items()}
    regions = []
    for inst in plan["instances"]:
        at = [order[p] for p in inst["nodes"]]
        region = Region(order[inst["root"]], at, [order[p] for p in inst["inputs"]],
                        bool(inst["matmul"]), signature=str(inst["signature"]),
                        fused=int(inst["fused"]), group=int(inst["group"]),
                        cheap=[int(p) for p in inst["cheap"]],
                        quantized=bool(inst["quantized"]))
        if (region.nodes[-1] != region.root or not set(region.inputs) <= set(region.nodes)
                or not all(0 <= p < len(region.nodes) for p in region.cheap)):
            raise ValueError("region instance does not fit the graph")
        check_candidate(graph, region, results[region.signature].choice, space, calls)
        regions.append(region)
    return results, regions, WholeGraph.from_json(plan["whole"])


def check_candidate(graph: Graph, region: Region, cand: Candidate,
                    space: dict[str, Any], calls: frozenset[str] = frozenset()) -> None:
    if cand.kind not in ("default", "schedule", "rewrite", "fuse"):
        raise ValueError(f"unknown candidate kind {cand.kind!r}")
    if any(value not in space.get(name, ()) for name, value in cand.tuning):
        raise ValueError(f"tuning {cand.tuning} outside the backend's schedule space")
    if (cand.kind == "fuse") != bool(region.fused):
        raise ValueError("a fused kernel chosen for a region that is not a fusion, or back")
    if cand.loops and not region.matmul:
        raise ValueError("loops on a region that is not a matmul")
    if any(name in calls for name, _ in cand.tuning) and (not region.quantized or cand.loops):
        raise ValueError(f"tuning {cand.tuning} of the quantized matmul call on a region "
                         f"that is not one")
    for p in cand.store:
        if not 0 <= p < len(region.nodes):
            raise ValueError(f"store position {p} outside the region")
    if not set(cand.inline) <= set(region.cheap):
        raise ValueError(f"inline positions {cand.inline} are not the region's cheap nodes")
    if cand.kind == "rewrite":
        leaf_ids = leaves(graph, region)
        views, _ = views_and_extents(graph, region, leaf_ids)
        _check_steps(cand.steps, len(leaf_ids), len(views))


def _check_steps(steps: Any, n_leaves: int, n_views: int) -> None:
    if not isinstance(steps, list) or not steps:
        raise ValueError("empty rewrite")
    names = {**terms.UNARY, **terms.BINARY, **terms.REDUCE}
    for k, step in enumerate(steps):
        kind = step[0]
        if kind == "leaf" and 0 <= step[1] < n_leaves:
            continue
        if kind == "read" and 0 <= step[1] < k and 0 <= step[2] < n_views:
            continue
        if kind == "op" and step[1] in names and all(0 <= a < k for a in step[3]) and len(
                step[3]) == (2 if step[1] in terms.BINARY else 1):
            continue
        raise ValueError(f"malformed rewrite step {step!r}")
