"""Fit y = x @ w + b by gradient descent, with autograd and the optimizer used as compilers.

    python packages/luminal-train/examples/linear_regression.py [--backend cpu] [--steps 200]
        [--search]

The last line of output is `max_weight_error=<value>`: the largest distance between a learned
and a true coefficient (below 0.05 expected: the data has noise of std 0.1).
"""

from __future__ import annotations

import argparse

import luminal as lm
import luminal_train as lt
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="luminal backend (default: best)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--search", action="store_true",
                        help="compile with the search compiler (needs luminal-search)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    true_w = rng.standard_normal((5, 1)).astype(np.float32)
    xs = rng.standard_normal((512, 5)).astype(np.float32)
    ys = xs @ true_w + 0.5 + 0.1 * rng.standard_normal((512, 1)).astype(np.float32)

    g = lm.Graph()
    x = g.tensor((512, 5), name="x").set(xs)
    y = g.tensor((512, 1), name="y").set(ys)
    w = g.tensor((5, 1), name="w").set(np.zeros((5, 1), np.float32))
    b = g.tensor((1,), name="b").set(np.zeros(1, np.float32))
    loss = lt.mse_loss(x @ w + b, y).retrieve()

    grads = lt.Autograd([w, b], loss)  # compiler: adds d(loss)/dw and d(loss)/db
    opt = lt.SGD([w, b], lr=0.1, momentum=0.9, grads=grads)  # compiler: adds the update
    backend = lt.default_backend(args.backend)
    if args.search:  # found by name: luminal-train does not depend on luminal-search
        backend = lm.plugins.compiler("search", backend=backend, progress=False)
    g.compile((grads, opt, lm.GenericCompiler(), backend))
    for i in range(args.steps):
        g.execute()  # one step: forward, backward, update; w and b stay on the device
        if i % 50 == 0:
            print(f"step {i:4d}  loss {loss.numpy():.5f}")
    error = float(np.abs(w.numpy() - true_w).max())
    print(f"learned b={b.numpy()[0]:.3f} (true 0.5)")
    print(f"max_weight_error={error:.4f}")


if __name__ == "__main__":
    main()
