"""Tensors made from nothing but their shape: arange, ones, zeros, full, eye, iota."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import ops
from ..dtypes import DType, dtype_of, float32, int32
from ..shape import as_shape
from ..symbolic import INF, Expr, ExprLike, to_expr

if TYPE_CHECKING:
    from ..graph import Graph
    from ..tensor import GraphTensor

IOTA_INDEX = Expr.var(ops.IOTA_VAR, 0, INF)


def iota(graph: Graph, expr: Expr, shape: Sequence[ExprLike], dtype: DType = int32) -> GraphTensor:
    """A tensor whose element at flat index `IOTA_INDEX` is `expr` (an integer expression)."""
    shape = as_shape(shape)
    return graph.wrap(graph.add_node(ops.Iota(expr, shape), [], shape, dtype_of(dtype)).id)


def full(graph: Graph, shape: Sequence[ExprLike], value, dtype: DType | str | None = None):
    if dtype is None:
        dtype = float32 if isinstance(value, float) else dtype_of("bool") if isinstance(
            value, bool) else int32
    return graph.constant(value, dtype).expand(as_shape(shape))


def arange(graph: Graph, start, end=None, step=1, dtype: DType | str | None = None):
    """`torch.arange`: [start, end) by step; ints give int32, floats float32."""
    if end is None:
        start, end = 0, start
    floats = any(isinstance(v, float) for v in (start, end, step))
    dtype = dtype_of(dtype) if dtype is not None else (float32 if floats else int32)
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if floats:
        n = max(math.ceil((end - start) / step), 0)
        idx = iota(graph, IOTA_INDEX, (n,), float32)
        return (idx * float(step) + float(start)).to(dtype)
    start, end = to_expr(start), to_expr(end)
    if step > 0:
        n = (end - start + (step - 1)) // step
    else:
        n = (start - end + (-step - 1)) // (-step)
    return iota(graph, IOTA_INDEX * step + start, (n,), dtype)


def eye(graph: Graph, n: int, m: int | None = None, dtype: DType | str = float32):
    from ..symbolic import lt

    m = n if m is None else m
    i = IOTA_INDEX
    diag = lt(i % m - (i // m), 1).__mul__(lt(i // m - i % m, 1))
    return iota(graph, diag, (n, m), dtype_of(dtype))
