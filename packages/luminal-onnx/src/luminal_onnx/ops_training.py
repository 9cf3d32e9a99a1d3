"""Optimizer steps of the `ai.onnx.preview.training` domain: Adagrad, Momentum, Adam.

Inputs are the learning rate R, the step count T, then the tensors X..., their gradients
G..., and the optimizer state (V..., H...); outputs are the new X... then the new states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm

from .registry import TRAINING_DOMAIN, converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _groups(ctx: NodeContext, count: int) -> list[list[lm.GraphTensor]]:
    tensors = [ctx.tensor(i) for i in range(2, len(ctx.inputs))]
    n = len(tensors) // count
    if n * count != len(tensors):
        raise ctx.fail(f"expected {count} groups of equally many tensors after R and T")
    return [tensors[k * n:(k + 1) * n] for k in range(count)]


@converter("Adagrad", domain=TRAINING_DOMAIN)
def _adagrad(ctx: NodeContext):
    rate, step = ctx.tensor(0), ctx.tensor(1).float()
    decay, eps = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0)
    norm = ctx.attr("norm_coefficient", 0.0)
    xs, gs, hs = _groups(ctx, 3)
    r = rate / (step * decay + 1.0)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g = x * norm + g
        h = h + g * g
        new_x.append(x - r * g / (h.sqrt() + eps))
        new_h.append(h)
    return new_x + new_h


@converter("Momentum", domain=TRAINING_DOMAIN)
def _momentum(ctx: NodeContext):
    rate, step = ctx.tensor(0), ctx.tensor(1)
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    mode, norm = ctx.attr("mode"), ctx.attr("norm_coefficient")
    if mode not in ("standard", "nesterov"):
        raise ctx.fail(f"mode {mode!r} is not supported")
    xs, gs, vs = _groups(ctx, 3)
    # the first step (T = 0) takes the whole gradient
    beta_now = lm.where(step > 0, beta, 1.0)
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g = x * norm + g
        v = v * alpha + beta_now * g
        new_x.append(x - rate * (g + v * alpha if mode == "nesterov" else v))
        new_v.append(v)
    return new_x + new_v


@converter("Adam", domain=TRAINING_DOMAIN)
def _adam(ctx: NodeContext):
    rate, step = ctx.tensor(0), ctx.tensor(1).float()
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    eps = ctx.attr("epsilon", 1e-6)
    norm, norm_post = ctx.attr("norm_coefficient", 0.0), ctx.attr("norm_coefficient_post", 0.0)
    xs, gs, vs, hs = _groups(ctx, 4)
    first = step <= 0  # no bias correction on the first step; keep both branches finite
    corrected = rate * (1.0 - beta ** step).sqrt() / lm.where(first, 1.0, 1.0 - alpha ** step)
    r = lm.where(first, rate, corrected)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = x * norm + g
        v = v * alpha + g * (1.0 - alpha)
        h = h * beta + g * g * (1.0 - beta)
        new_x.append((x - r * v / (h.sqrt() + eps)) * (1.0 - norm_post))
        new_v.append(v)
        new_h.append(h)
    return new_x + new_v + new_h
