"""Binary ops with PyTorch broadcasting and type promotion, composed from Add/Mul/Mod/LessThan."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from ..dtypes import bool_, float32, int32, promote, uint8
from ..errors import OpError
from ..symbolic import Expr
from .base import TensorBase
from .custom_vjp import with_vjp
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
        raise OpError(f"{name}: operands belong to different graphs")
    common = dtype or promote(a.dtype, b.dtype)
    a, b = a.to(common), b.to(common)
    shape = broadcast_shape(name, a.layout.shape, b.layout.shape)
    return a._new(op, broadcast_to(a, shape), broadcast_to(b, shape))


def where(cond: Operand, x: Operand, y: Operand) -> GraphTensor:
    """`x` where `cond` is true, else `y` (PyTorch `torch.where`): broadcasting, type
    promotion, and exact selection (a `Select` node: an inf or NaN in the branch not taken
    never reaches the result, so `masked_fill(mask, -inf)` and `where(x > 0, x.log(), 0)` are
    what PyTorch gives)."""
    anchor = next((t for t in (cond, x, y) if isinstance(t, TensorBase)), None)
    if anchor is None:
        raise TypeError("where: at least one argument must be a GraphTensor")
    c = lift(anchor, cond).to(bool_)
    common = _where_dtype(x, y)
    x, y = (t.to(common) if isinstance(t, TensorBase) else anchor.graph.constant(t, common)
            for t in (x, y))
    shape = broadcast_shape("where", c.layout.shape, x.layout.shape)
    shape = broadcast_shape("where", shape, y.layout.shape)
    return c._new(ops.Select(), *(broadcast_to(t, shape) for t in (c, x, y)))


def _where_dtype(x: Operand, y: Operand):
    """PyTorch's result dtype of where(c, x, y): tensors promote; a Python float makes an
    integer or bool result float32; a Python int makes a bool result int32."""
    dtypes = [t.dtype for t in (x, y) if isinstance(t, TensorBase)]
    common = (promote(*dtypes) if len(dtypes) == 2 else dtypes[0]) if dtypes else None
    scalars = [v for v in (x, y) if not isinstance(v, TensorBase)]
    if common is None:
        return float32 if any(isinstance(v, float) for v in scalars) else (
            bool_ if all(isinstance(v, bool) for v in scalars) else int32)
    if any(isinstance(v, float) for v in scalars) and not common.is_float:
        return float32
    if any(isinstance(v, int) and not isinstance(v, bool) for v in scalars) and common == bool_:
        return int32
    return common


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
    common = promote(a.dtype, b.dtype)
    a, b = a.to(common), b.to(common)
    if not common.is_float:  # ~ maps INT_MIN to INT_MAX (and False to True): no overflow
        return ~maximum(~a, ~b)
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
        return self * (255 if self.dtype == uint8 else -1)  # uint8 wraps: 255 is -1 mod 256

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
            other = lift(self, other)
            r = self.fmod(other)
            # a - fmod(a, b) is a multiple of b: rounding undoes the float error of the division
            q = ((self - r) / other).round()
            # r is NaN where a is inf or b is 0: a / b is inf or NaN there
            q = where(r == r, q, (self / other).trunc())
            return q.to(promote(self.dtype, other.dtype))
        raise OpError(f"div: unknown rounding_mode {rounding_mode!r}")

    # bool logic: Add on bools is "or", Mul is "and", x < True is "not"; integers bit by bit
    def __and__(self, other: Operand) -> GraphTensor:
        return _bitwise("and", self, other)

    __rand__ = __and__

    def __or__(self, other: Operand) -> GraphTensor:
        return _bitwise("or", self, other)

    __ror__ = __or__

    def __xor__(self, other: Operand) -> GraphTensor:
        return _bitwise("xor", self, other)

    __rxor__ = __xor__

    def __invert__(self) -> GraphTensor:
        if self.dtype == bool_:
            return self.logical_not()
        if self.dtype.is_float:
            raise TypeError(f"~ (bitwise_not) is not defined for {self.dtype.name} tensors")
        info = np.iinfo(self.dtype.numpy)  # ~x == max + min - x: -1 - x signed, 255 - x uint8
        return int(info.max) + int(info.min) - self

    def bitwise_not(self) -> GraphTensor:
        return ~self

    def bitwise_and(self, other):
        return self & other

    def bitwise_or(self, other):
        return self | other

    def bitwise_xor(self, other):
        return self ^ other

    def __lshift__(self, shift: int | GraphTensor) -> GraphTensor:
        """x << n: x * 2**n, wrapping like int32 (PyTorch's `bitwise_left_shift`); n is an
        int or an integer tensor of amounts in [0, 32)."""
        _check_shift(self, shift)
        if _is_tensor(shift):
            return self * lift(self, 2) ** shift  # integer pow wraps as the shift does
        return self * (1 << shift) if shift < 31 else self * int(np.int32(-(2**31)))

    def __rshift__(self, shift: int | GraphTensor) -> GraphTensor:
        """x >> n: arithmetic (sign-extending) shift, from the bits of x; n is an int or an
        integer tensor of amounts in [0, 32)."""
        _check_shift(self, shift)
        if _is_tensor(shift):  # one fixed shift per bit of the amounts
            out = self
            for j in range(5):
                out = where(shift.fmod(2 << j) >= (1 << j), out >> (1 << j), out)
            return out
        bits = _bits(self)
        out = lift(self, 0)
        for k in range(shift, 31):
            out = out + bits[k].to(self.dtype) * (1 << (k - shift))
        return out + bits[31].to(self.dtype) * -(1 << (31 - shift))

    def bitwise_left_shift(self, shift):
        return self << shift

    def bitwise_right_shift(self, shift):
        return self >> shift

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
        """PyTorch `clamp`: NaN stays NaN, and the gradient is 1 inside [min, max], bounds
        included (a bound that is a tensor gets the gradient where it is taken)."""
        if min is None and max is None:
            raise OpError("clamp: at least one of min and max must be given")
        out = self
        if min is not None:
            out = where(out < min, min, out)
        if max is not None:
            out = where(out > max, max, out)
        return out

    clip = clamp

    def where(self, cond, other):
        """PyTorch `Tensor.where(cond, other)`: self where cond else other."""
        return where(cond, self, other)

    def masked_fill(self, mask, value):
        """`value` where `mask`, else self. Like `where`, an inf or NaN of self under the mask
        still gives NaN there (no select primitive); a non-finite `value` is fine."""
        return where(mask, value, self)

    def copysign(self, other: Operand) -> GraphTensor:
        """|self| with the sign bit of `other` (-0.0 counts as negative: 1 / -0.0 < 0)."""
        x = self.to(_float_of(self))
        mag = x.abs() + 0.0  # + 0.0 turns -0.0 into 0.0; abs'(0) = 0 as PyTorch's copysign'(0)
        sign_of = lift(self, other).to(x.dtype)
        negative = (sign_of < 0) | ((sign_of == 0) & (sign_of.reciprocal() < 0))
        return where(negative, -mag, mag)

    def lerp(self, end: Operand, weight: Operand) -> GraphTensor:
        """self + weight * (end - self), from the nearer end as PyTorch (exact at 0 and 1)."""
        end = lift(self, end)
        w = lift(self, weight)
        diff = end - self
        return where(w.abs() < 0.5, self + w * diff, end - diff * (1 - w))

    def isclose(self, other: Operand, rtol: float = 1e-5, atol: float = 1e-8,
                equal_nan: bool = False) -> GraphTensor:
        """|self - other| <= atol + rtol * |other|, equal infinities close, NaN as asked."""
        other = lift(self, other)
        same = self == other
        if not promote(self.dtype, other.dtype).is_float:
            return same if rtol == 0 and atol == 0 else same | (
                (self - other).abs() <= atol + rtol * other.abs())
        finite = (self.abs() < math.inf) & (other.abs() < math.inf)
        close = same | (finite & ((self - other).abs() <= atol + rtol * other.abs()))
        return close | ((self != self) & (other != other)) if equal_nan else close

    def logaddexp(self, other: Operand) -> GraphTensor:
        from .movement import stack

        a, b = self._float(), lift(self, other)._float()
        shape = broadcast_shape("logaddexp", a.layout.shape, b.layout.shape)
        return stack([broadcast_to(a, shape), broadcast_to(b, shape)], -1).logsumexp(-1)

    def pow(self, exponent: Operand) -> GraphTensor:
        """`self ** exponent` with PyTorch semantics: negative bases with integral exponents,
        NaN for negative bases with fractional ones, 0 ** 0 == 1, 0 ** -1 == inf; and
        PyTorch's gradient formulas (`_pow_vjp`), exact at 0, inf and negative bases."""
        if not self.dtype.is_float and _integral_exponent(exponent):
            return _pow_int(self, exponent)
        x = self.to(_float_of(self))
        if not _is_tensor(exponent):
            e = float(exponent)
            return with_vjp(_pow_scalar(x, e), [x], lambda g: [_pow_base_grad(g, x, e)])
        y = exponent.to(promote(x.dtype, exponent.dtype) if exponent.dtype.is_float else x.dtype)
        shape = broadcast_shape("pow", x.layout.shape, y.layout.shape)
        x, y = broadcast_to(x, shape), broadcast_to(y, shape)
        out = _pow_tensor(x, y)
        return with_vjp(out, [x, y], lambda g: [_pow_base_grad(g, x, y),
                                                _pow_exponent_grad(g, x, y, out)])


def _pow_tensor(x: GraphTensor, y: GraphTensor) -> GraphTensor:
    """|x| ** y as exp2(y * log2|x|), the sign from y's parity."""
    neg = x < 0
    fractional = y != y.trunc()  # False for +-inf
    # x ** 0, 1 ** y and -1 ** +-inf are 1 for every x and y (NaN included), but
    # exp2(y * log2|x|) is NaN there: read base 1 and exponent 0. A negative finite base
    # with a fractional exponent reads x itself, whose log2 is NaN (PyTorch's value);
    # -inf ** 0.3 is inf.
    one = (y == 0) | (x == 1) | ((x == -1) & (y.abs() == math.inf))
    base = where(one, 1.0, where(neg & fractional & (x > -math.inf), x, x.abs()))
    mag = (base.log2() * where(one, 0.0, y)).exp2()
    odd = y.abs().fmod(2.0) == 1
    return where(neg & odd, -mag, mag)


def _pow_base_grad(g: GraphTensor, x: GraphTensor, e) -> GraphTensor:
    """PyTorch's d(x ** e)/dx: e * x ** (e - 1), and 0 wherever e == 0 (even for x = 0 or
    NaN, where the formula is not a number)."""
    if not _is_tensor(e):
        return g * 0.0 if e == 0 else g * (x.pow(e - 1.0) * e)
    return g * where(e == 0, 0.0, e * x.pow(e - 1.0))


def _pow_exponent_grad(g: GraphTensor, x: GraphTensor, y: GraphTensor,
                       out: GraphTensor) -> GraphTensor:
    """PyTorch's d(x ** y)/dy: x ** y * log(x), and 0 where x == 0 and y >= 0 (NaN for a
    negative base, whose log is NaN)."""
    return g * where((x == 0) & (y >= 0), 0.0, out * x.log())


def _check_shift(x: GraphTensor, shift) -> None:
    if x.dtype.is_float or x.dtype == bool_:
        raise TypeError(f"shift of a {x.dtype.name} tensor: shifts are defined for integers")
    if _is_tensor(shift) and not (shift.dtype.is_float or shift.dtype == bool_):
        return
    if not isinstance(shift, int) or not 0 <= shift < 32:
        raise TypeError(
            f"shift by {shift!r}: the amount must be a Python int in [0, 32) or an integer "
            f"tensor")


def _bits(x: GraphTensor) -> list[GraphTensor]:
    """The 32 bits of int32 `x` as bool tensors, least significant first. The low 31 bits
    are read from x with its sign bit cleared (adding INT_MIN wraps a negative x to
    x + 2**31 >= 0), so that the truncated Mod is a floor mod."""
    low = where(x < 0, x + int(np.int32(-(2**31))), x)
    bits = [low.fmod(1 << (k + 1)) >= (1 << k) for k in range(30)]
    return [*bits, low >= (1 << 30), x < 0]


def _from_bits(bits: list[GraphTensor], dtype) -> GraphTensor:
    """The int32 whose bits are `bits` (bit 31 weighs INT_MIN: two's complement)."""
    out = bits[0].to(dtype)
    for k, b in enumerate(bits[1:], start=1):
        out = out + b.to(dtype) * (int(np.int32(-(2**31))) if k == 31 else 1 << k)
    return out


def _bitwise(name: str, a: Operand, b: Operand) -> GraphTensor:
    """&, | and ^ on bool or integer tensors (integers bit by bit from `_bits`)."""
    if not _is_tensor(a):
        a = lift(b, a)
    if not _is_tensor(b):
        b = lift(a, b)
    dtype = promote(a.dtype, b.dtype)
    if dtype.is_float:
        raise TypeError(f"bitwise {name} is not defined for {dtype.name} tensors")
    if dtype == bool_:
        if name == "and":
            return binary(name, ops.Mul(), a, b, dtype=bool_)
        if name == "or":
            return binary(name, ops.Add(), a, b, dtype=bool_)
        return a != b
    combine = {"and": lambda p, q: p & q, "or": lambda p, q: p | q, "xor": lambda p, q: p != q}
    pairs = zip(_bits(a.to(dtype)), _bits(b.to(dtype)))
    return _from_bits([combine[name](p, q) for p, q in pairs], dtype)


def _integral_exponent(exponent: Operand) -> bool:
    """An exponent that keeps an integer base integer, as in PyTorch (an int or int tensor)."""
    if _is_tensor(exponent):
        return not exponent.dtype.is_float
    return isinstance(exponent, int)


def _pow_int(x: GraphTensor, exponent: Operand) -> GraphTensor:
    """Integer power, exact (wrapping like int32) by binary exponentiation: for a constant
    exponent a chain of squarings, for a tensor one factor per exponent bit. A negative
    tensor exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise, as PyTorch."""
    if not _is_tensor(exponent):
        exponent = int(exponent)
        if exponent < 0:
            raise OpError("pow: integers to negative integer powers are not allowed")
    dtype = promote(x.dtype, exponent.dtype) if _is_tensor(exponent) else x.dtype
    dtype = int32 if dtype == bool_ else dtype
    x = x.to(dtype)
    one = lift(x, 1)
    if not _is_tensor(exponent):
        out, square, e = one.expand_as(x), x, exponent
        while e:
            if e & 1:
                out = out * square
            e >>= 1
            if e:
                square = square * square
        return out
    e = exponent.to(dtype)
    bits = _bits(e)
    out, square = one, x
    for k in range(31):
        out = out * where(bits[k], square, one)
        square = square * square
    odd = bits[0]
    negative = where(x == 1, one, where(x == -1, where(odd, lift(x, -1), one), lift(x, 0)))
    return where(e < 0, negative, out)


def _pow_scalar(x: GraphTensor, e: float) -> GraphTensor:
    """x ** e for a Python exponent: whole exponents up to 64 by square-and-multiply (exact,
    fine for negative bases), sqrt for +-0.5, exp2/log2 otherwise.

    In the exp2/log2 form the bases where it breaks (0 and -inf) read 1 instead, and their
    value (C's pow) comes from a branch of its own. A negative finite base with a fractional
    exponent reads x itself: its log2 is NaN, as in PyTorch. (The gradient is pow's own rule,
    `_pow_base_grad`, not this composition's.)"""
    if e == int(e) and abs(e) <= 64:
        out, square, k = None, x, int(abs(e))
        while k:
            if k & 1:
                out = square if out is None else out * square
            k >>= 1
            if k:
                square = square * square
        if out is None:
            return x.graph.constant(1.0, x.dtype).expand_as(x)
        return out.reciprocal() if e < 0 else out
    if e == 0.5:  # PyTorch's sqrt and rsqrt special cases: NaN at -inf
        return x.sqrt()
    if e == -0.5:
        return x.sqrt().reciprocal()
    edge = (x == 0) | (x == -math.inf)
    safe = where(edge, 1.0, x)
    if e == int(e):  # large whole exponent: sign from its parity
        mag = (safe.abs().log2() * e).exp2()
        general = where(safe < 0, -mag, mag) if int(e) % 2 else mag
        at_inf = (math.inf if int(e) % 2 == 0 else -math.inf) if e > 0 else 0.0
    else:
        general = (safe.log2() * e).exp2()
        at_inf = math.inf if e > 0 else 0.0
    edge_value = where(x == 0, 0.0 if e > 0 else math.inf, at_inf)
    return where(edge, edge_value, general)


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
