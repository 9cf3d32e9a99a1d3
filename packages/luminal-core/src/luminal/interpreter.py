"""`PrimitiveBackend`: the smallest way to bring a new device to luminal.

Subclass it and implement eight methods over your own buffer type (flat 1-D buffers): moving
data to and from NumPy, gathering a view, filling, and the 12 primitives as four families.
Every graph then runs on your device, one primitive at a time; fusion and special kernels can
come later as compilers. Views are resolved on the host into index/valid arrays, so a device
needs only a gather to support every permute, expand, slice and pad.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from . import ops
from .backend import Backend
from .dtypes import DType, bool_
from .host_views import concrete_view
from .ir import Graph, Node
from .runtime import Buffer, Runtime


def view_indices(view, dims: dict[str, int]) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat source position and validity of every element a view reads, row-major."""
    shape, strides, offset, mask = concrete_view(view, dims)
    idx = np.full((1,) * len(shape), offset, dtype=np.int64)
    valid = np.ones((1,) * len(shape), dtype=bool)
    for k, (d, s) in enumerate(zip(shape, strides)):
        ar = np.arange(d, dtype=np.int64).reshape([-1 if j == k else 1 for j in range(len(shape))])
        idx = idx + ar * s
        if mask is not None:
            lo, hi = mask[k]
            valid = valid & (ar >= lo) & (ar < hi)
    idx = np.broadcast_to(idx, shape).reshape(-1)
    if mask is None:
        return idx, None
    valid = np.broadcast_to(valid, shape).reshape(-1)
    return np.where(valid, idx, 0), valid


class PrimitiveBackend(Backend):
    """Base class for a backend that executes the 12 primitives one at a time.

    Buffers are flat. Arithmetic on float16/bfloat16 tensors may be done in float32: the
    runtime hands you the node's dtype so you can round results as the reference does.
    """

    @abstractmethod
    def from_numpy(self, array: np.ndarray) -> Buffer:
        """Upload a flat host array."""

    @abstractmethod
    def to_numpy(self, buf: Buffer, dtype: DType) -> np.ndarray:
        """Download a flat buffer as a host array of `dtype.numpy`."""

    @abstractmethod
    def gather(self, buf: Buffer, index: np.ndarray, valid: np.ndarray | None) -> Buffer:
        """out[i] = buf[index[i]] where valid[i] (or everywhere if valid is None), else 0."""

    @abstractmethod
    def unary(self, op: str, x: Buffer, dtype: DType) -> Buffer:
        """op in log2, exp2, sin, sqrt, recip."""

    @abstractmethod
    def binary(self, op: str, a: Buffer, b: Buffer, dtype: DType) -> Buffer:
        """op in add, mul, mod (truncated: sign of a), lt (result 1/0 as bool)."""

    @abstractmethod
    def reduce(self, op: str, x: Buffer, outer: int, size: int, inner: int, dtype) -> Buffer:
        """op in sum, max over the middle axis of x viewed as (outer, size, inner)."""

    @abstractmethod
    def cast(self, x: Buffer, src: DType, dst: DType) -> Buffer:
        """Convert element type (float -> int truncates; nonzero -> True)."""

    def select(self, cond: Buffer, a: Buffer, b: Buffer, dtype: DType) -> Buffer:
        """`a` where the bool buffer `cond` is true, else `b`. The default is exact on any
        device: it reads `cond` on the host and picks each side with `gather`'s validity (the
        side not taken reads 0, never multiplies), then adds the two; override it with a
        native select where you have one."""
        mask = self.to_numpy(cond, bool_).astype(bool)
        every = np.arange(mask.size, dtype=np.int64)
        return self.binary("add", self.gather(a, every, mask), self.gather(b, every, ~mask), dtype)

    def compile(self, graph: Graph) -> None:
        graph.set_runtime(_PrimitiveRuntime(self, graph))


class _PrimitiveRuntime(Runtime):
    def __init__(self, backend: PrimitiveBackend, graph: Graph):
        super().__init__(graph)
        self.backend = backend
        self.order = graph.toposort()
        self.outputs = graph.outputs()

    def upload(self, host: np.ndarray) -> Buffer:
        return self.backend.from_numpy(host)

    def download(self, buffer: Buffer, dtype: DType) -> np.ndarray:
        return self.backend.to_numpy(buffer, dtype)

    def launch(self, inputs: dict[int, Buffer], dims: dict[str, int]) -> dict[int, Buffer]:
        values = dict(inputs)
        for node in self.order:
            if node.id not in values:
                values[node.id] = self._run(node, values, dims)
        return {n: values[n] for n in self.outputs if n in values}

    def _run(self, node: Node, values: dict[int, Buffer], dims: dict[str, int]) -> Buffer:
        be, op = self.backend, node.op
        if isinstance(op, (ops.Constant, ops.Iota)):
            host = op.reference([], node.dtype, dims).astype(node.dtype.numpy)
            return be.from_numpy(np.ascontiguousarray(host).reshape(-1))
        xs = [be.gather(values[e.src], *view_indices(e.view, dims)) for e in node.inputs]
        in_dtype = self.node_info[node.inputs[0].src][1] if node.inputs else node.dtype
        if isinstance(op, ops.Contiguous):
            return xs[0]
        if isinstance(op, ops.Cast):
            return be.cast(xs[0], in_dtype, node.dtype)
        if isinstance(op, ops.Select):
            return be.select(*xs, node.dtype)
        if type(op) in ops.MATH:
            return be.unary(op.code, xs[0], node.dtype)
        if type(op) in ops.BINARY:
            return be.binary(op.code, xs[0], xs[1], in_dtype)
        if isinstance(op, (ops.SumReduce, ops.MaxReduce)):
            shape = [d.evaluate(dims) for d in node.inputs[0].view.shape]
            outer = int(np.prod(shape[: op.axis]))
            inner = int(np.prod(shape[op.axis + 1 :]))
            return be.reduce(op.code, xs[0], outer, shape[op.axis], inner, node.dtype)
        raise NotImplementedError(
            f"backend {be.name!r} cannot run {op.name}: it only runs primitive graphs "
            f"(compile without other backends' compilers)"
        )


__all__ = ["Buffer", "PrimitiveBackend", "view_indices"]
