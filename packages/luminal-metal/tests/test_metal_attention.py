"""Fused attention on the Metal kernels: luminal-search derives attention (and any
softmax-weighted sum) from luminal's primitives into one online-softmax kernel (`ir.SoftmaxSum`)
and hands it to the backend through `Schedule.kernels`.

Each check renders that kernel as MSL, compiles it with clang++ against the stand-in header and
runs it as C++ on the CPU (see msl_cpu.py: a syntax, type and arithmetic check, not Metal
verification), once as `MetalBackend` renders it, once one thread per point, and once through
`MetalBackend` itself on `fake_metal`'s emulated device; on Apple silicon also on the GPU
(marked `metal`). The results are compared with PyTorch's `scaled_dot_product_attention` and
with the reference backend running the primitive decomposition.
"""

from __future__ import annotations

import math

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal_codegen import Kernel, Schedule, lower, row_softmax
from luminal_codegen.ir import SoftmaxSum, walk
from luminal_metal import MetalBackend
from luminal_metal.dialect import render_metal_kernel
from luminal_metal_tests_msl_cpu import CpuMetalBackend

search = pytest.importorskip("luminal_search", reason="fused attention comes from luminal-search")
from luminal_search import fusion  # noqa: E402
from luminal_search.regions import find_regions  # noqa: E402


@pytest.fixture(params=["metal", "thread", "emulated-device",
                        pytest.param("device", marks=pytest.mark.metal)])
def backend(request: pytest.FixtureRequest) -> lm.Backend:
    if request.param == "device":
        return MetalBackend()
    if request.param == "emulated-device":
        request.getfixturevalue("emulated_metal")
        return MetalBackend()
    request.getfixturevalue("msl")  # skips without clang++
    return CpuMetalBackend(request.param)


def derived_schedule(g: lm.Graph) -> tuple[Schedule, Kernel]:
    """The schedule computing the graph's first fused region with the kernel luminal-search
    derives for it in its e-graph."""
    (fused, *_) = fusion.find_fusions(g, find_regions(g))
    derived = fusion.derive(g, fused, {})
    assert derived is not None, "luminal-search derived no kernel for the fused region"
    params = tuple(g.resolve(fused.nodes[p]) for p in derived.params)
    return Schedule(kernels={params[0]: (derived.kernel, params)}), derived.kernel


def attention_graph(queries: int, keys: int, heads: int, kv_heads: int, head_dim: int = 16):
    """Causal attention (the mask aligned to the last key, as in a decode step) with grouped
    key/value heads, written with luminal's primitives; and PyTorch's result for the data."""
    import torch

    rng = np.random.default_rng(queries * 1000 + keys)
    arrays = {"q": rng.standard_normal((1, heads, queries, head_dim)),
              "k": rng.standard_normal((1, kv_heads, keys, head_dim)),
              "v": rng.standard_normal((1, kv_heads, keys, head_dim)),
              "mask": np.triu(np.full((queries, keys), -np.inf), keys - queries + 1)}
    arrays = {n: a.astype(np.float32) for n, a in arrays.items()}
    g = lm.Graph()
    q, k, v, mask = (g.tensor(a.shape, name=n).set(a) for n, a in arrays.items())
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).retrieve()
    t = {n: torch.from_numpy(a) for n, a in arrays.items()}
    want = torch.nn.functional.scaled_dot_product_attention(
        t["q"], t["k"], t["v"], attn_mask=t["mask"], enable_gqa=True).numpy()
    return g, out, want


ATTENTION = {"prefill": (24, 24, 2, 2), "gqa": (12, 12, 4, 2), "decode-gqa": (1, 160, 6, 2)}


@pytest.mark.parametrize("shape", list(ATTENTION))
def test_derived_attention_runs_on_the_metal_kernels(backend, shape):
    """In "metal" rendering prefill runs one thread per row of queries, decode (one query,
    160 keys) one threadgroup per output splitting the keys (`_GroupWriter.softmax_sum`)."""
    queries, keys, heads, kv_heads = ATTENTION[shape]
    g, out, want = attention_graph(queries, keys, heads, kv_heads)
    lm.GenericCompiler().compile(g)
    schedule, kernel = derived_schedule(g)
    assert any(isinstance(v, SoftmaxSum) for v in walk(kernel.out.value))
    program = lower(g, schedule)
    assert program.kernels == [kernel]  # one kernel, no queries x keys matrix stored
    g.compile(backend.with_schedule(schedule))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def softmax_weighted_graph(rows: np.ndarray, values: np.ndarray, scale: float):
    """sum_n softmax_n(x * scale) * b[n, :] written with the primitives' decomposition."""
    g = lm.Graph()
    x = g.tensor(rows.shape, name="x").set(rows)
    b = g.tensor(values.shape, name="b").set(values)
    z = x * scale
    w = (z - z.amax(-1, keepdim=True)).exp2()
    out = ((w @ b) * w.sum(-1, keepdim=True).reciprocal()).retrieve()
    return g, out


