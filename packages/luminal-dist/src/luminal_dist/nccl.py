"""`NcclCommunicator`: the collectives on NVIDIA GPUs through NCCL (`cupy.cuda.nccl`).

One rank per GPU. MPI starts the processes and carries NCCL's unique id from rank 0 to the
others (`MpiCommunicator.broadcast`); from then on data moves GPU to GPU. Arrays may be CuPy
arrays (they stay on the device) or host arrays (copied up, and the result copied back).
NCCL calls are asynchronous: each collective is waited for on its stream with the same
timeout as MPI's, and on expiry the NCCL communicator is aborted so no rank waits forever.
`start_all_reduce` returns before the all-reduce ends, for `Distributed(overlap=True)`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .comm import CollectiveTimeout, check_reduce_op, check_split, default_timeout

# NumPy dtype name -> the `cupy.cuda.nccl` constant naming NCCL's type
NCCL_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "float16": "NCCL_FLOAT16",
              "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint8": "NCCL_UINT8",
              "bool": "NCCL_UINT8", "bfloat16": "NCCL_BFLOAT16"}
NCCL_OPS = {"sum": "NCCL_SUM", "max": "NCCL_MAX", "min": "NCCL_MIN"}


def nccl_type(dtype: Any) -> str:
    """The name of NCCL's type for `dtype`; ValueError for types NCCL cannot move."""
    name = np.dtype(dtype).name
    if name not in NCCL_TYPES:
        raise ValueError(f"NCCL has no type for {name}; supported: {sorted(NCCL_TYPES)}")
    return NCCL_TYPES[name]


def nccl_op(op: str) -> str:
    return NCCL_OPS[check_reduce_op(op)]


def _nccl() -> Any:
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise ImportError("NcclCommunicator needs CuPy with NCCL: pip install "
                          "'luminal-dist[cuda]' (a cupy-cudaXXx wheel matching the driver)"
                          ) from exc
    return nccl


class NcclPending:
    """A collective queued on `comm`'s stream: `test()` asks whether it has finished,
    `wait()` polls until it has (aborting NCCL after the timeout) and gives its result."""

    def __init__(self, comm: NcclCommunicator, out: Any, on_host: bool, what: str) -> None:
        self.comm, self.out, self.on_host, self.what = comm, out, on_host, what
        self.event = comm.stream.record()

    def test(self) -> bool:
        return bool(self.event.done)

    def wait(self) -> Any:
        comm = self.comm
        deadline = time.monotonic() + comm.timeout
        while not self.event.done:
            if time.monotonic() > deadline:
                comm.comm.abort()
                raise CollectiveTimeout(f"rank {comm.rank}/{comm.size}: NCCL {self.what} did "
                                        f"not complete within {comm.timeout:g} s")
            time.sleep(1e-4)
        return comm.cupy.asnumpy(self.out) if self.on_host else self.out


class NcclCommunicator:
    """NCCL over the ranks of `bootstrap` (an `MpiCommunicator`; default: MPI's world), on
    GPU `device` (default: rank modulo the visible GPUs)."""

    def __init__(self, bootstrap: Any = None, device: int | None = None,
                 timeout: float | None = None) -> None:
        nccl = _nccl()  # first: without CuPy, the error says what to install
        import cupy

        from .mpi import MpiCommunicator

        self.bootstrap = bootstrap if bootstrap is not None else MpiCommunicator()
        self.rank, self.size = self.bootstrap.rank, self.bootstrap.size
        self.timeout = default_timeout() if timeout is None else float(timeout)
        self.device = cupy.cuda.Device(
            self.rank % cupy.cuda.runtime.getDeviceCount() if device is None else device)
        self.device.use()
        # NCCL's id: 128 signed bytes, made on rank 0
        uid = np.array(nccl.get_unique_id(), np.int8) if self.rank == 0 else np.zeros(
            128, np.int8)
        uid = self.bootstrap.broadcast(uid, root=0)
        self.nccl, self.cupy = nccl, cupy
        self.comm = nccl.NcclCommunicator(self.size, tuple(int(b) for b in uid), self.rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)

    def _device(self, x: Any) -> tuple[Any, bool]:
        on_host = isinstance(x, np.ndarray) or not hasattr(x, "data")
        return self.cupy.ascontiguousarray(self.cupy.asarray(x)), on_host

    def _done(self, out: Any, on_host: bool, what: str) -> Any:
        return NcclPending(self, out, on_host, what).wait()

    def _const(self, name: str) -> int:
        return getattr(self.nccl, name)

    def all_reduce(self, x: Any, op: str = "sum") -> Any:
        return self.start_all_reduce(x, op).wait()

    def start_all_reduce(self, x: Any, op: str = "sum") -> NcclPending:
        """Start an all-reduce of `x` on this communicator's stream and return at once: the
        GPU moves the data while the caller goes on (`Distributed(overlap=True)`)."""
        x, on_host = self._device(x)
        out = self.cupy.empty_like(x)
        self.comm.allReduce(x.data.ptr, out.data.ptr, x.size, self._const(nccl_type(x.dtype)),
                            self._const(nccl_op(op)), self.stream.ptr)
        return NcclPending(self, out, on_host, f"all_reduce({op})")

    def all_gather(self, x: Any, axis: int = 0) -> Any:
        x, on_host = self._device(x)
        out = self.cupy.empty((self.size, *x.shape), x.dtype)
        self.comm.allGather(x.data.ptr, out.data.ptr, x.size, self._const(nccl_type(x.dtype)),
                            self.stream.ptr)
        gathered = self.cupy.concatenate(list(out), axis=axis) if x.ndim else out
        return self._done(gathered, on_host, "all_gather")

    def reduce_scatter(self, x: Any, axis: int = 0, op: str = "sum") -> Any:
        check_split(tuple(x.shape), axis, self.size, "reduce_scatter")
        x, on_host = self._device(x)
        front = self.cupy.ascontiguousarray(self.cupy.moveaxis(x, axis, 0))
        out = self.cupy.empty((front.shape[0] // self.size, *front.shape[1:]), x.dtype)
        self.comm.reduceScatter(front.data.ptr, out.data.ptr, out.size,
                                self._const(nccl_type(x.dtype)), self._const(nccl_op(op)),
                                self.stream.ptr)
        return self._done(self.cupy.moveaxis(out, 0, axis), on_host, f"reduce_scatter({op})")

    def broadcast(self, x: Any, root: int = 0) -> Any:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root} is not a rank of a world of {self.size}")
        x, on_host = self._device(x)
        out = self.cupy.empty_like(x)
        self.comm.broadcast(x.data.ptr, out.data.ptr, x.size, self._const(nccl_type(x.dtype)),
                            root, self.stream.ptr)
        return self._done(out, on_host, "broadcast")

    def barrier(self) -> None:
        self.bootstrap.barrier()

    def allgather_object(self, value: Any) -> list[Any]:
        return self.bootstrap.allgather_object(value)

    def __repr__(self) -> str:
        return f"NcclCommunicator(rank={self.rank}, size={self.size}, device={self.device.id})"
