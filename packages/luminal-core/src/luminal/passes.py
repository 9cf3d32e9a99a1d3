"""GenericCompiler: dead-code elimination, common-subexpression elimination, arithmetic
simplification and constant folding. Each pass keeps every result the graph computes."""

from __future__ import annotations

import numpy as np

from . import ops
from .dtypes import compute_dtype
from .ir import Graph, Node
from .shape import View
from .symbolic import Expr


class DeadCodeElimination:
    """Remove nodes that no retrieved, kept or assigned value depends on (inputs stay, so
    handles to them keep working)."""

    def compile(self, graph: Graph) -> None:
        live: set[int] = set()
        stack = [n for n in graph.outputs() if n in graph.nodes]
        while stack:
            nid = stack.pop()
            if nid in live:
                continue
            live.add(nid)
            stack.extend([e.src for e in graph.nodes[nid].inputs])
        for nid in [n for n, node in graph.nodes.items() if n not in live]:
            if not isinstance(graph.nodes[nid].op, ops.Input):
                graph.remove(nid)


class CSE:
    """Merge nodes that compute the same op on the same inputs through the same views."""

    def compile(self, graph: Graph) -> None:
        seen: dict[tuple, int] = {}
        merged: dict[int, int] = {}  # applied in one pass at the end (see Graph.replace_many)
        moved = merged.get
        for node in graph.toposort():
            if isinstance(node.op, ops.Input):
                continue
            key = (node.op, tuple([(moved(e.src, e.src), e.view) for e in node.inputs]),
                   node.dtype, node.shape)
            other = seen.setdefault(key, node.id)  # one hash of the key, not two
            if other != node.id:
                merged[node.id] = other
        graph.replace_many(merged)


def _is_identity_edge(graph: Graph, node: Node, k: int) -> bool:
    """Input k is read as its producer's whole buffer, at the node's shape."""
    e = node.inputs[k]
    src = graph.nodes[e.src]
    return e.view.is_contiguous and tuple(e.view.shape) == tuple(src.shape) == tuple(node.shape)


def _constant_value(graph: Graph, node_id: int) -> float | None:
    op = graph.nodes[node_id].op
    if isinstance(op, ops.Constant) and not isinstance(op.value, Expr):
        return op.value
    return None


class ArithmeticSimplify:
    """x+0, x*1, recip(recip(x)), log2(exp2(x)), contiguous(contiguous x), cast to own dtype."""

    def compile(self, graph: Graph) -> None:
        survivors: dict[int, int] = {}  # applied in one pass (see Graph.replace_many)
        for node in graph.toposort():
            keep = self._survivor(graph, node)
            if keep is not None and keep != node.id:
                survivors[node.id] = keep
        graph.replace_many(survivors)

    def _survivor(self, graph: Graph, node: Node) -> int | None:
        op = node.op
        if not isinstance(op, _SIMPLIFIED):  # most nodes: one check instead of five
            return None
        if isinstance(op, (ops.Add, ops.Mul)) and node.dtype.is_float:
            neutral = 0.0 if isinstance(op, ops.Add) else 1.0
            for k in (0, 1):
                other = 1 - k
                if _constant_value(graph, node.inputs[k].src) == neutral and (
                    node.inputs[k].view.mask is None
                ) and _is_identity_edge(graph, node, other):
                    return node.inputs[other].src
        if isinstance(op, (ops.Recip, ops.Log2)) and _is_identity_edge(graph, node, 0):
            inner = graph.nodes[node.inputs[0].src]
            undo = ops.Recip if isinstance(op, ops.Recip) else ops.Exp2
            if isinstance(inner.op, undo) and _is_identity_edge(graph, inner, 0):
                return inner.inputs[0].src
        if isinstance(op, ops.Contiguous) and _is_identity_edge(graph, node, 0):
            return node.inputs[0].src
        if isinstance(op, ops.Cast) and op.dtype == graph.nodes[node.inputs[0].src].dtype and (
            _is_identity_edge(graph, node, 0)
        ):
            return node.inputs[0].src
        return None


_SIMPLIFIED = (ops.Add, ops.Mul, ops.Recip, ops.Log2, ops.Contiguous, ops.Cast)


def _as_scalar_view(view: View) -> View:
    """The same logical view reading a single-element buffer (every position the same)."""
    zeros = tuple(Expr.const(0) for _ in view.shape)
    return View(view.shape, zeros, Expr.const(0), view.mask)


class ConstantFold:
    """Evaluate ops whose inputs are all numeric constants into one constant."""

    def compile(self, graph: Graph) -> None:
        # applied in one pass at the end (see Graph.replace_many); until then, reads of a
        # folded node look through `folded`
        folded: dict[int, int] = {}
        users: dict[int, list[int]] | None = None  # built at the first fold
        outputs = graph.outputs()
        for node in graph.toposort():
            if not node.inputs or isinstance(node.op, _NEVER_FOLDED):
                continue
            srcs = [folded.get(e.src, e.src) for e in node.inputs]
            values = [_constant_value(graph, s) for s in srcs]
            if any(v is None for v in values) or node.id in outputs:
                continue
            if any(e.view.mask is not None for e in node.inputs):
                continue  # padding makes the value position dependent
            xs = [
                np.asarray(v, dtype=compute_dtype(graph.nodes[s].dtype))
                for v, s in zip(values, srcs)
            ]
            result = np.asarray(node.op.reference(xs, node.dtype, {}))
            result = result.astype(node.dtype.numpy).item()
            const = graph.add_node(ops.Constant(result), [], (), node.dtype)
            if users is None:
                users = graph.consumers()
            for uid in users[node.id]:
                for e in graph.nodes[uid].inputs:
                    if e.src == node.id:
                        e.view = _as_scalar_view(e.view)
            folded[node.id] = const.id
        graph.replace_many(folded)


# leaves, and reductions (their value depends on the reduced length; rare enough not to fold)
_NEVER_FOLDED = (ops.Input, ops.Constant, ops.Iota, ops.SumReduce, ops.MaxReduce)


class GenericCompiler:
    """DCE + CSE + arithmetic simplification + constant folding, to a fixed point."""

    def __init__(self, max_rounds: int = 10):
        self.passes = (DeadCodeElimination(), ConstantFold(), ArithmeticSimplify(), CSE())
        self.max_rounds = max_rounds

    def compile(self, graph: Graph) -> None:
        for _ in range(self.max_rounds):
            before = (len(graph.nodes), graph.version)
            for p in self.passes:
                p.compile(graph)
            DeadCodeElimination().compile(graph)
            if len(graph.nodes) == before[0] and graph.version == before[1]:
                break

    def __repr__(self) -> str:
        return "GenericCompiler()"
