"""Reverse-mode automatic differentiation as a graph compiler.

`Autograd(params, loss)` adds the backward graph of a scalar `loss` with respect to input
tensors `params` to the *same* graph, so forward, backward and the optimizer update compile and
run as one program:

    ag = lt.Autograd([w, b], loss)
    g.compile((ag, lm.GenericCompiler(), lm.backend()))   # ag.compile(g) builds the gradients
    ag[w]                                                  # the gradient of w, a GraphTensor

`lt.grad(loss, params)` does the same at graph-build time and returns the list directly.

Algorithm: the nodes that lie on a path from a parameter to the loss are visited in reverse
topological order; each node's upstream gradients are summed, its primitive VJP rule
(`vjp.py`) gives the gradient of each input in the shape it was read, and `transpose_view`
(`views.py`) scatters that back through the edge's view into the producer's buffer shape.
A node carrying a `CustomVjp` (`luminal.hl_ops.custom_vjp`, e.g. `pow`'s output) gets its
inputs' gradients from that rule instead of from the primitives inside it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from luminal import Graph, GraphTensor, ops
from luminal.hl_ops.custom_vjp import VJP_META
from luminal.shape import View

from .contract import mul_grad, reduced_view, summed_axes
from .views import transpose_view
from .vjp import VjpContext, vjp

Params = Sequence[GraphTensor] | Mapping[str, GraphTensor]


def param_list(params: Params) -> list[GraphTensor]:
    """The tensors of a list or a name -> tensor mapping, checked to be trainable inputs."""
    tensors = list(params.values()) if isinstance(params, Mapping) else list(params)
    if len({p.id for p in tensors}) != len(tensors):
        raise ValueError("a parameter is listed twice")
    for p in tensors:
        node = p.node
        if not isinstance(node.op, ops.Input):
            raise TypeError(f"parameters must be inputs made by Graph.tensor(), got {p!r}")
        if not (p.layout.is_contiguous and p.layout.shape == node.shape):
            raise ValueError(f"parameter {node.op.label_name!r} must be passed without a view")
        if not p.dtype.is_float:
            raise TypeError(f"parameter {node.op.label_name!r} has non-float dtype {p.dtype}")
    return tensors


class Autograd:
    """Compiler adding d(loss)/d(param) for every parameter; the gradients are then `ag[p]`,
    `ag.grads` (in parameter order), or what `ag.compile(graph)` returns.

    Building is idempotent: compiling again, or reading `grads` before compiling, reuses the
    first result. A parameter the loss does not depend on gets a zero gradient (PyTorch's
    `autograd.grad(..., allow_unused=True, materialize_grads=True)`); a loss that reads no
    float input (a constant, or only detached or compared values) raises ValueError, as
    PyTorch raises for a loss without `grad_fn`.
    """

    def __init__(self, params: Params, loss: GraphTensor):
        self.params = param_list(params)
        self.loss = loss
        self._grads: list[GraphTensor] | None = None

    def compile(self, graph: Graph) -> list[GraphTensor]:
        if graph is not self.loss.graph:
            raise ValueError("Autograd: the loss belongs to another graph")
        if self._grads is None:
            self._grads = build_gradients(self.loss, self.params)
        return self._grads

    @property
    def grads(self) -> list[GraphTensor]:
        return self.compile(self.loss.graph)

    def __getitem__(self, param: GraphTensor) -> GraphTensor:
        for p, g in zip(self.params, self.grads):
            if p.id == param.id:
                return g
        raise KeyError(f"{param!r} is not one of this Autograd's parameters")

    def __iter__(self) -> Iterator[GraphTensor]:
        return iter(self.grads)

    def __len__(self) -> int:
        return len(self.params)

    def __repr__(self) -> str:
        return f"Autograd({len(self.params)} params)"


def grad(loss: GraphTensor, params: Params) -> list[GraphTensor]:
    """Gradients of scalar `loss` w.r.t. `params`, added to the graph now (build time)."""
    return Autograd(params, loss).grads


def build_gradients(loss: GraphTensor, params: Sequence[GraphTensor]) -> list[GraphTensor]:
    graph = loss.graph
    if not loss.dtype.is_float:
        raise TypeError(f"the loss must be a float tensor, got {loss.dtype}")
    if not loss.layout.numel == 1:
        raise ValueError(f"the loss must hold one element, got shape {loss.shape}")
    if not _reads_an_input(graph, loss.id):
        raise ValueError(
            "grad: the loss is a constant (it reads no float input tensor, or reads them only "
            "through detach, comparisons or integer casts), so it has no gradient (PyTorch "
            "raises 'element 0 of tensors does not require grad' for the same)")
    param_ids = [p.id for p in params]
    relevant = _on_some_path(graph, set(param_ids), loss.id)
    seed = graph.constant(1.0, loss.dtype).expand(loss.layout.shape)
    pending: dict[int, list[GraphTensor]] = {
        loss.id: [transpose_view(seed, loss.layout, loss.node.shape)]
    }
    found: dict[int, GraphTensor] = {}
    users = graph.consumers()
    for node in reversed(graph.toposort()):
        parts = pending.pop(node.id, None)
        if parts is None or node.id not in relevant:  # no parameter below: zero gradients
            continue
        g = _sum(parts)
        if isinstance(node.op, ops.Input):
            found[node.id] = g
            continue
        if node.meta.get("detach"):  # GraphTensor.detach(): a constant for autograd
            continue
        custom = node.meta.get(VJP_META)
        if custom is not None:  # an op with a gradient formula of its own (e.g. pow)
            for t, gin in zip(custom.inputs, custom.rule(g)):
                if gin is not None and t.id in relevant:
                    src = graph.nodes[t.id]
                    pending.setdefault(t.id, []).append(transpose_view(gin, t.layout, src.shape))
            continue
        inputs = [
            GraphTensor(graph, e.src, e.view, graph.nodes[e.src].dtype) for e in node.inputs
        ]
        if isinstance(node.op, ops.MaxReduce):
            chain = _max_chain(graph, node, users)
            if len(chain) > 1:
                first = chain[-1]
                edge = first.inputs[0]
                if edge.src in relevant:
                    gin = _joint_max_grad(graph, chain, g)
                    src = graph.nodes[edge.src]
                    pending.setdefault(edge.src, []).append(
                        transpose_view(gin, edge.view, src.shape))
                continue
        if isinstance(node.op, ops.Mul):
            for k, edge in enumerate(node.inputs):
                if edge.src in relevant:
                    gin = _mul_input_grad(g, inputs[1 - k], edge.view, graph.nodes[edge.src])
                    pending.setdefault(edge.src, []).append(gin)
            continue
        out = GraphTensor(graph, node.id, View.contiguous(node.shape), node.dtype)
        for edge, gin in zip(node.inputs, vjp(VjpContext(node.op, inputs, out, g))):
            if gin is None or edge.src not in relevant:
                continue
            src = graph.nodes[edge.src]
            pending.setdefault(edge.src, []).append(transpose_view(gin, edge.view, src.shape))
    return [
        found[pid] if pid in found else graph.zeros(p.layout.shape, p.dtype)
        for pid, p in zip(param_ids, params)
    ]


def _max_chain(graph: Graph, node, users: dict[int, list[int]]) -> list:
    """`node` and the MaxReduces it reduces further (a max over several axes, e.g. a pool's
    window): each read whole (an identity view) by the next one only. Outermost first."""
    chain = [node]
    while True:
        edge = chain[-1].inputs[0]
        inner = graph.nodes[edge.src]
        if not (isinstance(inner.op, ops.MaxReduce) and users[inner.id] == [chain[-1].id]
                and edge.view.is_contiguous and tuple(edge.view.shape) == tuple(inner.shape)):
            return chain
        chain.append(inner)


def _joint_max_grad(graph: Graph, chain: list, g: GraphTensor) -> GraphTensor:
    """The gradient of the input of a chain of MaxReduces (`_max_chain`) in the shape the
    innermost one reads it: shared evenly among all the positions equal to the overall max,
    as PyTorch's amax over several dims does, in one step instead of one per axis."""
    first = chain[-1]
    edge = first.inputs[0]
    x = GraphTensor(graph, edge.src, edge.view, graph.nodes[edge.src].dtype)
    shape = x.layout.shape
    # the reduced axes in the coordinates of x: each reduce's axis, shifted past the axes
    # that the reduces inside it removed
    axes: list[int] = []
    for node in reversed(chain):
        a = node.op.axis
        for b in sorted(axes):
            if b <= a:
                a += 1
        axes.append(a)
    peak = GraphTensor(graph, chain[0].id, View.contiguous(chain[0].shape), chain[0].dtype)
    for a in sorted(axes):
        peak = peak.unsqueeze(a)
        g = g.unsqueeze(a)
    hits = 1.0 - (x < peak.expand(shape)).to(g.dtype)  # x <= peak everywhere: x == peak
    count = hits.sum(sorted(axes), keepdim=True)
    return hits * (g / count).expand(shape)


