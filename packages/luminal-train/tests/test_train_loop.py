"""The training loop against PyTorch, checkpoints, batching and the plugin registration."""

from __future__ import annotations

import json

import luminal as lm
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np
import pytest
from luminal.reference import ReferenceBackend
from safetensors import safe_open

torch = pytest.importorskip("torch")
TF = torch.nn.functional

SHAPES = {"w1": (16, 10), "b1": (16,), "w2": (4, 16), "b2": (4,)}
BACKENDS = ["reference", "cpu"]


def _backend(name: str):
    """The backend `name`, or a skip naming why it cannot run here."""
    if name == "reference":
        return ReferenceBackend()
    info = {b.name: b for b in lm.backends()}.get(name)
    if info is None or not info.available:
        pytest.skip(f"{name} backend unavailable: {info.reason if info else 'not installed'}")
    return lm.backend(name)


def _dataset(seed: int = 0):
    rng = np.random.default_rng(seed)
    xs = rng.standard_normal((96, 10)).astype(np.float32)
    ys = (np.abs(xs[:, :4]).argmax(1)).astype(np.int32)  # learnable labels
    init = {k: (rng.uniform(-0.3, 0.3, s)).astype(np.float32) for k, s in SHAPES.items()}
    return xs, ys, init


def _forward(x, p, f=F):
    """The model in luminal (`f=F`) or PyTorch (`f=TF`)."""
    return f.linear(f.linear(x, p["w1"], p["b1"]).relu(), p["w2"], p["b2"])


def _build(init, schedule, batch: int = 16, backend: str = "reference"):
    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor((batch, 10), name="x")
    y = g.tensor((batch,), name="y", dtype=lm.int32)
    loss = lt.cross_entropy(_forward(x, params), y, label_smoothing=0.1)
    opt = lt.AdamW(params, schedule, weight_decay=0.05)
    step = lt.TrainStep(loss, opt, clip_grad_norm=1.0, backend=_backend(backend))
    return step, params, x, y


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_loss_curve_matches_torch(backend: str) -> None:
    """AdamW + warmup/cosine schedule + global-norm clipping, 18 steps: the same losses, on
    the reference backend and compiled to native code."""
    xs, ys, init = _dataset()
    schedule = lt.LinearWarmup(lt.Cosine(0.02, 12), 6, 0.1)
    step, _, x, y = _build(init, schedule, backend=backend)
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


CNN = {"c1": (4, 1, 3, 3), "c1b": (4,), "c2": (6, 4, 3, 3), "c2b": (6,), "fc": (3, 24),
       "fcb": (3,)}


