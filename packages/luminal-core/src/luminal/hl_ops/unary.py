"""Unary ops and activations, composed from Log2, Exp2, Sin, Sqrt, Recip and arithmetic."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import ml_dtypes

from .. import ops
from ..dtypes import bool_, float32
from .binary import not_nan, where

if TYPE_CHECKING:
    from ..tensor import GraphTensor

LOG2_E = 1.0 / math.log(2.0)
LN_2 = math.log(2.0)


class UnaryOps:
    def _float(self) -> GraphTensor:
        return self if self.dtype.is_float else self.to(float32)

    def _unary(self, op: ops.Op) -> GraphTensor:
        x = self._float()
        return x._new(op, x)

    # ----- primitives ---------------------------------------------------------------------
    def log2(self) -> GraphTensor:
        return self._unary(ops.Log2())

    def exp2(self) -> GraphTensor:
        return self._unary(ops.Exp2())

    def sin(self) -> GraphTensor:
        return self._unary(ops.Sin())

    def sqrt(self) -> GraphTensor:
        return self._unary(ops.Sqrt())

    def reciprocal(self) -> GraphTensor:
        return self._unary(ops.Recip())

    # ----- compositions -------------------------------------------------------------------
    def exp(self) -> GraphTensor:
        return (self._float() * LOG2_E).exp2()

    def log(self) -> GraphTensor:
        return self.log2() * LN_2

    def log10(self) -> GraphTensor:
        return self.log2() * (1.0 / math.log2(10.0))

    def log1p(self) -> GraphTensor:
        """log(1 + x), accurate where 1 + x rounds to 1 (Goldberg's log(u) * x / (u - 1))."""
        x = self._float()
        # the ratio reads x clamped to a finite value so that x = inf gives log(inf) * 1
        xc = x.minimum(float(ml_dtypes.finfo(x.dtype.numpy).max))
        return _log1p_ratio(x + 1, xc, (xc + 1) - 1)

    def expm1(self) -> GraphTensor:
        return self.exp() - 1

    def cos(self) -> GraphTensor:
        return (self._float() + math.pi / 2).sin()

    def tan(self) -> GraphTensor:
        return self.sin() / self.cos()

    def rsqrt(self) -> GraphTensor:
        return self.sqrt().reciprocal()

    def square(self) -> GraphTensor:
        return self * self

    def abs(self) -> GraphTensor:
        if self.dtype == bool_:
            return self
        return self * (1 - 2 * (self < 0).to(self.dtype))

    def sign(self) -> GraphTensor:
        return (self > 0).to(self.dtype) - (self < 0).to(self.dtype)

    def trunc(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self
        return self - self.fmod(1.0)

    def floor(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return t - (self < t).to(self.dtype)

    def ceil(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self
        t = self.trunc()
        return t + (self > t).to(self.dtype)

    def round(self) -> GraphTensor:
        """Round half to even (PyTorch `round`)."""
        if not self.dtype.is_float:
            return self
        r = (self + 0.5).floor()
        tie = (r - self) == 0.5
        odd = r.fmod(2.0) != 0
        return r - (tie & odd).to(self.dtype)

    def frac(self) -> GraphTensor:
        return self - self.trunc()

    def relu(self) -> GraphTensor:
        return self.maximum(0.0 if self.dtype.is_float else 0)

    def relu6(self) -> GraphTensor:
        return self.clamp(0.0, 6.0)

    def sigmoid(self) -> GraphTensor:
        return ((-self._float()).exp() + 1).reciprocal()

    def tanh(self) -> GraphTensor:
        return (self._float() * 2).sigmoid() * 2 - 1

    def silu(self) -> GraphTensor:
        return self * self.sigmoid()

    swish = silu

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> GraphTensor:
        """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (PyTorch).

        Computed as (max(bx, 0) + log1p(exp(-|bx|))) / beta, which never overflows. Each
        branch of the `where` reads its argument clamped to its own side of the threshold, so
        the branch not taken is finite and cannot leak NaN (see `where`); +-inf map to
        inf and 0 as in PyTorch.
        """
        x = self._float()
        edge = threshold / beta
        above = x > edge if beta > 0 else x < edge
        # the soft branch sees x clamped below the threshold: finite for every x
        bx = (x.minimum(edge) if beta > 0 else x.maximum(edge)) * beta
        soft = (bx.maximum(0.0) + _log1p_unit((-bx.abs()).exp())) * (1.0 / beta)
        linear = x.maximum(edge) if beta > 0 else x.minimum(edge)
        return where(above, linear, soft)

    def leaky_relu(self, negative_slope: float = 0.01) -> GraphTensor:
        return self.maximum(0.0) + self.minimum(0.0) * negative_slope

    def elu(self, alpha: float = 1.0) -> GraphTensor:
        # relu(x) + alpha * (exp(min(x, 0)) - 1): no select, so +-inf give inf and -alpha
        x = self._float()
        return x.relu() + (x.minimum(0.0).exp() - 1) * alpha

    def gelu(self, approximate: str = "none") -> GraphTensor:
        x = self._float()
        if approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
            return x * 0.5 * (inner.tanh() + 1)
        if approximate != "none":
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        return x * 0.5 * ((x * (1.0 / math.sqrt(2.0))).erf() + 1)

    def erf(self) -> GraphTensor:
        """Error function: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7) in primitives."""
        x = self._float()
        a = x.abs()
        t = (a * 0.3275911 + 1).reciprocal()
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
            -1.453152027 + t * 1.061405429))))
        y = 1 - poly * (-(a * a)).exp()
        return y * x.sign()

    def hardsigmoid(self) -> GraphTensor:
        return (self / 6 + 0.5).clamp(0.0, 1.0)

    def hardswish(self) -> GraphTensor:
        return self * self.hardsigmoid()

    def mish(self) -> GraphTensor:
        return self * self.softplus().tanh()

    def isnan(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self.to(bool_) & False
        return not_nan(self).logical_not()

    def isinf(self) -> GraphTensor:
        return self.abs() == math.inf


def _log1p_unit(y: GraphTensor) -> GraphTensor:
    """log(1 + y) for y in [0, 1], accurate for tiny y (where 1 + y rounds to 1): Goldberg's
    log(u) * y / (u - 1) with u = 1 + y, and y itself where u - 1 is 0."""
    u = y + 1
    return _log1p_ratio(u, y, u - 1)


def _log1p_ratio(u: GraphTensor, y: GraphTensor, d: GraphTensor) -> GraphTensor:
    """log(u) * y / d, and y where d (the rounded u - 1) is 0; both branches stay finite."""
    exact = d == 0
    safe_d = d + exact.to(d.dtype)  # 1 where d is 0
    return where(exact, y, u.log() * (y / safe_d))
