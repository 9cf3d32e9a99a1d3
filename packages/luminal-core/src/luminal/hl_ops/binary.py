"""Binary ops with PyTorch broadcasting and type promotion, composed from Add/Mul/Mod/LessThan."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Union

from .. import ops
from ..dtypes import bool_, float32, int32, promote
from ..shape import show_shape
from ..symbolic import Expr, to_expr

if TYPE_CHECKING:
    from ..tensor import GraphTensor

    Operand = Union["GraphTensor", float, int, bool]


def broadcast_shape(name: str, a, b) -> tuple[Expr, ...]:
    a, b = tuple(map(to_expr, a)), tuple(map(to_expr, b))
    n = max(len(a), len(b))
    a = (Expr.const(1),) * (n - len(a)) + a
    b = (Expr.const(1),) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f"{name}: shapes {show_shape(a)} and {show_shape(b)} do not broadcast")
    return tuple(out)


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
    from ..tensor import GraphTensor

    if isinstance(value, GraphTensor):
        return value
    if isinstance(value, Expr):
        return like.graph.constant(value, like.dtype)
    return like.graph.constant(value, scalar_dtype(like, value))


def broadcast_to(t: GraphTensor, shape) -> GraphTensor:
    """View `t` at `shape` (PyTorch broadcasting: prepend 1s, expand size-1 axes)."""
    shape = tuple(map(to_expr, shape))
    if tuple(t.view.shape) == shape:
        return t
    if t.ndim > len(shape):
        raise ValueError(f"cannot broadcast {show_shape(t.view.shape)} to {show_shape(shape)}")
    lead = len(shape) - t.ndim
    if lead:
        t = t.reshape((1,) * lead + tuple(t.view.shape))
    broadcast_shape("expand", t.view.shape, shape)
    return t._with_view(t.view.expand(shape))


def binary(name: str, op: ops.Op, a: Operand, b: Operand, dtype=None) -> GraphTensor:
    """Broadcast, promote to a common dtype (or `dtype`), then apply primitive `op`."""
    from ..tensor import GraphTensor

    if not isinstance(a, GraphTensor):
        a = lift(b, a)
    if not isinstance(b, GraphTensor):
        b = lift(a, b)
    if a.graph is not b.graph:
        raise ValueError(f"{name}: operands belong to different graphs")
    common = dtype or promote(a.dtype, b.dtype)
    a, b = a.to(common), b.to(common)
    shape = broadcast_shape(name, a.view.shape, b.view.shape)
    return a._new(op, broadcast_to(a, shape), broadcast_to(b, shape))


def where(cond: Operand, x: Operand, y: Operand) -> GraphTensor:
    """`x` where `cond` is true, else `y` (PyTorch `torch.where`).

    Composed as `x*c + y*(1-c)`; an infinite constant on either side becomes `log2(c)`
    arithmetic instead, so masking with -inf stays exact (0 * inf would be NaN).
    """
    from ..tensor import GraphTensor

    anchor = next(t for t in (cond, x, y) if isinstance(t, GraphTensor))
    cond = lift(anchor, cond) if not isinstance(cond, GraphTensor) else cond
    if not isinstance(x, GraphTensor) and not isinstance(y, GraphTensor):
        x = lift(anchor, float(x) if isinstance(y, float) else x)
    # log2 of a 0/1 mask is 0/-inf: adding it selects an infinity without computing 0 * inf
    if isinstance(y, (int, float)) and math.isinf(y) and isinstance(x, GraphTensor):
        mask = cond.to(bool_).to(_float_of(x)).log2()
        return x + mask if y < 0 else x - mask
    if isinstance(x, (int, float)) and math.isinf(x) and isinstance(y, GraphTensor):
        mask = cond.to(bool_).logical_not().to(_float_of(y)).log2()
        return y + mask if x < 0 else y - mask
    if not isinstance(x, GraphTensor):
        x = lift(y, x)
    if not isinstance(y, GraphTensor):
        y = lift(x, y)
    common = promote(x.dtype, y.dtype)
    if common == bool_:
        c = cond.to(bool_)
        return (c & x) | (c.logical_not() & y)
    c = cond.to(common)
    return x.to(common) * c + y.to(common) * (1 - c)


def maximum(a: Operand, b: Operand) -> GraphTensor:
    """Elementwise max, exact for infinities: a MaxReduce over the pair stacked on a new axis."""
    from ..tensor import GraphTensor

    if not isinstance(a, GraphTensor):
        a = lift(b, a)
    if not isinstance(b, GraphTensor):
        b = lift(a, b)
    common = promote(a.dtype, b.dtype)
    shape = broadcast_shape("maximum", a.view.shape, b.view.shape)
    a = broadcast_to(a.to(common), shape).unsqueeze(-1)
    b = broadcast_to(b.to(common), shape).unsqueeze(-1)
    from .movement import cat

    return cat([a, b], dim=-1).amax(-1)


def minimum(a: Operand, b: Operand) -> GraphTensor:
    from ..tensor import GraphTensor

    if not isinstance(a, GraphTensor):
        a = lift(b, a)
    if not isinstance(b, GraphTensor):
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
        return q if self.dtype.is_float or other.dtype.is_float else q.to(promote(self.dtype, other.dtype))

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
        return (self > other).logical_not()

    def __ge__(self, other: Operand) -> GraphTensor:
        return (self < other).logical_not()

    def __eq__(self, other: Operand) -> GraphTensor:  # type: ignore[override]
        return ((self < other) | (self > other)).logical_not()

    def __ne__(self, other: Operand) -> GraphTensor:  # type: ignore[override]
        return (self < other) | (self > other)

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

    def clamp(self, min=None, max=None):  # noqa: A002 (PyTorch names)
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
        return where(mask, value, self)

    def pow(self, exponent: Operand) -> GraphTensor:
        """`self ** exponent` with PyTorch semantics, including negative bases with integral
        exponents and 0 ** 0 == 1."""
        x = self.to(_float_of(self))
        if not _is_tensor(exponent):
            e = float(exponent)
            if e == int(e) and abs(e) <= 4:
                k = int(abs(e))
                out = x.graph.constant(1.0, x.dtype).expand_as(x) if k == 0 else x
                for _ in range(k - 1):
                    out = out * x
                return out.reciprocal() if e < 0 else out
            if e == 0.5:
                return x.sqrt()
            mag = (x.abs().log2() * e).exp2()
            if e == int(e):
                return mag * (1 - 2 * (x < 0).to(x.dtype)) if int(e) % 2 else mag
            return where(x < 0, math.nan, mag)
        y = exponent.to(promote(x.dtype, exponent.dtype)) if exponent.dtype.is_float else (
            exponent.to(x.dtype)
        )
        mag = (x.abs().log2() * y).exp2()
        integral = y == y.trunc()
        odd = (y.abs() % 2) == 1
        neg = x < 0
        sign = 1 - 2 * (neg & odd).to(x.dtype)
        out = where(neg & integral.logical_not(), math.nan, mag * sign)
        return where(y == 0, 1.0, out)


def _is_tensor(x) -> bool:
    from ..tensor import GraphTensor

    return isinstance(x, GraphTensor)


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
