"""Vector-Jacobian products of the primitive ops (and `Cast`).

A rule receives the upstream gradient `g` (shaped like the node's output), the node's inputs
read through their edge views, and the node's own output, and returns one gradient per input
in that input's *logical* (view) shape, or None where no gradient flows. `autograd.py` then maps
each one back through its edge view with `views.transpose_view`. Gradients of every
high-level op follow from these rules, because high-level ops are compositions of primitives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from luminal import GraphTensor, ops, where

LN_2 = math.log(2.0)


@dataclass(frozen=True)
class VjpContext:
    """What a rule sees: the node's op, its inputs (through their views) and its output."""

    op: ops.Op
    inputs: list[GraphTensor]
    out: GraphTensor
    g: GraphTensor


Rule = Callable[[VjpContext], list[GraphTensor | None]]


def _log2(c: VjpContext) -> list[GraphTensor | None]:
    (x,) = c.inputs
    return [c.g * x.reciprocal() * (1.0 / LN_2)]


def _exp2(c: VjpContext) -> list[GraphTensor | None]:
    return [c.g * c.out * LN_2]  # reuses the forward result


def _sin(c: VjpContext) -> list[GraphTensor | None]:
    (x,) = c.inputs
    return [c.g * x.cos()]


def _sqrt(c: VjpContext) -> list[GraphTensor | None]:
    return [c.g * c.out.reciprocal() * 0.5]


def _recip(c: VjpContext) -> list[GraphTensor | None]:
    return [c.g * (c.out * c.out) * -1.0]


def _add(c: VjpContext) -> list[GraphTensor | None]:
    return [c.g, c.g]


def _mul(c: VjpContext) -> list[GraphTensor | None]:
    a, b = c.inputs
    return [c.g * b, c.g * a]


def _mod(c: VjpContext) -> list[GraphTensor | None]:
    # fmod(a, b) = a - trunc(a / b) * b; trunc(a / b) is recovered exactly from the output
    a, b = c.inputs
    return [c.g, c.g * (a - c.out) * b.reciprocal() * -1.0]


def _no_grad(c: VjpContext) -> list[GraphTensor | None]:
    return [None] * len(c.inputs)


def _sum_reduce(c: VjpContext) -> list[GraphTensor | None]:
    (x,) = c.inputs
    return [c.g.unsqueeze(c.op.axis).expand(x.layout.shape)]


def _max_reduce(c: VjpContext) -> list[GraphTensor | None]:
    # like PyTorch's amax: the gradient is shared evenly between the tied maxima
    (x,) = c.inputs
    axis = c.op.axis
    peak = c.out.unsqueeze(axis).expand(x.layout.shape)
    hits = 1.0 - (x < peak).to(c.g.dtype)  # x <= peak everywhere, so this is x == peak
    share = c.g / hits.sum(axis)
    return [hits * share.unsqueeze(axis).expand(x.layout.shape)]


def _select(c: VjpContext) -> list[GraphTensor | None]:
    # the gradient goes to the branch taken, exactly (an inf gradient stays in its branch)
    cond = c.inputs[0]
    zero = c.g.graph.constant(0.0, c.g.dtype)
    return [None, where(cond, c.g, zero), where(cond, zero, c.g)]


def _identity(c: VjpContext) -> list[GraphTensor | None]:
    return [c.g]


def _cast(c: VjpContext) -> list[GraphTensor | None]:
    (x,) = c.inputs
    return [c.g.to(x.dtype) if x.dtype.is_float else None]


RULES: dict[type[ops.Op], Rule] = {
    ops.Log2: _log2,
    ops.Exp2: _exp2,
    ops.Sin: _sin,
    ops.Sqrt: _sqrt,
    ops.Recip: _recip,
    ops.Add: _add,
    ops.Mul: _mul,
    ops.Mod: _mod,
    ops.LessThan: _no_grad,
    ops.SumReduce: _sum_reduce,
    ops.MaxReduce: _max_reduce,
    ops.Contiguous: _identity,
    ops.Cast: _cast,
    ops.Select: _select,
}


def vjp(c: VjpContext) -> list[GraphTensor | None]:
    """Input gradients of one node; raises for ops without a rule (e.g. fused backend ops:
    run autograd before the device compilers)."""
    rule = RULES.get(type(c.op))
    if rule is None:
        raise NotImplementedError(
            f"autograd: no gradient rule for {c.op.name}; differentiate the primitive graph "
            f"(put Autograd before device compilers)"
        )
    return rule(c)
