"""Rotary embeddings, attention, the KV cache and the transformer block against torch /
transformers implementations with the same weights (reference backend)."""

from __future__ import annotations

import luminal as lm
import luminal_nn as nn
import numpy as np
import pytest

torch = pytest.importorskip("torch")

ATOL = 2e-5


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1)


def rotate_half_reference(x: np.ndarray, inv_freq: np.ndarray, offset: int) -> np.ndarray:
    """Hugging Face's apply_rotary_pos_emb on (..., seq, dim), in torch."""
    t = torch.from_numpy(x)
    pos = torch.arange(offset, offset + x.shape[-2], dtype=torch.float32)
    freqs = pos[:, None] * torch.from_numpy(inv_freq)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    half = x.shape[-1] // 2
    rotated = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
    return (t * emb.cos() + rotated * emb.sin()).numpy()


def to_interleaved(x: np.ndarray) -> np.ndarray:
    """Reorder the last axis from halves (HF) to adjacent pairs (llama.cpp): what the GGUF
    converter does to the Q/K projection rows."""
    d = x.shape[-1]
    return x.reshape(*x.shape[:-1], 2, d // 2).swapaxes(-1, -2).reshape(x.shape)


@pytest.mark.parametrize("offset", [0, 5])
def test_nn_rope_matches_hugging_face(rng, offset):
    rope = nn.RotaryEmbedding(16, theta=10000.0)
    x = rng.standard_normal((2, 3, 7, 16)).astype(np.float32)
    g = lm.Graph()
    out = rope(g.tensor(x.shape).set(x), offset).retrieve()
    g.execute()
    want = rotate_half_reference(x, rope.inv_freq.data, offset)
    np.testing.assert_allclose(out.numpy(), want, atol=ATOL)


def test_nn_rope_interleaved_equals_permuted_halves(rng):
    """Adjacent-pair RoPE on permuted features == half RoPE, permuted."""
    x = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    g = lm.Graph()
    half = nn.RotaryEmbedding(8, theta=500.0)(g.tensor(x.shape).set(x), 3).retrieve()
    inter_in = g.tensor(x.shape).set(to_interleaved(x))
    inter = nn.RotaryEmbedding(8, theta=500.0, interleaved=True)(inter_in, 3).retrieve()
    g.execute()
    np.testing.assert_allclose(inter.numpy(), to_interleaved(half.numpy()), atol=ATOL)


@pytest.mark.parametrize("scaling", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
    {"rope_type": "linear", "factor": 4.0},
])
def test_nn_rope_scaling_matches_transformers(scaling):
    pytest.importorskip("transformers", reason="transformers is the oracle for RoPE scaling")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(hidden_size=2048, num_attention_heads=16,
                         rope_parameters={"rope_theta": 500000.0, **scaling})
    want, _ = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu")
    got = nn.rope_inv_freq(128, 500000.0, scaling)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)


def test_nn_rope_rejects_unknown_scaling():
    with pytest.raises(ValueError, match="unsupported rope scaling type 'yarn'"):
        nn.rope_inv_freq(8, scaling={"rope_type": "yarn", "factor": 2.0})


def _attention_inputs(rng, embed=16, seq=6, batch=2):
    return rng.standard_normal((batch, seq, embed)).astype(np.float32)


