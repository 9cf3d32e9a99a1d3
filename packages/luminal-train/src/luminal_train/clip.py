"""Gradient clipping by global norm, computed in the graph (no host round trip)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from luminal import GraphTensor, maximum


def clip_grad_norm(
    grads: Iterable[GraphTensor], max_norm: float, norm_type: float = 2.0
) -> tuple[list[GraphTensor], GraphTensor]:
    """Scale all gradients by `min(1, max_norm / (total_norm + 1e-6))`, where `total_norm` is
    the norm of all gradients together (PyTorch `clip_grad_norm_`).

    Returns the clipped gradients and the total norm before clipping (a scalar tensor;
    `.retrieve()` it to log it). `norm_type` is 2 or `math.inf`.
    """
    grads = list(grads)
    if not grads:
        raise ValueError("clip_grad_norm: no gradients")
    if not float(max_norm) >= 0.0:
        raise ValueError(f"clip_grad_norm: max_norm must be >= 0, got {max_norm}")
    if norm_type == 2.0:
        total = (grads[0] * grads[0]).sum()
        for g in grads[1:]:
            total = total + (g * g).sum()
        total = total.sqrt()
    elif math.isinf(norm_type):
        total = grads[0].abs().amax()
        for g in grads[1:]:
            total = maximum(total, g.abs().amax())
    else:
        raise ValueError(f"clip_grad_norm: norm_type must be 2 or inf, got {norm_type}")
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return [g * coef for g in grads], total
