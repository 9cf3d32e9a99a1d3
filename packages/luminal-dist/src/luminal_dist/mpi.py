"""`MpiCommunicator`: the collectives over MPI (mpi4py), with a timeout on every one.

MPI's blocking collectives wait forever for a rank that died or hangs, so each collective is
started non-blocking and polled until it completes or `timeout` passes; polling yields the CPU
between tests, and sleeps after the first milliseconds, so a waiting rank leaves the CPU to a
rank still computing (two ranks on two cores).
On a timeout, or any other uncaught exception in a job of several ranks, the process aborts
the whole MPI job (as `python -m mpi4py` does) instead of waiting in MPI's exit for ranks that
will never arrive. Half-precision reductions are carried out in float32 (MPI has no bfloat16).
Nothing is pickled: small metadata travels as JSON text.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .comm import (
    CollectiveTimeout,
    check_reduce_op,
    check_split,
    default_timeout,
)

_aborting_hook_installed = False


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


class MpiCommunicator:
    """MPI's world communicator (or `comm`, an mpi4py communicator) as a luminal communicator.

    Args:
        comm: an `mpi4py.MPI.Comm`; default `MPI.COMM_WORLD`.
        timeout: seconds a collective waits for the others (default `$LUMINAL_DIST_TIMEOUT`,
            else 300).
    """

    def __init__(self, comm: Any = None, timeout: float | None = None) -> None:
        MPI = _mpi()
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        if self.size > 1:
            _abort_job_on_uncaught_exception(self.comm)

    # ----- collectives --------------------------------------------------------------------
    def all_reduce(self, x: Any, op: str = "sum") -> np.ndarray:
        return self.start_all_reduce(x, op).wait()

    def start_all_reduce(self, x: Any, op: str = "sum") -> MpiPending:
        """Start an all-reduce of `x` (`Iallreduce`); MPICH progresses it inside MPI calls,
        i.e. in the pending object's `test()` and `wait()`."""
        send, restore = _reducible(x)
        out = np.empty_like(send)
        request = self.comm.Iallreduce(send, out, self._ops[check_reduce_op(op)])
        return MpiPending(self, request, (send, out), lambda: restore(out),
                          f"all_reduce({op}) of {send.shape} {send.dtype}")

    def all_gather(self, x: Any, axis: int = 0) -> np.ndarray:
        x = np.asarray(x)
        send = _as_bytes(x)
        out = np.empty((self.size, send.size), np.uint8)
        self._wait(self.comm.Iallgather(send, out), f"all_gather of {x.shape} {x.dtype}")
        parts = [row.view(x.dtype).reshape(x.shape) for row in out]
        return np.concatenate(parts, axis=axis) if x.ndim else np.stack(parts)

    def reduce_scatter(self, x: Any, axis: int = 0, op: str = "sum") -> np.ndarray:
        x = np.asarray(x)
        check_split(x.shape, axis, self.size, "reduce_scatter")
        front, restore = _reducible(np.moveaxis(x, axis, 0))
        out = np.empty((front.shape[0] // self.size, *front.shape[1:]), front.dtype)
        self._wait(self.comm.Ireduce_scatter_block(front, out, self._ops[check_reduce_op(op)]),
                   f"reduce_scatter({op}) of {x.shape} {x.dtype}")
        return np.ascontiguousarray(np.moveaxis(restore(out), 0, axis))

    def broadcast(self, x: Any, root: int = 0) -> np.ndarray:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root} is not a rank of a world of {self.size}")
        x = np.asarray(x)
        buf = _as_bytes(x).copy()
        self._wait(self.comm.Ibcast(buf, root=root), f"broadcast of {x.shape} {x.dtype}")
        return buf.view(x.dtype).reshape(x.shape)

    def barrier(self) -> None:
        self._wait(self.comm.Ibarrier(), "barrier")

    def allgather_object(self, value: Any) -> list[Any]:
        data = np.frombuffer(json.dumps(value).encode(), np.uint8)
        sizes = np.empty(self.size, np.int64)
        self._wait(self.comm.Iallgather(np.array([data.size], np.int64), sizes),
                   "allgather_object (sizes)")
        out = np.empty(int(sizes.sum()), np.uint8)
        self._wait(self.comm.Iallgatherv(data, (out, sizes)), "allgather_object")
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return [json.loads(out[a:b].tobytes()) for a, b in itertools.pairwise(starts)]

    # ----- waiting ------------------------------------------------------------------------
    def _wait(self, request: Any, what: str) -> None:
        start = time.monotonic()
        deadline = start + self.timeout
        while not request.Test():
            now = time.monotonic()
            if now > deadline:
                raise CollectiveTimeout(
                    f"rank {self.rank}/{self.size}: {what} did not complete within "
                    f"{self.timeout:g} s: another rank died, hangs, or runs a different graph "
                    f"(set $LUMINAL_DIST_TIMEOUT to wait longer)")
            # yield for the first milliseconds (peers usually arrive by then), then sleep
            time.sleep(0 if now - start < 2e-3 else 1e-4)

    def __repr__(self) -> str:
        return f"MpiCommunicator(rank={self.rank}, size={self.size})"


class MpiPending:
    """An MPI request under way, the buffers MPI reads and writes meanwhile (kept alive
    here), and how to read its result."""

    def __init__(self, comm: MpiCommunicator, request: Any, buffers: tuple[np.ndarray, ...],
                 result: Callable[[], Any], what: str) -> None:
        self.comm, self.request, self.buffers = comm, request, buffers
        self.result, self.what = result, what

    def test(self) -> bool:
        return bool(self.request.Test())

    def wait(self) -> Any:
        self.comm._wait(self.request, self.what)
        return self.result()


def _as_bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


def _reducible(x: Any) -> tuple[np.ndarray, Any]:
    """`x` as an array MPI can reduce (half precision widened to float32, bool to int32), and
    the function turning a result back into `x`'s dtype."""
    x = np.ascontiguousarray(x)
    if x.dtype in (np.float32, np.float64, np.int32, np.int64):
        return x, lambda out: out
    wide = np.float32 if x.dtype.kind in "fV" or x.dtype.itemsize == 2 else np.int32
    if x.dtype == np.bool_:
        wide = np.int32
    return x.astype(wide), lambda out: out.astype(x.dtype)


def _abort_job_on_uncaught_exception(comm: Any) -> None:
    """Print the traceback, then abort every rank: the others may wait in a collective."""
    global _aborting_hook_installed
    if _aborting_hook_installed:
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        comm.Abort(1)

    sys.excepthook = hook
    _aborting_hook_installed = True
