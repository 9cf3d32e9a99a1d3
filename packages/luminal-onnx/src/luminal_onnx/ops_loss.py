"""Loss operators (opset 12+): NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from typing import TYPE_CHECKING

import luminal as lm

from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext


def _nll(ctx: NodeContext, log_prob: lm.GraphTensor, target: lm.GraphTensor,
         weight: lm.GraphTensor | None) -> lm.GraphTensor:
    """-log_prob[n, target[n, ...], ...] * weight[target], reduced as `reduction` says;
    positions whose target is `ignore_index` count neither in the sum nor in the mean."""
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.fail(f"reduction {reduction!r} is not supported")
    ignore = ctx.attr("ignore_index", None)
    target = target.to(lm.int32)
    valid = target != ignore if ignore is not None else None
    safe = lm.where(valid, target, 0) if valid is not None else target
    picked = log_prob.gather(1, safe.unsqueeze(1)).squeeze(1)
    if weight is not None:
        w = weight.index_select(0, safe.reshape((-1,))).reshape(safe.shape)
    else:
        w = log_prob.graph.constant(1.0, log_prob.dtype).expand(safe.shape)
    if valid is not None:
        w = w * valid.to(w.dtype)
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx: NodeContext):
    weight = ctx.tensor(2) if ctx.has(2) else None
    return _nll(ctx, ctx.tensor(0), ctx.tensor(1), weight)


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx: NodeContext):
    log_prob = ctx.tensor(0).log_softmax(1)
    weight = ctx.tensor(2) if ctx.has(2) else None
    return [_nll(ctx, log_prob, ctx.tensor(1), weight), log_prob]