def test_nn_mha_matches_torch_multihead_attention(rng):
    ref = torch.nn.MultiheadAttention(16, 4, bias=True, batch_first=True)
    mod = nn.MultiHeadAttention(16, 4, bias=True)
    w, b = ref.in_proj_weight.detach().numpy(), ref.in_proj_bias.detach().numpy()
    mod.load_state_dict({
        "q_proj.weight": w[:16], "k_proj.weight": w[16:32], "v_proj.weight": w[32:],
        "q_proj.bias": b[:16], "k_proj.bias": b[16:32], "v_proj.bias": b[32:],
        "o_proj.weight": ref.out_proj.weight.detach().numpy(),
        "o_proj.bias": ref.out_proj.bias.detach().numpy(),
    })
    x = _attention_inputs(rng)
    g = lm.Graph()
    out = mod(g.tensor(x.shape).set(x)).retrieve()
    g.execute()
    t = torch.from_numpy(x)
    future = torch.triu(torch.ones(6, 6, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        want, _ = ref(t, t, t, attn_mask=future, need_weights=False)
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=ATOL)


def _gqa_reference(mod: nn.MultiHeadAttention, x: np.ndarray,
                   window: int | None = None) -> np.ndarray:
    """Grouped-query attention with HF-style RoPE in torch (repeat K/V, causal SDPA; with
    `window`, query i sees keys i - window < j <= i, written out as an explicit mask)."""
    sd = {k: torch.from_numpy(v) for k, v in mod.state_dict().items()}
    t = torch.from_numpy(x)
    b, s, _ = x.shape
    h, kv, d = mod.num_heads, mod.num_kv_heads, mod.head_dim
    q = (t @ sd["q_proj.weight"].T).view(b, s, h, d).transpose(1, 2)
    k = (t @ sd["k_proj.weight"].T).view(b, s, kv, d).transpose(1, 2)
    v = (t @ sd["v_proj.weight"].T).view(b, s, kv, d).transpose(1, 2)
    inv = mod.rope.inv_freq.data
    q = torch.from_numpy(rotate_half_reference(q.numpy(), inv, 0))
    k = torch.from_numpy(rotate_half_reference(k.numpy(), inv, 0))
    if window is None:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                               enable_gqa=True)
    else:
        i, j = torch.arange(s)[:, None], torch.arange(s)[None, :]
        allowed = (j <= i) & (j > i - window)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                                               enable_gqa=True)
    return (out.transpose(1, 2).reshape(b, s, h * d) @ sd["o_proj.weight"].T).numpy()


def test_nn_gqa_with_rope_matches_torch_sdpa(rng):
    mod = nn.MultiHeadAttention(24, 6, num_kv_heads=2, head_dim=8,
                                rope=nn.RotaryEmbedding(8, theta=100.0))
    x = _attention_inputs(rng, embed=24, seq=5)
    g = lm.Graph()
    out = mod(g.tensor(x.shape).set(x)).retrieve()
    g.execute()
    np.testing.assert_allclose(out.numpy(), _gqa_reference(mod, x), atol=ATOL)


@pytest.mark.parametrize("window", [1, 3])
def test_nn_sliding_window_attention_matches_torch_with_and_without_cache(rng, window):
    """Mistral's sliding window: each query sees only its last `window` keys, in one pass
    and when decoding with a KV cache (older keys stay cached but are masked out)."""
    mod = nn.MultiHeadAttention(24, 6, num_kv_heads=2, head_dim=8,
                                rope=nn.RotaryEmbedding(8, theta=100.0), sliding_window=window)
    x = _attention_inputs(rng, embed=24, seq=7, batch=1)
    want = _gqa_reference(mod, x, window)
    assert not np.allclose(want, _gqa_reference(mod, x))  # the window matters here
    g = lm.Graph()
    out = mod(g.tensor(x.shape).set(x)).retrieve()
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, atol=ATOL)

    _decode_in_steps(mod, x, want)
    _decode_in_steps(mod, x, want, capacity=7)


def test_nn_sliding_window_needs_causal_and_a_positive_size():
    with pytest.raises(ValueError, match="sliding_window"):
        nn.MultiHeadAttention(8, 2, causal=False, sliding_window=4)
    with pytest.raises(ValueError, match="sliding_window"):
        nn.MultiHeadAttention(8, 2, sliding_window=0)
    assert "sliding_window=4" in repr(nn.MultiHeadAttention(8, 2, sliding_window=4))


def _decode_in_steps(mod, x: np.ndarray, want: np.ndarray,
                     capacity: int | None = None) -> nn.KVCache:
    """Prefill 4 positions of `x`, then decode the rest one at a time with one compiled graph
    and a KV cache (growing, or of `capacity` written in place); each step's output must equal
    the matching rows of `want`."""
    g = lm.Graph()
    cache = nn.KVCache(g, num_layers=1, batch=1, num_kv_heads=2, head_dim=8,
                       capacity=capacity)
    inp = g.tensor((1, "seq", 24))
    out = mod(inp, cache[0]).retrieve()
    g.compile(lm.GenericCompiler())
    for start, stop in [(0, 4), (4, 5), (5, 6), (6, 7)]:
        inp.set(x[:, start:stop])
        g.execute()
        cache.advance(stop - start)
        np.testing.assert_allclose(out.numpy(), want[:, start:stop], atol=ATOL)
    return cache