def _mul_input_grad(g: GraphTensor, other: GraphTensor, view: View, src) -> GraphTensor:
    """The gradient of one input of a Mul read through `view`: `g * other` sent back through
    the view, as a matrix product when the view broadcasts (`contract.py`)."""
    axes = summed_axes(view)
    if axes:
        product = mul_grad(g, other, axes)
        if product is not None:
            return transpose_view(product, reduced_view(view, axes), src.shape)
    return transpose_view(g * other, view, src.shape)


def _reads_an_input(graph: Graph, target: int) -> bool:
    """Whether the target depends on some float input tensor through float values (what
    PyTorch's `requires_grad` follows: not through comparisons, integer casts or `detach`),
    counting the inputs an op with a custom gradient reads in its rule (`x ** 0` is a
    constant that still depends on x)."""
    seen: set[int] = set()
    stack = [target]
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        node = graph.nodes[nid]
        if not node.dtype.is_float or node.meta.get("detach"):
            continue
        if isinstance(node.op, ops.Input):
            return True
        stack.extend(e.src for e in node.inputs)
        custom = node.meta.get(VJP_META)
        if custom is not None:
            stack.extend(t.id for t in custom.inputs)
    return False


def _on_some_path(graph: Graph, sources: set[int], target: int) -> set[int]:
    """Float nodes that depend on a source and that the target depends on."""
    below: set[int] = set()
    stack = [target]
    while stack:
        nid = stack.pop()
        if nid in below or not graph.nodes[nid].dtype.is_float:
            continue
        below.add(nid)
        stack.extend(e.src for e in graph.nodes[nid].inputs)
    users = graph.consumers()
    above: set[int] = set()
    stack = [s for s in sources if s in below]
    while stack:
        nid = stack.pop()
        if nid in above or nid not in below:
            continue
        above.add(nid)
        stack.extend(users[nid])
    return above


def _sum(parts: list[GraphTensor]) -> GraphTensor:
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total