def _cnn(x, p, f):
    """conv-relu-pool twice, then a linear layer (the digits CNN, smaller)."""
    h = f.max_pool2d(f.relu(f.conv2d(x, p["c1"], p["c1b"], padding=1)), 2)
    h = f.max_pool2d(f.relu(f.conv2d(h, p["c2"], p["c2b"], padding=1)), 2)
    return f.linear(h.flatten(1), p["fc"], p["fcb"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_cnn_loss_curve_matches_torch(backend: str) -> None:
    """Convolutions, max pools and ReLUs (col2im, pool and mask gradients, GEMMs for the
    weight gradients) under AdamW: 8 steps give PyTorch's losses and weights."""
    rng = np.random.default_rng(5)
    xs = rng.uniform(0, 1, (32, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 3, 32).astype(np.int32)
    init = {k: rng.uniform(-0.3, 0.3, s).astype(np.float32) for k, s in CNN.items()}
    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor((8, 1, 8, 8), name="x")
    y = g.tensor((8,), name="y", dtype=lm.int32)
    step = lt.TrainStep(lt.cross_entropy(_cnn(x, params, F), y), lt.AdamW(params, 0.01),
                        backend=_backend(backend))
    losses = lt.fit(step, lt.Batches({x: xs, y: ys}, 8, seed=1), epochs=2, progress=False)

    t_params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    t_opt = torch.optim.AdamW(list(t_params.values()), lr=0.01)
    t_losses = []
    replay = lt.Batches({"x": xs, "y": ys}, 8, seed=1)
    for _ in range(2):
        for feeds in replay:
            loss = TF.cross_entropy(_cnn(torch.tensor(feeds["x"]), t_params, TF),
                                    torch.tensor(feeds["y"], dtype=torch.int64))
            t_opt.zero_grad()
            loss.backward()
            t_opt.step()
            t_losses.append(loss.item())
    np.testing.assert_allclose(losses, t_losses, rtol=2e-4, atol=1e-5)
    for k, p in params.items():
        np.testing.assert_allclose(p.numpy(), t_params[k].detach().numpy(), rtol=1e-3,
                                   atol=1e-5, err_msg=k)


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_checkpoint_round_trip(tmp_path, backend: str) -> None:
    """Resuming from a checkpoint in a fresh graph gives exactly the next loss."""
    xs, ys, init = _dataset(1)
    schedule = lt.StepDecay(0.05, 3, 0.5)
    batch = {"x": xs[:16], "y": ys[:16]}
    step, params, x, y = _build(init, schedule, backend=backend)
    for k in range(5):
        step({x: xs[16 * k : 16 * (k + 1)], y: ys[16 * k : 16 * (k + 1)]})
    path = tmp_path / "ckpt.safetensors"
    step.save(path)
    want = step({x: batch["x"], y: batch["y"]})
    want_params = {k: p.numpy().copy() for k, p in params.items()}

    other = {k: np.zeros_like(v) for k, v in init.items()}  # a different start: all overwritten
    resumed, params2, x2, y2 = _build(other, schedule, backend=backend)
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


def test_train_fit_progress_bar(capsys) -> None:
    """fit(progress=True) draws a tqdm bar on stderr with the epoch and the running loss."""
    xs, ys, init = _dataset()
    step, _, x, y = _build(init, 0.01)
    losses = lt.fit(step, lt.Batches({x: xs, y: ys}, 16), epochs=2, progress=True, desc="fit")
    err = capsys.readouterr().err
    assert len(losses) == 12
    assert "fit" in err and "12/12" in err and "epoch=2" in err
    assert f"loss={np.mean(losses[6:]):.4f}" in err


def _tiny_model(g):
    w = g.tensor((3, 4), name="w").set(np.full((3, 4), 0.1, np.float32))
    x = g.tensor((2, 4), name="x")
    y = g.tensor((2,), name="y", dtype=lm.int32)
    return w, x, y, x @ w.T


def test_train_rejects_bad_hyperparameters() -> None:
    """Invalid settings fail when they are given, with PyTorch's messages."""
    g = lm.Graph()
    w, x, y, logits = _tiny_model(g)
    with pytest.raises(ValueError, match=r"Invalid learning rate: -0\.1"):
        lt.SGD([w], lr=-0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        lt.AdamW([w], lr=lt.Constant(-1.0))
    with pytest.raises(ValueError, match="Invalid momentum value"):
        lt.SGD([w], lr=0.1, momentum=-0.5)
    with pytest.raises(ValueError, match="Invalid weight_decay value"):
        lt.AdamW([w], weight_decay=-0.01)
    for betas, index in (((1.0, 0.999), 0), ((0.9, -0.1), 1), ((0.9, 1.5), 1)):
        with pytest.raises(ValueError, match=f"Invalid beta parameter at index {index}"):
            lt.Adam([w], betas=betas)
    with pytest.raises(ValueError, match="Invalid epsilon value"):
        lt.Adam([w], eps=-1e-8)
    opt = lt.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.set_lr(-1.0)
    scheduled = lt.SGD([w], lr=lambda step: 0.1 - 0.05 * step)
    scheduled.schedule_lr(2)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        scheduled.schedule_lr(3)
    for smoothing in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"label_smoothing must be between 0\.0 and 1\.0"):
            lt.cross_entropy(logits, y, label_smoothing=smoothing)
    with pytest.raises(ValueError, match="max_norm"):
        lt.clip_grad_norm([w * 1.0], -1.0)
    with pytest.raises(ValueError, match="max_norm"):
        lt.TrainStep((logits * logits).sum(), lt.SGD([w], 0.1), clip_grad_norm=-2.0,
                     backend=ReferenceBackend())
    for size in (0, -3, 2.5):
        with pytest.raises(ValueError, match="batch_size should be a positive integer"):
            lt.Batches({x: np.zeros((4, 4), np.float32)}, size)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "nll_loss"])
def test_train_step_rejects_out_of_range_targets(loss_fn: str) -> None:
    """A class index >= C or < 0 (other than ignore_index) is an IndexError at step time,
    like PyTorch's "Target 3 is out of bounds."; ignore_index itself is fine."""
    g = lm.Graph()
    w, x, y, logits = _tiny_model(g)
    scores = logits if loss_fn == "cross_entropy" else logits.log_softmax(-1)
    loss = getattr(lt, loss_fn)(scores, y, ignore_index=-1)
    step = lt.TrainStep(loss, lt.SGD([w], 0.1), backend=ReferenceBackend())
    xs = np.ones((2, 4), np.float32)
    assert np.isfinite(step({x: xs, y: np.array([2, -1], np.int32)}))  # -1 is ignored
    for bad, shown in (([0, 3], "3"), ([-2, 1], "-2")):
        with pytest.raises(IndexError, match=f"Target {shown} is out of bounds.*'y'.*3"):
            step({x: xs, y: np.array(bad, np.int32)})
    assert step.step == 1  # the bad batches did not run


def test_train_checkpoint_garbage_file_is_a_clear_error(tmp_path) -> None:
    """A file that is not a checkpoint fails with an error naming it."""
    g = lm.Graph()
    w = g.tensor((2,), name="w").set(np.ones(2, np.float32))
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\x01not a safetensors file at all" * 10)
    with pytest.raises(ValueError, match=r"garbage\.safetensors.*not a readable checkpoint"):
        lt.load_checkpoint(garbage, params={"w": w})
    truncated = tmp_path / "truncated.safetensors"
    lt.save_checkpoint(truncated, params={"w": w})
    truncated.write_bytes(truncated.read_bytes()[:-5])
    with pytest.raises(ValueError, match=r"truncated\.safetensors"):
        lt.load_checkpoint(truncated, params={"w": w})
    with pytest.raises(FileNotFoundError, match=r"missing\.safetensors"):
        lt.load_checkpoint(tmp_path / "missing.safetensors", params={"w": w})
