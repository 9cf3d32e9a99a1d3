"""Neural-network functions with `torch.nn.functional` names and semantics.

`import luminal_nn.functional as F` reads like PyTorch code (PyTorch keeps these in
`torch.nn.functional`; luminal-core keeps only the tensor ops). Convolutions and pools take
sliding windows as views (`unfold`), then a matmul (im2col) or a reduction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from luminal.dtypes import bool_, float32, int32, uint8
from luminal.errors import OpError
from luminal.hl_ops.binary import where
from luminal.hl_ops.creation import IOTA_INDEX, iota
from luminal.hl_ops.matmul import matmul
from luminal.hl_ops.movement import check_ids, one_hot_mask
from luminal.shape import show_shape
from luminal.symbolic import Expr, const_or_expr, lt, smax, to_expr
from luminal.tensor import GraphTensor

__all__ = [
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "binary_cross_entropy", "celu", "conv1d",
    "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "dropout",
    "elu", "embedding", "gelu", "hardsigmoid", "hardswish", "hardtanh", "interpolate",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "logsigmoid", "max_pool1d",
    "max_pool2d", "max_pool3d", "mish", "normalize", "one_hot", "pad", "relu", "relu6",
    "rms_norm", "scaled_dot_product_attention", "selu", "sigmoid", "silu", "softmax",
    "softmin", "softplus", "softsign", "tanh",
]


def _tuple(v, n: int, name: str) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) != n:
        raise OpError(f"{name} must be an int or a tuple of {n} ints, got {v}")
    return v


def relu(x: GraphTensor) -> GraphTensor:
    return x.relu()


def gelu(x: GraphTensor, approximate: str = "none") -> GraphTensor:
    return x.gelu(approximate)


def silu(x: GraphTensor) -> GraphTensor:
    return x.silu()


def sigmoid(x: GraphTensor) -> GraphTensor:
    return x.sigmoid()


def tanh(x: GraphTensor) -> GraphTensor:
    return x.tanh()


def softplus(x: GraphTensor, beta: float = 1.0, threshold: float = 20.0) -> GraphTensor:
    return x.softplus(beta, threshold)


def leaky_relu(x: GraphTensor, negative_slope: float = 0.01) -> GraphTensor:
    return x.leaky_relu(negative_slope)


def elu(x: GraphTensor, alpha: float = 1.0) -> GraphTensor:
    return x.elu(alpha)


def hardswish(x: GraphTensor) -> GraphTensor:
    return x.hardswish()


def mish(x: GraphTensor) -> GraphTensor:
    return x.mish()


def relu6(x: GraphTensor) -> GraphTensor:
    return x.relu6()


def hardtanh(x: GraphTensor, min_val: float = -1.0, max_val: float = 1.0) -> GraphTensor:
    return x.hardtanh(min_val, max_val)


def hardsigmoid(x: GraphTensor) -> GraphTensor:
    return x.hardsigmoid()


def celu(x: GraphTensor, alpha: float = 1.0) -> GraphTensor:
    return x.celu(alpha)


def selu(x: GraphTensor) -> GraphTensor:
    return x.selu()


def logsigmoid(x: GraphTensor) -> GraphTensor:
    return x.logsigmoid()


def softsign(x: GraphTensor) -> GraphTensor:
    return x.softsign()


def softmin(x: GraphTensor, dim: int) -> GraphTensor:
    return (-x).softmax(dim)


def binary_cross_entropy(x: GraphTensor, target: GraphTensor, weight=None,
                         reduction: str = "mean") -> GraphTensor:
    """-(t log p + (1 - t) log(1 - p)), each log clamped at -100 as in PyTorch."""
    loss = -(target * x.log().clamp(min=-100.0) + (1 - target) * (1 - x).log().clamp(min=-100.0))
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, reduction, "binary_cross_entropy")


def reduce_loss(loss: GraphTensor, reduction: str, name: str) -> GraphTensor:
    """A loss's `reduction` ("mean", "sum" or "none"), PyTorch's; `name` is the loss, for errors."""
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise OpError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def softmax(x: GraphTensor, dim: int) -> GraphTensor:
    return x.softmax(dim)


def log_softmax(x: GraphTensor, dim: int) -> GraphTensor:
    return x.log_softmax(dim)


def pad(x: GraphTensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0):
    return x.pad(pad, mode, value)


def dropout(x: GraphTensor, p: float = 0.5, training: bool = False) -> GraphTensor:
    """Identity at inference. Training-time dropout needs a random mask input: pass one
    explicitly (`x * mask / (1 - p)`)."""
    if training and p > 0:
        raise NotImplementedError("dropout(training=True): multiply by an input mask instead")
    return x


def linear(x: GraphTensor, weight: GraphTensor, bias: GraphTensor | None = None):
    """x @ weight.T + bias, weight of shape (out_features, in_features) as in PyTorch."""
    out = matmul(x, weight.transpose(-1, -2) if weight.ndim > 1 else weight)
    return out + bias if bias is not None else out


def one_hot(index: GraphTensor, num_classes: int) -> GraphTensor:
    check_ids(index, to_expr(num_classes))
    return one_hot_mask(index, to_expr(num_classes)).to(int32)


def embedding(index: GraphTensor, weight: GraphTensor) -> GraphTensor:
    """Rows of `weight` (vocab, dim) picked by integer `index` of any shape."""
    if weight.ndim != 2:
        raise OpError(f"embedding: weight must be 2-D, got {show_shape(weight.layout.shape)}")
    check_ids(index, weight.layout.shape[0])
    rows = weight.index_select(0, index.reshape(-1))
    return rows.reshape((*index.layout.shape, weight.layout.shape[1]))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> GraphTensor:
    axes = _norm_axes(x, normalized_shape, "layer_norm")
    xf = x._float()
    mean = xf.mean(axes, keepdim=True)
    centered = xf - mean
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None) -> GraphTensor:
    axes = _norm_axes(x, normalized_shape, "rms_norm")
    xf = x._float()
    if eps is None:
        eps = 1.1920928955078125e-07  # torch.finfo(float32).eps, PyTorch's default
    out = xf * ((xf * xf).mean(axes, keepdim=True) + eps).rsqrt()
    return out * weight if weight is not None else out


def normalize(x: GraphTensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    return x / x.norm(p, dim, keepdim=True).clamp(min=eps)


def _norm_axes(x: GraphTensor, normalized_shape, name: str) -> list[int]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    tail = tuple(x.layout.shape[x.ndim - len(shape):])
    if len(shape) > x.ndim or tail != tuple(map(to_expr, shape)):
        raise OpError(
            f"{name}: normalized_shape {shape} does not match the last dims of "
            f"{show_shape(x.layout.shape)}"
        )
    return list(range(x.ndim - len(shape), x.ndim))


def _windows(x: GraphTensor, kernel, stride, dilation, spatial: int) -> GraphTensor:
    """(N, C, *S) -> (N, C, *S_out, *kernel) sliding-window view over the last `spatial` axes."""
    for k in range(spatial):
        axis = 2 + k
        if x.layout.axis_masked(axis):
            x = x.contiguous()
        x = x._with_view(x.layout.unfold(axis, kernel[k], stride[k], dilation[k]))
    return x


def _static(d, name: str, what: str) -> int:
    """The value of dim `d`, or a ValueError naming the op and the dim when it is symbolic."""
    d = to_expr(d)
    if not d.is_const:
        raise OpError(f"{name}: {what} must be static, got the symbolic size {d}")
    return d.value


def _conv(x, weight, bias, stride, padding, dilation, groups, spatial: int, name: str):
    """Convolution as im2col: sliding-window view, then one (grouped) matmul, weights on
    the left (see below).

    Input (N, C, *S) or unbatched (C, *S); `padding` an int, a tuple, or "valid" / "same"
    ("same" needs stride 1, as in PyTorch; an odd total padding puts the extra on the right).
    Spatial dims may be symbolic; channels and kernel sizes are static.
    """
    if weight.ndim != spatial + 2 or x.ndim not in (spatial + 1, spatial + 2):
        raise OpError(
            f"{name}: expected input (N, C, ...) or (C, ...) with {spatial} spatial dims and a "
            f"weight (out, in/groups, ...) of rank {spatial + 2}, got "
            f"{show_shape(x.layout.shape)} and {show_shape(weight.layout.shape)}"
        )
    unbatched = x.ndim == spatial + 1
    if unbatched:
        x = x.unsqueeze(0)
    stride = _tuple(stride, spatial, "stride")
    dilation = _tuple(dilation, spatial, "dilation")
    kernel = [_static(d, name, f"kernel size {d}") for d in weight.layout.shape[2:]]
    pads = _conv_padding(padding, kernel, stride, dilation, spatial, name)
    n, c = x.layout.shape[:2]
    out_ch = _static(weight.layout.shape[0], name, "the number of output channels")
    cg = _static(weight.layout.shape[1], name, "the number of input channels per group")
    if not (c == to_expr(cg) * groups) or out_ch % groups:
        raise OpError(
            f"{name}: input {show_shape(x.layout.shape)} and weight "
            f"{show_shape(weight.layout.shape)} do not fit groups={groups}"
        )
    flat = [p for pair in reversed(pads) for p in pair]
    xp = x.pad(flat) if any(flat) else x
    for k in range(spatial):
        size = xp.layout.shape[2 + k]
        span = dilation[k] * (kernel[k] - 1) + 1
        if size.is_const and size.value < span:
            raise OpError(f"{name}: the kernel spans {span} (size {kernel[k]}, dilation "
                          f"{dilation[k]}) but spatial dim {k} of the padded input is "
                          f"{size.value}")
    win = _windows(xp, kernel, stride, dilation, spatial)  # (N, C, *So, *K)
    out_sp = list(win.layout.shape[2 : 2 + spatial])
    g = groups
    win = win.reshape((n, g, cg, *out_sp, *kernel))
    # (N, g, Cg, *K, *So) -> (N, g, Cg*K, So): the im2col matrix with the positions last, so
    # that weights @ columns comes out in (N, O, *So) order: the output needs no transpose
    order = [0, 1, 2, *range(3 + spatial, 3 + 2 * spatial), *range(3, 3 + spatial)]
    cols = win.permute(order).reshape((n, g, cg * math.prod(kernel), _prod(out_sp)))
    w = weight.reshape((g, out_ch // g, cg * math.prod(kernel)))  # (g, Og, CgK)
    out = matmul(w.unsqueeze(0), cols)  # (N, g, Og, So)
    out = out.reshape((n, out_ch, *out_sp))
    if bias is not None:
        out = out + bias.reshape((1, out_ch) + (1,) * spatial)
    return out.squeeze(0) if unbatched else out


def _conv_padding(padding, kernel, stride, dilation, spatial: int, name: str):
    """(left, right) zero padding per spatial axis for an int, tuple, "valid" or "same"."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * spatial
        if padding != "same":
            raise OpError(f"{name}: padding must be an int, a tuple, 'valid' or 'same', "
                             f"got {padding!r}")
        if any(s != 1 for s in stride):
            raise OpError(f"{name}: padding='same' is not supported for strided "
                             f"convolutions (stride={tuple(stride)})")
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in totals]
    return [(p, p) for p in _tuple(padding, spatial, "padding")]


