"""`TensorBase`: what every high-level op needs from a tensor handle (its graph, node, view
and dtype) and the two ways to make a new one: another view of the same node, or a new node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import ops
from ..ir import Edge, RemovedTensorError
from ..shape import View
from ..symbolic import Expr, const_or_expr

if TYPE_CHECKING:
    from ..dtypes import DType
    from ..ir import Graph


class TensorBase:
    """A node's output seen through a `View` (`layout`); `luminal.GraphTensor` builds on it."""

    __slots__ = ("_id", "dtype", "graph", "layout")

    def __init__(self, graph: Graph, node_id: int, view: View, dtype: DType):
        self.graph = graph
        self._id = node_id
        self.layout = view
        self.dtype = dtype

    # ----- identity -----------------------------------------------------------------------
    @property
    def id(self) -> int:
        """Id of the live node holding this tensor's data (stable across compilation)."""
        return self.graph.resolve(self._id)

    @property
    def node(self):
        node = self.graph.nodes.get(self.id)
        if node is None:
            raise RemovedTensorError(
                f"this tensor (node {self.id}) was removed by compilation: call .retrieve() "
                f"(or .keep()) on it before compile() to use it afterwards"
            )
        return node

    @property
    def shape(self) -> tuple[int | Expr, ...]:
        """Dims as ints, or symbolic `Expr`s for dims that depend on named dims."""
        return tuple(const_or_expr(d) for d in self.layout.shape)

    @property
    def ndim(self) -> int:
        return len(self.layout.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int | Expr:
        return const_or_expr(self.layout.numel)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        first = self.shape[0]
        if isinstance(first, Expr):
            raise TypeError(f"len() of a tensor whose first dim is symbolic ({first})")
        return first

    __hash__ = object.__hash__

    def _with_view(self, view: View) -> TensorBase:
        return type(self)(self.graph, self._id, view, self.dtype)

    def _new(self, op: ops.Op, *inputs: TensorBase) -> TensorBase:
        """Add a node computing `op` on `inputs` (read through their views)."""
        shapes = [t.layout.shape for t in inputs]
        node = self.graph.add_node(
            op,
            [Edge(t.id, t.layout) for t in inputs],
            op.output_shape(shapes),
            op.output_dtype([t.dtype for t in inputs]),
        )
        return type(self)(self.graph, node.id, View.contiguous(node.shape), node.dtype)
