"""Unary ops and activations, composed from Log2, Exp2, Sin, Sqrt, Recip and arithmetic."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import ml_dtypes

from .. import ops
from ..dtypes import bool_, float32
from ..errors import OpError
from .binary import not_nan, where
from .custom_vjp import with_vjp

if TYPE_CHECKING:
    from ..tensor import GraphTensor

LOG2_E = 1.0 / math.log(2.0)
LN_2 = math.log(2.0)
# 2*pi as a sum of three float32 values, the first two with few significant bits, so that
# k * part is exact for the k of any float32 argument a test meets (|x| < 2**20 or so)
_TWO_PI_HI = 6.25
_TWO_PI_MID = 0.033203125
_TWO_PI_LO = 2 * math.pi - 6.25 - 0.033203125


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
        """sin(r + pi/2) with r = x reduced into [-pi, pi] first (2*pi split in three parts,
        Cody-Waite), so that the shift by pi/2 loses no precision for large x."""
        x = self._float()
        k = (x * (0.5 / math.pi)).round()
        r = x - k * _TWO_PI_HI - k * _TWO_PI_MID - k * _TWO_PI_LO
        return (r + math.pi / 2).sin()

    def tan(self) -> GraphTensor:
        return self.sin() / self.cos()

    def rsqrt(self) -> GraphTensor:
        return self.sqrt().reciprocal()

    def square(self) -> GraphTensor:
        return self * self

    def abs(self) -> GraphTensor:
        """|x| as x * sign(x): PyTorch's subgradient 0 at 0; NaN stays NaN (NaN * 0)."""
        if self.dtype == bool_:
            return self
        return self * _sign(self)

    def sign(self) -> GraphTensor:
        """-1, 0 or 1 (0 for NaN, as PyTorch). Float: differentiable with gradient 0 (PyTorch's
        `sign` output requires grad), not a constant as a comparison would make it."""
        out = _sign(self)
        return with_vjp(out, [self], lambda g: [None]) if self.dtype.is_float else out

    def trunc(self) -> GraphTensor:
        """x - fmod(x, 1); +-inf stay +-inf (fmod(inf, 1) is NaN), with gradient 0
        everywhere as PyTorch's (the infinities are constants here)."""
        if not self.dtype.is_float:
            return self
        whole = self - self.fmod(1.0)
        return where(self == math.inf, math.inf, where(self == -math.inf, -math.inf, whole))

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
        """max(x, 0) with PyTorch's relu'(0) = 0; NaN stays NaN."""
        zero = 0.0 if self.dtype.is_float else 0
        return where(self > 0, self, where(self != self, self, zero))

    def relu6(self) -> GraphTensor:
        return self.hardtanh(0.0, 6.0)

    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> GraphTensor:
        """clamp(x, min_val, max_val) whose gradient is 0 at the bounds, as PyTorch's."""
        x = self._float()
        inside = (x > min_val) & (x < max_val)
        return where(inside | (x != x), x, where(x <= min_val, min_val, max_val))

    def sigmoid(self) -> GraphTensor:
        """1 / (1 + exp(-x)) with x read at >= -88, so exp(-x) stays finite and the gradient
        far out on either side is 0, not NaN (0 * inf); NaN stays NaN."""
        x = self._float()
        return ((-where(x < -88.0, -88.0, x)).exp() + 1).reciprocal()

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
        """x where x > 0, else x * slope: PyTorch's gradient (the slope) at 0."""
        x = self._float()
        return where(x > 0, x, x * negative_slope)

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
            raise OpError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
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

    # ----- hyperbolic and inverse trigonometric ------------------------------------------
    def sinh(self) -> GraphTensor:
        e = self._float().exp()
        return (e - e.reciprocal()) * 0.5

    def cosh(self) -> GraphTensor:
        e = self._float().exp()
        return (e + e.reciprocal()) * 0.5

    def atan(self) -> GraphTensor:
        """arctan by argument reduction to |t| <= tan(pi/12) and a Taylor polynomial there
        (|error| < 2e-7): atan(x) = pi/2 - atan(1/x) for |x| > 1, then
        atan(a) = pi/6 + atan((a*sqrt(3) - 1) / (a + sqrt(3))) for a > tan(pi/12)."""
        x = self._float()
        a = x.abs()
        big = a > 1
        a = where(big, a.reciprocal(), a)
        shifted = a > 0.2679491924311227
        r3 = math.sqrt(3.0)
        t = where(shifted, (a * r3 - 1) / (a + r3), a)
        t2 = t * t
        poly = t * (1 + t2 * (-1 / 3 + t2 * (1 / 5 + t2 * (-1 / 7 + t2 * (
            1 / 9 + t2 * (-1 / 11))))))
        r = poly + where(shifted, math.pi / 6, 0.0)
        r = where(big, math.pi / 2 - r, r)
        return where(x < 0, -r, r)

    def asin(self) -> GraphTensor:
        x = self._float()
        return _atan2_pos(x, (1 - x * x).sqrt())

    def acos(self) -> GraphTensor:
        return math.pi / 2 - self.asin()

    def asinh(self) -> GraphTensor:
        x = self._float()
        a = x.abs()
        r = (a + (a * a + 1).sqrt()).log()
        return where(x < 0, -r, r)

    def acosh(self) -> GraphTensor:
        x = self._float()
        return (x + (x * x - 1).sqrt()).log()

    def atanh(self) -> GraphTensor:
        x = self._float()
        return ((1 + x) / (1 - x)).log() * 0.5

    # ----- more activations (torch.nn.functional names) ------------------------------------
    def softsign(self) -> GraphTensor:
        return self / (self.abs() + 1)

    def celu(self, alpha: float = 1.0) -> GraphTensor:
        x = self._float()
        return x.relu() + ((x.minimum(0.0) / alpha).exp() - 1) * alpha

    def selu(self) -> GraphTensor:
        alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
        return self.elu(alpha) * scale

    def logsigmoid(self) -> GraphTensor:
        return -(-self._float()).softplus()

    def isnan(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self.to(bool_) & False
        return not_nan(self).logical_not()

    def isinf(self) -> GraphTensor:
        return self.abs() == math.inf

    def isposinf(self) -> GraphTensor:
        return self == math.inf

    def isneginf(self) -> GraphTensor:
        return self == -math.inf

    def isfinite(self) -> GraphTensor:
        if not self.dtype.is_float:
            return self.to(bool_) | True
        return self.abs() < math.inf

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None,
                   neginf: float | None = None) -> GraphTensor:
        if not self.dtype.is_float:
            return self
        top = float(ml_dtypes.finfo(self.dtype.numpy).max)
        x = where(self != self, nan, self)
        x = where(x == math.inf, top if posinf is None else posinf, x)
        return where(x == -math.inf, -top if neginf is None else neginf, x)


def _atan2_pos(y: GraphTensor, x: GraphTensor) -> GraphTensor:
    """atan(y / x) for x >= 0 (asin's angle), pi/2 * sign(y) where x is 0; NaN stays NaN."""
    ratio = y / where(x == 0, 1.0, x)
    return where(x == 0, where(y < 0, -math.pi / 2, math.pi / 2), ratio.atan())


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


def _sign(x: GraphTensor) -> GraphTensor:
    """-1, 0 or 1 from comparisons (no gradient reaches x through it)."""
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)
