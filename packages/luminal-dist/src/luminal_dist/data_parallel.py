"""Data-parallel training: every rank holds the whole model and a shard of each batch.

    dp = ld.DataParallel()                                   # this job's ranks
    step = lt.TrainStep(loss, lt.AdamW(params, 1e-3), data_parallel=dp, backend="cpu")
    batches = lt.Batches({x: xs, y: ys}, 32, rank=dp.rank, world_size=dp.size)

`TrainStep` hands its gradients to `reduce_gradients`, which packs them into buckets (flat
concatenations of about `bucket_mb` megabytes, like PyTorch DDP's), averages each bucket over
the ranks with one all-reduce and unpacks them, all inside the compiled step graph; the
optimizer update that follows is the same computation on every rank, so the parameters stay
identical. Averaging equals training on the combined batch when every rank's batch has the
same size and the loss is a mean.

Buckets are filled in reverse parameter order, the order in which the backward pass produces
the gradients; with `overlap=True` each bucket's all-reduce starts as soon as its gradients
are computed, while the backward pass of the earlier layers runs (`Distributed(overlap=True)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import luminal as lm
from luminal import GraphTensor

from .comm import Communicator, OnCommunicator, world
from .ops import all_reduce
from .staged import Distributed


def buckets(grads: Sequence[GraphTensor], bucket_bytes: int) -> list[list[int]]:
    """Indices of `grads` grouped in order into buckets of one dtype and at most
    `bucket_bytes` (a larger gradient gets a bucket of its own)."""
    out: list[list[int]] = []
    size, dtype = 0, None
    for k, g in enumerate(grads):
        numel = g.layout.numel  # a symbolic size (never for parameters) fills a bucket
        nbytes = numel.value * g.dtype.numpy.itemsize if numel.is_const else bucket_bytes
        if not out or g.dtype != dtype or size + nbytes > bucket_bytes:
            out.append([])
            size, dtype = 0, g.dtype
        out[-1].append(k)
        size += nbytes
    return out


class DataParallel(OnCommunicator):
    """Averages gradients over the ranks of `comm` (default: this job's world) inside the
    compiled training step; pass it to `luminal_train.TrainStep(data_parallel=...)`.

    Args:
        comm: the communicator.
        bucket_mb: gradient bytes per all-reduce (fewer, larger messages amortise latency).
        overlap: start each bucket's all-reduce during the backward pass (the step is cut into
            one compiled stage per bucket); see the README for when it pays.
    """

    def __init__(self, comm: Communicator | None = None, bucket_mb: float = 25.0,
                 overlap: bool = False) -> None:
        if not bucket_mb > 0:
            raise ValueError(f"bucket_mb must be positive, got {bucket_mb}")
        self.comm = comm if comm is not None else world()
        self.bucket_bytes = int(bucket_mb * (1 << 20))
        self.overlap = overlap

    def reduce_gradients(self, grads: Sequence[GraphTensor]) -> list[GraphTensor]:
        """The gradients averaged over the ranks, one all-reduce per bucket."""
        out: list[GraphTensor] = list(grads)
        if self.size == 1:
            return out
        backward_order = list(reversed(range(len(grads))))
        for part in buckets([grads[k] for k in backward_order], self.bucket_bytes):
            bucket = [backward_order[k] for k in part]
            flat = [grads[k].reshape((-1,)) for k in bucket]
            packed = flat[0] if len(flat) == 1 else lm.cat(flat, dim=0)
            mean = all_reduce(packed, "sum", self.comm) * (1.0 / self.size)
            start = 0
            for k in bucket:
                n = grads[k].layout.numel
                out[k] = mean[start:start + n].reshape(tuple(grads[k].shape))
                start += n
        return out

    def compiler(self, backend: Any) -> Distributed:
        """The compiler running the step's collectives on this communicator for `backend`."""
        return Distributed(backend, self.comm, self.overlap)

    def __repr__(self) -> str:
        return (f"DataParallel({self.comm!r}, bucket_mb={self.bucket_bytes / (1 << 20):g}, "
                f"overlap={self.overlap})")
