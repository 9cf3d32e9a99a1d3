"""Weights kept in GGUF block formats: `QuantizedParameter` in Linear and Embedding.

The expected values come from a NumPy decoding of the same blocks, written here from the GGUF
layout (f16 scale, then int8 / 4-bit values), independent of luminal.quant.
"""

from __future__ import annotations

import luminal as lm
import luminal_nn as nn
import numpy as np
import pytest


def quantize_q8_0(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(raw uint8 blocks, the float values they decode to) for a (rows, cols) matrix."""
    blocks = w.reshape(w.shape[0], -1, 32)
    d = (np.abs(blocks).max(-1, keepdims=True) / 127).astype(np.float16)
    safe = np.where(d == 0, 1, d).astype(np.float32)
    qs = np.clip(np.round(blocks / safe), -127, 127).astype(np.int8)
    raw = np.concatenate([d.view(np.uint8), qs.view(np.uint8)], axis=-1)
    return raw.reshape(w.shape[0], -1), (qs * d.astype(np.float32)).reshape(w.shape)


def quantize_q4_1(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    blocks = w.reshape(w.shape[0], -1, 32)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    d = ((hi - lo) / 15).astype(np.float16)
    m = lo.astype(np.float16)
    q = np.clip(np.round((blocks - m.astype(np.float32)) / d.astype(np.float32)), 0, 15)
    q = q.astype(np.uint8)
    packed = q[..., :16] | (q[..., 16:] << 4)  # element i low nibble, i + 16 high nibble
    raw = np.concatenate([d.view(np.uint8), m.view(np.uint8), packed], axis=-1)
    values = q * d.astype(np.float32) + m.astype(np.float32)
    return raw.reshape(w.shape[0], -1), values.reshape(w.shape)


QUANTIZERS = {"q8_0": quantize_q8_0, "q4_1": quantize_q4_1}


@pytest.mark.parametrize("qtype", sorted(QUANTIZERS))
def test_nn_quantized_linear(qtype):
    rng = np.random.default_rng(0)
    raw, values = QUANTIZERS[qtype](rng.standard_normal((6, 64)).astype(np.float32))
    layer = nn.Linear(64, 6, bias=False)
    layer.weight = nn.QuantizedParameter((6, 64), qtype, raw)
    assert layer.state_dict()["weight"].dtype == np.uint8
    x = rng.standard_normal((3, 64)).astype(np.float32)
    g = lm.Graph()
    out = layer(g.tensor(x.shape).set(x)).retrieve()
    g.execute()
    np.testing.assert_allclose(out.numpy(), x @ values.T, atol=1e-4)


@pytest.mark.parametrize("qtype", sorted(QUANTIZERS))
def test_nn_quantized_embedding_decodes_only_looked_up_rows(qtype):
    rng = np.random.default_rng(1)
    raw, values = QUANTIZERS[qtype](rng.standard_normal((50, 32)).astype(np.float32))
    emb = nn.Embedding(50, 32)
    emb.weight = nn.QuantizedParameter((50, 32), qtype.upper(), raw)
    ids = np.array([[3, 49, 0], [7, 7, 21]], np.int32)
    g = lm.Graph()
    out = emb(g.tensor((2, "seq"), dtype=lm.int32).set(ids)).retrieve()
    head = emb.attend(g.tensor((1, 32)).set(values[:1])).retrieve()
    g.execute()
    np.testing.assert_array_equal(out.numpy(), values[ids])
    np.testing.assert_allclose(head.numpy(), values[:1] @ values.T, atol=1e-4)


def test_nn_quantized_parameter_checks_its_bytes():
    with pytest.raises(ValueError, match=r"expected an array of shape \(4, 68\)"):
        nn.QuantizedParameter((4, 64), "q8_0", np.zeros((4, 64), np.uint8))
    with pytest.raises(ValueError, match="unsupported quantized format 'q2_k'"):
        nn.QuantizedParameter((4, 64), "q2_k")
