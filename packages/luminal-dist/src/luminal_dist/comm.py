"""The communicator interface: what the distributed runtime asks of a transport.

A communicator knows its `rank` and `size` and runs the four collectives on host arrays
(NumPy, or the device arrays of a transport that keeps data on the GPU). Every collective
returns a new array and gives up with `CollectiveTimeout` when the other ranks do not join
within `timeout` seconds, so a rank that died or hangs never leaves the others waiting
forever. Implementations: `SingleProcess` (here), `MpiCommunicator` (mpi4py) and
`NcclCommunicator` (CuPy's NCCL).
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

TIMEOUT_ENV = "LUMINAL_DIST_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
REDUCE_OPS = ("sum", "max", "min")


class DistributedError(RuntimeError):
    """The ranks of a job disagree (different graphs, shapes) or the transport failed."""


class CollectiveTimeout(DistributedError):
    """A collective did not complete in time: another rank died, hung or skipped it."""


def default_timeout() -> float:
    """Seconds a collective waits for the other ranks: `$LUMINAL_DIST_TIMEOUT`, else 300."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: expected a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{TIMEOUT_ENV}={raw!r}: the timeout must be positive")
    return value


def check_reduce_op(op: str) -> str:
    if op not in REDUCE_OPS:
        raise ValueError(f"unknown reduction {op!r}; expected one of {list(REDUCE_OPS)}")
    return op


def check_split(shape: tuple[int, ...], axis: int, size: int, what: str) -> None:
    """reduce_scatter splits `axis` into `size` equal parts: it must divide."""
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"{what}: axis {axis} is out of range for shape {shape}")
    if shape[axis] % size:
        raise ValueError(f"{what}: axis {axis} of shape {shape} does not split into {size} "
                         "equal parts (one per rank)")


class Pending(Protocol):
    """A collective under way: `test()` makes progress and says whether it completed,
    `wait()` returns its result (raising `CollectiveTimeout` past the communicator's
    timeout)."""

    def test(self) -> bool: ...

    def wait(self) -> Any: ...


class Done:
    """A collective that completed when it started (a communicator without non-blocking
    collectives)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def test(self) -> bool:
        return True

    def wait(self) -> Any:
        return self.value


@runtime_checkable
class Communicator(Protocol):
    """A group of `size` processes; this one is `rank` (0-based)."""

    rank: int
    size: int
    timeout: float

    def all_reduce(self, x: Any, op: str = "sum") -> Any:
        """Elementwise reduction of every rank's `x` (same shape and dtype); all get it.
        A communicator may also offer `start_all_reduce(x, op) -> Pending`, the same started
        without waiting (see `Distributed(overlap=True)`)."""

    def all_gather(self, x: Any, axis: int = 0) -> Any:
        """Every rank's `x` concatenated along `axis` in rank order; all get it."""

    def reduce_scatter(self, x: Any, axis: int = 0, op: str = "sum") -> Any:
        """The reduction of every rank's `x`, split along `axis`: rank r gets part r."""

    def broadcast(self, x: Any, root: int = 0) -> Any:
        """Rank `root`'s `x` on every rank."""

    def barrier(self) -> None:
        """Return once every rank has called it."""

    def allgather_object(self, value: Any) -> list[Any]:
        """Every rank's small JSON-like `value` (str, int, tuple), in rank order."""


class SingleProcess:
    """A world of one: every collective is a copy (the primitive decomposition's semantics)."""

    rank, size = 0, 1

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = default_timeout() if timeout is None else timeout

    def all_reduce(self, x: Any, op: str = "sum") -> Any:
        check_reduce_op(op)
        return np.array(x, copy=True)

    def all_gather(self, x: Any, axis: int = 0) -> Any:
        return np.array(x, copy=True)

    def reduce_scatter(self, x: Any, axis: int = 0, op: str = "sum") -> Any:
        check_reduce_op(op)
        return np.array(x, copy=True)

    def broadcast(self, x: Any, root: int = 0) -> Any:
        if root != 0:
            raise ValueError(f"broadcast: root {root} is not a rank of a world of 1")
        return np.array(x, copy=True)

    def barrier(self) -> None:
        return None

    def allgather_object(self, value: Any) -> list[Any]:
        return [value]

    def __repr__(self) -> str:
        return "SingleProcess()"


class OnCommunicator:
    """Base of the objects that work over a communicator `comm`: its `rank` and `size`."""

    comm: Communicator

    @property
    def rank(self) -> int:
        return self.comm.rank

    @property
    def size(self) -> int:
        return self.comm.size


def world() -> Communicator:
    """The communicator of this job: MPI's world when launched by `mpiexec` with more than
    one rank, else a `SingleProcess`."""
    if not launched_by_mpi():
        return SingleProcess()
    from .mpi import MpiCommunicator

    comm = MpiCommunicator()
    return comm if comm.size > 1 else SingleProcess()


def launched_by_mpi() -> bool:
    """Whether an MPI launcher started this process (MPICH's Hydra, Open MPI, Slurm's PMI)."""
    return any(k in os.environ for k in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
                                         "PMI_SIZE"))
