"""`Distributed(backend)`: the compiler that runs a graph holding collectives on any backend.

In a world of one, every collective is replaced by its primitive decomposition (the identity)
and the backend compiles the graph as usual. With more ranks the graph is cut at its
collectives into stages: stage k holds the nodes that depend on k rounds of collectives. Each
stage becomes a graph of its own, compiled by the backend (one native library, one CUDA
graph...), and a `StagedRuntime` on the user's graph runs stage 0, starts the collectives that
read its results, waits for them before the first stage that reads theirs, runs stage 1, and
so on. The user's tensor handles, `set()`, `assign()` and `numpy()` keep working: the staged
runtime honours the runtime contract of core.

With `overlap=True` each stage is cut further, so that a collective starts as soon as its own
inputs are computed rather than after the whole stage: within a round, the collective with
the fewest ancestors goes first, its ancestors make the first part, the next collective's
remaining ancestors the second, and so on (other nodes join the earliest part their inputs
allow). For a training step this starts each gradient bucket's all-reduce while the backward
pass of the earlier layers still runs (as PyTorch DDP does); the communicator progresses the
started all-reduces (`Pending.test()`) between parts. The price is more stages (one per
bucket), each a separate compiled graph with host-array boundaries.

Before anything runs, the ranks compare fingerprints of their graphs (`check_same_graph`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from luminal import Graph, Runtime, ops, run_compiler
from luminal.host_views import read_view
from luminal.ir import Edge, Node

from .comm import Communicator, Pending
from .fingerprint import check_same_graph
from .ops import Collective


class Distributed:
    """Compiles a graph with collectives for `backend` (a backend or compiler chain) on
    `comm` (default: this job's world, see `luminal_dist.world()`)."""

    def __init__(self, backend: Any, comm: Communicator | None = None,
                 overlap: bool = False) -> None:
        from .comm import world

        self.backend = backend
        self.comm = comm if comm is not None else world()
        self.overlap = overlap

    def compile(self, graph: Graph) -> None:
        collectives = [n for n in graph.nodes.values() if isinstance(n.op, Collective)]
        for node in collectives:
            if node.op.size != self.comm.size:
                raise ValueError(f"{node.op.label()} (node {node.id}) was built for "
                                 f"{node.op.size} ranks, the communicator has {self.comm.size}")
        if self.comm.size == 1:
            lower_to_identity(graph, collectives)
            run_compiler(self.backend, graph)
            return
        check_same_graph(graph, self.comm)
        graph.set_runtime(StagedRuntime(graph, self.backend, self.comm, self.overlap))

    def __repr__(self) -> str:
        return f"Distributed({self.backend!r}, {self.comm!r}, overlap={self.overlap})"


def lower_to_identity(graph: Graph, collectives: Iterable[Node]) -> None:
    """Replace each collective of a world of one by its input (a copy where the input is read
    through a view that is not the producer's whole buffer)."""
    for node in collectives:
        edge = node.inputs[0]
        src = graph.nodes[edge.src]
        if edge.view.is_contiguous and tuple(edge.view.shape) == tuple(src.shape):
            graph.replace(node.id, src.id)
        else:
            copy = graph.add_node(ops.Contiguous(), [Edge(src.id, edge.view)], node.shape,
                                  node.dtype)
            graph.replace(node.id, copy.id)


@dataclass
class Stage:
    """One stage: its own graph, where its inputs come from, what it hands on."""

    graph: Graph
    feeds: dict[int, int] = field(default_factory=dict)  # user node -> stage input node
    results: dict[int, int] = field(default_factory=dict)  # user node -> stage node
    collectives: list[Node] = field(default_factory=list)  # started after this stage


def _levels(graph: Graph, order: list[Node]) -> dict[int, int]:
    """How many rounds of collectives each node depends on (a collective has its inputs'
    level: it runs right after their stage)."""
    level: dict[int, int] = {}
    for n in order:
        level[n.id] = max(
            (level[e.src] + isinstance(graph.nodes[e.src].op, Collective) for e in n.inputs),
            default=0)
    return level


def _leaf(node: Node) -> bool:
    return isinstance(node.op, (ops.Input, ops.Constant, ops.Iota))


def _parts(graph: Graph, order: list[Node], level: dict[int, int]) -> dict[int, int]:
    """Each node's stage when every round is cut so that its collectives start as early as
    their inputs allow (see the module docstring); a collective's stage is the one after
    which it starts."""
    rounds: dict[int, list[Node]] = {}
    for n in order:
        if isinstance(n.op, Collective):
            rounds.setdefault(level[n.id], []).append(n)
    ancestors: dict[int, set[int]] = {}
    for k, collectives in rounds.items():
        for c in collectives:
            seen, todo = set(), [e.src for e in c.inputs]
            while todo:
                nid = todo.pop()
                node = graph.nodes[nid]
                # a collective is never in its own readers' round
                if nid in seen or level[nid] != k or _leaf(node):
                    continue
                seen.add(nid)
                todo.extend(e.src for e in node.inputs)
            ancestors[c.id] = seen
        # the same order on every rank: the graphs are the same
        collectives.sort(key=lambda c: (len(ancestors[c.id]), c.id))
    offset, start = {}, 0
    for k in range(1 + max(level.values(), default=0)):
        offset[k] = start
        start += max(len(rounds.get(k, ())), 1)
    part: dict[int, int] = {}
    for k, collectives in rounds.items():
        for j, c in enumerate(collectives):
            part[c.id] = offset[k] + j
            for nid in ancestors[c.id]:
                part.setdefault(nid, offset[k] + j)
    for n in order:  # the others: the earliest part of their round their inputs allow
        if n.id not in part and not _leaf(n):
            k = level[n.id]
            part[n.id] = max((part[e.src] for e in n.inputs
                              if e.src in part and level[e.src] == k), default=offset[k])
    return part


def split_stages(graph: Graph, overlap: bool = False) -> list[Stage]:
    """Cut `graph` at its collectives, and with `overlap` each round before each of its
    collectives (see the module docstring)."""
    order = graph.toposort()
    level = _levels(graph, order)
    if overlap:
        level = {**level, **_parts(graph, order, level)}
    outputs = graph.outputs()
    consumers = graph.consumers()
    count = 1 + max((level[n.id] for n in order if not _leaf(n)), default=0)
    stages = [Stage(Graph()) for _ in range(count)]
    copies: list[dict[int, int]] = [{} for _ in range(count)]  # user node -> stage node

    def local(k: int, nid: int) -> int:
        """The node of stage k standing for user node `nid` (copied leaf or fed input)."""
        if nid in copies[k]:
            return copies[k][nid]
        src = graph.nodes[nid]
        op = src.op if isinstance(src.op, (ops.Constant, ops.Iota)) else ops.Input(f"%{nid}")
        new = stages[k].graph.add_node(op, [], src.shape, src.dtype)
        if isinstance(op, ops.Input):
            stages[k].feeds[nid] = new.id
        copies[k][nid] = new.id
        return new.id

    for n in order:
        if _leaf(n):
            continue
        k = level[n.id]
        if isinstance(n.op, Collective):
            stages[k].collectives.append(n)
            continue
        inputs = [Edge(local(k, e.src), e.view) for e in n.inputs]
        copies[k][n.id] = stages[k].graph.add_node(n.op, inputs, n.shape, n.dtype).id
        handed_on = any(level[u] > k or isinstance(graph.nodes[u].op, Collective)
                        for u in consumers[n.id])
        if handed_on or n.id in outputs:
            stages[k].results[n.id] = copies[k][n.id]
            stages[k].graph.mark_retrieved(copies[k][n.id])
    return stages


class StagedRuntime(Runtime):
    """Runs the stages in order with the collectives between them (see the module
    docstring); values crossing a stage boundary travel through host arrays."""

    host_buffers = True

    def __init__(self, graph: Graph, backend: Any, comm: Communicator,
                 overlap: bool = False) -> None:
        super().__init__(graph)
        self.comm = comm
        self.stages = split_stages(graph, overlap)
        for stage in self.stages:
            if stage.graph.nodes:
                run_compiler(backend, stage.graph)
        self._fed_versions: list[dict[int, int | None]] = [{} for _ in self.stages]

    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        values: dict[int, np.ndarray] = {}
        pending: dict[int, Pending] = {}
        for k, stage in enumerate(self.stages):
            if stage.graph.nodes:
                self._complete(graph, pending, values, stage.feeds)
                self._feed(k, graph, values, dims)
                stage.graph.execute()
                for nid, local in stage.results.items():
                    values[nid] = np.array(stage.graph.fetch(local), copy=True).reshape(-1)
            for node in stage.collectives:
                edge = node.inputs[0]
                self._complete(graph, pending, values, (edge.src,))
                x = read_view(self._flat(graph, values, edge.src, dims), edge.view, dims)
                pending[node.id] = node.op.start(self.comm, x)
            for started in pending.values():  # MPI progresses only inside its calls
                started.test()
        self._complete(graph, pending, values, list(pending))
        self.finish_run(graph, values, dims)  # host buffers: assigned values are copies

    @staticmethod
    def _complete(graph: Graph, pending: dict[int, Pending], values: dict[int, np.ndarray],
                  nodes: Iterable[int]) -> None:
        """Wait for the started collectives among `nodes`; their results go to `values`."""
        for nid in nodes:
            if nid in pending:
                values[nid] = np.ascontiguousarray(
                    pending.pop(nid).wait(), dtype=graph.nodes[nid].dtype.numpy).reshape(-1)

    def _feed(self, k: int, graph: Graph, values: dict[int, np.ndarray],
              dims: dict[str, int]) -> None:
        stage = self.stages[k]
        stage.graph.dims = dict(dims)
        seen = self._fed_versions[k]
        for nid, local in stage.feeds.items():
            node = graph.nodes[nid]
            if isinstance(node.op, ops.Input):
                version = graph.data_version.get(nid)
                if seen.get(nid, -1) == version:
                    continue  # unchanged weights are uploaded once
                seen[nid] = version
                stage.graph.set_data(local, np.asarray(graph.data[nid]))
            else:
                shape = tuple(d.evaluate(dims) for d in node.shape)
                stage.graph.set_data(local, values[nid].reshape(shape))

    @staticmethod
    def _flat(graph: Graph, values: dict[int, np.ndarray], nid: int,
              dims: dict[str, int]) -> np.ndarray:
        if nid in values:
            return values[nid]
        node = graph.nodes[nid]
        if isinstance(node.op, ops.Input):
            return np.asarray(graph.data[nid]).reshape(-1)
        # a constant or iota read directly by a collective: evaluate it on the host
        return np.asarray(node.op.reference([], node.dtype, dims), node.dtype.numpy).reshape(-1)

    def fetch(self, node_id: int) -> np.ndarray:
        (shape,) = self.shapes((node_id,), self._dims)
        return self._outputs[node_id].reshape(shape)


__all__ = ["Distributed", "Stage", "StagedRuntime", "lower_to_identity", "split_stages"]
