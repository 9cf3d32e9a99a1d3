"""The reference backend: runs any graph with NumPy, one op at a time, through the views.

It defines the semantics every other backend is tested against, so it favours plainness over
speed. Two concessions keep it usable on real models: expanded views are read as zero-copy
stride tricks, and a `SumReduce` of a single-use `Mul` (matmul, convolution) or of a
`where(mask, x, 0)` (one-hot gather) is evaluated with `np.einsum` instead of materialising
the broadcast product (exactly: the masked sum adds the non-finite values it picks apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops
from .backend import Backend, BackendStatus
from .dtypes import compute_dtype
from .host_views import read_view
from .ir import Graph, Node
from .runtime import Runtime
from .symbolic import Expr


@dataclass
class _Step:
    node: Node
    fused_mul: Node | None  # a Mul folded into this SumReduce
    free_after: list[int]


class ReferenceRuntime(Runtime):
    """NumPy arrays as buffers; `launch` walks the graph in order."""

    host_buffers = True

    def __init__(self, graph: Graph):
        super().__init__(graph)
        order = graph.toposort()
        outputs = graph.outputs()
        users = graph.consumers()
        fused: dict[int, Node] = {}
        for n in order:
            if isinstance(n.op, ops.SumReduce) and len(n.inputs) == 1:
                src = graph.nodes[n.inputs[0].src]
                if (
                    (isinstance(src.op, ops.Mul) or _selects_or_zero(graph, src))
                    and users[src.id] == [n.id]
                    and src.id not in outputs
                    and n.inputs[0].view.is_contiguous
                    # a reshaped product has other axes than the Mul it reads
                    and tuple(n.inputs[0].view.shape) == tuple(src.shape)
                    and src.dtype.is_float
                ):
                    fused[n.id] = src
        skipped = {m.id for m in fused.values()}
        last_use: dict[int, int] = {}
        steps = [n for n in order if n.id not in skipped]
        for i, n in enumerate(steps):
            srcs = fused[n.id].inputs if n.id in fused else n.inputs
            for e in srcs:
                last_use[e.src] = i
        free_at: dict[int, list[int]] = {}
        for nid, i in last_use.items():
            if nid not in outputs and not isinstance(graph.nodes[nid].op, ops.Input):
                free_at.setdefault(i, []).append(nid)
        self.steps = [_Step(n, fused.get(n.id), free_at.get(i, [])) for i, n in enumerate(steps)]
        self.outputs = outputs

    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        check_index_ranges(graph, dims)
        super().execute(graph, dims)

    def upload(self, host: np.ndarray) -> np.ndarray:
        return host

    def download(self, buffer: np.ndarray, dtype) -> np.ndarray:
        return buffer

    def launch(self, inputs: dict[int, np.ndarray], dims: dict[str, int]) -> dict[int, np.ndarray]:
        values: dict[int, np.ndarray] = dict(inputs)
        for step in self.steps:
            node = step.node
            if isinstance(node.op, ops.Input):
                continue
            if step.fused_mul is not None:
                out = self._sum_of_product(step.fused_mul, node, values, dims)
            else:
                xs = [
                    read_view(values[e.src].astype(compute_dtype(self.node_info[e.src][1]),
                                                   copy=False), e.view, dims)
                    for e in node.inputs
                ]
                out = node.op.reference(xs, node.dtype, dims)
            shape = tuple(d.evaluate(dims) for d in node.shape)
            out = np.asarray(out)
            if out.shape != shape:
                out = np.broadcast_to(out, shape)
            with np.errstate(over="ignore"):  # float16 rounding overflows to inf, as on devices
                values[node.id] = np.ascontiguousarray(out, dtype=node.dtype.numpy).reshape(-1)
            for nid in step.free_after:
                values.pop(nid, None)
        return {nid: values[nid] for nid in self.outputs if nid in values}

    def _sum_of_product(self, mul: Node, red: Node, values, dims) -> np.ndarray:
        a, b = (
            read_view(values[e.src].astype(np.float32, copy=False), e.view, dims)
            for e in mul.inputs[:2]  # a Mul's factors; a Select's mask and picked value
        )
        axis = red.op.axis
        if not isinstance(mul.op, ops.Select):
            return _einsum_reduce(a, b, axis)
        # sum of where(a, b, 0): einsum over b with its non-finite values zeroed, then those
        # values added where the mask picks them (rare: only then is the product materialised)
        out, clean = _einsum_reduce(a, b, axis, finite_b=True)
        if not clean:
            out = out + np.where((a != 0) & ~np.isfinite(b), b, 0).sum(axis)
        return out


def _einsum_reduce(a: np.ndarray, b: np.ndarray, axis: int, finite_b: bool = False):
    """sum(a * b, axis) by einsum, without materialising the broadcast product. With
    `finite_b`, b's non-finite values count as 0 and the result is (sum, b was all finite)."""
    letters = "abcdefghijklmnopqrstuvwxyz"[: a.ndim]
    out = letters[:axis] + letters[axis + 1 :]
    # Expanded (stride-0) axes are dropped from the operand that only broadcasts along
    # them: einsum then sees a plain contraction (a matmul) and hands it to BLAS instead
    # of looping over the whole broadcast product.
    a_axes, b_axes = _unbroadcast_axes(a), _unbroadcast_axes(b)
    both = set(range(a.ndim)) - a_axes - b_axes
    a_axes |= both
    a, sa = _take_axes(a, a_axes, letters)
    b, sb = _take_axes(b, b_axes, letters)
    if not finite_b:
        return np.einsum(f"{sa},{sb}->{out}", a, b, optimize=True)
    finite = np.isfinite(b)
    clean = bool(finite.all())
    b = b if clean else np.where(finite, b, 0)
    return np.einsum(f"{sa},{sb}->{out}", a, b, optimize=True), clean


