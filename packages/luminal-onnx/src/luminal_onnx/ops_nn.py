"""Neural-network ONNX operators: convolution, pooling, normalization, matmul, resize."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import luminal as lm
import luminal_nn.functional as F
import numpy as np

from .ops_shape import axis_of
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _static_dim(ctx: NodeContext, d, what: str) -> int:
    if not isinstance(d, int):
        raise ctx.fail(f"{what} must be static, got the symbolic size {d}")
    return d


def _window_pads(ctx: NodeContext, x: lm.GraphTensor, kernel, strides, dilations):
    """(begin, end) padding per spatial axis from `pads` or `auto_pad`."""
    spatial = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    pads = ctx.attr("pads", [0] * 2 * spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for k in range(spatial):
            size = _static_dim(ctx, x.shape[2 + k], "a SAME-padded spatial dim")
            span = (kernel[k] - 1) * dilations[k] + 1
            total = max((math.ceil(size / strides[k]) - 1) * strides[k] + span - size, 0)
            small = total // 2
            out.append((small, total - small) if auto_pad == "SAME_UPPER" else
                       (total - small, small))
        return out
    if auto_pad == "VALID":
        return [(0, 0)] * spatial
    if auto_pad != "NOTSET":
        raise ctx.fail(f"auto_pad {auto_pad!r} is not supported")
    return [(pads[k], pads[k + spatial]) for k in range(spatial)]


def _flat_pads(pads) -> list[int]:
    """(begin, end) per spatial axis as F.pad's list (last axis first)."""
    return [p for pair in reversed(pads) for p in pair]


def _window_attrs(ctx: NodeContext, x: lm.GraphTensor, kernel=None):
    kernel = list(kernel if kernel is not None else ctx.attr("kernel_shape"))
    spatial = len(kernel)
    strides = list(ctx.attr("strides", [1] * spatial))
    dilations = list(ctx.attr("dilations", [1] * spatial))
    return kernel, strides, dilations, _window_pads(ctx, x, kernel, strides, dilations)


@converter("Conv")
def _conv(ctx: NodeContext):
    bias = ctx.tensor(2) if ctx.has(2) else None
    return _convolve(ctx, ctx.tensor(0), ctx.tensor(1), bias)


def _zero_pointed(ctx: NodeContext, i: int, zero_point: int, rank: int) -> lm.GraphTensor:
    """Integer input `i` minus its zero point (input `zero_point`), as float32."""
    x = ctx.tensor(i).to(lm.float32)
    if not ctx.has(zero_point):
        return x
    zp = ctx.tensor(zero_point).to(lm.float32)
    return x - (zp.reshape((-1,) + (1,) * (rank - 1)) if zp.ndim == 1 and rank > 1 and
                zp.shape[0] != 1 else zp)


@converter("ConvInteger")
def _conv_integer(ctx: NodeContext):
    x, w = _zero_pointed(ctx, 0, 2, 1), _zero_pointed(ctx, 1, 3, ctx.tensor(1).ndim)
    return _convolve(ctx, x, w, None).round().to(lm.int32)


@converter("MatMulInteger")
def _matmul_integer(ctx: NodeContext):
    a = _zero_pointed(ctx, 0, 2, 1)
    b = ctx.tensor(1).to(lm.float32)
    if ctx.has(3):
        b = b - ctx.tensor(3).to(lm.float32)  # per column of b: broadcasts over the last axis
    return lm.matmul(a, b).round().to(lm.int32)


def _convolve(ctx: NodeContext, x: lm.GraphTensor, w: lm.GraphTensor, bias):
    spatial = w.ndim - 2
    if spatial not in (1, 2, 3):
        raise ctx.fail(f"{spatial}-D convolution is not supported (1-D to 3-D are)")
    kernel = [_static_dim(ctx, d, "the kernel size") for d in w.shape[2:]]
    ctx.attr("kernel_shape", None)
    kernel, strides, dilations, pads = _window_attrs(ctx, x, kernel)
    groups = ctx.attr("group", 1)
    if any(b != e for b, e in pads):
        x, padding = x.pad(_flat_pads(pads)), 0
    else:
        padding = [b for b, _ in pads]
    conv = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
    return conv(x, w, bias, stride=strides, padding=padding, dilation=dilations, groups=groups)


