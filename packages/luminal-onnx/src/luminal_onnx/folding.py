"""Import-time evaluation of shape arithmetic (Shape -> Gather -> Concat -> Reshape chains).

When every input of one of these small operators is known at import time, its output is
computed here with NumPy instead of adding graph nodes, so the shapes, axes and sizes that
later operators need stay known. Arrays may hold symbolic dims (`luminal.Expr`) as objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .ops_shape import axis_of, reshape_target, slice_params

if TYPE_CHECKING:
    from .importer import NodeContext

# larger import-time arrays are left to the graph (they are data, not shapes)
_MAX_FOLDED = 1 << 16


def _axes(ctx: NodeContext):
    return ctx.attr("axes", None) if ctx.opset < 13 else (
        ctx.static_ints(1) if ctx.has(1) else None)


def _unsqueeze(ctx, x):
    axes = _axes(ctx)
    rank = x.ndim + len(axes)
    for a in sorted(axis_of(ctx, a, rank) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _squeeze(ctx, x):
    axes = _axes(ctx)
    return np.squeeze(x) if axes is None else np.squeeze(
        x, tuple(axis_of(ctx, a, x.ndim) for a in axes))


def _int_div(a, b):
    if a.dtype.kind == "f":
        return (a / b).astype(a.dtype)
    return np.asarray(np.trunc(np.asarray(a / b, dtype=np.float64)), dtype=a.dtype) if (
        a.dtype != object) else a // b


def _cast(ctx, x):
    from . import dtypes

    to = dtypes.onnx_numpy_dtype(ctx.attr("to"))
    if to is None:
        return None
    ctx.attr("saturate", 1)
    return x if x.dtype == object and to.kind in "iu" else x.astype(to)


_FOLDERS = {
    "Identity": lambda ctx, x: x,
    "Cast": _cast,
    "Unsqueeze": lambda ctx, x, *_: _unsqueeze(ctx, x),
    "Squeeze": lambda ctx, x, *_: _squeeze(ctx, x),
    "Concat": lambda ctx, *xs: np.concatenate(xs, axis=ctx.attr("axis")),
    "Gather": lambda ctx, x, i: np.take(x, i, axis=ctx.attr("axis", 0)),
    "Reshape": lambda ctx, x, s: x.reshape(
        reshape_target(list(x.shape), [int(v) for v in s], ctx.attr("allowzero", 0))),
    "Slice": lambda ctx, x, *_: x[tuple(slice_params(ctx, x.shape))],
    "Add": lambda ctx, a, b: a + b,
    "Sub": lambda ctx, a, b: a - b,
    "Mul": lambda ctx, a, b: a * b,
    "Div": lambda ctx, a, b: _int_div(a, b),
    "Neg": lambda ctx, x: -x,
    "Equal": lambda ctx, a, b: np.equal(a, b),
    "Less": lambda ctx, a, b: np.less(a, b),
    "Greater": lambda ctx, a, b: np.greater(a, b),
    "Not": lambda ctx, x: np.logical_not(x),
    "Where": lambda ctx, c, a, b: np.where(c, a, b),
    "Min": lambda ctx, *xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
    "Max": lambda ctx, *xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
}


def fold(ctx: NodeContext):
    """The node's outputs computed now, or None when it must become graph nodes."""
    folder = _FOLDERS.get(ctx.op_type)
    if folder is None or not ctx.inputs:
        return None
    present = [v for v in ctx.inputs if v is not None]
    if not present or not all(isinstance(v, np.ndarray) for v in present):
        return None
    if any(v.size > _MAX_FOLDED for v in present):
        return None
    out = folder(ctx, *ctx.inputs)
    return None if out is None else np.asarray(out)
