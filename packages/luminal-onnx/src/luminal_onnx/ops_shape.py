"""Shape and movement ONNX operators: reshapes, slices, concatenation, gathers, padding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm
import numpy as np

from .ops_elementwise import cast_to
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def axis_of(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


@converter("Constant")
def _constant(ctx: NodeContext):
    for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
        if key in ctx.attrs:
            value = ctx.attr(key)
            if isinstance(value, np.ndarray):
                return value
            kind = np.float32 if "float" in key else np.int64
            return np.asarray(value, dtype=kind)
    raise ctx.fail(f"no supported value attribute among {sorted(ctx.attrs)}")


@converter("Shape")
def _shape(ctx: NodeContext):
    dims = ctx.inputs[0].shape
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    dims = list(dims)[slice(start, end)]
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return np.asarray(dims, dtype=np.int64)
    return np.asarray(dims, dtype=object)  # symbolic dims stay expressions


@converter("Size")
def _size(ctx: NodeContext):
    x = ctx.inputs[0]
    n = x.size if isinstance(x, np.ndarray) else x.numel()
    return np.asarray(n, dtype=np.int64 if isinstance(n, (int, np.integer)) else object)


def reshape_target(in_shape, shape: list, allowzero: int) -> list:
    """ONNX Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred."""
    if not allowzero:
        shape = [in_shape[k] if isinstance(d, int) and d == 0 else d for k, d in enumerate(shape)]
    return shape


@converter("Reshape")
def _reshape(ctx: NodeContext):
    x = ctx.tensor(0)
    target = reshape_target(list(x.shape), ctx.static_ints(1), ctx.attr("allowzero", 0))
    try:
        return x.reshape(target)
    except ValueError as e:
        raise ctx.fail(str(e)) from None


@converter("Flatten")
def _flatten(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis  # in [-rank, rank]
    if not 0 <= axis <= x.ndim:
        raise ctx.fail(f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    if axis == 0:
        return x.reshape((1, -1))
    lead = x.flatten(0, axis - 1)  # (outer, *rest)
    return lead.reshape((lead.shape[0], -1))


@converter("Transpose")
def _transpose(ctx: NodeContext):
    x = ctx.tensor(0)
    perm = ctx.attr("perm", None)
    return x.permute(list(perm) if perm is not None else list(reversed(range(x.ndim))))


def _axes(ctx: NodeContext, input_index: int):
    """Axes from the `axes` attribute (before opset 13) or input (from 13), or None."""
    if ctx.opset < 13:
        return ctx.attr("axes", None)
    return ctx.static_ints(input_index) if ctx.has(input_index) else None


@converter("Squeeze")
def _squeeze(ctx: NodeContext):
    x = ctx.tensor(0)
    axes = _axes(ctx, 1)
    if axes is None:
        return x.squeeze()
    return x.squeeze([axis_of(ctx, a, x.ndim) for a in axes]) if axes else x


@converter("Unsqueeze")
def _unsqueeze(ctx: NodeContext):
    x = ctx.tensor(0)
    axes = _axes(ctx, 1)
    rank = x.ndim + len(axes)
    for a in sorted(axis_of(ctx, a, rank) for a in axes):
        x = x.unsqueeze(a)
    return x


@converter("Concat")
def _concat(ctx: NodeContext):
    parts = [ctx.tensor(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    axis = axis_of(ctx, ctx.attr("axis"), parts[0].ndim)
    parts = [p for p in parts if not (isinstance(p.shape[axis], int) and p.shape[axis] == 0)]
    return lm.cat(parts, axis) if len(parts) > 1 else parts[0]


@converter("Split")
def _split(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), x.ndim)
    n_out = len(ctx.node.output)
    if ctx.opset >= 13:
        sizes = ctx.static_ints(1) if ctx.has(1) else None
    else:
        sizes = ctx.attr("split", None)
    if ctx.opset >= 18:
        n_out = ctx.attr("num_outputs", n_out)
    if sizes is None:
        size = x.shape[axis]
        if not isinstance(size, int):
            raise ctx.fail("splitting a symbolic dim into equal parts is not supported")
        chunk = -(-size // n_out)
        sizes = [min(chunk, size - k * chunk) for k in range(n_out)]
    out, start = [], 0
    for s in sizes:
        out.append(x._slice_axis(axis, start, start + s))
        start += s
    return out


def _clamp_index(v, big: int):
    """ONNX uses INT64_MAX / INT64_MIN for "to the end"; keep them within int32."""
    return v if isinstance(v, lm.Expr) else max(min(v, big), -big - 1)


def slice_params(ctx: NodeContext, shape) -> list[slice]:
    """Python slices per axis from Slice's starts/ends/axes/steps."""
    starts, ends = ctx.static_ints(1), ctx.static_ints(2)
    axes = ctx.static_ints(3) if ctx.has(3) else list(range(len(starts)))
    steps = ctx.static_ints(4) if ctx.has(4) else [1] * len(starts)
    index = [slice(None)] * len(shape)
    big = 2**31 - 1
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ctx.fail("a slice step of 0 is invalid")
        start, end = _clamp_index(start, big), _clamp_index(end, big)
        if step < 0 and isinstance(end, int) and end < -big + 1:
            end = None  # slice to the very beginning
        index[axis_of(ctx, axis, len(shape))] = slice(start, end, step)
    return index