def _pool_input(ctx: NodeContext):
    x = ctx.tensor(0)
    kernel, strides, dilations, pads = _window_attrs(ctx, x)
    if len(kernel) not in (1, 2, 3):
        raise ctx.fail(f"{len(kernel)}-D pooling is not supported (1-D to 3-D are)")
    return x, kernel, strides, dilations, pads


@converter("MaxPool")
def _max_pool(ctx: NodeContext):
    if len([o for o in ctx.node.output if o]) > 1:
        raise ctx.fail("the Indices output of MaxPool is not supported")
    if ctx.attr("storage_order", 0):
        raise ctx.fail("storage_order=1 is not supported")
    x, kernel, strides, dilations, pads = _pool_input(ctx)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    if any(b != e for b, e in pads):
        x, padding = x.pad(_flat_pads(pads), value=-math.inf), 0
    else:
        padding = [b for b, _ in pads]
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[len(kernel) - 1]
    return pool(x, kernel, strides, padding, dilations, ceil_mode)


@converter("AveragePool")
def _avg_pool(ctx: NodeContext):
    x, kernel, strides, dilations, pads = _pool_input(ctx)
    if any(d != 1 for d in dilations):
        raise ctx.fail("dilated average pooling is not supported")
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    include_pad = bool(ctx.attr("count_include_pad", 0))
    if any(b != e for b, e in pads):
        if not include_pad:
            if ceil_mode:
                raise ctx.fail("asymmetric pads with count_include_pad=0 and ceil_mode=1 are "
                               "not supported")
            return _avg_pool_counted(x, kernel, strides, pads)
        x, padding = x.pad(_flat_pads(pads)), 0
    else:
        padding = [b for b, _ in pads]
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[len(kernel) - 1]
    return pool(x, kernel, strides, padding, ceil_mode, include_pad)


def _avg_pool_counted(x, kernel, strides, pads):
    """Average over the input elements of each window only (asymmetric explicit padding)."""
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[len(kernel) - 1]
    ones = x.graph.constant(1.0).expand(x.shape)
    total = pool(x.pad(_flat_pads(pads)), kernel, strides)
    count = pool(ones.pad(_flat_pads(pads)), kernel, strides)
    return total / count


@converter("GlobalAveragePool")
def _global_avg_pool(ctx: NodeContext):
    x = ctx.tensor(0)
    return x.mean(list(range(2, x.ndim)), keepdim=True)


@converter("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext):
    x = ctx.tensor(0)
    return x.amax(list(range(2, x.ndim)), keepdim=True)


def _per_channel(t: lm.GraphTensor, rank: int) -> lm.GraphTensor:
    """A (C,) tensor shaped to broadcast over (N, C, *spatial)."""
    return t.reshape((1, -1) + (1,) * (rank - 2))


@converter("BatchNormalization")
def _batch_norm(ctx: NodeContext):
    momentum = ctx.attr("momentum", 0.9)
    if ctx.attr("spatial", 1) != 1:
        raise ctx.fail("spatial=0 is not supported")
    x = ctx.tensor(0)
    scale, bias, mean, var = (_per_channel(ctx.tensor(i), x.ndim) for i in range(1, 5))
    eps = ctx.attr("epsilon", 1e-5)
    if not ctx.attr("training_mode", 0):
        if len([o for o in ctx.node.output if o]) > 1:
            raise ctx.fail("running statistics outputs need training_mode=1")
        return (x - mean) * (var + eps).rsqrt() * scale + bias
    # training: normalise with the batch's statistics and update the running ones
    axes = [0, *range(2, x.ndim)]
    batch_mean = x.mean(axes, keepdim=True)
    batch_var = ((x - batch_mean) * (x - batch_mean)).mean(axes, keepdim=True)
    y = (x - batch_mean) * (batch_var + eps).rsqrt() * scale + bias
    running_mean = mean * momentum + batch_mean * (1 - momentum)
    running_var = var * momentum + batch_var * (1 - momentum)
    return [y, running_mean.reshape((-1,)), running_var.reshape((-1,))]


@converter("InstanceNormalization")
def _instance_norm(ctx: NodeContext):
    x = ctx.tensor(0)
    axes = list(range(2, x.ndim))
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + ctx.attr("epsilon", 1e-5)).rsqrt()
    return out * _per_channel(ctx.tensor(1), x.ndim) + _per_channel(ctx.tensor(2), x.ndim)


