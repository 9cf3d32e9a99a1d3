"""The runtime's control flow on a recorded (fake) CuPy: when it runs eagerly, captures and
replays CUDA graphs, uploads inputs, reallocates, and publishes assigned values."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal_cuda import CudaBackend, DeviceArray, StaleDeviceArrayError
from luminal_cuda.runtime import CudaRuntime, RuntimeOptions


def compile_fake(g: lm.Graph, fake, **options) -> CudaRuntime:
    g.compile(lm.GenericCompiler())
    program, module = CudaBackend().build(g)
    runtime = CudaRuntime(g, program, module, fake, 0, RuntimeOptions(**options))
    g.set_runtime(runtime)
    return runtime


def data_uploads(fake, rt: CudaRuntime) -> list[tuple]:
    """Host-to-device copies of input data (not of the dims array)."""
    return [op for op in fake.log
            if op[0] == "memcpy" and op[1] == 1 and op[2] != rt.memory.ptr("dims")]


def elementwise_graph():
    g = lm.Graph()
    x = g.tensor(("n", 4), name="x")
    y = (x.exp() * 2 + 1).retrieve()
    return g, x, y


def test_cuda_first_run_eager_second_captures_then_replays(fake_cupy):
    g, x, _ = elementwise_graph()
    rt = compile_fake(g, fake_cupy)
    x.set(np.ones((3, 4), np.float32))
    for _ in range(4):
        g.execute()
    assert rt.stats == {"eager": 1, "captured": 1, "replayed": 2}
    # one upload (the data never changed), then launches, then a captured graph's replays
    assert len(data_uploads(fake_cupy, rt)) == 1
    assert fake_cupy.kinds().count("replay") == 3


def test_cuda_new_dims_never_reuse_another_binding(fake_cupy):
    g, x, _ = elementwise_graph()
    rt = compile_fake(g, fake_cupy)
    for n in (3, 3, 5, 5, 3):
        x.set(np.ones((n, 4), np.float32))
        g.execute()
    # n=5 grew the buffers: the n=3 binding was dropped and is rebuilt (eager) on return
    assert rt.stats == {"eager": 3, "captured": 2, "replayed": 0}
    launches = [op for op in fake_cupy.log if op[0] == "launch"]
    grids = sorted({op[2][0] for op in launches})
    assert grids == [1]  # 12 and 20 elements: one block of 256 threads each time


def test_cuda_growing_dim_replays_per_bucket(fake_cupy):
    g = lm.Graph()
    cache = g.tensor(("past", 8), name="cache")
    (cache.exp().sum(0)).retrieve()
    rt = compile_fake(g, fake_cupy)
    for past in range(17, 41):
        cache.set(np.ones((past, 8), np.float32))
        g.execute()
    # buckets 32 (17..32) and 64 (33..40): one eager run and one capture each, then replays
    assert rt.stats == {"eager": 2, "captured": 2, "replayed": 20}
    dims_uploads = [op for op in fake_cupy.log if op[0] == "memcpy" and op[3] == 8]
    assert len(dims_uploads) == 24  # the real value goes to the device every run


def test_cuda_lru_bounds_bindings(fake_cupy):
    g, x, _ = elementwise_graph()
    rt = compile_fake(g, fake_cupy, graph_cache=2)
    x.set(np.ones((8, 4), np.float32))
    g.execute()  # largest first: later sizes never reallocate
    for n in (1, 2, 3, 4):
        x.set(np.ones((n, 4), np.float32))
        g.execute()
    assert len(rt.bindings) == 2


def test_cuda_graphs_disabled(fake_cupy):
    g, x, _ = elementwise_graph()
    rt = compile_fake(g, fake_cupy, graph_cache=0)
    x.set(np.ones((2, 4), np.float32))
    for _ in range(3):
        g.execute()
    assert rt.stats == {"eager": 3, "captured": 0, "replayed": 0}


def test_cuda_uploads_only_changed_inputs_before_replay(fake_cupy):
    g = lm.Graph()
    w = g.tensor((4, 4), name="w").set(np.eye(4, dtype=np.float32))
    x = g.tensor((2, 4), name="x")
    (x @ w).retrieve()
    rt = compile_fake(g, fake_cupy)
    for k in range(3):
        x.set(np.full((2, 4), k, np.float32))
        fake_cupy.clear()
        g.execute()
        uploads = data_uploads(fake_cupy, rt)
        assert len(uploads) == (2 if k == 0 else 1)  # w once, x every time
        first_work = min(i for i, op in enumerate(fake_cupy.log)
                         if op[0] in ("launch", "gemm", "replay"))
        assert all(i < first_work for i, op in enumerate(fake_cupy.log) if op in uploads)


def test_cuda_upload_looks_only_at_inputs_set_since_the_last_run(fake_cupy, monkeypatch):
    """A decode step sets one input of hundreds (the token; the caches are handed over on the
    device): the upload checks those, not every weight, and a weight whose device copy was
    lost (its allocation moved) is uploaded again although its data did not change."""
    g = lm.Graph()
    x = g.tensor((2, 4), name="x")
    weights = [g.tensor((4, 4), name=f"w{i}").set(np.eye(4, dtype=np.float32) * i)
               for i in range(40)]
    total = x
    for w in weights:
        total = total + (x @ w)
    total.retrieve()
    rt = compile_fake(g, fake_cupy)
    looked_at = []
    check = rt.changed_input
    monkeypatch.setattr(rt, "changed_input", lambda graph, nid: looked_at.append(nid) or
                        check(graph, nid))
    x.set(np.ones((2, 4), np.float32))
    g.execute()
    assert len(looked_at) == 41 and len(data_uploads(fake_cupy, rt)) == 41
    for step in range(2):
        looked_at.clear()
        fake_cupy.clear()
        x.set(np.full((2, 4), step, np.float32))
        g.execute()
        assert looked_at == [x.id] and len(data_uploads(fake_cupy, rt)) == 1
    rt.forget_upload(weights[7].id)
    looked_at.clear()
    fake_cupy.clear()
    g.execute()
    assert looked_at == [weights[7].id]
    assert [op[2] for op in data_uploads(fake_cupy, rt)] == [rt.memory.ptr(weights[7].id)]


def test_cuda_matmul_goes_to_cublas(fake_cupy):
    g = lm.Graph()
    a = g.tensor((3, 5), name="a").set(np.ones((3, 5), np.float32))
    b = g.tensor((4, 5), name="b").set(np.ones((4, 5), np.float32))
    (a @ b.T).retrieve()
    compile_fake(g, fake_cupy)
    g.execute()
    gemms = [op for op in fake_cupy.log if op[0] == "gemm"]
    assert len(gemms) == 1
    _, transa, transb, m, n, k = gemms[0]
    assert (m, n, k) == (4, 3, 5) and transa == 1 and transb == 0


def test_cuda_assignment_stays_on_device(fake_cupy):
    g = lm.Graph()
    cache = g.tensor((1, "past", 2), name="cache")
    new = g.tensor((1, 1, 2), name="new")
    grown = lm.cat([cache, new], dim=1)
    g.assign(cache, grown)
    grown.sum().retrieve()
    rt = compile_fake(g, fake_cupy)
    cache.set(np.zeros((1, 0, 2), np.float32))
    new.set(np.ones((1, 1, 2), np.float32))
    g.execute()
    first = g.data[cache.id]
    assert isinstance(first, DeviceArray) and first.shape == (1, 1, 2)
    g.set_dim("past", 1)
    fake_cupy.clear()
    g.execute()
    assert data_uploads(fake_cupy, rt) == []  # the cache was not re-uploaded
    assert any(op[0] == "preserve" for op in fake_cupy.log)  # it grew, keeping its contents
    with pytest.raises(StaleDeviceArrayError):
        first.numpy()
    assert g.data[cache.id].shape == (1, 2, 2)


def test_gemm_function_of_a_stand_in_is_its_own_wrapper(fake_cupy):
    # the direct ctypes path is only for the real CuPy, whose handle libcublas accepts
    from luminal_cuda.cublas import gemm_function

    assert gemm_function(fake_cupy) is fake_cupy.cuda.cublas.gemmStridedBatchedEx

