"""Fusions across the default plan's kernels, derived in a kernel-level e-graph.

The default plan cuts attention into seven kernels (the scores' matmul, the mask, the max, the
exponentials, the sum, the normalisation, the values' matmul) and stores a (queries x keys)
matrix between them. Search tries the other answer to "where does fusion stop":

1. **Fused regions.** Starting from the last region of the plan, a region absorbs the producer
   regions that only it reads (transitively): their results become values computed inside one
   kernel instead of buffers.
2. **One kernel, everything inlined.** The fused region is lowered as a single kernel with
   every interior node inlined and its matmuls as loops: a correct program, usually a
   hopeless one (the max of a softmax recomputed for every key).
3. **The e-graph** (`kterms`, rule set `online.egg`) rewrites that kernel's value tree with
   generic identities: factors leave sums they do not depend on, and a sum of
   `exp2((x - max x)*c) * b` divided by the sum of the same weights is a one-pass softmax
   (`ir.SoftmaxSum`). Nothing in it knows about attention; applied to attention's primitives
   it yields a streaming online-softmax kernel that never stores the score matrix.
4. **Kept when it pays.** The extracted kernel must be cheaper in the e-graph's cost than the
   inlined one and, in an estimate of the work its loops do, at most `WORK_MARGIN` times the
   work of the default plan's kernels for the same region; search then checks it against the
   reference and times it against the default plan like any other candidate.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib.resources import files

from luminal import ops
from luminal.graph import Graph
from luminal.symbolic import Expr
from luminal_codegen import Kernel, KernelLike, Matmul, Schedule, lower
from luminal_codegen.ir import Reduce, SoftmaxSum, Value, children
from luminal_codegen.lower import Lowering

from . import kterms
from .egraph import Limits
from .regions import Region, signature, subgraph

MAX_MEMBERS = 12  # regions one fusion may absorb
MAX_NODES = 300
WORK_MARGIN = 2.0


def rules() -> str:
    return files("luminal_search").joinpath("rules/online.egg").read_text()


def find_fusions(graph: Graph, regions: list[Region]) -> list[Region]:
    """Candidate fused regions of `graph`: for each region, it with the fewest of the producer
    regions only it reads (`closure`, nearest first) that hold the most passes to merge
    (`_passes`), when there are such; largest first. They
    overlap (attention inside an attention block): search keeps the ones that pay, disjoint."""
    by_root = {r.root: r for r in regions}
    users = graph.consumers()
    outputs = graph.outputs()
    order = {n.id: k for k, n in enumerate(graph.toposort())}
    fusions = []
    for region in regions:
        if region.quantized:
            continue
        reach = closure(region, by_root, users, outputs)
        interior = set(region.nodes) - set(region.inputs)
        best, members = 0, []
        for count, member in enumerate(reach[1:], start=2):
            interior |= set(member.nodes) - set(member.inputs)
            if len(interior) > MAX_NODES:
                break
            merged = _passes(graph, interior)
            if merged > best:
                best, members = merged, reach[:count]
        if not members:
            continue
        interior = set().union(*(set(m.nodes) - set(m.inputs) for m in members))
        for member in reach[len(members):]:  # producers read once per element come along
            if set(users[member.root]) <= interior and not _broadcast(graph, member.root,
                                                                       interior):
                members.append(member)
                interior |= set(member.nodes) - set(member.inputs)
        if len(interior) > MAX_NODES:
            continue
        nodes = sorted(set().union(*(m.nodes for m in members)), key=order.__getitem__)
        inputs = [n for n in nodes if n not in interior]
        fused = Region(region.root, nodes, inputs, matmul=False, fused=len(members))
        fused.signature = signature(graph, fused)
        fusions.append(fused)
    return sorted(fusions, key=lambda f: -len(f.nodes))


def closure(region: Region, by_root: dict[int, Region], users: dict[int, list[int]],
             outputs: set[int]) -> list[Region]:
    """`region` and the producer regions only it (and they) read, transitively, nearest
    first, at most `MAX_MEMBERS` of them."""
    members = [region]
    interior = set(region.nodes) - set(region.inputs)
    k = 0
    while k < len(members):
        for n in members[k].inputs:
            p = by_root.get(n)
            if (len(members) == MAX_MEMBERS or p is None or p in members or n in outputs
                    or p.quantized or not set(users[n]) <= interior):
                continue
            members.append(p)
            interior |= set(p.nodes) - set(p.inputs)
        k += 1
    return members


def _broadcast(graph: Graph, node: int, readers: set[int]) -> bool:
    """Whether one of `readers` reads `node` through a broadcast (a zero stride on an axis
    longer than one): inlined there, it would be computed again for every element of it."""
    return any(e.src == node and any(st == 0 and not (sh.is_const and sh.value == 1)
                                     for st, sh in zip(e.view.strides, e.view.shape))
               for n in readers for e in graph.nodes[n].inputs)


def _passes(graph: Graph, interior: set[int]) -> int:
    """How many pairs of reductions inside read data both directly and through the other's
    result over the same extent (a softmax's sum reads the scores and their max): passes the
    rules can merge. A fused region with none only inlines producers, which the default plan
    weighs already, so it is not worth an e-graph run."""
    reductions = [n for n in interior
                  if isinstance(graph.nodes[n].op, (ops.SumReduce, ops.MaxReduce))]

    def extent(n: int) -> Expr:
        node = graph.nodes[n]
        return node.inputs[0].view.shape[node.op.axis]

    def reaches(target: int, start: int, avoid: int) -> bool:
        stack, seen = [start], {avoid}
        while stack:
            n = stack.pop()
            if n == target:
                return True
            if n in seen or n not in interior:
                continue
            seen.add(n)
            stack.extend(e.src for e in graph.nodes[n].inputs)
        return False

    return sum(first != second and extent(first) == extent(second)
               and reaches(first, second, -1)
               and reaches(graph.nodes[first].inputs[0].src, second, first)
               for first in reductions for second in reductions)


@dataclass
class Derived:
    """A fused region's kernel found in the e-graph: `params` are positions in the region's
    nodes (its root first); costs and work estimates are for `explain`."""

    kernel: Kernel
    params: tuple[int, ...]
    inlined_cost: int
    cost: int
    work: float
    default_work: float
    seconds: float


def derive(graph: Graph, region: Region, dims: Mapping[str, int],
           limits: Limits | None = None) -> Derived | None:
    """The kernel the e-graph extracts for the fused `region`, or None when it is not cheaper
    than inlining or would do much more work than the default plan (see the module doc)."""
    from egglog.bindings import EGraph

    t0 = time.perf_counter()
    limits = limits or Limits()
    sub, ids = subgraph(graph, region)
    interior = {ids[n] for n in region.nodes if n not in region.inputs} - {ids[region.root]}
    sums = {ids[n] for n in region.nodes if isinstance(graph.nodes[n].op, ops.SumReduce)}
    lowering = Lowering(sub, Schedule(inline=frozenset(interior), loop_matmuls=frozenset(sums)))
    kernel, params = lowering.build_kernel(sub.nodes[ids[region.root]])
    if not isinstance(kernel, Kernel) or len(kernel.params) != len(params):
        return None
    encoded = kterms.encode(kernel.out.value)
    if encoded is None:
        return None
    base = [kterms.LANGUAGE, encoded.text]
    run = (f"(run-schedule (let-scheduler bo (back-off :match-limit {limits.match_limit})) "
           f"(repeat {limits.rounds} (seq (saturate (run uses)) (run-with bo online))))")
    outs = []
    for body in ([], ["(ruleset online)", rules(), run]):
        egraph = EGraph()
        program = "\n".join([*base, *body, "(run-schedule (saturate (run uses)))",
                             f"(extract {encoded.root})"])
        outs.append(egraph.run_program(*egraph.parse_program(program))[-1])
    inlined, best = outs
    if best.cost >= inlined.cost:
        return None
    value = kterms.decode(best.termdag, best.term, encoded)
    derived = replace(kernel, out=replace(kernel.out, value=value))
    for d in sub.free_dims():
        sub.set_dim(d, dims.get(d, 64))
    work = kernel_work(derived, sub.dims)
    default_work = sum(kernel_work(k, sub.dims) * n for k, n in _calls(lower(sub)))
    if work > WORK_MARGIN * default_work:
        return None
    position = {ids[n]: k for k, n in enumerate(region.nodes)}
    return Derived(derived, tuple(position[p] for p in params), inlined.cost, best.cost, work,
                   default_work, time.perf_counter() - t0)


def _calls(program) -> list[tuple[KernelLike, int]]:
    counts: dict[int, int] = {}
    for call in program.calls:
        counts[call.kernel] = counts.get(call.kernel, 0) + 1
    return [(program.kernels[k], n) for k, n in counts.items()]


def kernel_work(kernel: KernelLike, dims: Mapping[str, int]) -> float:
    """Loads and arithmetic a kernel does, roughly: every node of the value tree once per
    iteration of the loops around it (a `SoftmaxSum` rendered row-wise computes its logit once
    per row); a matmul does four per multiply-add."""
    def size(e: Expr) -> float:
        return float(e.evaluate(dims))

    if isinstance(kernel, Matmul):
        batch = 1.0
        for b in kernel.batch:
            batch *= size(b)
        return 4.0 * batch * size(kernel.m) * size(kernel.n) * size(kernel.k)
    points = 1.0
    for d in kernel.domain:
        points *= size(d)
    row = size(kernel.domain[-1]) if kernel.domain else 1.0
    memo: dict[int, float] = {}

    def cost(v: Value) -> float:
        got = memo.get(id(v))
        if got is not None:
            return got
        if isinstance(v, Reduce):
            out = size(v.size) * (1 + cost(v.body))
        elif isinstance(v, SoftmaxSum):
            out = size(v.size) * (cost(v.logit) / row + cost(v.body) + 6)
        else:
            out = 1 + sum(cost(c) for c in children(v))
        memo[id(v)] = out
        return out

    return points * cost(kernel.out.value)
