"""One training step (forward, backward, AdamW update) of the digits MLP and CNN: luminal vs
PyTorch eager on the CPU.

    python benchmarks/train_bench.py                      # luminal on the best backend
    python benchmarks/train_bench.py --backend reference --steps 30

The models are those of packages/luminal-train/examples (MLP 64-128-10; CNN conv16-pool-
conv32-pool-linear on 1x8x8 images), batch 64, same initial weights and data for both systems.
luminal runs forward + backward + update as one compiled graph (`luminal_train.TrainStep`);
PyTorch runs `zero_grad(); loss.backward(); opt.step()`. Times are medians over --steps timed
steps after --warmup steps; "ratio" is luminal time / PyTorch time (lower is better for
luminal). Compile time (graph build + compile) is reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import time

import luminal as lm
import luminal.functional as F
import luminal_train as lt
import numpy as np

BATCH = 64
MODELS = {
    "mlp": {"w1": (128, 64), "b1": (128,), "w2": (10, 128), "b2": (10,)},
    "cnn": {"c1": (16, 1, 3, 3), "c1b": (16,), "c2": (32, 16, 3, 3), "c2b": (32,),
            "fc": (10, 128), "fcb": (10,)},
}


def forward(name: str, x, p, f):
    """The model in luminal (`f` = luminal.functional) or PyTorch (torch.nn.functional)."""
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


def bench_luminal(name, init, xs, ys, backend, warmup, steps) -> tuple[float, float]:
    t = time.perf_counter()
    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor(xs.shape, name="x")
    y = g.tensor(ys.shape, name="y", dtype=lm.int32)
    loss = lt.cross_entropy(forward(name, x, params, F), y)
    train = lt.TrainStep(loss, lt.AdamW(params, 1e-3), backend=backend)
    feeds = {x: xs, y: ys}
    train(feeds)
    compile_s = time.perf_counter() - t
    return _median_ms(lambda: train(feeds), warmup, steps), compile_s


def bench_torch(name, init, xs, ys, warmup, steps) -> float:
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

    return _median_ms(step, warmup, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="luminal backend (default: best)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    import torch

    backend = lt.default_backend(args.backend)
    rng = np.random.default_rng(0)
    xs = rng.uniform(0, 1, (BATCH, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 10, BATCH).astype(np.int32)
    print(f"luminal backend: {backend.name}; torch {torch.__version__} "
          f"({torch.get_num_threads()} threads); batch {BATCH}; median of {args.steps} steps")
    print(f"{'model':6} {'luminal ms':>11} {'torch ms':>9} {'ratio':>6} {'compile s':>10}")
    for name, shapes in MODELS.items():
        init = {k: rng.uniform(-0.2, 0.2, s).astype(np.float32) for k, s in shapes.items()}
        ours, compile_s = bench_luminal(name, init, xs, ys, backend, args.warmup, args.steps)
        theirs = bench_torch(name, init, xs, ys, args.warmup, args.steps)
        print(f"{name:6} {ours:11.2f} {theirs:9.2f} {ours / theirs:6.1f} {compile_s:10.2f}")


if __name__ == "__main__":
    main()
