"""`NcclCommunicator` on two threads over an emulated `cupy` / `cupy.cuda.nccl` (no GPU
here): the emulator reads and writes the buffers through the raw pointers and counts the
communicator passes, exactly as NCCL's C API would, so the marshalling (pointers, element
counts, NCCL types, the layout reduce_scatter and all_gather need) is checked against NumPy,
and so is overlapped data-parallel training (all-reduces started during the backward pass).
On a GPU machine the same communicator runs on real NCCL."""

from __future__ import annotations

import ctypes
import sys
import threading
import types

import numpy as np
import pytest

TYPES = {1: np.int8, 2: np.int32, 4: np.int64, 6: np.float16, 7: np.float32, 8: np.float64,
         5: np.uint8}


class DevArray(np.ndarray):
    """A host array standing in for a CuPy array: `.data.ptr` is its address."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _dev(fn):
    return lambda *a, **k: np.ascontiguousarray(fn(*a, **k)).view(DevArray)


def _view(ptr: int, count: int, dtype) -> np.ndarray:
    size = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * size).from_address(ptr), dtype, count)


class Hub:
    """Where the two emulated ranks meet: each collective deposits, then reads the result."""

    def __init__(self, size: int) -> None:
        self.size, self.sent = size, {}
        self.barrier = threading.Barrier(size, timeout=20)

    def exchange(self, rank: int, data) -> list:
        self.sent[rank] = data.copy() if isinstance(data, np.ndarray) else data
        self.barrier.wait()
        out = [self.sent[r] for r in range(self.size)]
        self.barrier.wait()
        return out


HUBS: dict[tuple, Hub] = {}


class EmulatedComm:
    def __init__(self, size: int, uid: tuple, rank: int) -> None:
        self.hub, self.rank, self.aborted = HUBS.setdefault(uid, Hub(size)), rank, False

    def _reduce(self, parts, op):
        return {0: np.sum, 1: np.prod, 2: np.max, 3: np.min}[op](np.stack(parts), axis=0)

    def allReduce(self, send, recv, count, dtype, op, stream):
        parts = self.hub.exchange(self.rank, _view(send, count, TYPES[dtype]))
        _view(recv, count, TYPES[dtype])[:] = self._reduce(parts, op)

    def allGather(self, send, recv, count, dtype, stream):
        parts = self.hub.exchange(self.rank, _view(send, count, TYPES[dtype]))
        _view(recv, count * self.hub.size, TYPES[dtype])[:] = np.concatenate(parts)

    def reduceScatter(self, send, recv, recvcount, dtype, op, stream):
        n = recvcount * self.hub.size
        total = self._reduce(self.hub.exchange(self.rank, _view(send, n, TYPES[dtype])), op)
        _view(recv, recvcount, TYPES[dtype])[:] = total[self.rank * recvcount:][:recvcount]

    def broadcast(self, send, recv, count, dtype, root, stream):
        parts = self.hub.exchange(self.rank, _view(send, count, TYPES[dtype]))
        _view(recv, count, TYPES[dtype])[:] = parts[root]

    def abort(self):
        self.aborted = True


class Bootstrap:
    """The MPI side of start-up (NCCL's id from rank 0), between threads."""

    def __init__(self, hub: Hub, rank: int) -> None:
        self.hub, self.rank, self.size = hub, rank, hub.size

    def broadcast(self, x, root=0):
        return self.hub.exchange(self.rank, np.asarray(x))[root]

    def allgather_object(self, value):
        return self.hub.exchange(self.rank, value)


@pytest.fixture
def emulated_cupy(monkeypatch):
    nccl = types.SimpleNamespace(
        NcclCommunicator=EmulatedComm, get_unique_id=lambda: tuple(range(-64, 64)),
        NCCL_SUM=0, NCCL_PROD=1, NCCL_MAX=2, NCCL_MIN=3, NCCL_INT8=1, NCCL_UINT8=5,
        NCCL_INT32=2, NCCL_INT64=4, NCCL_FLOAT16=6, NCCL_FLOAT32=7, NCCL_FLOAT64=8,
        NCCL_BFLOAT16=9)
    device = types.SimpleNamespace(use=lambda: None, id=0)
    stream = types.SimpleNamespace(ptr=0, record=lambda: types.SimpleNamespace(done=True))
    cuda = types.SimpleNamespace(
        nccl=nccl, Device=lambda i: device, Stream=lambda non_blocking: stream,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    cupy = types.SimpleNamespace(
        cuda=cuda, asarray=_dev(np.asarray), ascontiguousarray=_dev(np.ascontiguousarray),
        empty=_dev(np.empty), empty_like=_dev(np.empty_like), concatenate=_dev(np.concatenate),
        moveaxis=np.moveaxis, asnumpy=np.asarray)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    HUBS.clear()


def test_nccl_collectives_on_two_emulated_gpus(emulated_cupy) -> None:
    from luminal_dist.nccl import NcclCommunicator

    start, results, errors = Hub(2), {}, []
    xs = [np.random.default_rng(r).standard_normal((4, 6)).astype(np.float32) for r in range(2)]

    def rank(r: int) -> None:
        try:
            comm = NcclCommunicator(bootstrap=Bootstrap(start, r))
            results[r] = {"sum": comm.all_reduce(xs[r]), "max": comm.all_reduce(xs[r], "max"),
                          "gather": comm.all_gather(xs[r], axis=1),
                          "scatter": comm.reduce_scatter(xs[r], axis=1),
                          "bcast": comm.broadcast(xs[r], root=1),
                          "ints": comm.all_reduce(np.arange(5, dtype=np.int32) * (r + 1))}
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    total = xs[0] + xs[1]
    for r in range(2):
        got = results[r]
        np.testing.assert_allclose(got["sum"], total, rtol=1e-6)
        np.testing.assert_array_equal(got["max"], np.maximum(xs[0], xs[1]))
        np.testing.assert_array_equal(got["gather"], np.concatenate(xs, axis=1))
        np.testing.assert_allclose(got["scatter"], total[:, 3 * r:3 * r + 3], rtol=1e-6)
        np.testing.assert_array_equal(got["bcast"], xs[1])
        np.testing.assert_array_equal(got["ints"], np.arange(5) * 3)
        assert isinstance(got["sum"], np.ndarray) and got["sum"].shape == (4, 6)


def test_nccl_collective_that_never_finishes_aborts_after_the_timeout(emulated_cupy) -> None:
    import luminal_dist as ld
    from luminal_dist.nccl import NcclCommunicator

    comm = NcclCommunicator(bootstrap=Bootstrap(Hub(1), 0), timeout=0.05)
    comm.stream = types.SimpleNamespace(ptr=0, record=lambda: types.SimpleNamespace(done=False))
    waited = r"NCCL all_reduce\(sum\) did not complete within 0.05 s"
    with pytest.raises(ld.CollectiveTimeout, match=waited):
        comm.all_reduce(np.ones(3, np.float32))
    assert comm.comm.aborted


def test_nccl_all_reduce_is_started_without_waiting(emulated_cupy) -> None:
    """`start_all_reduce` returns while the stream still works; `test()` follows the stream's
    event and `wait()` gives the sum once it is done."""
    from luminal_dist.nccl import NcclCommunicator

    comm = NcclCommunicator(bootstrap=Bootstrap(Hub(1), 0), timeout=5)
    event = types.SimpleNamespace(done=False)
    comm.stream = types.SimpleNamespace(ptr=0, record=lambda: event)
    pending = comm.start_all_reduce(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not pending.test()
    event.done = True
    assert pending.test()
    np.testing.assert_array_equal(pending.wait(), np.arange(6).reshape(2, 3))


def _train(backend, data_parallel, xs, ys, batch):
    import luminal as lm
    import luminal_nn.functional as F
    import luminal_train as lt

    rng = np.random.default_rng(0)
    g = lm.Graph()
    p = {"w1": g.tensor((16, 6), name="w1").set(rng.uniform(-0.5, 0.5, (16, 6))),
         "b1": g.tensor((16,), name="b1").set(np.zeros(16)),
         "w2": g.tensor((3, 16), name="w2").set(rng.uniform(-0.5, 0.5, (3, 16)))}
    x, y = g.tensor(("batch", 6), name="x"), g.tensor(("batch",), name="y", dtype=lm.int32)
    loss = lt.cross_entropy(F.linear(F.linear(x, p["w1"], p["b1"]).relu(), p["w2"]), y)
    step = lt.TrainStep(loss, lt.AdamW(p, 1e-2), backend=backend, data_parallel=data_parallel)
    rank, size = (0, 1) if data_parallel is None else (data_parallel.rank, data_parallel.size)
    batches = lt.Batches({x: xs, y: ys}, batch // size, seed=1, rank=rank, world_size=size)
    lt.fit(step, batches, epochs=1, progress=False)
    return {k: t.numpy() for k, t in p.items()}


def test_overlapped_data_parallel_training_on_two_emulated_gpus(emulated_cupy) -> None:
    """`DataParallel(overlap=True)` over NCCL: the step's buckets are started on the stream
    during the backward pass, and 10 AdamW steps on two ranks equal one process on the
    combined batches."""
    import luminal_dist as ld
    from luminal_dist.nccl import NcclCommunicator

    rng = np.random.default_rng(2)
    xs = rng.standard_normal((80, 6)).astype(np.float32)
    ys = rng.integers(0, 3, 80).astype(np.int32)
    start, results, errors, started = Hub(2), {}, [], {0: [], 1: []}

    def rank(r: int) -> None:
        try:
            comm = NcclCommunicator(bootstrap=Bootstrap(start, r))
            begin = comm.start_all_reduce
            comm.start_all_reduce = lambda x, op="sum": started[r].append(x.size) or begin(x, op)
            dp = ld.DataParallel(comm, bucket_mb=200 / 2**20, overlap=True)  # 3 buckets
            results[r] = _train("reference", dp, xs, ys, 8)
        except Exception as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert started[0] == started[1] == [48, 16, 96] * 10  # w2, b1, w1: backward's order
    single = _train("reference", None, xs, ys, 8)
    for name, want in single.items():
        np.testing.assert_array_equal(results[0][name], results[1][name])
        np.testing.assert_allclose(results[0][name], want, atol=1e-5)
