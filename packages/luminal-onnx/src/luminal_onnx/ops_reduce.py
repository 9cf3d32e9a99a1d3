"""Reductions: Reduce*, ArgMax/ArgMin, CumSum and the Softmax family."""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm

from .ops_shape import axis_of
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext

_REDUCE = {
    "ReduceSum": lambda x, axes, keep: x.sum(axes, keepdim=keep),
    "ReduceMean": lambda x, axes, keep: x.mean(axes, keepdim=keep),
    "ReduceMax": lambda x, axes, keep: x.amax(axes, keepdim=keep),
    "ReduceMin": lambda x, axes, keep: x.amin(axes, keepdim=keep),
    "ReduceProd": lambda x, axes, keep: _prod(x, axes, keep),
    "ReduceL1": lambda x, axes, keep: x.abs().sum(axes, keepdim=keep),
    "ReduceL2": lambda x, axes, keep: (x * x).sum(axes, keepdim=keep).sqrt(),
    "ReduceSumSquare": lambda x, axes, keep: (x * x).sum(axes, keepdim=keep),
    "ReduceLogSum": lambda x, axes, keep: x.sum(axes, keepdim=keep).log(),
    "ReduceLogSumExp": lambda x, axes, keep: x.logsumexp(axes, keepdim=keep),
}
# the opset where each reduction's axes moved from an attribute to an input
_AXES_INPUT_FROM = {name: 13 if name == "ReduceSum" else 18 for name in _REDUCE}


def _prod(x: lm.GraphTensor, axes: list[int], keep: bool) -> lm.GraphTensor:
    for a in sorted(axes, reverse=True):
        x = x.prod(a, keepdim=keep)
    return x


@converter(*_REDUCE)
def _reduce(ctx: NodeContext):
    x = ctx.tensor(0)
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.opset >= _AXES_INPUT_FROM[ctx.op_type]:
        axes = ctx.static_ints(1) if ctx.has(1) else []
    else:
        axes = ctx.attr("axes", [])
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.ndim))
    axes = sorted({axis_of(ctx, a, x.ndim) for a in axes})
    if not axes:  # a 0-d input
        return x
    out = _REDUCE[ctx.op_type](x, axes, keep)
    return out.to(x.dtype)


@converter("ArgMax", "ArgMin")
def _arg_extreme(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), x.ndim)
    keep = bool(ctx.attr("keepdims", 1))
    pick = (lambda t: t.argmax(axis, keepdim=keep)) if ctx.op_type == "ArgMax" else (
        lambda t: t.argmin(axis, keepdim=keep))
    if ctx.attr("select_last_index", 0):
        return (x.shape[axis] - 1) - pick(x.flip(axis))
    return pick(x)


@converter("CumSum")
def _cumsum(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = axis_of(ctx, int(ctx.static(1).item()), x.ndim)
    reverse, exclusive = ctx.attr("reverse", 0), ctx.attr("exclusive", 0)
    if reverse:
        x = x.flip(axis)
    out = x.cumsum(axis)
    if exclusive:
        out = out - x
    return (out.flip(axis) if reverse else out).to(x.dtype)


def _coerced(ctx: NodeContext, fn):
    """Softmax-like ops: along `axis` (opset >= 13) or over the 2-D coercion at `axis`."""
    x = ctx.tensor(0)
    default = -1 if ctx.opset >= 13 else 1
    axis = axis_of(ctx, ctx.attr("axis", default), x.ndim)
    if ctx.opset >= 13:
        return fn(x, axis)
    flat = x.reshape((*x.shape[:axis], -1)) if axis else x.reshape((1, -1))
    return fn(flat, flat.ndim - 1).reshape(x.shape)


@converter("Softmax")
def _softmax(ctx: NodeContext):
    return _coerced(ctx, lambda x, a: x.softmax(a))


@converter("LogSoftmax")
def _log_softmax(ctx: NodeContext):
    return _coerced(ctx, lambda x, a: x.log_softmax(a))


@converter("Hardmax")
def _hardmax(ctx: NodeContext):
    def hardmax(x, a):
        index = x.argmax(a, keepdim=True)
        positions = x.graph.arange(x.shape[a]).reshape((-1,) + (1,) * (x.ndim - 1 - a))
        return (index == positions).to(x.dtype)

    return _coerced(ctx, hardmax)