@converter("Slice")
def _slice(ctx: NodeContext):
    x = ctx.tensor(0)
    if ctx.opset < 10:
        raise ctx.fail("attribute-style Slice (opset < 10) is not supported")
    out = x
    for axis, s in enumerate(slice_params(ctx, x.shape)):
        if s != slice(None):
            out = out._slice_axis(axis, s.start, s.stop, s.step)
    return out


def _normalized_index(index: lm.GraphTensor, size) -> lm.GraphTensor:
    """ONNX indices may be negative (counted from the end)."""
    index = index.to(lm.int32)
    return index + (index < 0).to(lm.int32) * size


@converter("Gather")
def _gather(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), x.ndim)
    index = _normalized_index(ctx.tensor(1), x.shape[axis])
    flat = index.reshape((-1,)) if index.ndim != 1 else index
    out = x.index_select(axis, flat)
    return out.reshape((*out.shape[:axis], *index.shape, *out.shape[axis + 1:]))


@converter("GatherElements")
def _gather_elements(ctx: NodeContext):
    x = ctx.tensor(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), x.ndim)
    return x.gather(axis, _normalized_index(ctx.tensor(1), x.shape[axis]))


@converter("Expand")
def _expand(ctx: NodeContext):
    x = ctx.tensor(0)
    shape = ctx.static_ints(1)
    rank = max(len(shape), x.ndim)
    have = [1] * (rank - x.ndim) + list(x.shape)
    want = [1] * (rank - len(shape)) + list(shape)
    out = [h if isinstance(w, int) and w == 1 else w for h, w in zip(have, want)]
    return x.reshape(have).expand(out) if rank != x.ndim else x.expand(out)


@converter("Tile")
def _tile(ctx: NodeContext):
    return ctx.tensor(0).repeat(ctx.static_ints(1))


