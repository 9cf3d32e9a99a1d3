"""Loss functions with `torch.nn.functional` names, arguments and semantics.

Each is a composition of high-level ops, so it is differentiated like any other part of the
graph. `reduction` is "mean" (default), "sum" or "none".
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
from luminal import Graph, GraphTensor, OpError, int32, ops, where
from luminal.symbolic import Expr
from luminal_nn.functional import reduce_loss


@dataclass(frozen=True)
class TargetCheck:
    """Class indices that an input feeds to `loss`: every value must lie in [0, classes),
    or equal `ignore_index`. The graph cannot raise, so the host checks the array bound to
    `node` before a run (`check_targets`; `TrainStep` does it at every step)."""

    loss: str
    node: int
    classes: Expr
    ignore_index: int


_TARGETS: weakref.WeakKeyDictionary[Graph, list[TargetCheck]] = weakref.WeakKeyDictionary()


def _register_targets(loss: str, target: GraphTensor, classes: Expr, ignore_index: int) -> None:
    """Remember to range-check `target` when it is (a view of) a graph input."""
    if isinstance(target.node.op, ops.Input) and not target.dtype.is_float:
        _TARGETS.setdefault(target.graph, []).append(
            TargetCheck(loss, target.id, classes, ignore_index))  # inputs keep their id


def check_targets(graph: Graph) -> None:
    """Raise an IndexError (PyTorch's "Target 12 is out of bounds.") when the data bound to
    an input used as class indices holds a value outside [0, classes) other than the loss's
    `ignore_index`. Inputs without data yet are skipped."""
    for check in _TARGETS.get(graph, ()):
        data = graph.data.get(graph.resolve(check.node))
        if data is None or data.size == 0:
            continue
        classes = check.classes.evaluate(graph.dims) if check.classes.free_vars else (
            check.classes.value)
        values = np.asarray(data)
        bad = (values < 0) | (values >= classes)
        bad &= values != check.ignore_index
        if bad.any():
            value = values[bad].flat[0]
            node = graph.nodes.get(graph.resolve(check.node))
            name = node.op.label_name if node is not None else f"node {check.node}"
            raise IndexError(
                f"{check.loss}: Target {value} is out of bounds (input {name!r}: class indices "
                f"must lie in [0, {classes}) or equal ignore_index={check.ignore_index})")


def mse_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean squared error (broadcasting `target` like PyTorch)."""
    diff = input - target
    return reduce_loss(diff * diff, reduction, "mse_loss")


def l1_loss(input: GraphTensor, target: GraphTensor, reduction: str = "mean") -> GraphTensor:
    """Mean absolute error."""
    return reduce_loss((input - target).abs(), reduction, "l1_loss")


def _class_last(x: GraphTensor) -> GraphTensor:
    """(N, C, d1, ...) -> (N, d1, ..., C); (C,) and (N, C) stay as they are."""
    return x.movedim(1, -1) if x.ndim > 2 else x


def _picked_class(logp: GraphTensor, target: GraphTensor, weight, ignore_index: int):
    """-weight[t] * logp[t] per target and the weight each counts with in a mean (0 for
    `ignore_index`): an exact pick, and an ignored target picks nothing, so even a -inf
    log-probability in its row cannot reach the loss (`_register_targets` checks the rest
    of the targets on the host)."""
    ignored = target == ignore_index
    safe = where(ignored, 0, target).to(int32)
    loss = where(ignored, 0.0, -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1))
    kept = ignored.logical_not().to(logp.dtype)
    if weight is None:
        return loss, kept
    w = weight.index_select(0, safe.reshape(-1)).reshape(safe.layout.shape) * kept
    return loss * w, w


def _weighted_mean(loss: GraphTensor, counts: GraphTensor, reduction: str,
                   name: str) -> GraphTensor:
    if reduction == "mean":
        return loss.sum() / counts.sum()
    return reduce_loss(loss, reduction, name)


def nll_loss(
    input: GraphTensor,
    target: GraphTensor,
    weight: GraphTensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> GraphTensor:
    """Negative log-likelihood of class indices `target` under log-probabilities `input`
    ((C,), (N, C) or (N, C, d1, ...)), optionally weighted per class (`weight`, shape (C,)).
    Targets equal to `ignore_index` contribute nothing and are left out of the mean, which
    divides by the summed weights of the targets kept (PyTorch)."""
    if isinstance(weight, str):  # the old positional order was (input, target, reduction)
        weight, reduction = None, weight
    logp = _class_last(input)
    n_classes = logp.layout.shape[-1]
    _register_targets("nll_loss", target, n_classes, ignore_index)
    loss, counts = _picked_class(logp, target, weight, ignore_index)
    return _weighted_mean(loss, counts, reduction, "nll_loss")


def cross_entropy(
    input: GraphTensor,
    target: GraphTensor,
    weight: GraphTensor | None = None,
    reduction: str = "mean",
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
) -> GraphTensor:
    """Cross entropy between logits `input` ((C,), (N, C) or (N, C, d1, ...)) and either class
    indices `target` or class probabilities (a float `target` shaped like `input`), with
    PyTorch's `weight`, `label_smoothing` (the target distribution is
    (1 - eps) * target + eps / C) and `ignore_index` (class indices only)."""
    if isinstance(weight, str):  # the old positional order was (input, target, reduction)
        weight, reduction = None, weight
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    logp = _class_last(input).log_softmax(-1)
    n_classes = logp.layout.shape[-1]
    if target.dtype.is_float:
        return _cross_entropy_probs(input, logp, _class_last(target), weight, reduction,
                                    label_smoothing)
    _register_targets("cross_entropy", target, n_classes, ignore_index)
    loss, counts = _picked_class(logp, target, weight, ignore_index)
    if label_smoothing:
        per_class = -logp if weight is None else -logp * weight
        smooth = where(target == ignore_index, 0.0, per_class.mean(-1))
        loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing
    return _weighted_mean(loss, counts, reduction, "cross_entropy")


def _cross_entropy_probs(input, logp, target, weight, reduction, label_smoothing):
    if tuple(target.layout.shape) != tuple(logp.layout.shape):
        raise OpError(
            f"cross_entropy: probability targets {target.shape} must have the shape of the "
            f"input {input.shape}")
    if label_smoothing:
        target = target * (1.0 - label_smoothing) + label_smoothing / logp.shape[-1]
    per_class = target * logp if weight is None else target * logp * weight
    loss = -per_class.sum(-1)
    return reduce_loss(loss, reduction, "cross_entropy")


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
    return reduce_loss(loss, reduction, "binary_cross_entropy_with_logits")
