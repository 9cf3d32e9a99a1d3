"""Inlining across the default plan's kernels: groups of regions in which a cheap node the
default stores may be recomputed by its readers instead (`Schedule.inline`).

The default plan stores an elementwise node when it has several readers or is read through a
broadcast (`luminal_codegen.lower`: a heuristic with fixed limits). Whether recomputing it pays
depends on the machine, so search asks: for each region, the producer regions only it reads
(transitively, nearest first: `fusion.closure`) are merged with it into a group, up to the last
producer that is cheap elementwise work; the group is searched like any region, with those
producers as `Cheap` facts of its schedule e-graph (rule in `rules/schedule.egg`), and replaces
the regions it absorbs only when one of its plans beats the default plan. Inputs, outputs and
matmul operands are always stored (the lowering ignores `inline` on them too), so they are never
proposed.
"""

from __future__ import annotations

from luminal import ops
from luminal.graph import Graph

from .fusion import closure
from .regions import Region, signature

MAX_GROUP = 4  # regions one group may absorb
MAX_NODES = 200
# arithmetic a producer region may cost and still be proposed for recomputation (an add or
# a multiply 1, a square root or reciprocal 2, a transcendental 8; no reductions)
CHEAP_LIMIT = 24
MAX_READERS = 4
_COST = {ops.Log2: 8, ops.Exp2: 8, ops.Sin: 8, ops.Sqrt: 2, ops.Recip: 2}


def find_groups(graph: Graph, regions: list[Region]) -> list[Region]:
    """Candidate groups of `regions` (disjoint or not; largest first): each a region with the
    producer regions only it reads, up to the last cheap one, and `cheap` naming those."""
    by_root = {r.root: r for r in regions}
    users = graph.consumers()
    outputs = graph.outputs()
    operands = {n for r in regions if r.matmul for n in r.inputs}
    order = {n.id: k for k, n in enumerate(graph.toposort())}
    groups = []
    for region in regions:
        if region.quantized or region.fused or region.matmul:
            continue
        members = closure(region, by_root, users, outputs)[:MAX_GROUP]
        cheap = [k for k, m in enumerate(members)
                 if k and _cheap(graph, m, users, operands)]
        if not cheap:
            continue
        members = members[: cheap[-1] + 1]
        nodes = sorted(set().union(*(m.nodes for m in members)), key=order.__getitem__)
        if len(nodes) > MAX_NODES:
            continue
        interior = set().union(*(set(m.nodes) - set(m.inputs) for m in members))
        group = Region(region.root, nodes, [n for n in nodes if n not in interior],
                       matmul=False, recomputed=[n for m in members for n in m.recomputed],
                       group=len(members),
                       cheap=[nodes.index(members[k].root) for k in cheap])
        group.signature = signature(graph, group)
        groups.append(group)
    return sorted(groups, key=lambda g: -len(g.nodes))


def _cheap(graph: Graph, region: Region, users: dict[int, list[int]],
           operands: set[int]) -> bool:
    """Whether the region is elementwise work cheap enough to recompute in its readers."""
    if (region.matmul or region.fused or region.quantized or region.root in operands
            or len(users[region.root]) > MAX_READERS):
        return False
    cost = 0
    for n in region.nodes:
        if n in region.inputs:
            continue
        op = graph.nodes[n].op
        if isinstance(op, (ops.SumReduce, ops.MaxReduce)):
            return False
        if not isinstance(op, (ops.Constant, ops.Iota)):
            cost += _COST.get(type(op), 1)
    return cost <= CHEAP_LIMIT