def _unbroadcast_axes(x: np.ndarray) -> set[int]:
    """Axes along which `x` really varies (size > 1, not a stride-0 expansion), and empty
    axes, which cannot be indexed at 0."""
    return {i for i, (n, st) in enumerate(zip(x.shape, x.strides))
            if (st != 0 and n > 1) or n == 0}


def _take_axes(x: np.ndarray, axes: set[int], letters: str) -> tuple[np.ndarray, str]:
    """`x` indexed at 0 along the axes not in `axes`, and the einsum letters of the rest."""
    index = tuple(slice(None) if i in axes else 0 for i in range(x.ndim))
    return x[index], "".join(letters[i] for i in sorted(axes))


def check_index_ranges(graph: Graph, dims: dict[str, int]) -> None:
    """Raise IndexError when an input used as embedding / gather / index_select / one_hot ids
    holds a value outside the indexed axis (the one-hot decomposition would silently give
    zeros)."""
    for input_id, sizes in graph.index_bounds.items():
        nid = graph.resolve(input_id)
        data = graph.data.get(nid)
        if data is None or not data.size:
            continue
        size = min(s.evaluate(dims) for s in sizes)
        low, high = data.min(), data.max()
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            name = graph.nodes[nid].op.label_name if nid in graph.nodes else input_id
            raise IndexError(f"input {name!r}: index {bad.item()} is out of range for an axis "
                             f"of size {size} (ids must be in [0, {size}))")


def _selects_or_zero(graph: Graph, node: Node) -> bool:
    """A `Select` whose third input (the value where the mask is false) is the constant 0."""
    if not isinstance(node.op, ops.Select):
        return False
    other = graph.nodes[node.inputs[2].src].op
    return isinstance(other, ops.Constant) and not isinstance(other.value, Expr) and (
        other.value == 0)


class ReferenceBackend(Backend):
    """NumPy, one op at a time. Always available; defines the semantics of every op."""

    name = "reference"
    priority = 0
    in_place_writes = True  # host arrays: a write is a NumPy slice assignment
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool")

    def probe(self) -> BackendStatus:
        return BackendStatus(True, device=f"NumPy {np.__version__} (host)")

    def compile(self, graph: Graph) -> None:
        graph.set_runtime(ReferenceRuntime(graph))
