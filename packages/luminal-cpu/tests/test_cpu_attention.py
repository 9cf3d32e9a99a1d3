"""Prefill attention in the default compile (`attention.fuse`: the seven calls of the
decomposition as one kernel that `flash` tiles) against float64 NumPy: grouped-query heads
(one key/value head for several query heads, and several of them), past keys (a KV cache's
offset), causal and sliding-window masks built in the graph, a data mask with a fully
masked row (NaN, as the decomposition gives), tanh-capped logits, no mask, odd sizes, the
longest head (`flash.HEAD_LIMIT`). Decode (one query) keeps the decomposition.

The fused kernel sums its softmax block by block (online softmax) and takes the weights as
exp2(l * log2(e) - max) rather than exp2((l - max) * log2(e)): the results differ from the
decomposition's in rounding only, bounded here by 2e-5 relative + 2e-6 absolute (outputs
are averages of unit normal values)."""

from __future__ import annotations

import math

import luminal as lm
import numpy as np
import pytest
from luminal_codegen import Kernel, Matmul
from luminal_codegen.ir import SoftmaxSum, walk
from luminal_cpu import CpuBackend, flash
from luminal_cpu.attention import FusedAttention


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, past: int, window: int | None,
              cap: float | None, keep: np.ndarray | None, seq: str | None = None):
    """Graph of softmax(where(mask, q k^T / sqrt(d), -inf)) v as luminal-nn's attention
    writes it: q (kv, rep, s, d) grouped by key/value head, k and v (kv, past + s, d), the
    causal mask (sliding: only the last `window` keys) from the positions, `keep` (s, past +
    s) and-ed into it; `cap`: logits cap * tanh(logit / cap). `seq`: the queries' count as
    this symbolic dim (no past keys), the graph compiled and returned unexecuted with its
    output and inputs."""
    g = lm.Graph()
    if seq is None:
        tq, tk, tv = (g.tensor(a.shape).set(a) for a in (q, k, v))
    else:
        tq, tk, tv = (g.tensor((*a.shape[:-2], seq, a.shape[-1]), name=n)
                      for n, a in zip("qkv", (q, k, v)))
    s = q.shape[-2] if seq is None else tq.shape[-2]
    scores = (tq @ tk.unsqueeze(1).transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if cap is not None:
        scores = (scores * (1.0 / cap)).tanh() * cap
    rows, cols = g.arange(s) + past, g.arange(past + s)
    mask = cols.unsqueeze(0) <= rows.unsqueeze(1)
    if window is not None:
        mask = mask & (cols.unsqueeze(0) > rows.unsqueeze(1) - window)
    if keep is not None:
        mask = mask & g.tensor(keep.shape, dtype=lm.bool).set(keep)
    out = (lm.where(mask, scores, -math.inf).softmax(-1) @ tv.unsqueeze(1)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    if seq is not None:
        return g, (out, tq, tk, tv)
    g.execute()
    return g, np.array(out.numpy())


def reference(q, k, v, past, window, cap, keep) -> np.ndarray:
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q.shape[-2]
    scores = q @ k[:, None].swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if cap is not None:
        scores = np.tanh(scores / cap) * cap
    pos, key = np.arange(s)[:, None] + past, np.arange(past + s)[None, :]
    mask = key <= pos
    if window is not None:
        mask &= key > pos - window
    if keep is not None:
        mask &= keep
    scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        w = np.exp(scores - scores.max(-1, keepdims=True))
        return (w / w.sum(-1, keepdims=True)) @ v[:, None]


def fused(g) -> bool:
    """Whether the program runs attention as one tiled kernel (and no float matmul is left),
    or chooses it at run time (a symbolic query count)."""
    kernels = [k.kernel if isinstance(k, FusedAttention) else k
               for k in g.runtime.program.kernels]
    tiled = [k for k in kernels if isinstance(k, Kernel) and flash.match(k)
             and any(isinstance(x, SoftmaxSum) for x in walk(k.out.value))]
    return bool(tiled) and not any(isinstance(k, Matmul) for k in kernels)


CASES = {
    # kv heads, query heads per kv head, queries, past keys, head size, window, cap
    "one-kv-head": (1, 4, 45, 0, 64, None, None),
    "gqa-past": (2, 3, 37, 50, 80, None, None),
    "sliding": (2, 1, 70, 20, 32, 16, None),
    "sliding-long": (1, 2, 150, 140, 48, 100, None),
    "softcap": (1, 2, 33, 5, 48, None, 4.0),
    "head-limit": (3, 1, 40, 0, flash.HEAD_LIMIT, None, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_attention_is_one_tiled_kernel(case):
    kv, rep, s, past, d, window, cap = CASES[case]
    rng = np.random.default_rng(len(case))
    q = rng.standard_normal((kv, rep, s, d)).astype(np.float32)
    k, v = (rng.standard_normal((kv, past + s, d)).astype(np.float32) for _ in "kv")
    g, got = attention(q, k, v, past, window, cap, None)
    assert fused(g)
    np.testing.assert_allclose(got, reference(q, k, v, past, window, cap, None),
                               rtol=2e-5, atol=2e-6)


def test_a_fully_masked_row_is_nan_as_in_the_decomposition():
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 2, 41, 32)).astype(np.float32)
    k, v = (rng.standard_normal((1, 41, 32)).astype(np.float32) for _ in "kv")
    keep = rng.uniform(size=(41, 41)) < 0.7  # a data mask, random holes
    keep[5] = False  # query 5 sees no key
    keep[:, 40] = True
    g, got = attention(q, k, v, 0, None, None, keep)
    assert fused(g)
    want = reference(q, k, v, 0, None, None, keep)
    assert np.isnan(got[..., 5, :]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_values_that_are_not_finite_reach_every_row_they_weigh():
    """A key a query cannot see still makes its row NaN when its value is infinite (0 * inf,
    as the decomposition's product of weights and values): masked blocks are skipped only
    for finite values."""
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 1, 300, 32)).astype(np.float32)
    k, v = (rng.standard_normal((1, 300, 32)).astype(np.float32) for _ in "kv")
    v[0, 290, 3] = np.inf
    g, got = attention(q, k, v, 0, None, None, None)
    assert fused(g)
    with np.errstate(invalid="ignore"):
        want = reference(q, k, v, 0, None, None, None)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[0, 0, :290, 3]).all() and np.isinf(got[0, 0, 290:, 3]).all()


