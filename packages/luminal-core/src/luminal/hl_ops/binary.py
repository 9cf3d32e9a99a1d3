"""Binary ops with PyTorch broadcasting and type promotion, composed from Add/Mul/Mod/LessThan."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .. import ops
from ..dtypes import bool_, float32, int32, promote
from ..symbolic import Expr
from .base import TensorBase
from .movement import broadcast_shape, broadcast_to, cat

if TYPE_CHECKING:
    from ..tensor import GraphTensor

    Operand = GraphTensor | float | int | bool


def scalar_dtype(t: GraphTensor, value) -> object:
    if isinstance(value, bool):
        return t.dtype
    if isinstance(value, float) and not t.dtype.is_float:
        return float32
    if isinstance(value, int) and t.dtype == bool_:
        return int32
    return t.dtype


def lift(like: GraphTensor, value) -> GraphTensor:
    """A Python scalar (or symbolic Expr) as a constant tensor of `like`'s graph."""
    if isinstance(value, TensorBase):
        return value
    if isinstance(value, Expr):
        return like.graph.constant(value, like.dtype)
    return like.graph.constant(value, scalar_dtype(like, value))


def binary(name: str, op: ops.Op, a: Operand, b: Operand, dtype=None) -> GraphTensor:
    """Broadcast, promote to a common dtype (or `dtype`), then apply primitive `op`."""
    if not isinstance(a, TensorBase):
        a = lift(b, a)
    if not isinstance(b, TensorBase):
        b = lift(a, b)
    if a.graph is not b.graph:
        raise ValueError(f"{name}: operands belong to different graphs")
    common = dtype or promote(a.dtype, b.dtype)
    a, b = a.to(common), b.to(common)
    shape = broadcast_shape(name, a.layout.shape, b.layout.shape)
    return a._new(op, broadcast_to(a, shape), broadcast_to(b, shape))


def where(cond: Operand, x: Operand, y: Operand) -> GraphTensor:
    """`x` where `cond` is true, else `y` (PyTorch `torch.where`).

    Limitation: the 12 primitives have no select, so this is `x*c + y*(1-c)`: exact when both
    branches are finite, but an inf or NaN in the branch that is *not* chosen still reaches
    the result as NaN (0 * inf, 0 * nan). `where(x > 0, x.log(), 0.0)` is NaN where x <= 0,
    because log(x) is -inf or NaN there. Sanitize the argument instead, so that the unchosen
    branch is finite:

        where(x > 0, x.clamp(min=1e-30).log(), 0.0)      # not where(x > 0, x.log(), 0.0)
        where(d != 0, n / where(d != 0, d, 1.0), 0.0)    # a safe division

    A non-finite *scalar* branch (`-inf` for masking, `nan`) is fine: it is built from the
    mask itself (log2(0) = -inf), so it never meets a `0 *`. The high-level ops of luminal
    that use `where` internally keep their branches finite for finite inputs.
    """
    anchor = next((t for t in (cond, x, y) if isinstance(t, TensorBase)), None)
    if anchor is None:
        raise TypeError("where: at least one argument must be a GraphTensor")
    c = lift(anchor, cond).to(bool_)
    x, y = _where_operand(anchor, x, y), _where_operand(anchor, y, x)
    shape = c.layout.shape
    for t in (x, y):
        if isinstance(t, TensorBase):
            shape = broadcast_shape("where", shape, t.layout.shape)  # names where, not mul
    dtypes = [t.dtype for t in (x, y) if isinstance(t, TensorBase)]
    common = promote(*dtypes) if len(dtypes) == 2 else dtypes[0] if dtypes else float32
    if any(isinstance(v, float) for v in (x, y)) and not common.is_float:
        common = float32
    if common == bool_:
        return (c & x) | (c.logical_not() & y)
    return _select(c, x, common) + _select(c.logical_not(), y, common)


def _where_operand(anchor: GraphTensor, value: Operand, other: Operand):
    """A where() branch: tensors stay, non-finite floats stay Python floats (see `_select`),
    other scalars become constants (floats when the other branch is a float)."""
    if isinstance(value, TensorBase) or (isinstance(value, float) and not math.isfinite(value)):
        return value
    if isinstance(value, int) and isinstance(other, float):
        value = float(value)
    return lift(other if isinstance(other, TensorBase) else anchor, value)