@converter("LayerNormalization")
def _layer_norm(ctx: NodeContext):
    x = ctx.tensor(0)
    ctx.attr("stash_type", 1)
    axis = axis_of(ctx, ctx.attr("axis", -1), x.ndim)
    axes = list(range(axis, x.ndim))
    xf = x.float()
    mean = xf.mean(axes, keepdim=True)
    centered = xf - mean
    inv_std = ((centered * centered).mean(axes, keepdim=True) + ctx.attr("epsilon", 1e-5)).rsqrt()
    out = centered * inv_std * ctx.tensor(1)
    if ctx.has(2):
        out = out + ctx.tensor(2)
    return [out.to(x.dtype), mean, inv_std]


@converter("MeanVarianceNormalization")
def _mean_variance_norm(ctx: NodeContext):
    x = ctx.tensor(0)
    axes = [axis_of(ctx, a, x.ndim) for a in ctx.attr("axes", [0, 2, 3])]
    centered = x - x.mean(axes, keepdim=True)
    return centered / ((centered * centered).mean(axes, keepdim=True).sqrt() + 1e-9)


@converter("LRN")
def _lrn(ctx: NodeContext):
    x = ctx.tensor(0)
    size = ctx.attr("size")
    alpha, beta, bias = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    squares = (x * x).movedim(1, -1)
    windows = squares.pad((before, after)).unfold(-1, size, 1).sum(-1).movedim(-1, 1)
    return x / (windows * (alpha / size) + bias).pow(beta)


@converter("MatMul")
def _matmul(ctx: NodeContext):
    return lm.matmul(ctx.tensor(0), ctx.tensor(1))