def _prod(dims):
    out = to_expr(1)
    for d in dims:
        out = out * d
    return out


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(x, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                    spatial: int, name: str):
    """The gradient of a convolution: zeros inserted between inputs (stride), padded by
    dilation * (k - 1) - padding (+ output_padding on the right), then a convolution with
    the kernel flipped and its in/out channels swapped per group."""
    if weight.ndim != spatial + 2:
        raise OpError(f"{name}: weight must have rank {spatial + 2}, got "
                         f"{show_shape(weight.layout.shape)}")
    x, unbatched = _batched(x, spatial, name)
    stride = _tuple(stride, spatial, "stride")
    padding = _tuple(padding, spatial, "padding")
    output_padding = _tuple(output_padding, spatial, "output_padding")
    dilation = _tuple(dilation, spatial, "dilation")
    kernel = [_static(d, name, "the kernel size") for d in weight.layout.shape[2:]]
    for k in range(spatial):
        axis = 2 + k
        s = stride[k]
        if s > 1:  # interleave s - 1 zeros after each element, drop the trailing ones
            n = x.layout.shape[axis]
            x = x.unsqueeze(axis + 1)._pad_axis(axis + 1, 0, s - 1)
            x = x.flatten(axis, axis + 1)._slice_axis(axis, 0, n * s - (s - 1))
    cin = _static(weight.layout.shape[0], name, "the number of input channels")
    cout_g = _static(weight.layout.shape[1], name, "the output channels per group")
    if cin % groups:
        raise OpError(f"{name}: {cin} input channels do not split into groups={groups}")
    w = weight.reshape((groups, cin // groups, cout_g, *kernel)).transpose(1, 2)
    w = w.reshape((groups * cout_g, cin // groups, *kernel)).flip(*range(2, 2 + spatial))
    pads = []
    for k in range(spatial):
        edge = dilation[k] * (kernel[k] - 1) - padding[k]
        pads.append((edge, edge + output_padding[k]))
    flat = [p for pair in reversed(pads) for p in pair]
    out = _conv(x.pad(flat) if any(flat) else x, w, bias, 1, 0, dilation, groups, spatial, name)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                           1, "conv_transpose1d")


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                           2, "conv_transpose2d")


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                           3, "conv_transpose3d")


class _PoolGeometry:
    """Window parameters of a pool over the last `spatial` axes of an (N, C, *S) tensor.

    `pads` holds (left, right) per spatial axis; with `ceil_mode` the right side grows so the
    last partial window exists, minus a window that would start inside the right padding
    (PyTorch's rule).
    """

    def __init__(self, x, kernel_size, stride, padding, dilation, ceil_mode, spatial):
        self.spatial = spatial
        self.kernel = _tuple(kernel_size, spatial, "kernel_size")
        self.stride = _tuple(stride if stride not in (None, []) else self.kernel, spatial,
                             "stride")
        self.padding = _tuple(padding, spatial, "padding")
        self.dilation = _tuple(dilation, spatial, "dilation")
        self.pads = [(p, p + (self._ceil_extra(x, k) if ceil_mode else 0))
                     for k, p in enumerate(self.padding)]

    def _ceil_extra(self, x, k: int) -> int | Expr:
        """Extra right padding of `ceil_mode` (symbolic when the spatial dim is)."""
        size = x.layout.shape[2 + k] + 2 * self.padding[k]
        span = self.dilation[k] * (self.kernel[k] - 1) + 1
        s = self.stride[k]
        out = (size - span + s - 1) // s + 1  # ceil((size - span) / s) + 1
        # drop a last window that would start inside the right padding
        out = out - lt(size - self.padding[k] - 1, (out - 1) * s)
        return const_or_expr(smax((out - 1) * s + span - size, 0))

    def flat_pads(self, pads) -> list:
        """(left, right) pairs per spatial axis as `F.pad`'s flat list (last axis first)."""
        return [p for pair in reversed(pads) for p in pair]

    def windows(self, x: GraphTensor, pads, fill: float) -> GraphTensor:
        """(N, C, *S_out, *kernel): `x` padded with `fill` by `pads`, as sliding windows."""
        flat = self.flat_pads(pads)
        xp = x.pad(flat, value=fill) if any(to_expr(p) != 0 for p in flat) else x
        return _windows(xp, self.kernel, self.stride, self.dilation, self.spatial)


def _batched(x: GraphTensor, spatial: int, name: str) -> tuple[GraphTensor, bool]:
    """`x` as (N, C, *S), and whether it came without the batch axis."""
    if x.ndim not in (spatial + 1, spatial + 2):
        raise OpError(f"{name}: expected {spatial + 2}-D input, got "
                         f"{show_shape(x.layout.shape)}")
    unbatched = x.ndim == spatial + 1
    return (x.unsqueeze(0) if unbatched else x), unbatched


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, spatial, name,
              return_indices=False):
    """Max over windows; with `return_indices` also the flat index (over the spatial dims
    of the input) of each window's first maximum, as PyTorch."""
    x, unbatched = _batched(x, spatial, name)
    geo = _PoolGeometry(x, kernel_size, stride, padding, dilation, ceil_mode, spatial)
    axes = tuple(range(-spatial, 0))
    # pads never win the max: the lowest value of the dtype (0 for unsigned ints)
    lowest = -math.inf if x.dtype.is_float else int(np.iinfo(x.dtype.numpy).min)
    if not return_indices:
        out = _separable_max(x, geo, lowest)
        return out.squeeze(0) if unbatched else out
    win = geo.windows(x, geo.pads, lowest)
    out = win.amax(axes)
    sizes = [_static(d, name, "the spatial size (for return_indices)") for d in x.layout.shape[2:]]
    flat_pos = iota(x.graph, IOTA_INDEX, (math.prod(sizes),), int32).reshape(sizes)
    pos = geo.windows(flat_pos.reshape((1, 1, *sizes)), geo.pads, -1)
    first = math.prod(sizes) + 1
    pos = pos.expand(win.layout.shape)
    at_max = win == out.reshape((*out.layout.shape, *(1,) * spatial)).expand(win.layout.shape)
    idx = where(at_max & (pos >= 0), pos, first).amin(axes)
    # a window holding NaN: PyTorch's scan takes every NaN in turn, so the last one is picked
    last_nan = where(win.isnan(), pos, -1).amax(axes)
    idx = where(last_nan >= 0, last_nan, idx)
    if unbatched:
        out, idx = out.squeeze(0), idx.squeeze(0)
    return out, idx