def test_nn_kv_cache_decode_matches_full_recompute(rng):
    """Prefill 4 positions, then decode 3 one at a time with one compiled graph: each step's
    output equals the last rows of a full uncached forward over the whole sequence."""
    mod = nn.MultiHeadAttention(24, 6, num_kv_heads=2, head_dim=8,
                                rope=nn.RotaryEmbedding(8, theta=100.0))
    x = _attention_inputs(rng, embed=24, seq=7, batch=1)

    full_graph = lm.Graph()
    full = mod(full_graph.tensor(x.shape).set(x)).retrieve()
    full_graph.execute()
    want = full.numpy()

    cache = _decode_in_steps(mod, x, want)
    assert cache.length == 7
    assert cache[0].k.numpy().shape == (1, 2, 7, 8)
    keys = cache[0].k.numpy()
    cache.reset()
    assert cache.length == 0

    # written in place: the same keys, position-major, in a buffer that keeps its size
    in_place = _decode_in_steps(mod, x, want, capacity=9)
    assert in_place.length == 7
    assert in_place[0].k.numpy().shape == (1, 9, 2, 8)
    np.testing.assert_allclose(in_place[0].k.numpy()[:, :7].transpose(0, 2, 1, 3), keys,
                               atol=ATOL)
    in_place.reset()
    assert in_place.length == 0


def test_nn_kv_cache_in_place_refuses_to_overflow(rng):
    """A step whose rows would not fit the capacity is an error naming the cache, and
    leaves the cache as it was."""
    mod = nn.MultiHeadAttention(24, 6, num_kv_heads=2, head_dim=8)
    g = lm.Graph()
    cache = nn.KVCache(g, num_layers=1, batch=1, num_kv_heads=2, head_dim=8, capacity=5)
    inp = g.tensor((1, "seq", 24))
    mod(inp, cache[0]).retrieve()
    g.compile(lm.GenericCompiler())
    inp.set(_attention_inputs(rng, embed=24, seq=4, batch=1))
    g.execute()
    cache.advance(4)
    before = cache[0].k.numpy().copy()
    inp.set(_attention_inputs(rng, embed=24, seq=2, batch=1))
    with pytest.raises(ValueError, match=r"kv_cache\.0\.k.*rows 4\.\.5.*5 positions"):
        g.execute()
    np.testing.assert_array_equal(cache[0].k.numpy(), before)
    with pytest.raises(ValueError, match="capacity"):
        nn.KVCache(g, 1, 1, 2, 8, capacity=0)


def test_nn_layer_cache_order_continues_chosen_rows(rng):
    """Beam search's reorder: prefill two sequences, then a step whose rows continue cached
    rows [1, 1, 0] (one dropped, one duplicated) equals an uncached forward over those
    sequences."""
    mod = nn.MultiHeadAttention(16, 4, bias=True)
    x = _attention_inputs(rng, embed=16, seq=5, batch=2)
    step = rng.standard_normal((3, 1, 16)).astype(np.float32)
    order = np.array([1, 1, 0], np.int32)

    g = lm.Graph()
    rows = g.tensor(("rows",), name="order", dtype=lm.int32)
    cache = nn.LayerCache(g, ("cached", 4, "past", 4), "kv", lm.float32, rows)
    cache.k.set(np.zeros((1, 4, 0, 4), np.float32))
    cache.v.set(np.zeros((1, 4, 0, 4), np.float32))
    inp = g.tensor(("rows", "seq", 16), name="x")
    out = mod(inp, cache).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    inp.set(x)
    rows.set(np.zeros(2, np.int32))  # prefill: both rows start from the (empty) row 0
    g.execute()
    g.set_dim("past", 5)
    g.set_dim("cached", 2)
    inp.set(step)
    rows.set(order)
    g.execute()

    full_graph = lm.Graph()
    whole = np.concatenate([x[order], step], axis=1)
    full = mod(full_graph.tensor(whole.shape).set(whole)).retrieve()
    full_graph.compile(lm.backend("reference"))
    full_graph.execute()
    np.testing.assert_allclose(out.numpy(), full.numpy()[:, -1:], atol=ATOL)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "attention_bias"])
