"""Tensors made from nothing but their shape: arange, linspace, ones, zeros, full, eye, iota,
the `*_like` forms, and random tensors (drawn on the host when the graph is built)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import ops
from ..dtypes import DType, dtype_of, float32, int32
from ..shape import View, as_shape
from ..symbolic import INF, Expr, ExprLike, to_expr

if TYPE_CHECKING:
    from ..graph import Graph
    from ..tensor import GraphTensor

IOTA_INDEX = Expr.var(ops.IOTA_VAR, 0, INF)


def iota(graph: Graph, expr: Expr, shape: Sequence[ExprLike], dtype: DType = int32) -> GraphTensor:
    """A tensor whose element at flat index `IOTA_INDEX` is `expr` (an integer expression)."""
    from ..tensor import GraphTensor

    shape = as_shape(shape)
    dtype = dtype_of(dtype)
    node = graph.add_node(ops.Iota(expr, shape), [], shape, dtype)
    return GraphTensor(graph, node.id, View.contiguous(shape), dtype)


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
    if n < 0 or m < 0:
        raise ValueError(f"eye: sizes must be non-negative, got ({n}, {m})")
    if n == 0 or m == 0:  # nothing to index (and i % 0 is undefined)
        return full(graph, (n, m), 0, dtype_of(dtype))
    i = IOTA_INDEX
    diag = lt(i % m - (i // m), 1).__mul__(lt(i // m - i % m, 1))
    return iota(graph, diag, (n, m), dtype_of(dtype))


def linspace(graph: Graph, start: float, end: float, steps: int,
             dtype: DType | str | None = None) -> GraphTensor:
    """`torch.linspace`: the first half counts up from start, the second half down from end
    (PyTorch's rule, so both ends are exact)."""
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    dtype = dtype_of(dtype) if dtype is not None else float32
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    i = iota(graph, IOTA_INDEX, (steps,), float32)
    from .binary import where

    half = steps // 2
    out = where(i < half, i * step + float(start), float(end) - (steps - 1 - i) * step)
    return out if dtype.is_float else out.to(dtype)


def full_like(x: GraphTensor, value, dtype: DType | str | None = None) -> GraphTensor:
    return full(x.graph, x.layout.shape, value, x.dtype if dtype is None else dtype)


def zeros_like(x: GraphTensor, dtype: DType | str | None = None) -> GraphTensor:
    return full_like(x, 0, dtype)


def ones_like(x: GraphTensor, dtype: DType | str | None = None) -> GraphTensor:
    return full_like(x, 1, dtype)


def _random_input(graph: Graph, shape, dtype, draw, name: str) -> GraphTensor:
    """An input bound to values drawn now with NumPy (a graph has no random op: re-`set()` it
    to draw again, or seed with `np.random.seed`)."""
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(
        shape)
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError(f"{name}: dims must be ints >= 0, got {shape}")
    dtype = dtype_of(dtype)
    return graph.tensor(shape, name=name, dtype=dtype).set(draw(shape).astype(dtype.numpy))


def rand(graph: Graph, *shape, dtype: DType | str = float32) -> GraphTensor:
    """Uniform [0, 1) values, drawn on the host (see `_random_input`)."""
    import numpy as np

    return _random_input(graph, shape, dtype, np.random.random_sample, "rand")


def randn(graph: Graph, *shape, dtype: DType | str = float32) -> GraphTensor:
    """Standard normal values, drawn on the host (see `_random_input`)."""
    import numpy as np

    return _random_input(graph, shape, dtype, np.random.standard_normal, "randn")


def randint(graph: Graph, low: int, high: int, size, dtype: DType | str = int32) -> GraphTensor:
    """Integers in [low, high), drawn on the host (see `_random_input`)."""
    import numpy as np

    return _random_input(graph, (tuple(size),), dtype,
                         lambda shape: np.random.randint(low, high, shape), "randint")
