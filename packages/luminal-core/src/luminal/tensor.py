"""`GraphTensor`: a handle to a node's output seen through a view.

Movement ops only change the view (no node is added); every other op adds a node whose input
edge records the view. The high-level ops live in `hl_ops/`, grouped by kind, as mixins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import ops
from .dtypes import DType, dtype_of
from .graph import Edge, Graph
from .hl_ops.binary import BinaryOps
from .hl_ops.matmul import MatmulOps
from .hl_ops.movement import MovementOps
from .hl_ops.reduction import ReductionOps
from .hl_ops.unary import UnaryOps
from .shape import View, show_shape
from .symbolic import Expr, UnboundDimError, const_or_expr

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


class GraphTensor(UnaryOps, BinaryOps, MovementOps, ReductionOps, MatmulOps):
    """A lazy tensor in a `Graph`. Nothing runs until the graph is compiled and executed."""

    __slots__ = ("_id", "dtype", "graph", "view")
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, graph: Graph, node_id: int, view: View, dtype: DType):
        self.graph = graph
        self._id = node_id
        self.view = view
        self.dtype = dtype

    # ----- identity -----------------------------------------------------------------------
    @property
    def id(self) -> int:
        """Id of the live node holding this tensor's data (stable across compilation)."""
        return self.graph.resolve(self._id)

    @property
    def node(self):
        return self.graph.nodes[self.id]

    @property
    def shape(self) -> tuple[int | Expr, ...]:
        """Dims as ints, or symbolic `Expr`s for dims that depend on named dims."""
        return tuple(const_or_expr(d) for d in self.view.shape)

    @property
    def ndim(self) -> int:
        return len(self.view.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int | Expr:
        return const_or_expr(self.view.numel)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        first = self.shape[0]
        if isinstance(first, Expr):
            raise TypeError(f"len() of a tensor whose first dim is symbolic ({first})")
        return first

    __hash__ = object.__hash__

    def _with_view(self, view: View) -> GraphTensor:
        return GraphTensor(self.graph, self._id, view, self.dtype)

    def _new(self, op: ops.Op, *inputs: GraphTensor) -> GraphTensor:
        """Add a node computing `op` on `inputs` (read through their views)."""
        shapes = [t.view.shape for t in inputs]
        node = self.graph.add_node(
            op,
            [Edge(t.id, t.view) for t in inputs],
            op.output_shape(shapes),
            op.output_dtype([t.dtype for t in inputs]),
        )
        return GraphTensor(self.graph, node.id, View.contiguous(node.shape), node.dtype)

    # ----- data in & out ------------------------------------------------------------------
    def set(self, data: ArrayLike) -> GraphTensor:
        """Bind host data to this input (converted to the tensor's dtype); binds the values of
        symbolic dims in its shape. Returns self, so `g.tensor(...).set(x)` chains."""
        node = self.node
        if not isinstance(node.op, ops.Input):
            raise TypeError(
                f"set() works on inputs made by Graph.tensor(), not on the result of {node.op.name}"
            )
        name = node.op.label_name
        arr = np.asarray(data)
        if arr.dtype == object:
            raise TypeError(f"input {name!r}: cannot convert {type(data).__name__} to an array")
        shape = node.shape
        if arr.ndim != len(shape):
            raise ValueError(
                f"input {name!r} expects shape {show_shape(shape)} but got an array of shape "
                f"{arr.shape} (rank {arr.ndim} instead of {len(shape)})"
            )
        bound: dict[str, int] = {}
        for want, have in zip(shape, arr.shape):
            if want.is_const:
                if want.value != have:
                    raise ValueError(
                        f"input {name!r} expects shape {show_shape(shape)} but got an array "
                        f"of shape {arr.shape}"
                    )
            elif want.op == "var":
                prev = bound.get(want.name)
                if prev is not None and prev != have:
                    raise ValueError(
                        f"input {name!r}: dim {want.name!r} would be both {prev} and {have} "
                        f"in array of shape {arr.shape}"
                    )
                bound[want.name] = have
        self.graph.dims.update(bound)
        for want, have in zip(shape, arr.shape):
            if not want.is_const and want.op != "var":
                try:
                    ok = want.evaluate(self.graph.dims) == have
                except UnboundDimError as e:
                    raise ValueError(f"input {name!r}: {e}") from None
                if not ok:
                    raise ValueError(
                        f"input {name!r}: dim {want} does not match {have} in shape {arr.shape}"
                    )
        host = self.dtype.numpy
        if self.dtype.is_float and not (
            np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_ or arr.dtype == host
        ):
            arr = arr.astype(np.float32)
        self.graph.set_data(node.id, np.ascontiguousarray(arr, dtype=host))
        return self

    def retrieve(self) -> GraphTensor:
        """Mark this tensor to be read with `.numpy()` after `execute()`."""
        self.graph.retrieved.add(self.id)
        self.graph._version += 1
        return self

    def keep(self) -> GraphTensor:
        """Keep this tensor's value alive on the device across executions (no copy back)."""
        self.graph.kept.add(self.id)
        self.graph._version += 1
        return self

    def numpy(self) -> np.ndarray:
        """The value after `execute()`, as a NumPy array of this tensor's shape and dtype."""
        from .backends.reference import read_view

        node = self.node
        flat = self.graph.fetch(self.id)
        if self.view.is_contiguous and self.view.shape == node.shape:
            dims = self.graph.dims
            return flat.reshape(tuple(d.evaluate(dims) for d in self.view.shape))
        return read_view(flat.reshape(-1), self.view, self.graph.dims)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def item(self) -> float | int | bool:
        return self.numpy().item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, dtype: DType | str) -> GraphTensor:
        """Convert to another dtype (a `Cast` node; a no-op when it already is)."""
        dtype = dtype_of(dtype)
        if dtype == self.dtype:
            return self
        return self._new(ops.Cast(dtype), self)

    def float(self) -> GraphTensor:
        return self.to("float32")

    def half(self) -> GraphTensor:
        return self.to("float16")

    def int(self) -> GraphTensor:
        return self.to("int32")

    def bool(self) -> GraphTensor:
        return self.to("bool")

    def type(self, dtype: DType | str) -> GraphTensor:
        return self.to(dtype)

    def contiguous(self) -> GraphTensor:
        """Materialise this view into a row-major buffer (a `Contiguous` node)."""
        return self._new(ops.Contiguous(), self)

    def contiguous_if_view(self) -> GraphTensor:
        """Self when it reads its node's buffer as is, else `contiguous()`."""
        if self.view.is_contiguous and self.view.shape == self.node.shape:
            return self
        return self.contiguous()

    def __repr__(self) -> str:
        return f"GraphTensor(node={self.id}, shape={show_shape(self.view.shape)}, {self.dtype!r})"

    def __bool__(self) -> bool:
        raise TypeError(
            "a GraphTensor has no value at graph-build time: use .numpy() after execute()"
        )

    def __iter__(self):
        n = len(self)
        return (self[i] for i in range(n))


def as_tensors(graph: Graph, items: Sequence) -> list[GraphTensor]:
    return [t if isinstance(t, GraphTensor) else graph.constant(t) for t in items]