def _select(mask: GraphTensor, value, dtype) -> GraphTensor:
    """`value` where `mask`, else 0. A non-finite scalar comes from the mask itself:
    log2(1 - m) is -inf where m and 0 elsewhere, sqrt(-m) is NaN where m and 0 elsewhere."""
    m = mask.to(dtype)
    if not isinstance(value, float):
        return value.to(dtype) * m
    if math.isnan(value):
        return (-m).sqrt()
    minus_inf = (1 - m).log2()
    return minus_inf if value < 0 else -minus_inf


def maximum(a: Operand, b: Operand) -> GraphTensor:
    """Elementwise max, exact for infinities: a MaxReduce over the pair stacked on a new axis."""
    if not isinstance(a, TensorBase):
        a = lift(b, a)
    if not isinstance(b, TensorBase):
        b = lift(a, b)
    common = promote(a.dtype, b.dtype)
    shape = broadcast_shape("maximum", a.layout.shape, b.layout.shape)
    a = broadcast_to(a.to(common), shape).unsqueeze(-1)
    b = broadcast_to(b.to(common), shape).unsqueeze(-1)
    return cat([a, b], dim=-1).amax(-1)


def minimum(a: Operand, b: Operand) -> GraphTensor:
    if not isinstance(a, TensorBase):
        a = lift(b, a)
    if not isinstance(b, TensorBase):
        b = lift(a, b)
    return -maximum(-a, -b)


