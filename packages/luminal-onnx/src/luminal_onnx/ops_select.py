"""Index-driven operators: TopK, GatherND, ScatterElements and ScatterND.

Scatters are one-hot compositions: each update is matched against every position of the
scattered axis, so they suit the small index sets of real models.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import TYPE_CHECKING

import luminal as lm

from .ops_shape import axis_of
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _lowest(x: lm.GraphTensor):
    return -math.inf if x.dtype.is_float else -(2**31)


@converter("TopK")
def _top_k(ctx: NodeContext):
    x = ctx.tensor(0)
    k = int(ctx.static(1).reshape(-1)[0]) if ctx.opset >= 10 else ctx.attr("k")
    axis = axis_of(ctx, ctx.attr("axis", -1), x.ndim)
    largest = ctx.attr("largest", 1)
    if not ctx.attr("sorted", 1):
        raise ctx.fail("sorted=0 is not supported")
    work = x if largest else -x
    positions = x.graph.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    values, indices = [], []
    for _ in range(k):  # repeated argmax: ties resolve to the lower index, as ONNX says
        index = work.argmax(axis, keepdim=True)
        best = work.amax(axis, keepdim=True)
        values.append(best if largest else -best)
        indices.append(index)
        work = lm.where(positions == index, _lowest(work), work)
    return [lm.cat(values, axis).to(x.dtype), lm.cat(indices, axis)]


def _linear_index(index: lm.GraphTensor, dims: list[int]) -> lm.GraphTensor:
    """(..., k) multi-indices into the leading `dims` as flat row-major offsets (...)."""
    flat = None
    for j, size in enumerate(dims):
        part = index[..., j].to(lm.int32)
        part = part + (part < 0).to(lm.int32) * size
        flat = part if flat is None else flat * size + part
    return flat


def _static_dims(ctx: NodeContext, shape) -> list[int]:
    if not all(isinstance(d, int) for d in shape):
        raise ctx.fail("indexed dims must be static")
    return list(shape)


@converter("GatherND")
def _gather_nd(ctx: NodeContext):
    if ctx.attr("batch_dims", 0):
        raise ctx.fail("batch_dims > 0 is not supported")
    data, index = ctx.tensor(0), ctx.tensor(1)
    k = index.shape[-1]
    dims = _static_dims(ctx, data.shape[:k])
    rest = list(data.shape[k:])
    flat = data.reshape((math.prod(dims), *rest))
    offsets = _linear_index(index, dims)
    picked = flat.index_select(0, offsets.reshape((-1,)))
    return picked.reshape((*index.shape[:-1], *rest))


def _combine(ctx: NodeContext, old: lm.GraphTensor, new: lm.GraphTensor, hit: lm.GraphTensor):
    reduction = ctx.attr("reduction", "none")
    if reduction == "none":
        return lm.where(hit, new, old)
    if reduction == "add":
        return old + new
    if reduction == "mul":
        return old * new
    raise ctx.fail(f"reduction {reduction!r} is not supported")


def _scatter_rows(ctx: NodeContext, rows: lm.GraphTensor, offsets: lm.GraphTensor,
                  updates: lm.GraphTensor) -> lm.GraphTensor:
    """rows (P, *rest) with updates (Q, *rest) written at offsets (Q,)."""
    count = rows.shape[0]
    hit = offsets.unsqueeze(-1) == rows.graph.arange(count)  # (Q, P)
    covered = hit.any(0)
    hit_f = hit.to(updates.dtype)
    extra = (1,) * (updates.ndim - 1)
    if ctx.attr("reduction", "none") == "mul":
        factors = reduce(lambda a, b: a * b, [
            lm.where(hit[q].reshape((count, *extra)), updates[q].unsqueeze(0), 1)
            for q in range(offsets.shape[0])])
        return rows * factors
    moved = (hit_f.reshape((*hit_f.shape, *extra)) * updates.unsqueeze(1)).sum(0)
    return _combine(ctx, rows, moved, covered.reshape((count, *extra)))


@converter("ScatterND")
def _scatter_nd(ctx: NodeContext):
    data, index, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    k = index.shape[-1]
    dims = _static_dims(ctx, data.shape[:k])
    rest = list(data.shape[k:])
    rows = data.reshape((math.prod(dims), *rest))
    offsets = _linear_index(index, dims).reshape((-1,))
    flat_updates = updates.reshape((-1, *rest))
    return _scatter_rows(ctx, rows, offsets, flat_updates).reshape(data.shape)


@converter("ScatterElements", "Scatter")
def _scatter_elements(ctx: NodeContext):
    data, index, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    axis = axis_of(ctx, ctx.attr("axis", 0), data.ndim)
    size = data.shape[axis]
    index = index.to(lm.int32)
    index = index + (index < 0).to(lm.int32) * size
    # pad index/updates up to data's shape on the other axes; padding never hits
    pads = []
    for a in reversed(range(data.ndim)):
        pads += [0, 0] if a == axis else [0, data.shape[a] - index.shape[a]]
    index = index.pad(pads, value=-1)
    updates = updates.pad(pads)
    hit = index.unsqueeze(-1) == data.graph.arange(size)  # (..., K, N) along axis
    hit = hit.movedim(axis, -2)
    moved_updates = updates.movedim(axis, -1).unsqueeze(-1)
    scattered = (hit.to(updates.dtype) * moved_updates).sum(-2).movedim(-1, axis)
    covered = hit.any(-2).movedim(-1, axis)
    if ctx.attr("reduction", "none") == "mul":
        raise ctx.fail("reduction 'mul' is not supported for ScatterElements")
    return _combine(ctx, data, scattered.to(data.dtype), covered)
