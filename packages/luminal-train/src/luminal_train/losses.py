"""Loss functions with `torch.nn.functional` names, arguments and semantics.

Each is a composition of high-level ops, so it is differentiated like any other part of the
graph. `reduction` is "mean" (default), "sum" or "none".
"""

from __future__ import annotations

from luminal import GraphTensor
from luminal.functional import one_hot

REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss: GraphTensor, reduction: str) -> GraphTensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def mse_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean squared error (broadcasting `target` like PyTorch)."""
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean absolute error."""
    return _reduce((input - target).abs(), reduction)


def _class_last(x: GraphTensor) -> GraphTensor:
    """(N, C, d1, ...) -> (N, d1, ..., C); (C,) and (N, C) stay as they are."""
    return x.movedim(1, -1) if x.ndim > 2 else x


def nll_loss(
    input: GraphTensor,
    target: GraphTensor,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> GraphTensor:
    """Negative log-likelihood of class indices `target` under log-probabilities `input`
    ((C,), (N, C) or (N, C, d1, ...)). Targets equal to `ignore_index` contribute nothing and
    are left out of the mean."""
    logp = _class_last(input)
    n_classes = logp.layout.shape[-1]
    picked = (logp * one_hot(target, n_classes).to(logp.dtype)).sum(-1)
    loss = -picked
    if reduction != "mean":
        return _reduce(loss, reduction)
    # the one-hot of an ignored (out-of-range) target is all zeros, so only the count changes
    kept = (target != ignore_index).to(logp.dtype)
    return loss.sum() / kept.sum()


def cross_entropy(
    input: GraphTensor,
    target: GraphTensor,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> GraphTensor:
    """Cross entropy between logits `input` ((C,), (N, C) or (N, C, d1, ...)) and class
    indices `target`, with PyTorch's `label_smoothing` (the target distribution is
    (1 - eps) * one_hot + eps / C) and `ignore_index`."""
    logp = _class_last(input).log_softmax(-1)
    n_classes = logp.layout.shape[-1]
    kept = (target != ignore_index).to(logp.dtype)
    loss = -(logp * one_hot(target, n_classes).to(logp.dtype)).sum(-1)
    if label_smoothing:
        smooth = -logp.mean(-1) * kept
        loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing
    if reduction == "mean":
        return loss.sum() / kept.sum()
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(
    input: GraphTensor,
    target: GraphTensor,
    reduction: str = "mean",
    pos_weight: GraphTensor | float | None = None,
) -> GraphTensor:
    """Sigmoid + binary cross entropy in one numerically stable expression:
    (1 - y) * x + (1 + (w - 1) * y) * (log(1 + exp(-|x|)) + max(-x, 0))."""
    softplus_neg = (-input.abs()).exp().log1p() + (-input).relu()
    if pos_weight is None:
        loss = (1 - target) * input + softplus_neg
    else:
        loss = (1 - target) * input + (1 + (pos_weight - 1) * target) * softplus_neg
    return _reduce(loss, reduction)