@converter("Gemm")
def _gemm(ctx: NodeContext):
    a, b = ctx.tensor(0), ctx.tensor(1)
    if ctx.attr("transA", 0):
        a = a.transpose(0, 1)
    if ctx.attr("transB", 0):
        b = b.transpose(0, 1)
    out = lm.matmul(a, b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        out = out * alpha
    if ctx.has(2):
        c = ctx.tensor(2)
        out = out + (c * beta if beta != 1.0 else c)
    return out


# ----- Resize: per-axis gathers with weights computed at import time -------------------
def _source_coords(ctx: NodeContext, mode: str, n: int, m: int, scale: float,
                   roi: tuple[float, float]) -> np.ndarray:
    """Where each of the `m` outputs samples the `n` inputs, in input coordinates. ONNX
    uses the unrounded output length n * scale in the align_corners / crop formulas."""
    length = n * scale
    o = np.arange(m, dtype=np.float64)
    if mode == "half_pixel":
        return (o + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (o + 0.5) / scale
    if mode == "pytorch_half_pixel":
        return (o + 0.5) / scale - 0.5 if m > 1 else np.zeros(m)
    if mode == "asymmetric":
        return o / scale
    if mode == "align_corners":
        return o * (n - 1) / (length - 1) if length > 1 else np.zeros(m)
    if mode == "tf_crop_and_resize":
        start, end = roi
        if length > 1:
            return start * (n - 1) + o * (end - start) * (n - 1) / (length - 1)
        return np.full(m, 0.5 * (start + end) * (n - 1))
    raise ctx.fail(f"coordinate_transformation_mode {mode!r} is not supported")


def _nearest(ctx: NodeContext, coords: np.ndarray, n: int):
    rule = ctx.attr("nearest_mode", "round_prefer_floor")
    if rule == "round_prefer_floor":
        idx = np.where(coords - np.floor(coords) == 0.5, np.floor(coords), np.round(coords))
    elif rule == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    elif rule == "floor":
        idx = np.floor(coords)
    elif rule == "ceil":
        idx = np.ceil(coords)
    else:
        raise ctx.fail(f"nearest_mode {rule!r} is not supported")
    return [(np.clip(idx, 0, n - 1).astype(np.int32), None)]


def _linear(coords: np.ndarray, n: int):
    c = np.clip(coords, 0, n - 1)
    lo = np.floor(c).astype(np.int32)
    hi = np.minimum(lo + 1, n - 1)
    w = c - lo
    return [(lo, 1.0 - w), (hi, w)]


def _cubic(ctx: NodeContext, coords: np.ndarray, n: int):
    a = ctx.attr("cubic_coeff_a", -0.75)
    exclude = ctx.attr("exclude_outside", 0)
    base = np.floor(coords)
    taps, weights = [], []
    for k in (-1, 0, 1, 2):
        idx = base + k
        d = np.abs(coords - idx)
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                     np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
        if exclude:
            w = np.where((idx < 0) | (idx > n - 1), 0.0, w)
        taps.append(np.clip(idx, 0, n - 1).astype(np.int32))
        weights.append(w)
    total = np.sum(weights, axis=0) if exclude else 1.0
    return [(t, w / total) for t, w in zip(taps, weights)]


def _resize_axis(ctx: NodeContext, x: lm.GraphTensor, axis: int, m: int, scale: float,
                 roi: tuple[float, float]) -> lm.GraphTensor:
    n = _static_dim(ctx, x.shape[axis], "a resized dim")
    mode = ctx.attr("mode", "nearest")
    coord_mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    coords = _source_coords(ctx, coord_mode, n, m, scale, roi)
    if mode == "nearest":
        taps = _nearest(ctx, coords, n)
        whole = m % n == 0 and np.array_equal(taps[0][0], np.repeat(np.arange(n), m // n))
        if whole:
            return x.repeat_interleave(m // n, axis)  # a view: no gather
    elif mode == "linear":
        taps = _linear(coords, n)
    elif mode == "cubic":
        taps = _cubic(ctx, coords, n)
    else:
        raise ctx.fail(f"mode {mode!r} is not supported")
    out = None
    shape = (m,) + (1,) * (x.ndim - axis - 1)
    for idx, w in taps:
        picked = x.index_select(axis, ctx.importer.constant(idx, f"{ctx.name}_idx{axis}"))
        if w is not None:
            picked = picked * ctx.importer.constant(w.astype(np.float32).reshape(shape),
                                                    f"{ctx.name}_w{axis}")
        out = picked if out is None else out + picked
    if coord_mode == "tf_crop_and_resize":
        outside = (coords < 0) | (coords > n - 1)
        if outside.any():
            keep = ctx.importer.constant((~outside).reshape(shape), f"{ctx.name}_in{axis}")
            out = lm.where(keep, out, ctx.attr("extrapolation_value", 0.0))
    return out


@converter("Resize", "Upsample")
def _resize(ctx: NodeContext):
    x = ctx.tensor(0)
    rank = x.ndim
    if ctx.op_type == "Upsample":
        scales = list(ctx.static(1).astype(np.float64)) if ctx.has(1) else ctx.attr("scales")
        sizes, roi = None, None
    elif ctx.opset < 11:
        raise ctx.fail("Resize before opset 11 is not supported")
    else:
        for name, unsupported in (("antialias", 0), ("keep_aspect_ratio_policy", "stretch")):
            if ctx.attr(name, unsupported) != unsupported:
                raise ctx.fail(f"attribute {name}={ctx.attr(name)!r} is not supported")
        ctx.attr("extrapolation_value", 0.0)
        ctx.attr("cubic_coeff_a", -0.75)
        ctx.attr("exclude_outside", 0)
        ctx.attr("nearest_mode", "round_prefer_floor")
        ctx.attr("coordinate_transformation_mode", "half_pixel")
        roi = ctx.static(1).astype(np.float64) if ctx.has(1) and ctx.static(1).size else None
        scales = ctx.static(2).astype(np.float64) if ctx.has(2) and ctx.static(2).size else None
        sizes = ctx.static_ints(3) if ctx.has(3) else None
    axes = [axis_of(ctx, a, rank) for a in ctx.attr("axes", list(range(rank)))]
    for k, axis in enumerate(axes):
        n = _static_dim(ctx, x.shape[axis], "a resized dim")
        if sizes is not None:
            m = int(sizes[k])
            scale = m / n
        else:
            scale = float(scales[k])
            m = math.floor(n * scale)
        if m == n and scale == 1.0:
            continue
        span = (roi[k], roi[k + len(axes)]) if roi is not None else (0.0, 1.0)
        x = _resize_axis(ctx, x, axis, m, scale, span)
    return x


@converter("ConvTranspose")
def _conv_transpose(ctx: NodeContext):
    x, w = ctx.tensor(0), ctx.tensor(1)
    bias = ctx.tensor(2) if ctx.has(2) else None
    spatial = w.ndim - 2
    if spatial not in (1, 2, 3):
        raise ctx.fail(f"{spatial}-D transposed convolution is not supported (1-D to 3-D are)")
    kernel = [_static_dim(ctx, d, "the kernel size") for d in w.shape[2:]]
    ctx.attr("kernel_shape", None)
    strides = list(ctx.attr("strides", [1] * spatial))
    dilations = list(ctx.attr("dilations", [1] * spatial))
    out_pad = list(ctx.attr("output_padding", [0] * spatial))
    sizes = [_static_dim(ctx, d, "a spatial dim") for d in x.shape[2:]]
    full = [s * (n - 1) + o + (k - 1) * d + 1
            for n, s, o, k, d in zip(sizes, strides, out_pad, kernel, dilations)]
    wanted = ctx.attr("output_shape", None)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if wanted is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = list(wanted)[-spatial:] if wanted is not None else [
            n * s for n, s in zip(sizes, strides)]
        pads = []
        for f, t in zip(full, target):
            total = f - t
            small = total // 2
            # ConvTranspose puts the larger half at the end for SAME_UPPER (Conv: the start)
            pads.append((small, total - small) if auto_pad == "SAME_UPPER" else
                        (total - small, small))
    elif auto_pad in ("VALID", "NOTSET"):
        flat = ctx.attr("pads", [0] * 2 * spatial)
        pads = [(flat[k], flat[k + spatial]) for k in range(spatial)]
    else:
        raise ctx.fail(f"auto_pad {auto_pad!r} is not supported")
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[spatial - 1]
    out = conv(x, w, bias, stride=strides, padding=0, output_padding=out_pad,
               groups=ctx.attr("group", 1), dilation=dilations)
    # ONNX pads crop the full output, possibly unevenly: negative padding
    crop = _flat_pads([(-b, -e) for b, e in pads])
    return out.pad(crop) if any(crop) else out


@converter("GroupNormalization")
def _group_norm(ctx: NodeContext):
    x = ctx.tensor(0)
    groups = ctx.attr("num_groups")
    ctx.attr("stash_type", 1)
    n, c = x.shape[:2]
    c = _static_dim(ctx, c, "the channel count")
    grouped = x.reshape((n, groups, -1))
    mean = grouped.mean(-1, keepdim=True)
    centered = grouped - mean
    var = (centered * centered).mean(-1, keepdim=True)
    normed = (centered * (var + ctx.attr("epsilon", 1e-5)).rsqrt()).reshape(x.shape)
    scale, bias = ctx.tensor(1), ctx.tensor(2)
    if ctx.opset < 21:  # opset 18 scales and shifts per group
        scale, bias = (t.repeat_interleave(c // groups, 0) for t in (scale, bias))
    return normed * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)


@converter("RMSNormalization")
def _rms_norm(ctx: NodeContext):
    x = ctx.tensor(0)
    ctx.attr("stash_type", 1)
    axis = axis_of(ctx, ctx.attr("axis", -1), x.ndim)
    xf = x.float()
    mean_square = (xf * xf).mean(list(range(axis, x.ndim)), keepdim=True)
    out = xf * (mean_square + ctx.attr("epsilon", 1e-5)).rsqrt() * ctx.tensor(1)
    return out.to(x.dtype)