def test_decode_keeps_the_decomposition():
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 2, 1, 64)).astype(np.float32)
    k, v = (rng.standard_normal((2, 30, 64)).astype(np.float32) for _ in "kv")
    g, got = attention(q, k, v, 29, None, None, None)
    assert not fused(g)
    np.testing.assert_allclose(got, reference(q, k, v, 29, None, None, None),
                               rtol=2e-5, atol=2e-6)


def test_a_symbolic_query_count_runs_few_queries_as_the_decomposition():
    """One compiled call choosing at run time: the decomposition's kernels for 1 and 3
    queries (2 and 6 query rows per key/value head, below `flash.MIN_QUERIES`), tiles for 5
    and 40."""
    rng = np.random.default_rng(10)
    g, (out, *inputs) = attention(np.zeros((2, 2, 1, 64), np.float32),
                                  np.zeros((2, 1, 64), np.float32),
                                  np.zeros((2, 1, 64), np.float32), 0, None, None, None, "seq")
    assert fused(g)
    for s in (40, 1, 3, 5):
        q = rng.standard_normal((2, 2, s, 64)).astype(np.float32)
        k, v = (rng.standard_normal((2, s, 64)).astype(np.float32) for _ in "kv")
        for t, a in zip(inputs, (q, k, v)):
            t.set(a)
        g.execute()
        np.testing.assert_allclose(np.array(out.numpy()), reference(q, k, v, 0, None, None, None),
                                   rtol=2e-5, atol=2e-6)
