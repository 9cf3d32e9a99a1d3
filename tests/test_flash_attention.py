"""Tiled attention end to end (luminal-search derives the streaming kernel from attention's
primitives, luminal-cpu renders it in flash tiles) against PyTorch's
`scaled_dot_product_attention`: head sizes 32/64/80/128 (80 pads its rows of values), ragged
tiles (query and key counts that are not multiples of 16, 32 or 64), dense and masked (-inf,
-1e9), grouped-query heads, a symbolic sequence length, NaN and infinities. The micro-kernels
alone are tested in `packages/luminal-cpu/tests/test_cpu_flash.py`."""

from __future__ import annotations

import math

import luminal as lm
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from luminal_codegen import Schedule  # noqa: E402
from luminal_cpu import flash  # noqa: E402
from luminal_search import fusion  # noqa: E402
from luminal_search.regions import find_regions  # noqa: E402


def tiled(g: lm.Graph) -> lm.Graph:
    """`g` compiled for the cpu backend with the kernel search derives for its attention."""
    lm.GenericCompiler().compile(g)
    region = fusion.find_fusions(g, find_regions(g))[0]
    derived = fusion.derive(g, region, {})
    assert derived is not None
    params = tuple(g.resolve(region.nodes[p]) for p in derived.params)
    g.compile(lm.backend("cpu").with_schedule(
        Schedule(kernels={params[0]: (derived.kernel, params)})))
    assert [k for k in g.runtime.program.kernels if flash.match(k)], "not rendered in tiles"
    return g


def attention(arrays: dict, seq_dim: str | None = None):
    """softmax(q @ k^T / sqrt(d) + mask) @ v from luminal's primitives; k and v may have fewer
    heads than q (grouped-query: each shared by consecutive query heads)."""
    g = lm.Graph()

    def shape(a: np.ndarray) -> tuple:
        return a.shape if seq_dim is None else (*a.shape[:-2], seq_dim, a.shape[-1])

    q, k, v = (g.tensor(shape(arrays[n]), name=n).set(arrays[n]) for n in "qkv")
    rep = arrays["q"].shape[1] // arrays["k"].shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(arrays["q"].shape[-1]))
    if "mask" in arrays:
        scores = scores + g.tensor(arrays["mask"].shape, name="mask").set(arrays["mask"])
    return g, (scores.softmax(-1) @ v).retrieve()


def reference(arrays: dict) -> np.ndarray:
    t = {n: torch.from_numpy(a) for n, a in arrays.items()}
    return torch.nn.functional.scaled_dot_product_attention(
        t["q"], t["k"], t["v"], attn_mask=t.get("mask"),
        enable_gqa=t["q"].shape[1] != t["k"].shape[1]).numpy()


def inputs(queries: int, keys: int, head: int, heads: int = 2, kv_heads: int = 2,
           mask: float | None = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {n: rng.standard_normal((1, heads if n == "q" else kv_heads,
                                      queries if n == "q" else keys, head)).astype(np.float32)
              for n in "qkv"}
    if mask is not None:  # causal, the queries being the last positions
        arrays["mask"] = np.triu(np.full((queries, keys), mask, np.float32),
                                 keys - queries + 1)
    return arrays


@pytest.mark.parametrize("head", [32, 64, 80, 128])
@pytest.mark.parametrize("mask", [None, -np.inf, -1e9], ids=["dense", "causal-inf", "causal-1e9"])
def test_tiled_attention_matches_torch(head, mask):
    """45 queries (32 + 13) against 77 keys (64 + 13)."""
    arrays = inputs(45, 77, head, mask=mask, seed=head)
    g, out = attention(arrays)
    tiled(g).execute()
    np.testing.assert_allclose(out.numpy(), reference(arrays), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("queries,keys", [(8, 8), (17, 130), (64, 64), (96, 200)])
def test_tiled_attention_at_tile_edges(queries, keys):
    arrays = inputs(queries, keys, 64, mask=-1e9, seed=queries + keys)
    g, out = attention(arrays)
    tiled(g).execute()
    np.testing.assert_allclose(out.numpy(), reference(arrays), rtol=1e-4, atol=1e-5)


def test_tiled_attention_with_grouped_query_heads():
    arrays = inputs(40, 70, 64, heads=4, kv_heads=2, mask=-np.inf, seed=3)
    g, out = attention(arrays)
    tiled(g).execute()
    np.testing.assert_allclose(out.numpy(), reference(arrays), rtol=1e-4, atol=1e-5)


def test_tiled_attention_with_a_symbolic_sequence():
    """One compiled graph, sequence lengths 50 and 90 bound at run time."""
    g = None
    for seq in (50, 90):
        arrays = inputs(seq, seq, 32, seed=seq)
        if g is None:
            g, out = attention(arrays, seq_dim="seq")
            g.set_dim("seq", seq)
            tiled(g)
        else:
            for node, name in zip(g.input_nodes(), "qkv"):
                g.set_data(node.id, arrays[name])
            g.set_dim("seq", seq)
        g.execute()
        np.testing.assert_allclose(out.numpy(), reference(arrays), rtol=1e-4, atol=1e-5)


def test_tiled_attention_keeps_nan_and_infinities():
    """A NaN query gives a NaN row, an infinite key NaN logits; an infinite value weighted by
    an exact 0 (masked at -inf) is still NaN (0 * inf), and inf where it is weighted. The
    default plan (the primitive decomposition) is the reference."""
    arrays = inputs(45, 77, 80, mask=-np.inf, seed=9)
    arrays["q"][0, 0, 5, 3] = np.nan
    arrays["k"][0, 1, 50, 2] = np.inf
    arrays["v"][0, 0, 70, 1] = np.inf
    g, out = attention(arrays)
    tiled(g)
    with np.errstate(all="ignore"):
        g.execute()
    got = out.numpy()
    want_g, want_out = attention(arrays)  # the default plan: the primitive decomposition
    want_g.compile((lm.GenericCompiler(), lm.backend("cpu")))
    with np.errstate(all="ignore"):
        want_g.execute()
    want = want_out.numpy()
    # query i sits at position i + 32: key 70 is masked (weight 0) for the first 38 queries
    assert np.isnan(want[0, 0, 5]).all() and np.isnan(want[0, 0, :38, 1]).all()
    assert np.isinf(want[0, 0, 38:, 1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-5)