class BinaryOps:
    """Arithmetic and comparison operators (PyTorch semantics)."""

    def __add__(self, other: Operand) -> GraphTensor:
        return binary("add", ops.Add(), self, other)

    def __radd__(self, other: Operand) -> GraphTensor:
        return binary("add", ops.Add(), other, self)

    def __mul__(self, other: Operand) -> GraphTensor:
        return binary("mul", ops.Mul(), self, other)

    def __rmul__(self, other: Operand) -> GraphTensor:
        return binary("mul", ops.Mul(), other, self)

    def __sub__(self, other: Operand) -> GraphTensor:
        return self + (-other if not _is_tensor(other) else other.neg())

    def __rsub__(self, other: Operand) -> GraphTensor:
        return self.neg() + other

    def __truediv__(self, other: Operand) -> GraphTensor:
        if not _is_tensor(other):
            return self.to(_float_of(self)) * _recip_scalar(other)
        return self.to(_float_of(self)) * other.to(_float_of(other)).reciprocal()

    def __rtruediv__(self, other: Operand) -> GraphTensor:
        return self.to(_float_of(self)).reciprocal() * other

    def __floordiv__(self, other: Operand) -> GraphTensor:
        """Floor division (PyTorch `floor_divide`), exact: (a - fmod(a, b)) / b, corrected."""
        other = lift(self, other)
        r = self.fmod(other)
        fix = ((r != 0) & ((r < 0) != (other < 0))).to(r.dtype)
        q = (self - r).to(_float_of(self)) / other.to(_float_of(other)) - fix
        q = q.round()
        if self.dtype.is_float or other.dtype.is_float:
            return q
        return q.to(promote(self.dtype, other.dtype))

    def __rfloordiv__(self, other: Operand) -> GraphTensor:
        return lift(self, other) // self

    def __mod__(self, other: Operand) -> GraphTensor:
        """Python/PyTorch remainder: the result has the sign of the divisor."""
        return _floor_mod(self, other)

    def __rmod__(self, other: Operand) -> GraphTensor:
        return _floor_mod(lift(self, other), self)

    def fmod(self, other: Operand) -> GraphTensor:
        """C-style remainder (sign of the dividend): the `Mod` primitive."""
        return binary("fmod", ops.Mod(), self, other)

    def remainder(self, other: Operand) -> GraphTensor:
        return self % other

    def __pow__(self, exponent: Operand) -> GraphTensor:
        return self.pow(exponent)

    def __rpow__(self, base: Operand) -> GraphTensor:
        return lift(self, float(base)).pow(self)

    def __neg__(self) -> GraphTensor:
        return self.neg()

    def neg(self) -> GraphTensor:
        if self.dtype == bool_:
            raise TypeError("negation of a bool tensor: use logical_not()")
        return self * -1

    def __lt__(self, other: Operand) -> GraphTensor:
        return binary("lt", ops.LessThan(), self, other)

    def __gt__(self, other: Operand) -> GraphTensor:
        return binary("gt", ops.LessThan(), other, self)

    def __le__(self, other: Operand) -> GraphTensor:
        return _less_or_equal(self, other)

    def __ge__(self, other: Operand) -> GraphTensor:
        return _less_or_equal(lift(self, other), self)

    def __eq__(self, other: Operand) -> GraphTensor:  # type: ignore[override]
        return _equal(self, other)

    def __ne__(self, other: Operand) -> GraphTensor:  # type: ignore[override]
        return _equal(self, other).logical_not()

    def lt(self, other):
        return self < other

    def gt(self, other):
        return self > other

    def le(self, other):
        return self <= other

    def ge(self, other):
        return self >= other

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def add(self, other, alpha: float = 1):
        return self + other * alpha if alpha != 1 else self + other

    def sub(self, other, alpha: float = 1):
        return self - other * alpha if alpha != 1 else self - other

    def mul(self, other):
        return self * other

    def div(self, other, rounding_mode: str | None = None):
        if rounding_mode is None:
            return self / other
        if rounding_mode == "floor":
            return self // other
        if rounding_mode == "trunc":
            q = self / other
            return q.trunc() if self.dtype.is_float else q.trunc().to(self.dtype)
        raise ValueError(f"div: unknown rounding_mode {rounding_mode!r}")

    # bool logic: Add on bools is "or", Mul is "and", x < True is "not"
    def __and__(self, other: Operand) -> GraphTensor:
        if self.dtype == bool_ and (not _is_tensor(other) or other.dtype == bool_):
            return binary("and", ops.Mul(), self, other, dtype=bool_)
        raise TypeError("& is defined for bool tensors only")

    __rand__ = __and__

    def __or__(self, other: Operand) -> GraphTensor:
        if self.dtype == bool_ and (not _is_tensor(other) or other.dtype == bool_):
            return binary("or", ops.Add(), self, other, dtype=bool_)
        raise TypeError("| is defined for bool tensors only")

    __ror__ = __or__

    def __xor__(self, other: Operand) -> GraphTensor:
        return self != other

    def __invert__(self) -> GraphTensor:
        if self.dtype != bool_:
            raise TypeError("~ is defined for bool tensors only")
        return self.logical_not()

    def logical_not(self) -> GraphTensor:
        return binary("logical_not", ops.LessThan(), self.to(bool_), True, dtype=bool_)

    def logical_and(self, other):
        return self.to(bool_) & lift(self, other).to(bool_)

    def logical_or(self, other):
        return self.to(bool_) | lift(self, other).to(bool_)

    def maximum(self, other):
        return maximum(self, other)

    def minimum(self, other):
        return minimum(self, other)

    def clamp(self, min=None, max=None):
        out = self
        if min is not None:
            out = maximum(out, min)
        if max is not None:
            out = minimum(out, max)
        return out

    clip = clamp

    def where(self, cond, other):
        """PyTorch `Tensor.where(cond, other)`: self where cond else other."""
        return where(cond, self, other)

    def masked_fill(self, mask, value):
        """`value` where `mask`, else self. Like `where`, an inf or NaN of self under the mask
        still gives NaN there (no select primitive); a non-finite `value` is fine."""
        return where(mask, value, self)

    def pow(self, exponent: Operand) -> GraphTensor:
        """`self ** exponent` with PyTorch semantics: negative bases with integral exponents,
        NaN for negative bases with fractional ones, 0 ** 0 == 1, 0 ** -1 == inf."""
        if not self.dtype.is_float and _integral_exponent(exponent):
            return _pow_int(self, exponent)
        x = self.to(_float_of(self))
        if not _is_tensor(exponent):
            return _pow_scalar(x, float(exponent))
        y = exponent.to(promote(x.dtype, exponent.dtype) if exponent.dtype.is_float else x.dtype)
        zero_exp = y == 0
        # |x| ** y as exp2(y * log2|x|); a zero exponent reads base 1 so that 0 ** 0 == 1
        base = x.abs() + zero_exp.to(x.dtype) * (1 - x.abs())
        mag = (base.log2() * y).exp2()
        neg = x < 0
        odd = y.abs().fmod(2.0) == 1
        fractional = y != y.trunc()
        sign = 1 - 2 * (neg & odd).to(x.dtype)
        return where(neg & fractional, math.nan, mag * sign)


