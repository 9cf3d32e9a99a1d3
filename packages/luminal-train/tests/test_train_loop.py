"""The training loop against PyTorch, checkpoints, batching and the plugin registration."""

from __future__ import annotations

import json

import luminal as lm
import luminal.functional as F
import luminal_train as lt
import numpy as np
import pytest
from luminal.backends.reference import ReferenceBackend
from safetensors import safe_open

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPES = {"w1": (16, 10), "b1": (16,), "w2": (4, 16), "b2": (4,)}


def _dataset(seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((96, 10)).astype(np.float32)
    ys = (np.abs(xs[:, :4]).argmax(1)).astype(np.int32)  # learnable labels
    init = {k: (rng.uniform(-0.3, 0.3, s)).astype(np.float32) for k, s in SHAPES.items()}
    return xs, ys, init


def _forward(x, p, f=F):
    """The model in luminal (`f=F`) or PyTorch (`f=TF`)."""
    return f.linear(f.linear(x, p["w1"], p["b1"]).relu(), p["w2"], p["b2"])


def _build(init, schedule, batch: int = 16):
    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor((batch, 10), name="x")
    y = g.tensor((batch,), name="y", dtype=lm.int32)
    loss = lt.cross_entropy(_forward(x, params), y, label_smoothing=0.1)
    opt = lt.AdamW(params, schedule, weight_decay=0.05)
    step = lt.TrainStep(loss, opt, clip_grad_norm=1.0, backend=ReferenceBackend())
    return step, params, x, y


def test_train_loss_curve_matches_torch() -> None:
    """AdamW + warmup/cosine schedule + global-norm clipping, 18 steps: the same losses."""
    xs, ys, init = _dataset()
    schedule = lt.LinearWarmup(lt.Cosine(0.02, 12), 6, 0.1)
    step, _, x, y = _build(init, schedule)
    batches = lt.Batches({x: xs, y: ys}, 16, seed=3)
    losses = lt.fit(step, batches, epochs=3, progress=False)

    t_params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    t_opt = torch.optim.AdamW(list(t_params.values()), lr=1.0, weight_decay=0.05)
    t_sched = torch.optim.lr_scheduler.LambdaLR(t_opt, schedule)  # lr = 1.0 * schedule(step)
    replay = lt.Batches({"x": xs, "y": ys}, 16, seed=3)
    t_losses = []
    for _ in range(3):
        for feeds in replay:
            out = _forward(torch.tensor(feeds["x"]), t_params, TF)
            loss = TF.cross_entropy(out, torch.tensor(feeds["y"], dtype=torch.int64),
                                    label_smoothing=0.1)
            t_opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(t_params.values()), 1.0)
            t_opt.step()
            t_sched.step()
            t_losses.append(loss.item())
    assert len(losses) == 18
    np.testing.assert_allclose(losses, t_losses, rtol=2e-4, atol=1e-5)
    assert losses[-1] < losses[0]


def test_train_checkpoint_round_trip(tmp_path) -> None:
    """Resuming from a checkpoint in a fresh graph gives exactly the next loss."""
    xs, ys, init = _dataset(1)
    schedule = lt.StepDecay(0.05, 3, 0.5)
    batch = {"x": xs[:16], "y": ys[:16]}
    step, params, x, y = _build(init, schedule)
    for k in range(5):
        step({x: xs[16 * k : 16 * (k + 1)], y: ys[16 * k : 16 * (k + 1)]})
    path = tmp_path / "ckpt.safetensors"
    step.save(path)
    want = step({x: batch["x"], y: batch["y"]})
    want_params = {k: p.numpy().copy() for k, p in params.items()}

    other = {k: np.zeros_like(v) for k, v in init.items()}  # a different start: all overwritten
    resumed, params2, x2, y2 = _build(other, schedule)
    resumed.load(path)
    assert resumed.step == 5
    got = resumed({x2: batch["x"], y2: batch["y"]})
    assert got == want
    for k, p in params2.items():
        np.testing.assert_array_equal(p.numpy(), want_params[k])

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert meta["format"] == "luminal-train/1" and meta["step"] == "5"
    assert meta["optimizer"] == "AdamW"
    assert json.loads(meta["hyperparams"])["weight_decay"] == 0.05
    assert {"param/w1", "optim/step", "optim/w1.exp_avg", "optim/b2.exp_avg_sq"} <= keys


def test_train_checkpoint_rejects_mismatch(tmp_path) -> None:
    g = lm.Graph()
    w = g.tensor((2, 3), name="w").set(np.ones((2, 3), np.float32))
    path = tmp_path / "w.safetensors"
    lt.save_checkpoint(path, params={"w": w}, step=7)
    assert lt.load_checkpoint(path, params={"w": w}) == 7
    v = g.tensor((3, 2), name="v")
    with pytest.raises(ValueError, match="shape"):
        lt.load_checkpoint(path, params={"w": v})
    with pytest.raises(KeyError, match="'u'"):
        lt.load_checkpoint(path, params={"u": w})
    with pytest.raises(ValueError, match="saved optimizer"):
        lt.load_checkpoint(path, optimizer=lt.SGD({"w": w}, 0.1))


def test_train_batches() -> None:
    g = lm.Graph()
    x = g.tensor(("n", 2), name="x")
    data = np.arange(20, dtype=np.float32).reshape(10, 2)
    kept = lt.Batches({x: data}, 4, seed=0)
    assert len(kept) == 2 and [len(b[x]) for b in kept] == [4, 4]
    full = lt.Batches({x: data}, 4, drop_last=False, seed=0)
    first, second = (np.concatenate([b[x] for b in full]) for _ in range(2))
    assert sorted(first[:, 0]) == list(data[:, 0]) and not np.array_equal(first, second)
    plain = lt.Batches({x: data}, 3, shuffle=False, drop_last=False)
    assert [len(b[x]) for b in plain] == [3, 3, 3, 1]
    with pytest.raises(ValueError, match="lengths"):
        lt.Batches({x: data, "y": data[:5]}, 2)


def test_train_plugin_registers_autograd() -> None:
    from luminal_train import plugin

    seen = []
    plugin.luminal_register_compilers(lambda name, factory, description: seen.append(
        (name, factory, description)))
    assert [(n, f) for n, f, _ in seen] == [("autograd", lt.Autograd)]
    g = lm.Graph()
    w = g.tensor((3,), name="w").set(np.array([1.0, 2.0, 3.0], np.float32))
    ag = seen[0][1](params=[w], loss=(w * w).sum())
    grad_w = ag[w].retrieve()
    g.compile((ag, lm.GenericCompiler()))
    g.execute()
    np.testing.assert_allclose(grad_w.numpy(), [2.0, 4.0, 6.0])
