"""Representative graphs on the OpenCL device against the reference backend, and the runtime's
promises: one compiled graph for every value of a symbolic dim, uploads only when data changes,
assignments that stay on the device, buffers shared by liveness."""

from __future__ import annotations

from collections.abc import Callable

import luminal as lm
import numpy as np
import pytest
from luminal import quant
from luminal.device_array import DeviceArray
from luminal.reference import ReferenceBackend
from luminal_codegen import Matmul, QuantOperand, lower
from luminal_rocm.device import open_device
from luminal_rocm.matmul import QUANT_KERNELS

cl = pytest.importorskip("pyopencl", reason="pyopencl is not installed")

Builder = Callable[[lm.Graph], tuple[list[lm.GraphTensor], list[lm.GraphTensor]]]


def run(build: Builder, backend, datas: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Build, compile once with `backend`, execute once per data set; the outputs per run."""
    g = lm.Graph()
    inputs, outputs = build(g)
    for o in outputs:
        o.retrieve()
    g.compile((lm.GenericCompiler(), backend))
    runtime = g.runtime
    results = []
    for data in datas:
        for t, x in zip(inputs, data):
            t.set(x)
        g.execute()
        assert g.runtime is runtime
        results.append([np.array(o.numpy()) for o in outputs])
    return results


def check(build: Builder, backend, datas, atol=1e-5, rtol=1e-5) -> None:
    got = run(build, backend, datas)
    want = run(build, ReferenceBackend(), datas)
    for g_run, w_run in zip(got, want):
        for g_out, w_out in zip(g_run, w_run):
            assert g_out.shape == w_out.shape and g_out.dtype == w_out.dtype
            np.testing.assert_allclose(g_out.astype(np.float64), w_out.astype(np.float64),
                                       atol=atol, rtol=rtol)


rng = np.random.default_rng(0)


def normal(*shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def test_rocm_fused_views_and_symbolic_dims(opencl_backend):
    """Permuted, sliced, padded and broadcast reads in one fused chain, at two dim values."""

    def build(g):
        x = g.tensor(("s", 6), name="x")
        b = g.tensor((6,), name="b")
        v = x.T[::2].pad((0, 2, 1, 0))  # (4, s + 2): strided, permuted and padded
        y = (v.exp() * 0.5 + b[:4].unsqueeze(1)).sin()
        return [x, b], [y, y.sum(1), y.amax(0), (x - x.mean(1, keepdim=True)).relu()]

    check(build, opencl_backend, [[normal(5, 6), normal(6)], [normal(9, 6), normal(6)]])


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_rocm_half_precision(opencl_backend, half):
    """Half inputs through elementwise ops, a reduction, a matmul, casts and half outputs."""

    def build(g):
        x = g.tensor(("s", 32), name="x", dtype=half)
        w = g.tensor((32, 16), name="w", dtype=half)
        h = (x @ w).softmax(-1)
        return [x, w], [h, (x * 2).sqrt().sum(-1), x.to("float32").exp(), h.to(half)]

    npt = np.dtype(lm.dtypes.dtype_of(half).numpy)
    datas = [[np.abs(normal(n, 32)).astype(npt), normal(32, 16).astype(npt)] for n in (3, 20)]
    check(build, opencl_backend, datas, atol=1e-2, rtol=1e-2)


@pytest.fixture(params=["cpu", "gpu"])
def family(request, opencl_backend, monkeypatch) -> str:
    """Both matmul kernel families run on whatever device is here (see luminal_rocm.matmul)."""
    monkeypatch.setattr(open_device(), "matmul_cpu", request.param == "cpu")
    return request.param


@pytest.mark.parametrize(("m", "n", "k"), [(1, 96, 64), (3, 70, 33), (70, 50, 33), (128, 64, 80)])
@pytest.mark.parametrize("layout", ["x@W", "x@W.T"])
def test_rocm_matmul(opencl_backend, family, m, n, k, layout):
    """GEMV (few rows) and GEMM (edges not multiples of the blocks), both B layouts."""

    def build(g):
        x = g.tensor((m, k), name="x")
        if layout == "x@W":
            w = g.tensor((k, n), name="w")
            return [x, w], [x @ w]
        w = g.tensor((n, k), name="w")
        return [x, w], [x @ w.T]

    w_shape = (k, n) if layout == "x@W" else (n, k)
    check(build, opencl_backend, [[normal(m, k), normal(*w_shape)]], atol=1e-4, rtol=1e-4)


def test_rocm_matmul_symbolic_rows_switch_kernels(opencl_backend, family):
    """One compiled graph runs decode (1 row: GEMV) and prefill (37 rows: GEMM), batched, with
    a transposed right operand, in float16 too."""

    def build(g):
        q = g.tensor((2, "seq", 16), name="q")
        kT = g.tensor((2, 16, 24), name="k")
        h = g.tensor(("seq", 40), name="h", dtype="float16")
        w = g.tensor((24, 40), name="w", dtype="float16")
        return [q, kT, h, w], [q @ kT, (q @ kT.transpose(1, 2).transpose(1, 2)).relu(), h @ w.T]

    datas = [[normal(2, s, 16), normal(2, 16, 24), normal(s, 40, dtype=np.float16),
              normal(24, 40, dtype=np.float16)] for s in (1, 37, 2)]
    check(build, opencl_backend, datas, atol=2e-3, rtol=2e-3)


def test_rocm_matmul_stored_through_a_permute(opencl_backend, family):
    """A batched product whose heads are merged right after (attention's `(p @ v)
    .transpose(1, 2).flatten(2)`) is stored at a permuted offset and row stride: every kernel
    (GEMV for one row, GEMM for many, both B layouts) writes there."""

    def build(g):
        p = g.tensor((1, 3, "seq", 20), name="p")
        v = g.tensor((1, 3, 20, 16), name="v")
        vt = g.tensor((1, 3, 16, 20), name="vt")
        return [p, v, vt], [(p @ v).transpose(1, 2).flatten(2),
                            (p @ vt.transpose(-1, -2)).transpose(1, 2).flatten(2)]

    datas = [[normal(1, 3, s, 20), normal(1, 3, 20, 16), normal(1, 3, 16, 20)] for s in (1, 37)]
    check(build, opencl_backend, datas, atol=1e-4, rtol=1e-4)


def random_quant(qtype: str, rows: int, cols: int) -> np.ndarray:
    """Valid GGUF bytes with random weights and finite scales, shape (rows, row_bytes)."""
    size = quant.BLOCK_BYTES[qtype]
    raw = rng.integers(0, 256, (rows, cols // 32, size), dtype=np.uint8)
    raw[..., 0:2] = rng.uniform(-0.1, 0.1, (rows, cols // 32, 1)).astype(np.float16).view(np.uint8)
    if qtype == "q4_1":
        raw[..., 2:4] = rng.uniform(-1, 1, (rows, cols // 32, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_rocm_quantized_matmul(opencl_backend, family, qtype, layout):
    """`luminal.quant.dequantize` weights become a quantized matmul kernel, for decode (1 row)
    and prefill (6 rows) in one graph, equal to the reference's primitive decomposition."""
    shape = (64, 96) if layout == "x@W.T" else (96, 64)  # (n, k) or (k, n)

    def build(g):
        x = g.tensor(("m", 96), name="x")
        raw = g.tensor((shape[0], quant.row_bytes(qtype, shape[1])), name="w", dtype="uint8")
        w = quant.dequantize(raw, qtype, shape)
        return [x, raw], [x @ w.T if layout == "x@W.T" else x @ w]

    g = lm.Graph()
    _, (out,) = build(g)
    out.retrieve()
    lm.GenericCompiler().compile(g)
    assert any(isinstance(kern, Matmul) and isinstance(kern.b, QuantOperand)
               for kern in lower(g, quant_kernels=QUANT_KERNELS).kernels)
    raw = random_quant(qtype, *shape)
    check(build, opencl_backend, [[normal(m, 96), raw] for m in (1, 6)], atol=1e-3, rtol=1e-4)


def test_rocm_int_and_bool(opencl_backend):
    def build(g):
        i = g.tensor((4, 5), name="i", dtype="int32")
        f = g.tensor((4, 5), name="f")
        mask = f > 0
        return [i, f], [(i * 3 + i.T.T) % 7, lm.where(mask, i, -i), mask, i.sum(0)]

    check(build, opencl_backend, [[rng.integers(-9, 9, (4, 5)).astype(np.int32), normal(4, 5)]])


def _cache_graph(g):
    cache = g.tensor((1, "past", 4), name="cache")
    new = g.tensor((1, "seq", 4), name="new")
    full = lm.cat([cache, new * 2], dim=1)
    g.assign(cache, full)
    return cache, new, full.sum(1).retrieve()


def test_rocm_assign_stays_on_device(opencl_backend):
    """A growing KV-cache-style input: the assigned value is handed over as a DeviceArray, read
    by the next run without a host round trip, and equal to the reference's."""
    results = {}
    for name, backend in (("rocm", opencl_backend), ("reference", ReferenceBackend())):
        g = lm.Graph()
        cache, new, total = _cache_graph(g)
        g.compile((lm.GenericCompiler(), backend))
        cache.set(np.zeros((1, 0, 4), np.float32))
        sums = []
        for step in range(3):
            new.set(np.full((1, 2, 4), step + 1, np.float32))
            g.execute()
            g.set_dim("past", g.dims["past"] + 2)
            sums.append(total.numpy().copy())
        results[name] = (sums, np.asarray(g.data[cache.id]))
        if name == "rocm":
            assert isinstance(g.data[cache.id], DeviceArray)
    (got_sums, got_cache), (want_sums, want_cache) = results["rocm"], results["reference"]
    np.testing.assert_array_equal(got_cache, want_cache)
    for a, b in zip(got_sums, want_sums):
        np.testing.assert_array_equal(a, b)


def test_rocm_device_array_keeps_its_run(opencl_backend):
    g = lm.Graph()
    cache, new, _ = _cache_graph(g)
    g.compile((lm.GenericCompiler(), opencl_backend))
    cache.set(np.zeros((1, 0, 4), np.float32))
    new.set(np.ones((1, 1, 4), np.float32))
    g.execute()
    first = g.data[cache.id]
    g.set_dim("past", 1)
    g.execute()
    g.set_dim("past", 2)
    np.testing.assert_array_equal(np.asarray(first), np.full((1, 1, 4), 2, np.float32))
    np.testing.assert_array_equal(cache.numpy(), np.full((1, 2, 4), 2, np.float32))


def test_rocm_uploads_only_changed_inputs(opencl_backend, monkeypatch):
    g = lm.Graph()
    w = g.tensor((64, 64), name="w").set(normal(64, 64))
    x = g.tensor((1, 64), name="x").set(normal(1, 64))
    y = (x @ w).retrieve()
    g.compile((lm.GenericCompiler(), opencl_backend))
    uploads = []
    real = cl.enqueue_copy

    def spy(queue, dest, src, **kw):
        if isinstance(dest, cl.Buffer) and isinstance(src, np.ndarray):
            uploads.append(src.nbytes)
        return real(queue, dest, src, **kw)

    monkeypatch.setattr(cl, "enqueue_copy", spy)
    g.execute()
    assert sorted(uploads) == [64 * 4, 64 * 64 * 4]
    uploads.clear()
    g.execute()
    assert uploads == []
    x.set(normal(1, 64))
    g.execute()
    assert uploads == [64 * 4]
    np.testing.assert_allclose(y.numpy(), g.data[x.id] @ g.data[w.id], rtol=1e-5, atol=1e-5)


def test_rocm_temporaries_share_buffers(opencl_backend):
    """A chain of reductions: every intermediate is materialised, but liveness lets them
    share a few buffers."""
    g = lm.Graph()
    x = g.tensor((256, 256), name="x").set(normal(256, 256))
    y = x
    for _ in range(8):
        y = (y - y.amax(1, keepdim=True)).exp() + 1
    y.retrieve()
    g.compile((lm.GenericCompiler(), opencl_backend))
    g.execute()
    matrix = 256 * 256 * 4
    assert g.runtime.allocated_bytes < 6 * matrix  # 8 steps unplanned would need > 16
    want = run(lambda g2: ([x2 := g2.tensor((256, 256))], [_chain(x2)]), ReferenceBackend(),
               [[g.data[x.id]]])[0][0]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def _chain(y):
    for _ in range(8):
        y = (y - y.amax(1, keepdim=True)).exp() + 1
    return y


def test_rocm_splits_kernels_beyond_the_parameter_space(opencl_backend):
    """More inputs summed than the device's kernel parameter space holds (8 bytes each):
    the lowering splits the sum into kernels that fit, with the reference's result."""
    limit = open_device(opencl_backend.device_spec).max_kernel_args
    count = limit + 10

    def build(g):
        xs = [g.tensor((3,), name=f"x{i}") for i in range(count)]
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return xs, [total]

    check(build, opencl_backend, [[normal(3) for _ in range(count)]], rtol=1e-4)