def _integral_exponent(exponent: Operand) -> bool:
    """An exponent that keeps an integer base integer, as in PyTorch (an int or int tensor)."""
    if _is_tensor(exponent):
        return not exponent.dtype.is_float
    return isinstance(exponent, int)


def _pow_int(x: GraphTensor, exponent: Operand) -> GraphTensor:
    """Integer power: exact by multiplication for small constant exponents, else computed in
    float32 and rounded (exact while the result fits float32's 24-bit mantissa)."""
    if not _is_tensor(exponent):
        exponent = int(exponent)
        if exponent < 0:
            raise ValueError("pow: integers to negative integer powers are not allowed")
    dtype = promote(x.dtype, exponent.dtype) if _is_tensor(exponent) else x.dtype
    dtype = int32 if dtype == bool_ else dtype
    x = x.to(dtype)
    if not _is_tensor(exponent) and exponent <= 4:
        out = lift(x, 1).expand_as(x) if exponent == 0 else x
        for _ in range(exponent - 1):
            out = out * x
        return out
    return x.to(float32).pow(exponent.to(float32) if _is_tensor(exponent) else float(exponent)
                             ).round().to(dtype)


def _pow_scalar(x: GraphTensor, e: float) -> GraphTensor:
    """x ** e for a Python exponent: repeated multiplication for small whole exponents
    (exact, and fine for negative bases), sqrt for 0.5, exp2/log2 otherwise."""
    if e == int(e) and abs(e) <= 4:
        k = int(abs(e))
        out = x.graph.constant(1.0, x.dtype).expand_as(x) if k == 0 else x
        for _ in range(k - 1):
            out = out * x
        return out.reciprocal() if e < 0 else out
    if e == 0.5:
        return x.sqrt()
    mag = (x.abs().log2() * e).exp2()
    if e != int(e):
        return where(x < 0, math.nan, mag)
    return mag * (1 - 2 * (x < 0).to(x.dtype)) if int(e) % 2 else mag


def _equal(a: Operand, b: Operand) -> GraphTensor:
    """a == b: neither is less than the other, and no NaN is involved (NaN compares unequal to
    everything, itself included; a NaN operand makes a + b NaN, which `not_nan` sees)."""
    a, b = (lift(b, a), b) if not _is_tensor(a) else (a, lift(a, b))
    unordered = ((a < b) | (a > b)).logical_not()
    if not promote(a.dtype, b.dtype).is_float:
        return unordered
    return unordered & not_nan(a + b)


def _less_or_equal(a: Operand, b: Operand) -> GraphTensor:
    """a <= b; not `not (a > b)`, which would hold for NaN."""
    a, b = (lift(b, a), b) if not _is_tensor(a) else (a, lift(a, b))
    if not promote(a.dtype, b.dtype).is_float:
        return (a > b).logical_not()
    return (a < b) | _equal(a, b)


def not_nan(x: GraphTensor) -> GraphTensor:
    """True where x is a number (possibly infinite): NaN is the only value that is neither
    below +inf nor above -inf."""
    return (x < math.inf) | (x > -math.inf)


def _is_tensor(x) -> bool:
    return isinstance(x, TensorBase)


def _float_of(t: GraphTensor):
    return t.dtype if t.dtype.is_float else float32


def _recip_scalar(v) -> float:
    v = float(v)
    if v == 0:
        return math.inf
    return 1.0 / v


def _floor_mod(a, b) -> GraphTensor:
    if not _is_tensor(b):
        b = lift(a, b)
    r = binary("remainder", ops.Mod(), a, b)
    # fmod has the dividend's sign; shift by b where the signs disagree
    fix = (r != 0) & ((r < 0) != (b < 0))
    return r + fix.to(r.dtype) * b