def _separable_max(x: GraphTensor, geo: _PoolGeometry, lowest: float) -> GraphTensor:
    """The windows' max as one max per spatial axis, last axis first, each over that axis's
    window steps alone: the same values (max is associative and NaN propagates through
    either; padding never wins), and a k x k window costs 2k steps per output, not k^2
    (YOLOv8's SPPF, 5 x 5: 10 instead of 25)."""
    n = geo.spatial
    # axes whose window moves or pads anything (at least one: a 1 x 1 pool still copies)
    axes = [k for k in range(n) if geo.kernel[k] != 1 or geo.stride[k] != 1
            or any(to_expr(p) != 0 for p in geo.pads[k])] or [n - 1]
    for k in reversed(axes):
        along = [(geo.kernel[k], geo.stride[k], geo.dilation[k]) if j == k else (1, 1, 1)
                 for j in range(n)]
        pads = [geo.pads[j] if j == k else (0, 0) for j in range(n)]
        flat = geo.flat_pads(pads)
        xp = x.pad(flat, value=lowest) if any(to_expr(p) != 0 for p in flat) else x
        kernel, stride, dilation = zip(*along)
        # the max over that axis's steps alone, the other window axes (size 1) dropped: a
        # reduction of one step left in the kernel kept gcc from vectorising the row
        win = _windows(xp, kernel, stride, dilation, n).amax(k - n)
        x = win.squeeze(tuple(range(-(n - 1), 0))) if n > 1 else win
    return x


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 1, "max_pool1d",
                     return_indices)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2, "max_pool2d",
                     return_indices)


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 3, "max_pool3d",
                     return_indices)


