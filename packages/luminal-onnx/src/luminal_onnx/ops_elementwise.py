"""Elementwise ONNX operators: arithmetic, comparisons, logic, activations, casts."""

from __future__ import annotations

import math
from functools import reduce
from typing import TYPE_CHECKING

import luminal as lm

from . import dtypes
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _binary(fn):
    return lambda ctx: _wrapping(fn, ctx.tensor(0), ctx.tensor(1))


def _wrapping(fn, a: lm.GraphTensor, b: lm.GraphTensor) -> lm.GraphTensor:
    """uint8 arithmetic wraps around (ONNX, NumPy): compute in int32, cast back."""
    if a.dtype == lm.uint8 and b.dtype == lm.uint8:
        out = fn(a.to(lm.int32), b.to(lm.int32))
        return out if out.dtype == lm.bool else (out % 256).to(lm.uint8)
    return fn(a, b)


_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Equal": lambda a, b: a == b,
    "Less": lambda a, b: a < b,
    "Greater": lambda a, b: a > b,
    "LessOrEqual": lambda a, b: a <= b,
    "GreaterOrEqual": lambda a, b: a >= b,
    "And": lambda a, b: a & b,
    "Or": lambda a, b: a | b,
    "Xor": lambda a, b: a != b,
}
for _name, _fn in _BINARY.items():
    converter(_name)(_binary(_fn))


@converter("Div")
def _div(ctx: NodeContext):
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.dtype.is_float:
        return a / b
    return a.div(b, rounding_mode="trunc")  # ONNX integer division truncates, like C


@converter("Mod")
def _mod(ctx: NodeContext):
    a, b = ctx.tensor(0), ctx.tensor(1)
    if ctx.attr("fmod", 0):
        return a.fmod(b)
    if a.dtype.is_float:
        raise ctx.fail("fmod=0 is only defined for integer inputs")
    return a % b


@converter("Pow")
def _pow(ctx: NodeContext):
    base = ctx.tensor(0)
    exponent = ctx.static(1) if ctx.is_static(1) and ctx.static(1).ndim == 0 else ctx.tensor(1)
    if not isinstance(exponent, lm.GraphTensor):
        exponent = exponent.item()
    return base.pow(exponent).to(base.dtype)


_UNARY = {
    "Abs": lambda x: x.abs(),
    "Neg": lambda x: x.neg(),
    "Exp": lambda x: x.exp(),
    "Log": lambda x: x.log(),
    "Sqrt": lambda x: x.sqrt(),
    "Reciprocal": lambda x: x.reciprocal(),
    "Sin": lambda x: x.sin(),
    "Cos": lambda x: x.cos(),
    "Tan": lambda x: x.tan(),
    "Sinh": lambda x: (x.exp() - (-x).exp()) * 0.5,
    "Cosh": lambda x: (x.exp() + (-x).exp()) * 0.5,
    "Asinh": lambda x: (x + (x * x + 1.0).sqrt()).log(),
    "Acosh": lambda x: (x + (x * x - 1.0).sqrt()).log(),
    "Atanh": lambda x: ((1.0 + x) / (1.0 - x)).log() * 0.5,
    "Atan": lambda x: _atan(x),
    "Asin": lambda x: _asin(x),
    "Acos": lambda x: math.pi / 2 - _asin(x),
    "Sigmoid": lambda x: x.sigmoid(),
    "Tanh": lambda x: x.tanh(),
    "Relu": lambda x: x.relu(),
    "Floor": lambda x: x.floor(),
    "Ceil": lambda x: x.ceil(),
    "Round": lambda x: x.round(),
    "Sign": lambda x: x.sign(),
    "Erf": lambda x: x.erf(),
    "IsNaN": lambda x: x.isnan(),
    "Not": lambda x: x.logical_not(),
    "Softsign": lambda x: x / (x.abs() + 1.0),
    "Softplus": lambda x: x.softplus(),
    "HardSwish": lambda x: x.hardswish(),
    "Mish": lambda x: x.mish(),
}
for _name, _fn in _UNARY.items():
    converter(_name)(lambda ctx, fn=_fn: fn(ctx.tensor(0)))


@converter("Identity")
def _identity(ctx: NodeContext):
    return ctx.inputs[0] if ctx.is_static(0) else ctx.tensor(0)


@converter("Dropout")
def _dropout(ctx: NodeContext):
    ctx.attr("seed", None)
    if ctx.opset < 12:
        ratio, training = ctx.attr("ratio", 0.5), ctx.attr("is_test", 1) == 0
    else:
        ratio = float(ctx.static(1).item()) if ctx.has(1) else 0.5
        training = ctx.has(2) and bool(ctx.static(2).item())
    if training and ratio != 0:
        raise ctx.fail("training-mode dropout (random masks) is not supported")
    x = ctx.tensor(0)
    if len([o for o in ctx.node.output if o]) > 1:
        return [x, _ones_like(x, lm.bool)]
    return x


def _ones_like(x: lm.GraphTensor, dtype) -> lm.GraphTensor:
    return x.graph.constant(True if dtype == lm.bool else 1, dtype).expand(x.shape)


@converter("IsInf")
def _isinf(ctx: NodeContext):
    x = ctx.tensor(0)
    negative, positive = ctx.attr("detect_negative", 1), ctx.attr("detect_positive", 1)
    if negative and positive:
        return x.isinf()
    if positive:
        return x == math.inf
    if negative:
        return x == -math.inf
    return _ones_like(x, lm.bool).logical_not()


