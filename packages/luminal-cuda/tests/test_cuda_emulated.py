"""The whole CUDA backend, executed by the CPU emulator of the generated kernels (see
`emulator.py`): conformance cases, fused attention, KV-cache decode, half precision,
quantized matmuls, block reductions and CUDA-graph replay, against the reference backend."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.testing import get_case, run_case
from luminal_cuda import CudaBackend

# one or two cases per kind of kernel: elementwise, reductions (thread and block mode), views,
# gathers, matmuls (cuBLAS and fallback), integers and booleans, symbolic dims, float16
CASES = [
    ("exp", "base"), ("add", "broadcast"), ("where", "base"), ("mod", "base"),
    ("int_floordiv", "base"), ("bool_xor", "base"), ("float_to_int", "base"),
    ("sum_dim", "permuted"), ("max_dim", "base"), ("max_dim", "symbolic"), ("argmax_dim", "base"),
    ("softmax", "strided"), ("log_softmax", "padded"), ("var_dim", "base"), ("cumsum", "base"),
    ("permute_reshape", "base"), ("sum_int", "base"), ("softmax", "float16"), ("add", "float16"),
]


@pytest.mark.parametrize(("case", "variant"), CASES, ids=[f"{c}-{v}" for c, v in CASES])
def test_cuda_emulated_conformance(emulated_cuda, case, variant):
    if variant not in get_case(case).variants():
        pytest.skip(f"{case} has no variant {variant}")
    run_case(case, CudaBackend(), variant)


def both(build, feeds, backend=None, rtol=1e-4, atol=1e-5):
    """Run on the emulated CUDA backend and on the reference; compare every output."""
    def run(compilers):
        g = lm.Graph()
        inputs, outputs = build(g)
        g.compile(compilers)
        results = []
        for feed in feeds:
            for t, value in zip(inputs, feed):
                t.set(value)
            g.execute()
            results.append([np.array(o.numpy()) for o in outputs])
        return g, results

    g, got = run((lm.GenericCompiler(), backend or CudaBackend()))
    _, want = run(lm.GenericCompiler())
    for g_outs, w_outs in zip(got, want):
        for a, b in zip(g_outs, w_outs):
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol,
                                       atol=atol)
    return g


def mlp(g):
    rng = np.random.default_rng(1)
    x = g.tensor(("seq", 32), name="x")
    w1 = g.tensor((32, 48), name="w1").set(rng.standard_normal((32, 48)).astype(np.float32) / 6)
    w2 = g.tensor((16, 48), name="w2").set(rng.standard_normal((16, 48)).astype(np.float32) / 6)
    y = F.rms_norm((x @ w1).silu() @ w2.T, (16,)).softmax(-1).retrieve()
    return [x], [y]


def feeds_of(*seqs, width=32, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal((s, width)).astype(np.float32)] for s in seqs]


def test_cuda_emulated_graph_replay_and_dims(emulated_cuda):
    g = both(mlp, feeds_of(3, 3, 3, 20, 20, 20, 3, seed=2))
    assert g.runtime.stats["replayed"] >= 2 and g.runtime.stats["captured"] >= 2


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_emulated_half_precision(emulated_cuda, dtype):
    both(mlp, feeds_of(4, 2), backend=CudaBackend(dtype=dtype), rtol=5e-2, atol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_emulated_fused_attention(emulated_cuda, causal):
    def build(g):
        q, k, v = (g.tensor((1, 2, "seq", 16), name=n) for n in "qkv")
        return [q, k, v], [F.scaled_dot_product_attention(q, k, v, is_causal=causal).retrieve()]

    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal((1, 2, s, 16)).astype(np.float32) for _ in range(3)]
             for s in (3, 40)]
    g = both(build, feeds)
    assert "lm_dot" in g.runtime.module.source


def test_cuda_emulated_attention_with_mask(emulated_cuda):
    def build(g):
        q, k, v = (g.tensor(s, name=n) for n, s in
                   (("q", (2, 5, 8)), ("k", (2, 7, 8)), ("v", (2, 7, 6))))
        m = g.tensor((5, 7), name="m", dtype="bool")
        return [q, k, v, m], [F.scaled_dot_product_attention(q, k, v, attn_mask=m).retrieve()]

    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 8), (2, 7, 8), (2, 7, 6))]
             + [rng.random((5, 7)) < 0.7]]
    feeds[0][3][:, 0] = True  # every query sees at least one key
    g = both(build, feeds)
    assert "lm_dot" in g.runtime.module.source


def test_cuda_emulated_kv_cache_decode(emulated_cuda):
    nn = pytest.importorskip("luminal_nn")

    def run_steps(compilers):
        g = lm.Graph()
        att = nn.MultiHeadAttention(32, 4, 2, rope=nn.RotaryEmbedding(8))
        for seed, (_, p) in enumerate(att.named_parameters()):
            p.data = np.random.default_rng(seed).standard_normal(p.shape).astype(np.float32) / 6
        cache = nn.KVCache(g, 1, 1, 2, 8)
        x = g.tensor((1, "seq", 32), name="x")
        y = att(x, cache[0]).retrieve()
        g.compile(compilers)
        rng = np.random.default_rng(3)
        outs = []
        for s in (5, 1, 1, 1):
            x.set(rng.standard_normal((1, s, 32)).astype(np.float32))
            g.execute()
            outs.append(y.numpy().copy())
            cache.advance(s)
        return g, outs

    g, got = run_steps((lm.GenericCompiler(), CudaBackend()))
    _, want = run_steps(lm.GenericCompiler())
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert "lm_dot" in g.runtime.module.source


def _q8_0(w):
    blocks = w.reshape(w.shape[0], -1, 32)
    d = np.abs(blocks).max(-1, keepdims=True) / 127
    q = np.round(blocks / np.where(d == 0, 1, d)).astype(np.int8)
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], -1)
    return out.reshape(w.shape[0], -1)


def _q4_1(w):
    blocks = w.reshape(w.shape[0], -1, 32)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    d = (hi - lo) / 15
    q = np.clip(np.round((blocks - lo) / np.where(d == 0, 1, d)), 0, 15).astype(np.uint8)
    head = np.concatenate([d.astype(np.float16).view(np.uint8),
                           lo.astype(np.float16).view(np.uint8)], -1)
    return np.concatenate([head, q[..., :16] | (q[..., 16:] << 4)], -1).reshape(w.shape[0], -1)


def _quantized_matmul(raw: np.ndarray, qtype: str, seq: int, cols: int,
                      rng: np.random.Generator, atol: float) -> None:
    """x (seq, cols) @ W.T for W (40, cols) stored as `raw` blocks of `qtype`, on the emulated
    GPU against the reference backend (which runs core's decomposition of the format)."""
    from luminal import quant

    def build(g):
        x = g.tensor(("seq", cols), name="x")
        r = g.tensor(raw.shape, name="w", dtype="uint8").set(raw)
        return [x], [(x @ quant.dequantize(r, qtype, (40, cols)).T).retrieve()]

    g = both(build, [[rng.standard_normal((seq, cols)).astype(np.float32)]], rtol=1e-4,
             atol=atol)
    assert "_qmv" in g.runtime.module.source


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize(("seq", "cols"), [(1, 64), (1, 1280), (12, 64)])  # qmatvec (one lane
# per block, 40 blocks: lanes loop), then dequantize + cuBLAS
def test_cuda_emulated_quantized_matmul(emulated_cuda, qtype, seq, cols):
    """Weights quantized from real values (Q4_0 as random blocks)."""
    from luminal.testing.quant import random_blocks

    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, cols)).astype(np.float32)
    quantize = {"q8_0": _q8_0, "q4_1": _q4_1}.get(qtype)
    raw = quantize(w) if quantize else random_blocks(qtype, 40, cols, rng)
    _quantized_matmul(raw, qtype, seq, cols, rng, atol=1e-3)


@pytest.mark.parametrize("qtype", ["q5_0", "q4_k", "q5_k", "q6_k"])
@pytest.mark.parametrize(("seq", "cols"), [(1, 512), (1, 1536), (12, 512)])  # qmatvec (48
# chunks of 32: lanes loop), then dequantize + cuBLAS
def test_cuda_emulated_kquant_matmul(emulated_cuda, qtype, seq, cols):
    """Q5_0 and the K-quants as random blocks (every bit pattern); random blocks decode to
    large values, so the relative tolerance decides."""
    from luminal.testing.quant import random_blocks

    rng = np.random.default_rng(1)
    _quantized_matmul(random_blocks(qtype, 40, cols, rng), qtype, seq, cols, rng, atol=1e-2)


def test_cuda_emulated_block_reductions(emulated_cuda):
    def build(g):
        x = g.tensor(("rows", 3000), name="x")
        return [x], [x.softmax(-1).retrieve(), x.amax(-1).retrieve(),
                     x.to(lm.int32).sum(-1).retrieve()]

    rng = np.random.default_rng(0)
    both(build, [[(rng.standard_normal((r, 3000)) * 4).astype(np.float32)] for r in (1, 2)],
         rtol=1e-4, atol=1e-6)
