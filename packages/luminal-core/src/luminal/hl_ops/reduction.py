"""Reductions (PyTorch names, `dim`/`keepdim`, negative axes) composed from SumReduce and
MaxReduce."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import ml_dtypes

from .. import ops
from ..dtypes import bool_, float32, int32
from ..symbolic import to_expr
from .custom_vjp import with_vjp

if TYPE_CHECKING:
    from ..tensor import GraphTensor


class ValuesIndices(NamedTuple):
    """What `max(dim)` / `min(dim)` return, as in PyTorch."""

    values: GraphTensor
    indices: GraphTensor


def _axes(x: GraphTensor, dim) -> list[int]:
    if dim is None:
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in dims:
        if not -max(x.ndim, 1) <= d < max(x.ndim, 1):  # a 0-d tensor takes dim 0 or -1
            raise IndexError(f"dim {d} is out of range for a tensor with {x.ndim} dims")
        out.append(d % max(x.ndim, 1))
    return sorted(set(out))


def _reduce(x: GraphTensor, op_type, dim, keepdim: bool) -> GraphTensor:
    if x.ndim == 0:
        _axes(x, dim)  # still checks the dim
        return x
    axes = _axes(x, dim)
    out = x
    for a in reversed(axes):  # from the back so earlier axis numbers stay valid
        out = out._new(op_type(a), out)
    if keepdim:
        shape = [to_expr(1) if i in axes else d for i, d in enumerate(x.layout.shape)]
        out = out.reshape(shape)
    return out


def _count(x: GraphTensor, axes: Sequence[int]) -> GraphTensor | float:
    n = to_expr(1)
    for a in axes:
        n = n * x.layout.shape[a]
    return float(n.value) if n.is_const else x.graph.constant(n, float32)


class ReductionOps:
    def sum(self, dim: int | Sequence[int] | None = None, keepdim: bool = False, dtype=None):
        x = self.to(dtype) if dtype is not None else self
        if x.dtype == bool_:
            x = x.to(int32)
        return _reduce(x, ops.SumReduce, dim, keepdim)

    def amax(self, dim=None, keepdim: bool = False) -> GraphTensor:
        return _reduce(self, ops.MaxReduce, dim, keepdim)

    def amin(self, dim=None, keepdim: bool = False) -> GraphTensor:
        if self.dtype == bool_:
            return _reduce(self.logical_not(), ops.MaxReduce, dim, keepdim).logical_not()
        if not self.dtype.is_float:  # ~x = -1 - x maps INT_MIN to INT_MAX: no overflow
            return ~_reduce(~self, ops.MaxReduce, dim, keepdim)
        return -_reduce(-self, ops.MaxReduce, dim, keepdim)

    def max(self, dim: int | None = None, keepdim: bool = False):
        """Without `dim`: the max of all elements. With `dim`: (values, indices), as PyTorch."""
        if dim is None:
            return self.amax()
        return ValuesIndices(self.amax(dim, keepdim), self.argmax(dim, keepdim))

    def min(self, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return self.amin()
        return ValuesIndices(self.amin(dim, keepdim), self.argmin(dim, keepdim))

    def mean(self, dim=None, keepdim: bool = False, dtype=None) -> GraphTensor:
        x = self.to(dtype) if dtype is not None else self._float()
        return x.sum(dim, keepdim) / _count(x, _axes(x, dim))

    def var(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: int | None = None) -> GraphTensor:
        """Variance; `correction` (or `unbiased`) as PyTorch, default Bessel's correction."""
        x = self._float()
        if correction is None:
            correction = 0 if unbiased is False else 1
        axes = _axes(x, dim)
        centered = x - x.mean(axes, keepdim=True)
        n = _count(x, axes)
        # PyTorch divides by max(n - correction, 0): no samples left is 0 / 0, NaN
        dof = max(n - correction, 0.0) if isinstance(n, float) else (n - correction).maximum(0.0)
        return (centered * centered).sum(axes, keepdim) / dof

    def std(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
            correction: int | None = None) -> GraphTensor:
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def std_mean(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
                 correction: int | None = None) -> tuple[GraphTensor, GraphTensor]:
        return (self.std(dim, unbiased, keepdim, correction=correction),
                self.mean(dim, keepdim))

    def var_mean(self, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,
                 correction: int | None = None) -> tuple[GraphTensor, GraphTensor]:
        return (self.var(dim, unbiased, keepdim, correction=correction),
                self.mean(dim, keepdim))

    def prod(self, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
        """Product. Over a static size: a log-depth tree of multiplications (exact for
        integers, wrapping like int32; PyTorch's gradients, zeros included). Over a symbolic
        size: exp2(sum(log2|x|)) with the sign from the count of negatives and an exact zero
        where any factor is zero (within a few ulps; integers rounded, exact only while every
        partial product stays below 2^24). Integer (and bool) inputs give int32."""
        exact = _tree_prod(self, dim, keepdim)
        if exact is not None:
            return exact
        x = self._float()
        axes = _axes(x, dim)
        mag = x.abs().log2().sum(axes, keepdim).exp2()
        negatives = (x < 0).to(float32).sum(axes, keepdim)
        sign = 1 - 2 * negatives.fmod(2.0)
        has_zero = (x == 0).to(float32).amax(axes, keepdim)
        out = mag * sign * (1 - has_zero)
        return out if self.dtype.is_float else out.round().to(int32)

    def _arg_extreme(self, dim, keepdim: bool, largest: bool) -> GraphTensor:
        """Index of the first max (min): max over (n - i) where x equals its max, then n - it."""
        from .creation import IOTA_INDEX, iota

        x = self if dim is not None else self.flatten()
        a = 0 if dim is None else _axes(x, dim)[0]
        best = x.amax(a, keepdim=True) if largest else x.amin(a, keepdim=True)
        hit = x == best.expand(x.layout.shape)
        if x.dtype.is_float:
            # NaN wins (as in PyTorch): the reductions propagate it, so `best` is NaN exactly
            # where the row holds one, and the first NaN is the index
            hit = hit | x.isnan()
        n = x.layout.shape[a]
        countdown = iota(x.graph, n - IOTA_INDEX, (n,), int32)
        shape = [1] * x.ndim
        shape[a] = n
        countdown = countdown.reshape(shape).expand(x.layout.shape)
        first = (hit.to(int32) * countdown).amax(a, keepdim=keepdim)
        out = -first + n.value if n.is_const else x.graph.constant(n, int32) - first
        if dim is None and keepdim:
            out = out.reshape([1] * self.ndim)
        return out

    def argmax(self, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
        return self._arg_extreme(dim, keepdim, largest=True)

    def argmin(self, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
        return self._arg_extreme(dim, keepdim, largest=False)

    def all(self, dim=None, keepdim: bool = False) -> GraphTensor:
        return self.to(bool_).amin(dim, keepdim)

    def any(self, dim=None, keepdim: bool = False) -> GraphTensor:
        return self.to(bool_).amax(dim, keepdim)

    def softmax(self, dim: int, dtype=None) -> GraphTensor:
        """exp(x - max) normalised over `dim`. Its gradient is PyTorch's formula,
        s * (g - sum(g * s)): differentiating the composition leaves rounding where the
        exact gradient is 0 (the gradient of `softmax(x).sum()`)."""
        x = self.to(dtype) if dtype is not None else self._float()
        order = _memory_order(x)
        if order is not None:  # computed in the order of x's memory (see `_memory_order`)
            back = sorted(range(x.ndim), key=order.__getitem__)
            return x.permute(order).softmax(order.index(_axes(x, dim)[0])).permute(back)
        e = (x - x.amax(dim, keepdim=True)).exp()
        s = e / e.sum(dim, keepdim=True)
        return with_vjp(s, [x], lambda g: [s * (g - (g * s).sum(dim, keepdim=True))])

    def log_softmax(self, dim: int, dtype=None) -> GraphTensor:
        """x - max - log(sum(exp(x - max))) over `dim`, with PyTorch's gradient formula
        g - exp(out) * sum(g)."""
        x = self.to(dtype) if dtype is not None else self._float()
        shifted = x - x.amax(dim, keepdim=True)
        out = shifted - shifted.exp().sum(dim, keepdim=True).log()
        return with_vjp(out, [x], lambda g: [g - out.exp() * g.sum(dim, keepdim=True)])

    def logsumexp(self, dim, keepdim: bool = False) -> GraphTensor:
        """log(sum(exp(x))) over `dim`, shifted by the max for stability. A row of -inf gives
        -inf and a row holding +inf gives inf (PyTorch): the shift is the max clamped to the
        finite range, so it never meets an infinity of the same sign (inf - inf)."""
        x = self._float()
        if x.ndim == 0:
            return x
        big = float(ml_dtypes.finfo(x.dtype.numpy).max)
        shift = x.amax(dim, keepdim=True).clamp(-big, big)
        out = (x - shift).exp().sum(dim, keepdim=True).log() + shift
        return out if keepdim else out.squeeze(_axes(x, dim))

    def cumsum(self, dim: int, dtype=None) -> GraphTensor:
        """Inclusive prefix sum: each position sums a causal window (pad + unfold + sum)."""
        x = self.to(dtype) if dtype is not None else self
        if x.dtype == bool_:
            x = x.to(int32)
        a = _axes(x, dim)[0]
        if x.ndim == 0:
            return x
        n = x.layout.shape[a]
        if n == 0:
            return x
        moved = x.movedim(a, -1)
        padded = moved._pad_axis(moved.ndim - 1, n - 1, 0)
        windows = padded.unfold(-1, n, 1)  # (..., n, n)
        return windows.sum(-1).movedim(-1, a)

    def cumprod(self, dim: int, dtype=None) -> GraphTensor:
        x = self.to(dtype) if dtype is not None else self
        a = _axes(x, dim)[0]
        if x.ndim == 0 or x.layout.shape[a] == 0:
            return x
        return _cumprod(x, a)

    def norm(self, p: float = 2.0, dim=None, keepdim: bool = False) -> GraphTensor:
        x = self._float()
        if p == 2:
            return (x * x).sum(dim, keepdim).sqrt()
        if p == 1:
            return x.abs().sum(dim, keepdim)
        if p == 0:  # the count of nonzero elements, as PyTorch
            return (x != 0).to(x.dtype).sum(dim, keepdim)
        if math.isinf(p):
            return x.abs().amax(dim, keepdim) if p > 0 else x.abs().amin(dim, keepdim)
        return x.abs().pow(p).sum(dim, keepdim).pow(1.0 / p)


def _cumprod(x: GraphTensor, a: int) -> GraphTensor:
    """Running product along axis `a`: the product of each causal window (1 past its end),
    so it is exact for integers and has PyTorch's gradient where a factor is 0."""
    from ..symbolic import lt
    from .binary import where
    from .creation import IOTA_INDEX, iota

    moved = x.movedim(a, -1)
    n = moved.layout.shape[-1]
    square = (*moved.layout.shape, n)
    seen = iota(x.graph, lt(IOTA_INDEX % n, IOTA_INDEX // n + 1), (n, n), bool_).expand(square)
    windows = where(seen, moved.unsqueeze(-2).expand(square), 1)
    return windows.prod(-1).movedim(-1, a)


def _tree_prod(x: GraphTensor, dim, keepdim: bool) -> GraphTensor | None:
    """Product over a static axis: multiply the two halves until one is left
    (ceil(log2 n) Mul nodes); integers as int32. None when the reduced size is symbolic."""
    if not x.dtype.is_float:
        x = x.to(int32)
    if x.ndim == 0:
        return x
    flat = dim is None
    t = x.flatten() if flat else x
    a = 0 if flat else _axes(x, dim)[0]
    n = t.layout.shape[a]
    if not n.is_const:
        return None
    t = t.movedim(a, -1)
    size = n.value
    if size == 0:
        t = x.graph.constant(1, x.dtype).expand((*t.layout.shape[:-1], 1))
    while size > 1:
        half = size // 2
        prod = t[..., :half] * t[..., half : 2 * half]
        t = prod if size % 2 == 0 else _cat_last(prod, t[..., 2 * half :])
        size = half + size % 2
    out = t.squeeze(-1)
    if keepdim:
        shape = [1] * x.ndim if flat else [
            to_expr(1) if i == a else d for i, d in enumerate(x.layout.shape)]
        return out.reshape(shape)
    return out


def _cat_last(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    from .movement import cat

    return cat([a, b], dim=-1)


def _memory_order(x: GraphTensor) -> list[int] | None:
    """The axes of a permuted view `x` (positive constant strides) from the largest stride to the
    smallest, or None when that is already their order. Softmax's max, exponentials and sum
    are stored in the logical order of the tensor they are computed on: over a transposed
    view (ONNX's Transpose -> Softmax -> Transpose, YOLOv8's DFL head) every one of those
    kernels would read across the softmax axis at a large stride and write transposed;
    computed on the view permuted back, they read and write along memory."""
    strides = x.layout.strides
    if not all(s.is_const and s.value > 0 for s in strides):
        return None
    order = sorted(range(x.ndim), key=lambda a: -strides[a].value)
    return order if order != list(range(x.ndim)) else None
