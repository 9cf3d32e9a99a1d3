"""Regions: the kernels the default lowering would make, the unit that search explores.

A region is a stored node (its root) with every node the lowering inlines into its kernel; it
reads the stored nodes it depends on (its inputs). Regions with the same structure (the 30
layers of a transformer) share a signature and are searched once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from luminal import ops
from luminal.graph import Edge, Graph
from luminal.shape import View
from luminal_codegen.lower import Lowering
from luminal_codegen.patterns import QuantWeight

from .terms import NAME_OF


@dataclass
class Region:
    """One kernel of the default plan: `nodes` in post-order (root last)."""

    root: int
    nodes: list[int]
    inputs: list[int]  # stored nodes the region reads, in first-read order
    matmul: bool  # the default plan makes it a matmul micro-kernel
    recomputed: list[int] = field(default_factory=list)  # inlined nodes read more than once
    signature: str = ""
    # the default plan is the backend's quantized matmul call (its weight a dequantized input
    # of packed blocks): it is neither fused nor inlined, and takes the call's settings
    quantized: bool = False
    fused: int = 0  # a fusion of this many regions of the default plan (`fusion.py`)
    # a group of this many regions of the default plan whose stored cheap producers may be
    # inlined (`inlining.py`): positions in `nodes` of those producers
    group: int = 0
    cheap: list[int] = field(default_factory=list)

    def label(self, graph: Graph) -> str:
        names = [graph.nodes[n].op.name for n in self.nodes if n not in self.inputs]
        kind = (f"fusion of {self.fused}" if self.fused else f"group of {self.group}"
                if self.group else "quantized matmul" if self.quantized else "matmul"
                if self.matmul else "kernel")
        head = ",".join(dict.fromkeys(names))
        return f"{kind}[{head[:60]}]"


def find_regions(graph: Graph, quant_kernels: Collection[str] = frozenset()) -> list[Region]:
    """The regions of `graph` under the default lowering heuristics, in topological order:
    one per kernel call of the default program (nodes a pattern absorbs, like the dequantizing
    ops of a quantized matmul's weight, make no region). `quant_kernels`: the `luminal.quant`
    formats the backend multiplies in packed form (its `quant_kernels`), as it lowers."""
    lowering = Lowering(graph, quant_kernels=quant_kernels)
    stored = lowering.materialised
    built = {b.node for b in lowering.program().buffers if b.role != "input"}
    dequantized: dict[int, list[int]] = {}  # packed input -> the nodes tagged as its matrix
    for n in graph.nodes.values():
        if n.dequantized is not None:
            dequantized.setdefault(n.dequantized.raw, []).append(n.id)
    regions = []
    for node in lowering.order:
        if node.id not in built:
            continue
        match = lowering.matmuls.get(node.id)
        quantized = match is not None and isinstance(match.b, QuantWeight)
        # the call reads the packed input itself: the dequantization (stored or not by the
        # heuristic, dead either way) belongs to the region, down to that input
        absorbed = (_dequantization(graph, dequantized[match.b.node], match.b.node)
                    if quantized else set())
        region = _region(graph, node.id, stored - absorbed, match is not None)
        region.quantized = quantized
        regions.append(region)
    return regions


def _dequantization(graph: Graph, tagged: list[int], raw: int) -> set[int]:
    """The nodes that dequantize the packed input `raw` into the `tagged` matrices."""
    out: set[int] = set()
    stack = list(tagged)
    while stack:
        nid = stack.pop()
        if nid not in out and nid != raw:
            out.add(nid)
            stack.extend(e.src for e in graph.nodes[nid].inputs)
    return out


def _region(graph: Graph, root: int, stored: set[int], matmul: bool) -> Region:
    nodes: list[int] = []
    inputs: list[int] = []
    reads: dict[int, int] = {}
    seen: set[int] = set()
    stack = [(root, False)]
    while stack:
        nid, ready = stack.pop()
        if ready:
            nodes.append(nid)
            continue
        reads[nid] = reads.get(nid, 0) + 1
        if nid in seen:
            continue
        seen.add(nid)
        if nid != root and nid in stored:
            inputs.append(nid)
            nodes.append(nid)
            continue
        stack.append((nid, True))
        stack.extend((e.src, False) for e in reversed(graph.nodes[nid].inputs))
    recomputed = [n for n in nodes if reads[n] > 1 and n not in inputs and n != root
                  and not isinstance(graph.nodes[n].op, (ops.Constant, ops.Iota))]
    region = Region(root, nodes, inputs, matmul, recomputed)
    region.signature = signature(graph, region)
    return region


def signature(graph: Graph, region: Region) -> str:
    """A digest of the region's structure (ops, dtypes, shapes, views; inputs by position)."""
    local = {n: k for k, n in enumerate(region.nodes)}
    parts = [f"matmul={region.matmul}"]
    for n in region.nodes:
        node = graph.nodes[n]
        if n in region.inputs:
            parts.append(f"in {node.dtype.name} {node.shape!r}")
            continue
        edges = " ".join(f"{local[e.src]}@{e.view!r}" for e in node.inputs)
        parts.append(f"{node.op!r} {node.dtype.name} {node.shape!r} <- {edges}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def packed_inputs(graph: Graph, region: Region) -> set[int]:
    """The region's inputs that hold a quantized matrix's packed blocks (what a dequantized
    weight of the region reads)."""
    tags = (graph.nodes[n].dequantized for n in region.nodes)
    return {t.raw for t in tags if t is not None} & set(region.inputs)


def leaves(graph: Graph, region: Region) -> list[int]:
    """The region's nodes that the term language treats as opaque leaves, in region order:
    its inputs, constants, and ops the language does not model (whatever they read stays
    inside them)."""
    return [n for n in region.nodes
            if n in region.inputs or type(graph.nodes[n].op) not in NAME_OF]


def views_and_extents(graph: Graph, region: Region, leaf_ids: list[int]) -> tuple[list[View], list]:
    """The distinct views the region reads through, and the distinct extents it reduces."""
    views: dict[View, None] = {}
    extents: dict = {}
    opaque = set(leaf_ids)
    for n in region.nodes:
        if n in opaque or n in region.inputs:
            continue
        node = graph.nodes[n]
        for e in node.inputs:
            views.setdefault(e.view)
        if isinstance(node.op, (ops.SumReduce, ops.MaxReduce)):
            extents.setdefault(node.inputs[0].view.shape[node.op.axis])
    return list(views), list(extents)


def subgraph(graph: Graph, region: Region) -> tuple[Graph, dict[int, int]]:
    """The region alone: its inputs become graph inputs, its root is retrieved. Returns the new
    graph and the map from the region's node ids to the new graph's. A dequantized weight
    keeps its tag (on the region's copy of its packed input), so the region alone lowers to
    the same quantized matmul."""
    sub = Graph()
    ids: dict[int, int] = {}
    for k, n in enumerate(region.inputs):
        node = graph.nodes[n]
        ids[n] = sub.tensor(node.shape, name=f"in{k}", dtype=node.dtype).id
    for n in region.nodes:
        if n in ids:
            continue
        node = graph.nodes[n]
        edges = [Edge(ids[e.src], e.view) for e in node.inputs]
        ids[n] = sub.add_node(node.op, edges, node.shape, node.dtype).id
        tag = node.dequantized
        if tag is not None and tag.raw in ids:
            sub.nodes[ids[n]].dequantized = replace(tag, raw=ids[tag.raw])
    sub.retrieved.add(ids[region.root])
    return sub, ids