@converter("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext):
    shape = ctx.static_ints(0)
    value = ctx.attr("value", np.zeros(1, dtype=np.float32)).reshape(-1)
    if all(isinstance(d, int) for d in shape):
        return np.full(shape, value[0], dtype=value.dtype)
    return ctx.importer.constant(value.reshape(()), ctx.name).expand(shape)


@converter("Range")
def _range(ctx: NodeContext):
    start, limit, delta = (ctx.static(i).item() for i in range(3))
    return np.arange(start, limit, delta, dtype=ctx.static(0).dtype)


@converter("Pad")
def _pad(ctx: NodeContext):
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value = ctx.attr("pads"), ctx.attr("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = ctx.static_ints(1)
        value = ctx.static(2).item() if ctx.has(2) else 0
        axes = [axis_of(ctx, a, x.ndim) for a in ctx.static_ints(3)] if ctx.has(3) else list(
            range(x.ndim))
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.fail(f"pad mode {mode!r} is not supported")
    n = len(axes)
    if mode != "constant":
        for k, axis in enumerate(axes):
            x = _pad_by_copy(ctx, x, axis, pads[k], pads[k + n], mode)
        return x
    flat = [0] * (2 * x.ndim)
    for k, axis in enumerate(axes):
        # F.pad order: last axis first, (left, right)
        flat[2 * (x.ndim - 1 - axis)] = pads[k]
        flat[2 * (x.ndim - 1 - axis) + 1] = pads[k + n]
    return x.pad(flat, value=value)


def _pad_by_copy(ctx: NodeContext, x: lm.GraphTensor, axis: int, before: int, after: int,
                 mode: str) -> lm.GraphTensor:
    """Edge, reflect or wrap padding of one axis, from slices of `x` itself."""
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ctx.fail(f"{mode} padding of a symbolic dim is not supported")
    if mode == "reflect" and max(before, after) >= n:
        raise ctx.fail(f"reflect padding of {max(before, after)} needs a dim larger than {n}")
    if before < 0 or after < 0:
        raise ctx.fail(f"negative pads are not supported in {mode} mode")

    def take(start, stop, flip=False):
        part = x._slice_axis(axis, start, stop)
        return part.flip(axis) if flip else part

    if mode == "edge":
        left = [take(0, 1)] * before
        right = [take(n - 1, n)] * after
    elif mode == "reflect":
        left = [take(1, before + 1, flip=True)] if before else []
        right = [take(n - 1 - after, n - 1, flip=True)] if after else []
    else:
        left = [take(n - before, n)] if before else []
        right = [take(0, after)] if after else []
    return lm.cat([*left, x, *right], axis)


@converter("DepthToSpace")
def _depth_to_space(ctx: NodeContext):
    x = ctx.tensor(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.shape
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape((n, b, b, c // (b * b), h, w)).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape((n, c // (b * b), b, b, h, w)).permute(0, 1, 4, 2, 5, 3)
    return y.reshape((n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth")
def _space_to_depth(ctx: NodeContext):
    x = ctx.tensor(0)
    b = ctx.attr("blocksize")
    n, c, h, w = x.shape
    y = x.reshape((n, c, h // b, b, w // b, b)).permute(0, 3, 5, 1, 2, 4)
    return y.reshape((n, c * b * b, h // b, w // b))


@converter("Trilu")
def _trilu(ctx: NodeContext):
    x = ctx.tensor(0)
    k = int(ctx.static(1).item()) if ctx.has(1) else 0
    upper = ctx.attr("upper", 1)
    if 0 in x.shape:
        return x
    return x.triu(k) if upper else x.tril(k)


@converter("EyeLike")
def _eye_like(ctx: NodeContext):
    x = ctx.tensor(0)
    n, m = x.shape
    eye = x.graph.eye(n, m)
    if ctx.attr("k", 0):
        eye = eye.pad((ctx.attr("k", 0), 0))[:, :m] if ctx.attr("k", 0) > 0 else eye.pad(
            (0, 0, -ctx.attr("k", 0), 0))[:n]
    dtype = ctx.attr("dtype", None)
    return cast_to(ctx, eye, dtype) if dtype is not None else eye.to(x.dtype)


@converter("OneHot")
def _one_hot(ctx: NodeContext):
    index = ctx.tensor(0)
    depth = int(ctx.static(1).item())
    values = ctx.tensor(2)
    axis = ctx.attr("axis", -1)
    index = index.to(lm.int32)
    index = index + (index < 0).to(lm.int32) * depth
    hot = index.unsqueeze(-1) == index.graph.arange(depth)
    off, on = values[0], values[1]
    out = lm.where(hot, on, off)
    rank = out.ndim
    axis = axis % rank
    return out.movedim(-1, axis) if axis != rank - 1 else out


@converter("ReverseSequence")
def _reverse_sequence(ctx: NodeContext):
    x, lengths = ctx.tensor(0), ctx.tensor(1).to(lm.int32)
    time_axis, batch_axis = ctx.attr("time_axis", 0), ctx.attr("batch_axis", 1)
    steps = x.graph.arange(x.shape[time_axis]).reshape(
        (-1, 1) if time_axis < batch_axis else (1, -1))
    lengths = lengths.reshape((1, -1) if time_axis < batch_axis else (-1, 1))
    # the first `length` steps of each sequence reversed, the rest kept in place
    source = lm.where(steps < lengths, lengths - 1 - steps, steps)
    source = source.reshape(source.shape + (1,) * (x.ndim - 2)).expand(x.shape)
    return x.gather(time_axis, source)
