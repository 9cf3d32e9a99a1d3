"""Shared pieces of the digits examples: data, parameter init, evaluation, command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import luminal as lm
import luminal_train as lt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

Forward = Callable[[lm.GraphTensor, dict[str, lm.GraphTensor]], lm.GraphTensor]


def parse_args(description: str, epochs: int, lr: float, batch_size: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--backend", default=None,
                        help="luminal backend name (default: the best installed one)")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--search", action="store_true",
                        help="compile with the search compiler (needs luminal-search)")
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the ranks of `mpiexec -n N` (needs "
                             "luminal-dist); --batch-size stays the global batch")
    return parser.parse_args()


def digits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """8x8 digit images scaled to [0, 1] as (N, 1, 8, 8) float32, and int32 labels; 20% held
    out (stratified)."""
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None]
    labels = data.target.astype(np.int32)
    return tuple(train_test_split(images, labels, test_size=0.2, random_state=seed,
                                  stratify=labels))


def torch_like_init(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """PyTorch's default Linear/Conv init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def train_and_evaluate(args: argparse.Namespace, shapes: dict[str, tuple[int, ...]],
                       fan_in: dict[str, int], forward: Forward) -> float | None:
    """Train `forward` on the digits with AdamW and a cosine schedule; returns the held-out
    accuracy (None on the ranks other than 0 of a `--distributed` run)."""
    x_train, x_test, y_train, y_test = digits(args.seed)
    rng = np.random.default_rng(args.seed)
    init = {k: torch_like_init(rng, s, fan_in[k]) for k, s in shapes.items()}
    backend = lt.default_backend(args.backend)
    if args.search:  # found by name: luminal-train does not depend on luminal-search
        backend = lm.plugins.compiler("search", backend=backend, progress=not args.no_progress)

    data_parallel, rank, ranks = None, 0, 1
    if args.distributed:  # every rank trains on its share of each global batch
        import luminal_dist

        data_parallel = luminal_dist.DataParallel()
        rank, ranks = data_parallel.rank, data_parallel.size
    args.no_progress = args.no_progress or rank != 0

    g = lm.Graph()
    params = {k: g.tensor(v.shape, name=k).set(v) for k, v in init.items()}
    x = g.tensor(("batch", 1, 8, 8), name="x")
    y = g.tensor(("batch",), name="y", dtype=lm.int32)
    loss = lt.cross_entropy(forward(x, params), y)
    batches = lt.Batches({x: x_train, y: y_train}, max(1, args.batch_size // ranks),
                         seed=args.seed, drop_last=False, rank=rank, world_size=ranks)
    schedule = lt.Cosine(args.lr, args.epochs * len(batches))
    step_backend = data_parallel.compiler(backend) if data_parallel else backend
    step = lt.TrainStep(loss, lt.AdamW(params, schedule, weight_decay=1e-4),
                        compilers=(lm.GenericCompiler(), step_backend),
                        data_parallel=data_parallel)
    # the matrices here are tiny: BLAS worker threads (used by NumPy backends) only add
    # spin-wait contention, which doubled the reference backend's CPU time on 2 cores
    with threadpool_limits(limits=1, user_api="blas"):
        losses = lt.fit(step, batches, args.epochs, progress=not args.no_progress)
    if rank == 0:
        print(f"final_train_loss={np.mean(losses[-len(batches):]):.4f}")

    # evaluation: the same network in a graph without the update, fed the trained weights
    ev = lm.Graph()
    ev_params = {k: ev.tensor(p.shape, name=k).set(p.numpy()) for k, p in params.items()}
    ev_x = ev.tensor(x_test.shape, name="x").set(x_test)
    predicted = forward(ev_x, ev_params).argmax(-1).retrieve()
    ev.compile((lm.GenericCompiler(), backend))
    ev.execute()
    return float((predicted.numpy() == y_test).mean()) if rank == 0 else None