def _max_unpool(x, indices, kernel_size, stride, padding, output_size, spatial, name):
    """Zeros with each value of `x` written at its flat index (over the spatial dims of the
    output), the inverse of max_pool with return_indices, as PyTorch."""
    kernel = _tuple(kernel_size, spatial, "kernel_size")
    stride = _tuple(kernel if stride is None else stride, spatial, "stride")
    padding = _tuple(padding, spatial, "padding")
    if output_size is None:
        ins = [_static(d, name, "the input's spatial size") for d in x.layout.shape[-spatial:]]
        output_size = [(i - 1) * s - 2 * p + k for i, s, p, k in zip(ins, stride, padding, kernel)]
    outs = list(output_size)[-spatial:]  # (a leading batch and channel size are ignored)
    lead = list(x.layout.shape[:-spatial])
    flat = x.graph.zeros((*lead, math.prod(outs)), x.dtype)
    out = flat.scatter(-1, indices.reshape(*lead, -1), x.reshape(*lead, -1))
    return out.reshape(*lead, *outs)


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(x, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(x, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")


def max_unpool3d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool(x, indices, kernel_size, stride, padding, output_size, 3, "max_unpool3d")


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              spatial, name):
    x, unbatched = _batched(x, spatial, name)
    geo = _PoolGeometry(x, kernel_size, stride, padding, 1, ceil_mode, spatial)
    axes = tuple(range(-spatial, 0))
    total = geo.windows(x._float(), geo.pads, 0.0).sum(axes)
    if divisor_override:
        out = total / divisor_override
    elif count_include_pad and not ceil_mode:
        out = total / math.prod(geo.kernel)
    else:
        out = total / _window_counts(x, geo, count_include_pad)
    return out.squeeze(0) if unbatched else out


def _window_counts(x: GraphTensor, geo: _PoolGeometry, count_include_pad: bool) -> GraphTensor:
    """How many elements each window averages: those inside the input, plus the explicit
    padding with `count_include_pad`, never the extra right padding of `ceil_mode`."""
    sizes = list(x.layout.shape[2:])
    if count_include_pad:
        sizes = [n + 2 * p for n, p in zip(sizes, geo.padding)]
        pads = [(0, right - left) for left, right in geo.pads]
    else:
        pads = geo.pads
    ones = x.graph.constant(1.0, float32).expand((1, 1, *sizes))
    return geo.windows(ones, pads, 0.0).sum(tuple(range(-geo.spatial, 0)))


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1,
                     "avg_pool1d")


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2, "avg_pool2d")


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 3, "avg_pool3d")


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(x: GraphTensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None):
    """Resize the spatial dims of (N, C, *S) with PyTorch's semantics for modes nearest,
    nearest-exact, linear, bilinear and trilinear (each axis separately: the linear modes
    blend the two nearest source elements, picked exactly with `index_select`).

    In nearest mode a symbolic spatial dim works with a whole-number `scale_factor` (each
    element repeated); other cases need a static input size there. uint8 input in bilinear
    mode follows PyTorch's fixed-point arithmetic bit for bit; the other linear modes on
    integer input raise NotImplementedError, as in PyTorch.
    """
    spatial = x.ndim - 2
    if spatial < 1:
        raise OpError(
            f"interpolate: expected (N, C, ...) input, got {show_shape(x.layout.shape)}"
        )
    linear = mode in _LINEAR_MODES
    if not linear and mode not in ("nearest", "nearest-exact"):
        raise NotImplementedError(
            f"interpolate: mode {mode!r} is not supported (nearest, nearest-exact, linear, "
            f"bilinear, trilinear)")
    if linear and _LINEAR_MODES[mode] != spatial:
        raise OpError(f"interpolate: mode {mode!r} expects {_LINEAR_MODES[mode]} spatial "
                         f"dims, got input {show_shape(x.layout.shape)}")
    if align_corners is not None and not linear:
        raise OpError("interpolate: align_corners only applies to the linear modes")
    if (size is None) == (scale_factor is None):
        raise OpError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        outs = list(_tuple(size, spatial, "size"))
        factors = [None] * spatial
    else:
        factors = _tuple(scale_factor, spatial, "scale_factor") if not isinstance(
            scale_factor, (int, float)) else (scale_factor,) * spatial
        outs = [None] * spatial
    if linear and not x.dtype.is_float:
        if mode != "bilinear" or x.dtype != uint8:
            raise NotImplementedError(
                f"interpolate: mode {mode!r} on {x.dtype.name} input is not supported (as in "
                f"PyTorch, the only integer linear mode is bilinear on uint8); cast to float")
        return _uint8_bilinear(x, outs, factors, bool(align_corners), size)
    out = x if not linear else x._float()
    for k, (i, o, f) in enumerate(zip(x.layout.shape[2:], outs, factors)):
        axis = 2 + k
        if mode == "nearest" and f is not None and float(f) == int(f) and f >= 1:
            out = out.repeat_interleave(int(f), axis)  # exact, for any (symbolic) size
            continue
        i, o, s = _resize_geometry(i, o, f, k, size)
        dst = iota(x.graph, IOTA_INDEX, (o,), float32)
        if linear:
            out = _linear_axis(out, axis, i, o, s, dst, bool(align_corners))
        elif mode == "nearest" and o % i == 0 and s == i / o:
            out = out.repeat_interleave(o // i, axis)
        else:
            src = dst * s if mode == "nearest" else (dst + 0.5) * s
            out = out.index_select(axis, src.floor().to(int32).clamp(max=i - 1))
    return out


def _resize_geometry(i, o, f, k: int, size) -> tuple[int, int, float]:
    """Spatial dim k's static input size, output size and source step (input / output, or
    1 / scale_factor as PyTorch takes it when given one)."""
    what = f"the input size of spatial dim {k} with size={size}" if size is not None else (
        f"the input size of spatial dim {k} with scale_factor={f}")
    i = _static(i, "interpolate", what)
    o, s = (math.floor(i * f), 1.0 / f) if f is not None else (o, i / o if o else 0.0)
    if i < 1 or o < 1:
        raise OpError(f"interpolate: input and output sizes must be > 0, got {i} -> {o} in "
                      f"spatial dim {k}")
    return i, o, s


def _uint8_bilinear(x: GraphTensor, outs, factors, align_corners: bool, size) -> GraphTensor:
    """uint8 bilinear resize with PyTorch's CPU arithmetic, bit for bit: the width first, then
    the height, each a blend of two source pixels with int16 fixed-point weights, rounded by a
    shift and stored as uint8 in between (aten's separable uint8 kernels)."""
    out = x.to(int32)
    for k in (1, 0):
        i, o, _ = _resize_geometry(x.layout.shape[2 + k], outs[k], factors[k], k, size)
        if i == o:  # PyTorch copies an axis that keeps its size
            continue
        lo, w0, w1, precision = _fixed_point_weights(i, o, align_corners, factors[k])
        # host-computed tables, bound to inputs (as `rand` is): int32 arithmetic in the graph
        # cannot reproduce PyTorch's double-precision weights
        lo = x.graph.tensor((o,), dtype=int32).set(lo)
        weights = x.graph.tensor((2, o), dtype=int32).set(np.stack([w0, w1]))
        shape = [1] * 4
        shape[2 + k] = o
        hi = (lo + 1).clamp(max=i - 1)
        acc = (out.index_select(2 + k, lo) * weights[0].reshape(shape)
               + out.index_select(2 + k, hi) * weights[1].reshape(shape)
               + (1 << (precision - 1)))
        # the weights sum to at most 2**precision + 1, so the result never passes 255
        out = acc // (1 << precision)
    return out.to(uint8)


def _fixed_point_weights(i: int, o: int, align_corners: bool, factor) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, int]:
    """For each of the o outputs of a linear resize from i: the first source index, the int16
    weights of it and of the next index, and their precision in bits, computed as PyTorch does
    for uint8 (source index in double, floored through float32; a weight falling past the
    edge added to the last index; the precision the largest that keeps the largest weight
    under 2**15)."""
    if align_corners:
        scale = (i - 1) / (o - 1) if o > 1 else 0.0
    else:
        scale = 1.0 / factor if factor else i / o
    lo = np.zeros(o, np.int64)
    weights = np.zeros((o, 2))
    for j in range(o):
        src = scale * j if align_corners else max(scale * (j + 0.5) - 0.5, 0.0)
        lo[j] = min(math.floor(np.float32(src)), i - 1)
        frac = min(max(src - lo[j], 0.0), 1.0)
        # the triangle filter at distances frac and 1 - frac, in PyTorch's double arithmetic;
        # past the last index the second weight joins the first
        near, far = max(1.0 - frac, 0.0), max(1.0 - abs(1.0 - frac), 0.0)
        weights[j, 0] = near
        weights[j, int(lo[j] < i - 1)] += far
    largest = weights.max()
    precision = next((p for p in range(22) if int(0.5 + largest * (2 << p)) >= 1 << 15), 22)
    fixed = np.floor(0.5 + weights * (1 << precision)).astype(np.int32)
    return lo.astype(np.int32), fixed[:, 0], fixed[:, 1], precision


