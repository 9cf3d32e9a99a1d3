"""Optimizers, schedules and clipping against torch.optim on identical models and data.

Parameters after 20 steps agree with PyTorch (float32 both sides) to rtol 1e-4, atol 1e-5.
"""

from __future__ import annotations

import math

import luminal as lm
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional

STEPS = 20
SHAPES = {"w1": (6, 4), "b1": (6,), "w2": (3, 6), "b2": (3,)}


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    init = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in SHAPES.items()}
    xs = rng.standard_normal((STEPS, 8, 4)).astype(np.float32)
    ys = rng.integers(0, 3, (STEPS, 8))
    return init, xs, ys


def _model_lm(g: lm.Graph, init):
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor((8, 4), name="x")
    y = g.tensor((8,), name="y", dtype=lm.int32)
    h = F.linear(x, params["w1"], params["b1"]).tanh()
    loss = lt.cross_entropy(F.linear(h, params["w2"], params["b2"]), y)
    return params, x, y, loss


def _model_torch(init):
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}

    def loss_fn(x, y):
        h = TF.linear(x, params["w1"], params["b1"]).tanh()
        return TF.cross_entropy(TF.linear(h, params["w2"], params["b2"]), y)

    return params, loss_fn


CONFIGS = {
    "sgd": (lambda p, lr: lt.SGD(p, lr), lambda p, lr: torch.optim.SGD(p, lr), 0.1),
    "sgd_momentum": (
        lambda p, lr: lt.SGD(p, lr, momentum=0.9, dampening=0.3, weight_decay=0.01),
        lambda p, lr: torch.optim.SGD(p, lr, momentum=0.9, dampening=0.3, weight_decay=0.01),
        0.1,
    ),
    "sgd_nesterov": (
        lambda p, lr: lt.SGD(p, lr, momentum=0.8, nesterov=True, maximize=True),
        lambda p, lr: torch.optim.SGD(p, lr, momentum=0.8, nesterov=True, maximize=True),
        0.05,
    ),
    "adam": (lambda p, lr: lt.Adam(p, lr), lambda p, lr: torch.optim.Adam(p, lr), 0.01),
    "adam_l2_amsgrad": (
        lambda p, lr: lt.Adam(p, lr, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                              amsgrad=True),
        lambda p, lr: torch.optim.Adam(p, lr, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                                       amsgrad=True),
        0.01,
    ),
    "adamw": (lambda p, lr: lt.AdamW(p, lr, weight_decay=0.1),
              lambda p, lr: torch.optim.AdamW(p, lr, weight_decay=0.1), 0.01),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_optimizer_matches_torch(name: str) -> None:
    ours, theirs, lr = CONFIGS[name]
    init, xs, ys = _data()
    g = lm.Graph()
    params, x, y, loss = _model_lm(g, init)
    # a step schedule checks that the learning-rate input changes between runs
    opt = ours(params, lt.StepDecay(lr, step_size=7, gamma=0.5))
    opt.step(lt.grad(loss, params))
    loss.retrieve()
    g.compile(lm.GenericCompiler())

    t_params, t_loss = _model_torch(init)
    t_opt = theirs(list(t_params.values()), lr)
    t_sched = torch.optim.lr_scheduler.StepLR(t_opt, step_size=7, gamma=0.5)
    for i in range(STEPS):
        x.set(xs[i])
        y.set(ys[i].astype(np.int32))
        opt.schedule_lr(i)
        g.execute()
        t_opt.zero_grad()
        t_l = t_loss(torch.tensor(xs[i]), torch.tensor(ys[i]))
        t_l.backward()
        t_opt.step()
        t_sched.step()
        assert abs(float(loss.numpy()) - t_l.item()) < 1e-4 * max(1.0, abs(t_l.item()))
    for k, p in params.items():
        np.testing.assert_allclose(p.numpy(), t_params[k].detach().numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=f"{name}: {k}")
    assert float(opt.step_count.numpy()) == STEPS


def test_train_optimizer_as_compiler() -> None:
    """`g.compile((autograd, optimizer, ...))` equals building the update by hand."""
    init, xs, ys = _data(1)
    results = []
    for as_compiler in (True, False):
        g = lm.Graph()
        params, x, y, loss = _model_lm(g, init)
        if as_compiler:
            ag = lt.Autograd(params, loss)
            g.compile((ag, lt.Adam(params, 0.05, grads=ag), lm.GenericCompiler()))
        else:
            lt.Adam(params, 0.05).step(lt.grad(loss, params))
            g.compile(lm.GenericCompiler())
        for i in range(3):
            x.set(xs[i])
            y.set(ys[i].astype(np.int32))
            g.execute()
        results.append({k: p.numpy().copy() for k, p in params.items()})
    for k in SHAPES:
        np.testing.assert_allclose(results[0][k], results[1][k], rtol=1e-6, atol=1e-7)


def test_train_optimizer_errors() -> None:
    g = lm.Graph()
    w = g.tensor((2,), name="w").set(np.ones(2, np.float32))
    opt = lt.SGD([w], 0.1)
    with pytest.raises(ValueError, match="gradients for"):
        opt.step([])
    with pytest.raises(ValueError, match="grads="):
        opt.compile(g)
    opt.step(lt.grad((w * w).sum(), [w]))
    with pytest.raises(RuntimeError, match="already built"):
        opt.step(lt.grad((w * w).sum(), [w]))
    with pytest.raises(ValueError, match="Nesterov"):
        lt.SGD([w], 0.1, nesterov=True)


def _torch_lrs(make_sched, steps: int) -> list[float]:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = make_sched(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_train_schedules_match_torch() -> None:
    lrs = torch.optim.lr_scheduler
    cases = [
        (lt.Constant(0.1), lambda o: lrs.ConstantLR(o, factor=1.0)),
        (lt.StepDecay(0.1, 4, 0.3), lambda o: lrs.StepLR(o, 4, 0.3)),
        (lt.Cosine(0.1, 15, 0.01), lambda o: lrs.CosineAnnealingLR(o, 15, 0.01)),
        (lt.LinearWarmup(lt.Cosine(0.1, 10), 5, 0.2),
         lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, 0.2, total_iters=5),
                                        lrs.CosineAnnealingLR(o, 10)], milestones=[5])),
    ]
    for ours, theirs in cases:
        want = _torch_lrs(theirs, 15)
        got = [ours(i) for i in range(15)]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=repr(ours))
    assert lt.Cosine(0.1, 10)(25) == 0.0  # holds min_lr after the end
    assert lt.LinearWarmup(0.5, 4)(2) == 0.25


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_train_clip_grad_norm_matches_torch(norm_type: float, max_norm: float) -> None:
    rng = np.random.default_rng(3)
    values = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,)]]
    g = lm.Graph()
    ws = [g.tensor(v.shape, name=f"w{k}").set(v) for k, v in enumerate(values)]
    loss = (ws[0] * ws[0]).sum() * 0.7 + ws[1].exp().sum()
    clipped, total = lt.clip_grad_norm(lt.grad(loss, ws), max_norm, norm_type)
    for t in (*clipped, total):
        t.retrieve()
    g.execute()
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    ((ts[0] * ts[0]).sum() * 0.7 + ts[1].exp().sum()).backward()
    t_total = torch.nn.utils.clip_grad_norm_(ts, max_norm, norm_type)
    np.testing.assert_allclose(total.numpy(), t_total.numpy(), rtol=1e-5)
    for ours, t in zip(clipped, ts):
        np.testing.assert_allclose(ours.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_train_half_precision_parameter() -> None:
    """A float16 parameter is updated in float32 and rounded back to float16."""
    w0 = np.array([0.1, -0.7, 1.3], np.float16)
    g = lm.Graph()
    w = g.tensor((3,), name="w", dtype=lm.float16).set(w0)
    opt = lt.SGD([w], 0.25, momentum=0.5)
    opt.step(lt.grad((w * w).sum(), [w]))
    g.execute()
    g.execute()
    w32 = w0.astype(np.float32)
    step1 = np.float16(w32 - 0.25 * (2 * w32))  # the buffer starts at the raw gradient
    buf = 2 * w32
    buf = 0.5 * buf + 2 * step1.astype(np.float32)
    want = np.float16(step1.astype(np.float32) - 0.25 * buf)
    assert w.numpy().dtype == np.float16
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-3)
    assert opt.state["w"]["momentum_buffer"].numpy().dtype == np.float32
