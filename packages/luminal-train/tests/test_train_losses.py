"""Losses against torch.nn.functional: values and gradients (float32 vs float64, 1e-4)."""

from __future__ import annotations

import luminal as lm
import luminal_train as lt
import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = 1e-4


def _check(ours, theirs, arrays: dict[str, np.ndarray], differentiable: list[str]) -> None:
    g = lm.Graph()
    tensors = {}
    for name, a in arrays.items():
        dtype = lm.int32 if a.dtype.kind == "i" else lm.float32
        tensors[name] = g.tensor(a.shape, name=name, dtype=dtype).set(a)
    out = ours(**tensors)
    loss = out.sum() if out.ndim else out
    grads = [t.retrieve() for t in lt.grad(loss, [tensors[n] for n in differentiable])]
    out.retrieve()
    g.execute()
    ts = {n: torch.tensor(a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64),
                          requires_grad=n in differentiable) for n, a in arrays.items()}
    t_out = theirs(**ts)
    (t_out.sum() if t_out.ndim else t_out).backward()
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=TOL, atol=TOL)
    for n, ours_g in zip(differentiable, grads):
        np.testing.assert_allclose(ours_g.numpy(), ts[n].grad.numpy(), rtol=TOL, atol=TOL,
                                   err_msg=f"d/d{n}")


RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 5)).astype(np.float32)
T = RNG.standard_normal((6, 5)).astype(np.float32)
Y = RNG.integers(0, 5, 6).astype(np.int32)
Y_IGNORED = np.where(np.arange(6) % 3 == 0, -100, Y).astype(np.int32)
X3 = RNG.standard_normal((2, 4, 3, 2)).astype(np.float32)
Y3 = RNG.integers(0, 4, (2, 3, 2)).astype(np.int32)
B = RNG.uniform(0, 1, (6, 5)).astype(np.float32)
W = RNG.uniform(0.5, 2, (5,)).astype(np.float32)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_train_regression_losses(reduction: str) -> None:
    for ours, theirs in [(lt.mse_loss, TF.mse_loss), (lt.l1_loss, TF.l1_loss)]:
        _check(lambda x, t, f=ours: f(x, t, reduction=reduction),
               lambda x, t, f=theirs: f(x, t, reduction=reduction),
               {"x": X, "t": T}, ["x", "t"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("targets", ["plain", "ignored", "spatial"])
def test_train_cross_entropy(reduction: str, smoothing: float, targets: str) -> None:
    x, y = {"plain": (X, Y), "ignored": (X, Y_IGNORED), "spatial": (X3, Y3)}[targets]
    _check(lambda x, y: lt.cross_entropy(x, y, reduction=reduction, label_smoothing=smoothing),
           lambda x, y: TF.cross_entropy(x, y, reduction=reduction, label_smoothing=smoothing),
           {"x": x, "y": y}, ["x"])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_train_nll_loss(reduction: str) -> None:
    _check(lambda x, y: lt.nll_loss(x.log_softmax(1), y, reduction=reduction),
           lambda x, y: TF.nll_loss(x.log_softmax(1), y, reduction=reduction),
           {"x": X, "y": Y_IGNORED}, ["x"])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_train_bce_with_logits(reduction: str) -> None:
    big = X * 30  # large logits: the stable formulation must not overflow
    _check(lambda x, t: lt.binary_cross_entropy_with_logits(x, t, reduction=reduction),
           lambda x, t: TF.binary_cross_entropy_with_logits(x, t, reduction=reduction),
           {"x": big, "t": B}, ["x", "t"])
    _check(lambda x, t, w: lt.binary_cross_entropy_with_logits(x, t, reduction, pos_weight=w),
           lambda x, t, w: TF.binary_cross_entropy_with_logits(x, t, reduction=reduction,
                                                                pos_weight=w),
           {"x": X, "t": B, "w": W}, ["x", "t"])


def test_train_loss_bad_reduction() -> None:
    g = lm.Graph()
    x = g.tensor((3,), name="x")
    with pytest.raises(ValueError, match="reduction"):
        lt.mse_loss(x, x, reduction="avg")