def _linear_axis(x: GraphTensor, axis: int, i: int, o: int, s: float, dst: GraphTensor,
                 align_corners: bool) -> GraphTensor:
    """Linear resampling of one axis from size i to o (PyTorch's source coordinates)."""
    if align_corners:
        src = dst * ((i - 1) / (o - 1) if o > 1 else 0.0)
    else:
        src = ((dst + 0.5) * s - 0.5).clamp(min=0.0)
    lo = src.floor().to(int32).clamp(max=i - 1)
    hi = (lo + 1).clamp(max=i - 1)
    frac = src - lo.to(float32)
    shape = [1] * x.ndim
    shape[axis] = o
    frac = frac.reshape(shape)
    return x.index_select(axis, lo) * (1 - frac) + x.index_select(axis, hi) * frac


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> GraphTensor:
    """softmax(q @ k^T * scale + mask) @ v, PyTorch semantics (causal mask is top-left)."""
    if dropout_p:
        raise NotImplementedError("scaled_dot_product_attention: dropout_p must be 0")
    if is_causal and attn_mask is not None:
        raise OpError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    d = q.layout.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(_static(d, "scaled_dot_product_attention",
                                        "the head dim (or pass scale=)"))
    if enable_gqa and q.layout.shape[-3] != k.layout.shape[-3]:
        rep = _static(q.layout.shape[-3], "scaled_dot_product_attention", "the query heads") // (
            _static(k.layout.shape[-3], "scaled_dot_product_attention", "the key heads"))
        k = k.repeat_interleave(rep, -3)
        v = v.repeat_interleave(rep, -3)
    scores = matmul(q, k.transpose(-1, -2)) * scale
    if is_causal:
        rows, cols = scores.layout.shape[-2:]
        i = IOTA_INDEX
        keep = iota(q.graph, lt(i % cols, (i // cols) % rows + 1), (rows, cols), bool_)
        scores = where(keep, scores, -math.inf)
    if attn_mask is not None:
        scores = where(attn_mask, scores, -math.inf) if attn_mask.dtype == bool_ else (
            scores + attn_mask)
    return matmul(scores.softmax(-1), v)
