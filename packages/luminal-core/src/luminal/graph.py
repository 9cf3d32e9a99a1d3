"""The user's graph: the IR (`luminal.ir.Graph`) plus tensor creation and the reference fallback.

`Graph.tensor()` and friends return `GraphTensor` handles; high-level ops on those handles add
primitive nodes to the IR. `execute()` on a graph compiled without a backend runs the reference
backend and says so once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from . import ops
from .dtypes import DType, dtype_of, float32
from .hl_ops import creation
from .ir import Edge, GraphModifiedError, Node, RemovedTensorError
from .ir import Graph as IRGraph
from .reference import ReferenceBackend
from .shape import View, as_shape, show_shape
from .symbolic import Expr, ExprLike, to_expr
from .tensor import GraphTensor

__all__ = ["Edge", "Graph", "GraphModifiedError", "Node", "RemovedTensorError"]

T = TypeVar("T")


def _constant_key(value: float | int | bool | Expr, dtype: DType) -> tuple:
    # repr tells 0.0 from -0.0 and makes every NaN one key
    return (dtype, value) if isinstance(value, Expr) else (dtype, type(value), repr(value))


class Graph(IRGraph):
    """A lazy static graph. Build tensors, `compile()` once, `execute()` many times."""

    def wrap(self, node_id: int) -> GraphTensor:
        """A tensor handle reading node `node_id`'s whole output."""
        node = self.nodes[self.resolve(node_id)]
        return GraphTensor(self, node.id, View.contiguous(node.shape), node.dtype)

    def tensor(
        self, shape: Sequence[ExprLike], name: str | None = None, dtype: DType | str = float32
    ) -> GraphTensor:
        """A new input. Dims are ints or names of symbolic dims (`("seq", 576)`)."""
        shape = as_shape(shape)
        for d in shape:
            if d.is_const and d.value < 0:
                raise ValueError(f"input {name!r}: negative dimension in shape {show_shape(shape)}")
        name = name or f"input{self._next_id}"
        return self.wrap(self.add_node(ops.Input(name), [], shape, dtype_of(dtype)).id)

    def named_tensor(self, name: str, shape: Sequence[ExprLike], dtype=float32) -> GraphTensor:
        return self.tensor(shape, name=name, dtype=dtype)

    def constant(self, value: float | int | bool | Expr | str, dtype: DType | str = float32):
        """A scalar constant (shape ()): a number, or a symbolic expression over dims."""
        if isinstance(value, str):
            value = to_expr(value)
        if isinstance(value, Expr) and value.is_const:
            value = value.value
        dtype = dtype_of(dtype)
        if not isinstance(value, Expr):
            value = bool(value) if dtype.name == "bool" else (
                float(value) if dtype.is_float else int(value)
            )
        return self.wrap(self._interned_constant(value, dtype))

    def _interned_constant(self, value: float | int | bool | Expr, dtype: DType) -> int:
        """The node of a scalar constant, one per (value, dtype): a model's high-level ops ask
        for the same few scalars thousands of times (SmolLM2: a third of its graph were
        duplicate constants), and every pass would otherwise walk and merge them."""
        key = _constant_key(value, dtype)
        node = self.nodes.get(self._constants.get(key, -1))
        # a compiler may have removed or rewritten the node since
        if node is None or not isinstance(node.op, ops.Constant) or node.inputs or (
                _constant_key(node.op.value, node.dtype) != key):
            node = self.add_node(ops.Constant(value), [], (), dtype)
            self._constants[key] = node.id
        return node.id

    def shared(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()`'s result, built on the first call for `key` and returned again after.

        For what every layer of a model would otherwise build identically (RoPE angles,
        causal masks): one subgraph the layers share instead of a copy per layer, which
        common-subexpression elimination would have to find and merge at every compile.
        `key` must name everything the result depends on. Handles stay valid across
        compilation, so a shared tensor is as good after `compile()` as any other handle."""
        if key not in self._shared:
            self._shared[key] = build()
        return self._shared[key]

    def arange(self, start, end=None, step=1, dtype=None) -> GraphTensor:
        """`torch.arange` as a graph tensor, computed from the index (no data)."""
        return creation.arange(self, start, end, step, dtype)

    def full(self, shape, value, dtype=None) -> GraphTensor:
        """`torch.full`: every element `value` (an expanded scalar, no data)."""
        return creation.full(self, shape, value, dtype)

    def ones(self, shape, dtype: DType | str = float32) -> GraphTensor:
        return self.full(shape, 1.0 if dtype_of(dtype).is_float else 1, dtype)

    def zeros(self, shape, dtype: DType | str = float32) -> GraphTensor:
        return self.full(shape, 0.0 if dtype_of(dtype).is_float else 0, dtype)

    def eye(self, n: int, m: int | None = None, dtype: DType | str = float32) -> GraphTensor:
        """`torch.eye`: ones on the diagonal of an n x m matrix."""
        return creation.eye(self, n, m, dtype)

    def assign(self, target: GraphTensor, value: GraphTensor) -> None:
        """After each `execute()`, input `target` takes the value `value` had (on the device).

        This is how state (KV caches, optimizer moments, weights being trained) persists across
        executions without a host round trip. Ranks and dtypes must match; with symbolic dims
        the caller updates the dims it changed (e.g. the cache length) with `set_dim`.
        """
        tnode = self.nodes[self.resolve(target.id)]
        if not isinstance(tnode.op, ops.Input):
            raise TypeError("assign(): the target must be an input tensor made by Graph.tensor()")
        if len(value.shape) != len(tnode.shape) or value.dtype != tnode.dtype:
            raise ValueError(
                f"assign(): value {value.dtype.name}{show_shape(value.layout.shape)} does not "
                f"match target {tnode.dtype.name}{show_shape(tnode.shape)}"
            )
        self.add_assignment(tnode.id, value.contiguous_if_view().id)

    def write(self, target: GraphTensor, value: GraphTensor, dim: int,
              offset: ExprLike) -> None:
        """Each `execute()` stores `value` into input `target` at `offset` along `dim`, in
        place: the other positions keep their data (a KV cache of fixed capacity taking the
        new keys at the current length).

        Unlike `assign`, the input keeps its buffer, so nothing of size `target` is copied or
        rebound per run; a runtime may even compute `value` straight into it. So the graph
        must not read the positions being written in the same run (read `value` instead).
        `execute()` raises a ValueError when the rows would not fit.
        """
        tnode = self.nodes[self.resolve(target.id)]
        if not isinstance(tnode.op, ops.Input):
            raise TypeError("write(): the target must be an input tensor made by Graph.tensor()")
        rank = len(tnode.shape)
        if not -rank <= dim < rank:
            raise ValueError(f"write(): dim {dim} is out of range for a rank-{rank} target")
        dim %= rank
        shape = value.layout.shape
        same = len(shape) == rank and value.dtype == tnode.dtype and all(
            to_expr(a) == to_expr(b)
            for k, (a, b) in enumerate(zip(shape, tnode.shape)) if k != dim)
        if not same:
            raise ValueError(
                f"write(): value {value.dtype.name}{show_shape(shape)} does not match target "
                f"{tnode.dtype.name}{show_shape(tnode.shape)} outside dim {dim}"
            )
        self.add_write(tnode.id, value.contiguous_if_view().id, dim, to_expr(offset))

    def _install_default_runtime(self) -> None:
        """A graph executed without a backend runs on the reference backend (NumPy, one op
        at a time), with a warning."""
        warnings.warn(
            "execute(): no backend was compiled into this graph, so it runs on the "
            "reference backend (NumPy, slow); compile with a backend, e.g. "
            "g.compile((lm.GenericCompiler(), lm.backend())), or lm.backend('reference')",
            UserWarning, stacklevel=3,
        )
        ReferenceBackend().compile(self)
