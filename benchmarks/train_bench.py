"""One training step (forward, backward, AdamW update) of the digits MLP and CNN: luminal vs
PyTorch eager on the CPU.

    python benchmarks/train_bench.py                      # luminal on the best backend
    python benchmarks/train_bench.py --backend reference --steps 30

The models are those of packages/luminal-train/examples (MLP 64-128-10; CNN conv16-pool-
conv32-pool-linear on 1x8x8 images), batch 64, same initial weights and data for both systems.
luminal runs forward + backward + update as one compiled graph (`luminal_train.TrainStep`);
PyTorch runs `zero_grad(); loss.backward(); opt.step()`. Each of --rounds rounds times
--steps steps of luminal, then of PyTorch (after --warmup steps); a system's time is the
median over its rounds of the median step, so load from other processes that comes and goes
hits both alike. "ratio" is luminal time / PyTorch time (lower is better for luminal);
"best" columns give the fastest round of each. Compile time (graph build + compile) is
reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import time

import luminal as lm
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np

BATCH = 64
MODELS = {
    "mlp": {"w1": (128, 64), "b1": (128,), "w2": (10, 128), "b2": (10,)},
    "cnn": {"c1": (16, 1, 3, 3), "c1b": (16,), "c2": (32, 16, 3, 3), "c2b": (32,),
            "fc": (10, 128), "fcb": (10,)},
}


def forward(name: str, x, p, f):
    """The model in luminal (`f` = luminal_nn.functional) or PyTorch (torch.nn.functional)."""
    if name == "mlp":
        return f.linear(f.relu(f.linear(x.flatten(1), p["w1"], p["b1"])), p["w2"], p["b2"])
    h = f.max_pool2d(f.relu(f.conv2d(x, p["c1"], p["c1b"], padding=1)), 2)
    h = f.max_pool2d(f.relu(f.conv2d(h, p["c2"], p["c2b"], padding=1)), 2)
    return f.linear(h.flatten(1), p["fc"], p["fcb"])


def _median_ms(step, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def luminal_step(name, init, xs, ys, backend) -> tuple[object, float]:
    """A luminal training step of the model (compiled) and its compile time in seconds."""
    t = time.perf_counter()
    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor(xs.shape, name="x")
    y = g.tensor(ys.shape, name="y", dtype=lm.int32)
    loss = lt.cross_entropy(forward(name, x, params, F), y)
    train = lt.TrainStep(loss, lt.AdamW(params, 1e-3), backend=backend)
    feeds = {x: xs, y: ys}
    train(feeds)
    return (lambda: train(feeds)), time.perf_counter() - t


def torch_step(name, init, xs, ys):
    """A PyTorch eager training step of the model."""
    import torch

    tf = torch.nn.functional
    params = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    opt = torch.optim.AdamW(list(params.values()), 1e-3)
    x, y = torch.tensor(xs), torch.tensor(ys, dtype=torch.int64)

    def step() -> float:
        opt.zero_grad()
        loss = tf.cross_entropy(forward(name, x, params, tf), y)
        loss.backward()
        opt.step()
        return loss.item()  # like luminal's step, which returns the loss to the host

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="luminal backend (default: best)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import torch

    backend = lt.default_backend(args.backend)
    rng = np.random.default_rng(0)
    xs = rng.uniform(0, 1, (BATCH, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 10, BATCH).astype(np.int32)
    print(f"luminal backend: {backend.name}; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); batch {BATCH}; {args.rounds} rounds of "
          f"{args.steps} steps")
    print(f"{'model':6} {'luminal ms':>11} {'torch ms':>9} {'ratio':>6} {'best ms':>15} "
          f"{'compile s':>10}")
    for name, shapes in MODELS.items():
        init = {k: rng.uniform(-0.2, 0.2, s).astype(np.float32) for k, s in shapes.items()}
        ours, compile_s = luminal_step(name, init, xs, ys, backend)
        theirs = torch_step(name, init, xs, ys)
        times: dict[str, list[float]] = {"ours": [], "theirs": []}
        for _ in range(args.rounds):
            times["ours"].append(_median_ms(ours, args.warmup, args.steps))
            times["theirs"].append(_median_ms(theirs, args.warmup, args.steps))
        a, b = (statistics.median(times[k]) for k in ("ours", "theirs"))
        best = f"{min(times['ours']):.2f} / {min(times['theirs']):.2f}"
        print(f"{name:6} {a:11.2f} {b:9.2f} {a / b:6.2f} {best:>15} {compile_s:10.2f}")


if __name__ == "__main__":
    main()
