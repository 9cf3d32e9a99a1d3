"""Linear (de)quantization to uint8: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear."""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm

from .ops_shape import axis_of
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _along_axis(ctx: NodeContext, t: lm.GraphTensor, rank: int) -> lm.GraphTensor:
    """A per-axis scale / zero point (1-D) shaped to broadcast over `axis` of a rank-`rank`
    tensor; a scalar stays as it is."""
    if t.ndim == 0 or rank == 0:
        return t
    axis = axis_of(ctx, ctx.attr("axis", 1), rank)
    return t.reshape((-1,) + (1,) * (rank - 1 - axis))


def _saturate(q: lm.GraphTensor) -> lm.GraphTensor:
    return q.round().clamp(0.0, 255.0).to(lm.uint8)


@converter("QuantizeLinear")
def _quantize(ctx: NodeContext):
    x = ctx.tensor(0)
    ctx.attr("saturate", 1)
    if ctx.has(2) and ctx.tensor(2).dtype != lm.uint8:
        raise ctx.fail(f"quantizing to {ctx.tensor(2).dtype.name} is not supported (uint8 is)")
    if ctx.attr("block_size", 0):
        raise ctx.fail("blocked quantization is not supported")
    scale = _along_axis(ctx, ctx.tensor(1), x.ndim)
    q = x.float() / scale
    if ctx.has(2):
        q = q.round() + _along_axis(ctx, ctx.tensor(2), x.ndim).to(lm.float32)
    return _saturate(q)


@converter("DequantizeLinear")
def _dequantize(ctx: NodeContext):
    x = ctx.tensor(0)
    if ctx.attr("block_size", 0):
        raise ctx.fail("blocked quantization is not supported")
    values = x.to(lm.float32)
    if ctx.has(2):
        values = values - _along_axis(ctx, ctx.tensor(2), x.ndim).to(lm.float32)
    return values * _along_axis(ctx, ctx.tensor(1), x.ndim)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: NodeContext):
    x = ctx.tensor(0)
    high = lm.maximum(x.amax(), 0.0)
    low = lm.minimum(x.amin(), 0.0)
    scale = (high - low) / 255.0
    zero = _saturate(-low / scale)
    return [_saturate((x / scale).round() + zero.to(lm.float32)), scale, zero]