def test_nn_transformer_block_matches_transformers_llama_layer(rng, bias):
    """Hugging Face Llama's `attention_bias` puts biases on q, k, v *and* o_proj."""
    pytest.importorskip("transformers", reason="transformers' Llama layer is the oracle")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=4,
                         num_key_value_heads=2, rms_norm_eps=1e-5, attention_bias=bias,
                         mlp_bias=bias,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = LlamaDecoderLayer(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.uniform_(-0.3, 0.3)
    block = nn.TransformerBlock(32, 4, 48, num_kv_heads=2, norm_eps=1e-5,
                                rope=nn.RotaryEmbedding(8, theta=1000.0), attn_bias=bias,
                                mlp_bias=bias)
    assert ("self_attn.o_proj.bias" in ref.state_dict()) == bias
    block.load_state_dict({k: v.numpy() for k, v in ref.state_dict().items()})
    x = rng.standard_normal((1, 5, 32)).astype(np.float32)
    g = lm.Graph()
    out = block(g.tensor(x.shape).set(x)).retrieve()
    g.execute()
    t = torch.from_numpy(x)
    pos = torch.arange(5)[None]
    mask = torch.full((5, 5), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        cos_sin = LlamaRotaryEmbedding(config)(t, pos)
        want = ref(t, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
    want = want[0] if isinstance(want, tuple) else want
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=1e-4)


def test_nn_layers_share_one_rope_table_and_one_causal_mask(rng):
    """Layers sharing a rotary module read one set of angles and one mask per graph (not a
    copy per layer for CSE to merge); the result still equals the unshared computation."""
    rope = nn.RotaryEmbedding(8)
    attns = [nn.MultiHeadAttention(16, 2, rope=rope) for _ in range(3)]
    xs = rng.standard_normal((1, 5, 16)).astype(np.float32)

    def forward(layers):
        g = lm.Graph()
        h = g.tensor((1, 5, 16), name="x").set(xs)
        for layer in layers:
            h = layer(h)
        return g, h.retrieve()

    one_g, _ = forward(attns[:1])
    three_g, out = forward(attns)
    ops = [type(n.op).__name__ for n in three_g.nodes.values()]
    one_ops = [type(n.op).__name__ for n in one_g.nodes.values()]
    assert ops.count("Sin") == one_ops.count("Sin") and ops.count("LessThan") == one_ops.count(
        "LessThan")
    three_g.compile((lm.GenericCompiler(), lm.backend("reference")))
    three_g.execute()
    want = xs
    for layer in attns:  # each layer on a graph of its own: nothing shared across layers
        g = lm.Graph()
        y = layer(g.tensor((1, 5, 16), name="x").set(want)).retrieve()
        g.compile((lm.GenericCompiler(), lm.backend("reference")))
        g.execute()
        want = y.numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 3])
def test_nn_last_only_attention_is_the_last_row_and_fills_the_cache(rng, window):
    """`last_only` returns the last position's row of torch's attention, chunk after chunk of a
    cached prompt, while every position's keys still reach the cache (the next chunk reads
    them)."""
    mod = nn.MultiHeadAttention(24, 6, num_kv_heads=2, head_dim=8,
                                rope=nn.RotaryEmbedding(8, theta=100.0), sliding_window=window)
    x = _attention_inputs(rng, embed=24, seq=7, batch=1)
    want = _gqa_reference(mod, x, window)
    g = lm.Graph()
    cache = nn.KVCache(g, num_layers=1, batch=1, num_kv_heads=2, head_dim=8)
    inp = g.tensor((1, "seq", 24))
    out = mod(inp, cache[0], last_only=True).retrieve()
    g.compile(lm.GenericCompiler())
    for start, stop in [(0, 4), (4, 7)]:
        inp.set(x[:, start:stop])
        g.execute()
        cache.advance(stop - start)
        assert out.numpy().shape == (1, 1, 24)
        np.testing.assert_allclose(out.numpy(), want[:, stop - 1:stop], atol=ATOL)
    assert cache[0].k.numpy().shape == (1, 2, 7, 8)


def test_nn_last_only_keeps_a_user_mask_and_the_block_residual(rng):
    """With a (seq, keys) mask the last row reads the mask's last row; a block's `last_only`
    equals the last row of its full output."""
    block = nn.TransformerBlock(24, 6, 40, num_kv_heads=2, head_dim=8,
                                rope=nn.RotaryEmbedding(8, theta=100.0))
    for p in block.parameters():
        p.data = rng.uniform(-0.3, 0.3, p.shape).astype(np.float32)
    x = _attention_inputs(rng, embed=24, seq=6, batch=2)
    keep = rng.random((6, 6)) < 0.7
    np.fill_diagonal(keep, True)
    g = lm.Graph()
    inp = g.tensor(x.shape).set(x)
    mask = g.tensor(keep.shape, dtype=lm.bool).set(keep)
    full = block(inp, mask=mask).retrieve()
    last = block(inp, mask=mask, last_only=True).retrieve()
    g.execute()
    assert last.numpy().shape == (2, 1, 24)
    np.testing.assert_allclose(last.numpy(), full.numpy()[:, -1:], rtol=1e-5, atol=1e-5)
    assert not np.allclose(full.numpy()[:, -1], full.numpy()[:, -2])
