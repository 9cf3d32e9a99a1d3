"""A minimal training loop: one compiled step per batch, mini-batches, a progress bar.

    step = lt.TrainStep(loss, lt.AdamW(params, lr=1e-3))      # builds backward + update, compiles
    losses = lt.fit(step, lt.Batches({x: xs, y: ys}, 64), epochs=10)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
from luminal import Backend, GenericCompiler, GraphTensor
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from .autograd import grad
from .checkpoint import load_checkpoint, save_checkpoint
from .clip import clip_grad_norm as clip_by_global_norm
from .losses import check_targets
from .optim import Optimizer

Feeds = Mapping[GraphTensor, ArrayLike]


def default_backend(name: str | None = None) -> Backend:
    """`lm.backend(name)`: the named backend, or the best installed one; the reference backend
    when the plugin registry cannot be used."""
    import luminal as lm

    try:
        return lm.backend(name)
    except (ImportError, AttributeError):
        if name not in (None, "reference"):
            raise
        from luminal.reference import ReferenceBackend

        return ReferenceBackend()


class TrainStep:
    """Forward, backward and optimizer update of `loss`, compiled into one graph.

    Calling it with a batch (`{input tensor: array}`) sets the inputs and the scheduled
    learning rate, runs the graph once and returns the loss. `clip_grad_norm` clips the
    gradients by their global norm in the graph; `compilers` replaces the default
    `(GenericCompiler(), backend)` chain.

    `data_parallel` (a `luminal_dist.DataParallel`, or any object with `rank`,
    `reduce_gradients(grads)` and `compiler(backend)`) averages the gradients over the ranks
    inside the step, wraps the backend so the collectives run, and makes `save()` write on
    rank 0 only.
    """

    def __init__(
        self,
        loss: GraphTensor,
        optimizer: Optimizer,
        *,
        clip_grad_norm: float | None = None,
        backend: Backend | str | None = None,
        compilers: Any = None,
        data_parallel: Any = None,
    ):
        self.loss, self.optimizer, self.graph = loss, optimizer, loss.graph
        self.data_parallel = data_parallel
        grads = grad(loss, optimizer.params)
        if data_parallel is not None:
            grads = data_parallel.reduce_gradients(grads)
        self.grad_norm: GraphTensor | None = None
        if clip_grad_norm is not None:
            grads, self.grad_norm = clip_by_global_norm(grads, clip_grad_norm)
            self.grad_norm.retrieve()
        optimizer.step(grads)
        loss.retrieve()
        if compilers is None:
            chosen = backend if isinstance(backend, Backend) else default_backend(backend)
            if data_parallel is not None:
                chosen = data_parallel.compiler(chosen)
            compilers = (GenericCompiler(), chosen)
        self.graph.compile(compilers)
        self.step = 0  # optimizer steps taken; drives the schedule

    def __call__(self, feeds: Feeds) -> float:
        for tensor, value in feeds.items():
            tensor.set(value)
        check_targets(self.graph)  # class indices out of range: an error, as in PyTorch
        self.optimizer.schedule_lr(self.step)
        self.graph.execute()
        self.step += 1
        return float(self.loss.numpy())

    def save(self, path: str | os.PathLike) -> None:
        """Checkpoint parameters, optimizer state and step (safetensors); in data-parallel
        training only rank 0 writes (every rank holds the same values)."""
        if self.data_parallel is not None and self.data_parallel.rank != 0:
            return
        save_checkpoint(path, optimizer=self.optimizer, step=self.step)

    def load(self, path: str | os.PathLike) -> None:
        """Resume from `save()`: the next call continues exactly where that run stopped."""
        self.step = load_checkpoint(path, optimizer=self.optimizer)


class Batches:
    """Mini-batches of aligned arrays as feed dicts, reshuffled on every pass.

    `Batches({x: xs, y: ys}, 64)` yields `{x: xs[idx], y: ys[idx]}` for consecutive slices of
    a permutation drawn from `seed`. `drop_last` skips a final short batch (graphs with a fixed
    batch size need it; a symbolic batch dim does not).

    For data-parallel training every rank passes its `rank` and the `world_size`: all ranks
    draw the same permutation, `batch_size` is each rank's share, and rank r gets the r-th
    share of each global batch of `batch_size * world_size` examples, so the ranks together
    see exactly the batches one process would with the global batch size. A final short
    global batch is split as evenly as possible (dropped with `drop_last`, or when it has
    fewer examples than ranks); every rank yields the same number of batches.
    """

    def __init__(self, arrays: Mapping[GraphTensor, np.ndarray], batch_size: int,
                 shuffle: bool = True, drop_last: bool = True, seed: int = 0,
                 rank: int = 0, world_size: int = 1):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or (
                batch_size <= 0):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not arrays:
            raise ValueError("Batches: no arrays to batch")
        sizes = {len(a) for a in arrays.values()}
        if len(sizes) != 1:
            raise ValueError(f"Batches: arrays have different lengths {sorted(sizes)}")
        if not 0 <= rank < world_size:
            raise ValueError(f"Batches: rank {rank} is not in [0, world_size={world_size})")
        self.arrays, self.batch_size = dict(arrays), batch_size
        self.rank, self.world_size = rank, world_size
        self.n = sizes.pop()
        self.shuffle, self.drop_last = shuffle, drop_last
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size * self.world_size)
        return full + (1 if rest >= self.world_size and not self.drop_last else 0)

    def __iter__(self) -> Iterator[dict[GraphTensor, np.ndarray]]:
        order = self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        step = self.batch_size * self.world_size
        for k in range(len(self)):
            idx = np.array_split(order[k * step : (k + 1) * step], self.world_size)[self.rank]
            yield {t: a[idx] for t, a in self.arrays.items()}


def fit(
    step: Callable[[Feeds], float],
    batches: Iterable[Feeds],
    epochs: int = 1,
    progress: bool = True,
    desc: str = "train",
) -> list[float]:
    """Run `step` on every batch for `epochs` passes; returns the loss of every step.

    The progress bar (tqdm, on stderr) shows the epoch and the running mean loss of the epoch.
    """
    losses: list[float] = []
    total = len(batches) * epochs if hasattr(batches, "__len__") else None
    with tqdm(total=total, desc=desc, disable=not progress, dynamic_ncols=True) as bar:
        for epoch in range(epochs):
            running, count = 0.0, 0
            for feeds in batches:
                losses.append(step(feeds))
                running, count = running + losses[-1], count + 1
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{running / count:.4f}")
    return losses
