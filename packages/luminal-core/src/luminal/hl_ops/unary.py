"""Unary ops and activations, composed from Log2, Exp2, Sin, Sqrt, Recip and arithmetic."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

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
        return (self._float() + 1).log()

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
        x = self._float()
        soft = ((x * beta).exp() + 1).log() * (1.0 / beta)
        return where(x * beta > threshold, x, soft)

    def leaky_relu(self, negative_slope: float = 0.01) -> GraphTensor:
        return self.maximum(0.0) + self.minimum(0.0) * negative_slope

    def elu(self, alpha: float = 1.0) -> GraphTensor:
        return where(self > 0, self, (self.minimum(0.0).exp() - 1) * alpha)

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