def special_rows(n: int) -> np.ndarray:
    """Logit rows with a NaN, a +inf, all -inf, half -inf, one dominant logit, all equal."""
    rows = np.random.default_rng(0).standard_normal((8, n)).astype(np.float32) * 4
    rows[1, 3], rows[2, 5], rows[3, :], rows[4, ::2] = np.nan, np.inf, -np.inf, -np.inf
    rows[5, 7], rows[6, :] = 1e30, 60.0
    return rows


def check_softmax_sum(backend: lm.Backend, width: int) -> None:
    """The derived kernel of a softmax-weighted sum of `width` columns over special rows gives
    the reference backend's numbers, NaN pattern included."""
    rows = special_rows(40)
    values = np.random.default_rng(1).standard_normal((40, width)).astype(np.float32)
    values[9, 1], values[10, 2] = np.inf, np.nan  # inf weighted by 0 in rows 3, 4: NaN
    want_g, want = softmax_weighted_graph(rows, values, 0.7)
    want_g.compile((lm.GenericCompiler(), lm.backend("cpu")))
    want_g.execute()

    g, out = softmax_weighted_graph(rows, values, 0.7)
    lm.GenericCompiler().compile(g)
    schedule, kernel = derived_schedule(g)
    assert (row_softmax(kernel) is not None) == (width == 6)
    g.compile(backend.with_schedule(schedule))
    g.execute()
    got, expected = out.numpy(), want.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("width", [6, 300], ids=["row-wise", "per-point"])
def test_softmax_sum_keeps_the_decompositions_nan_and_inf(backend, width):
    check_softmax_sum(backend, width)


def test_softmax_sum_split_over_a_threadgroup_keeps_nan_and_inf(msl):
    """Every `SoftmaxSum` in its threadgroup form (64-thread groups: two simdgroups), so the
    rows' -inf, NaN and dominant logits land in different threads' shares."""
    check_softmax_sum(msl.CpuMetalBackend("cooperative"), 6)


def test_derived_kernels_compile_as_msl(msl):
    """Row-wise and per-point `SoftmaxSum` kernels, float32 and float16 buffers, through
    `clang++ -fsyntax-only`; a row-wise kernel runs one thread per row of outputs."""
    kernels = []
    for shape in ATTENTION.values():
        g, _, _ = attention_graph(*shape)
        lm.GenericCompiler().compile(g)
        kernels.append(derived_schedule(g)[1])
    for width in (6, 300):
        g, _ = softmax_weighted_graph(special_rows(40), np.ones((40, width), np.float32), 0.7)
        lm.GenericCompiler().compile(g)
        kernels.append(derived_schedule(g)[1])
    assert msl.syntax_check(kernels) == len(kernels)
    prefill = kernels[0]
    assert row_softmax(prefill) is not None
    rendered = render_metal_kernel(prefill, "k0")
    assert not rendered.threadgroup
    assert rendered.points.evaluate({}) == math.prod(e.value for e in prefill.domain[:-1])
    assert "precise::exp2" in rendered.source
    decode = render_metal_kernel(kernels[2], "k2")  # 1 query, 160 keys: split over a group
    assert decode.threadgroup and "lm_tg_max" in decode.source


@pytest.mark.parametrize("where", ["cpu", pytest.param("device", marks=pytest.mark.metal)])
def test_search_checks_and_times_the_derived_kernel_on_the_metal_kernels(
        where, request, monkeypatch, tmp_path):
    """`Search` over the Metal kernels (on Linux run on the CPU, so which plan wins there says
    nothing about a GPU): decode attention's fused region gets the derived kernel as a
    candidate, which compiles through the backend's schedule, agrees with the reference on
    random and NaN/inf inputs and is timed against the default plan; the searched graph
    matches PyTorch."""
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    g, out, want = attention_graph(1, 128, 4, 2)
    if where == "device":
        backend = MetalBackend()
    else:
        backend = request.getfixturevalue("msl").CpuMetalBackend("thread")
    searched = search.Search(backend, progress=False)
    g.compile((lm.GenericCompiler(), searched))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    region = searched.report.regions[0]
    assert region.label.startswith("fusion of") and not region.rejected
    timed = [label for label, _ in region.timings]
    assert len(timed) == 2 and timed[1].startswith("one kernel from the e-graph")