@converter("LeakyRelu")
def _leaky_relu(ctx: NodeContext):
    return ctx.tensor(0).leaky_relu(ctx.attr("alpha", 0.01))


@converter("Elu")
def _elu(ctx: NodeContext):
    return ctx.tensor(0).elu(ctx.attr("alpha", 1.0))


@converter("Celu")
def _celu(ctx: NodeContext):
    alpha = ctx.attr("alpha", 1.0)
    x = ctx.tensor(0)
    return x.relu() + lm.minimum((x / alpha).exp() - 1.0, 0.0) * alpha


@converter("Selu")
def _selu(ctx: NodeContext):
    alpha, gamma = ctx.attr("alpha", 1.67326319217681884765625), ctx.attr(
        "gamma", 1.05070102214813232421875)
    return ctx.tensor(0).elu(alpha) * gamma


@converter("ThresholdedRelu")
def _thresholded_relu(ctx: NodeContext):
    x = ctx.tensor(0)
    return lm.where(x > ctx.attr("alpha", 1.0), x, 0.0)


@converter("HardSigmoid")
def _hard_sigmoid(ctx: NodeContext):
    alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
    return (ctx.tensor(0) * alpha + beta).clamp(0.0, 1.0)


@converter("Shrink")
def _shrink(ctx: NodeContext):
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    x = ctx.tensor(0)
    xf = x._float() if not x.dtype.is_float else x
    out = lm.where(xf < -lambd, xf + bias, lm.where(xf > lambd, xf - bias, 0.0))
    return out.to(x.dtype)


@converter("PRelu")
def _prelu(ctx: NodeContext):
    x, slope = ctx.tensor(0), ctx.tensor(1)
    return lm.where(x < 0, x * slope, x)


@converter("Clip")
def _clip(ctx: NodeContext):
    x = ctx.tensor(0)
    if ctx.opset < 11:
        low, high = ctx.attr("min", None), ctx.attr("max", None)
    else:
        low = ctx.tensor(1) if ctx.has(1) else None
        high = ctx.tensor(2) if ctx.has(2) else None
    if low is not None:
        x = lm.maximum(x, low).to(x.dtype)
    if high is not None:
        x = lm.minimum(x, high).to(x.dtype)
    return x


def _variadic(fn):
    return lambda ctx: reduce(fn, [ctx.tensor(i) for i in range(len(ctx.inputs))])


converter("Sum")(_variadic(lambda a, b: a + b))
converter("Max")(_variadic(lambda a, b: _wrapping(lm.maximum, a, b)))
converter("Min")(_variadic(lambda a, b: _wrapping(lm.minimum, a, b)))


@converter("Mean")
def _mean(ctx: NodeContext):
    return _variadic(lambda a, b: a + b)(ctx) / len(ctx.inputs)


@converter("Where")
def _where(ctx: NodeContext):
    return lm.where(ctx.tensor(0), ctx.tensor(1), ctx.tensor(2))


@converter("Cast")
def _cast(ctx: NodeContext):
    ctx.attr("saturate", 1)
    return cast_to(ctx, ctx.tensor(0), ctx.attr("to"))


@converter("CastLike")
def _cast_like(ctx: NodeContext):
    ctx.attr("saturate", 1)
    like = ctx.tensor(1)
    return ctx.tensor(0).to(like.dtype)


def cast_to(ctx: NodeContext, x: lm.GraphTensor, elem_type: int) -> lm.GraphTensor:
    dtype = dtypes.luminal_dtype(elem_type)
    if dtype is None:
        raise ctx.fail(f"cast to {dtypes.type_name(elem_type)}, which luminal does not support")
    if x.dtype.is_float and not dtype.is_float and dtype != lm.bool:
        x = x.trunc()  # float -> int truncates toward zero in ONNX
    return x.to(dtype)


def _atan(x: lm.GraphTensor) -> lm.GraphTensor:
    """arctan: two half-angle steps, atan(x) = 2 atan(x / (1 + sqrt(1 + x^2))), bring the
    argument within tan(pi/8) where the Taylor series to x^17 is within 2e-8."""
    t = x
    for _ in range(2):
        t = t / ((t * t + 1.0).sqrt() + 1.0)
    t2 = t * t
    series = 0.0
    for k in reversed(range(9)):  # sum of (-1)^k t^(2k+1) / (2k+1), Horner in t^2
        series = series * t2 + (-1) ** k / (2 * k + 1)
    return t * series * 4.0


def _asin(x: lm.GraphTensor) -> lm.GraphTensor:
    """arcsin(x) = 2 atan(x / (1 + sqrt(1 - x^2))), finite at x = +-1."""
    return _atan(x / ((1.0 - x * x).sqrt() + 1.0)) * 2.0


@converter("BitShift")
def _bit_shift(ctx: NodeContext):
    x, shift = ctx.tensor(0), ctx.tensor(1)
    if x.dtype != lm.uint8:
        raise ctx.fail(f"bit shifts of {x.dtype.name} are not supported (uint8 is)")
    factor = lm.where(shift.to(lm.int32) < 8, 2 ** shift.to(lm.int32).clamp(0, 8), 256)
    wide = x.to(lm.int32)
    if ctx.attr("direction") == "LEFT":
        return (wide * factor % 256).to(lm.uint8)
    return (wide // factor).to(lm.uint8)
