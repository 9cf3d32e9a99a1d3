"""The CUDA backend on a real GPU, against the reference backend. Skipped (with the reason)
where no NVIDIA GPU is present; `LUMINAL_REQUIRE_HW=cuda` turns the skips into failures."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.testing import conformance_tests
from luminal_cuda import CudaBackend

pytestmark = pytest.mark.cuda

# every case and variant of the conformance kit, float16 inputs included
test_cuda_conformance = conformance_tests(CudaBackend())


def run(build, compilers, feeds, steps=1):
    """Build a graph with `build(g) -> (inputs, outputs)`, compile, execute once per feed."""
    g = lm.Graph()
    inputs, outputs = build(g)
    g.compile(compilers)
    results = []
    for feed in feeds[:steps] if steps else feeds:
        for t, value in zip(inputs, feed):
            t.set(value)
        g.execute()
        results.append([np.array(o.numpy()) for o in outputs])
    return g, results


def both(build, feeds, backend=None, rtol=1e-4, atol=1e-5):
    """Run on CUDA and on the reference backend; compare every output of every feed."""
    cuda_graph, got = run(build, (lm.GenericCompiler(), backend or CudaBackend()), feeds, 0)
    _, want = run(build, (lm.GenericCompiler(), lm.backend("reference")), feeds, 0)
    for g_outs, w_outs in zip(got, want):
        for a, b in zip(g_outs, w_outs):
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                                       atol=atol)
    return cuda_graph


def mlp(g):
    x = g.tensor(("seq", 64), name="x")
    w1 = g.tensor((64, 128), name="w1").set(np.random.default_rng(1).standard_normal(
        (64, 128)).astype(np.float32) / 8)
    w2 = g.tensor((128, 32), name="w2").set(np.random.default_rng(2).standard_normal(
        (128, 32)).astype(np.float32) / 8)
    y = F.rms_norm((x @ w1).silu() @ w2, (32,)).softmax(-1).retrieve()
    return [x], [y]


def feeds_of(*seqs, width=64, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((s, width)).astype(np.float32)] for s in seqs]


def test_cuda_graph_replay_equals_first_run():
    feed = feeds_of(7)[0]
    g, results = run(mlp, (lm.GenericCompiler(), CudaBackend()), [feed] * 5, 0)
    stats = g.runtime.stats
    assert stats == {"eager": 1, "captured": 1, "replayed": 3}
    for r in results[1:]:
        np.testing.assert_array_equal(r[0], results[0][0])


def test_cuda_changing_dims_stay_correct():
    # grow, shrink, come back: new dims never replay a graph captured for other dims
    g = both(mlp, feeds_of(3, 3, 9, 9, 9, 3, 1, 9, 3, seed=4))
    assert g.runtime.stats["replayed"] >= 2


def test_cuda_new_data_is_uploaded_before_replay():
    feeds = feeds_of(5, 5, 5, 5, seed=7)
    both(mlp, feeds)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_half_precision(dtype):
    both(mlp, feeds_of(6, 6, 2), backend=CudaBackend(dtype=dtype), rtol=5e-2, atol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_fused_attention(causal):
    def build(g):
        q, k, v = (g.tensor((2, 3, "seq", 32), name=n) for n in "qkv")
        return [q, k, v], [F.scaled_dot_product_attention(q, k, v, is_causal=causal).retrieve()]

    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal((2, 3, s, 32)).astype(np.float32) for _ in range(3)]
             for s in (5, 300, 5)]
    g = both(build, feeds, rtol=1e-4, atol=1e-5)
    assert "lm_dot" in g.runtime.module.source  # the fused kernel ran


def test_cuda_decode_with_kv_cache_matches_reference():
    nn = pytest.importorskip("luminal_nn")

    def run_steps(compilers):
        g = lm.Graph()
        att = nn.MultiHeadAttention(64, 4, 2, rope=nn.RotaryEmbedding(16))
        for seed, (_, p) in enumerate(att.named_parameters()):
            p.data = np.random.default_rng(seed).standard_normal(p.shape).astype(
                np.float32) / 8
        cache = nn.KVCache(g, 1, 1, 2, 16)
        x = g.tensor((1, "seq", 64), name="x")
        y = att(x, cache[0]).retrieve()
        g.compile(compilers)
        rng = np.random.default_rng(3)
        outs = []
        for s in (6, 1, 1, 1):
            x.set(rng.standard_normal((1, s, 64)).astype(np.float32))
            g.execute()
            outs.append(y.numpy().copy())
            cache.advance(s)
        return outs

    got = run_steps((lm.GenericCompiler(), CudaBackend()))
    want = run_steps((lm.GenericCompiler(), lm.backend("reference")))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _q8_0(w: np.ndarray) -> np.ndarray:
    blocks = w.reshape(w.shape[0], -1, 32)
    d = np.abs(blocks).max(-1, keepdims=True) / 127
    q = np.round(blocks / np.where(d == 0, 1, d)).astype(np.int8)
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], -1)
    return out.reshape(w.shape[0], -1)


def _q4_1(w: np.ndarray) -> np.ndarray:
    blocks = w.reshape(w.shape[0], -1, 32)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    d = (hi - lo) / 15
    q = np.clip(np.round((blocks - lo) / np.where(d == 0, 1, d)), 0, 15).astype(np.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)
    head = np.concatenate([d.astype(np.float16).view(np.uint8),
                           lo.astype(np.float16).view(np.uint8)], -1)
    return np.concatenate([head, packed], -1).reshape(w.shape[0], -1)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_1"])
@pytest.mark.parametrize("seq", [1, 3, 40])  # qmatvec for few rows, dequantize + cuBLAS beyond
def test_cuda_quantized_matmul(qtype, seq):
    quant = pytest.importorskip("luminal.quant")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 128)).astype(np.float32)
    raw = (_q8_0 if qtype == "q8_0" else _q4_1)(w)

    def build(g):
        x = g.tensor(("seq", 128), name="x")
        r = g.tensor(raw.shape, name="w", dtype="uint8").set(raw)
        return [x], [(x @ quant.dequantize(r, qtype, (96, 128)).T).retrieve()]

    feeds = [[rng.standard_normal((seq, 128)).astype(np.float32)]]
    g = both(build, feeds, rtol=1e-4, atol=1e-4)
    assert "_qmv" in g.runtime.module.source


@pytest.mark.parametrize("qtype", ["q4_0", "q5_0", "q4_k", "q5_k", "q6_k"])
@pytest.mark.parametrize(("seq", "cols"), [(1, 2560), (8, 2560), (1, 9216), (40, 2560)])
def test_cuda_block_quant_matmul(qtype, seq, cols):
    """Q4_0, Q5_0 and the K-quants as random blocks (every bit pattern) at model sizes: the
    warp-per-column matvec with x staged in shared memory (2560 columns) or read from global
    memory (9216, past STAGED_MAX_K), up to its 8 rows, then dequantize + cuBLAS (40 rows).
    Against float64 products of the reference backend's decoding: random blocks decode to
    values up to 1e5 whose products cancel, so each output's error is bounded relative to
    the sum of its terms' magnitudes (float32 accumulation over `cols` terms)."""
    from luminal import quant
    from luminal.testing.quant import random_blocks

    rng = np.random.default_rng(1)
    raw = random_blocks(qtype, 512, cols, rng)
    x = rng.standard_normal((seq, cols)).astype(np.float32)
    decoded = lm.Graph()
    w = quant.dequantize(decoded.tensor(raw.shape, dtype="uint8").set(raw), qtype, (512, cols))
    w = w.retrieve()
    decoded.compile((lm.GenericCompiler(), lm.backend("reference")))
    decoded.execute()
    w = np.asarray(w.numpy(), np.float64)

    def build(g):
        xt = g.tensor(("seq", cols), name="x")
        r = g.tensor(raw.shape, name="w", dtype="uint8").set(raw)
        return [xt], [(xt @ quant.dequantize(r, qtype, (512, cols)).T).retrieve()]

    g, ((got,),) = run(build, (lm.GenericCompiler(), CudaBackend()), [[x]])
    assert "_qmv" in g.runtime.module.source
    error = np.abs(got - x.astype(np.float64) @ w.T)
    assert (error <= 1e-5 * (np.abs(x.astype(np.float64)) @ np.abs(w).T)).all(), error.max()


def test_cuda_long_softmax_block_reduction():
    def build(g):
        x = g.tensor(("rows", 50000), name="x")
        return [x], [x.softmax(-1).retrieve(), x.amax(-1).retrieve()]

    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal((r, 50000)).astype(np.float32) * 4] for r in (1, 3)]
    both(build, feeds, rtol=1e-4, atol=1e-7)
