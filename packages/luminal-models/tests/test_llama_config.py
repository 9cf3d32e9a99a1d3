"""Llama configuration from Hugging Face dicts, GGUF name mapping and RoPE frequency factors
(no weights needed)."""

from __future__ import annotations

import luminal_nn as nn
import numpy as np
import pytest
from luminal_models.llama import Llama, LlamaConfig, gguf_to_hf_name

HF_LLAMA32 = {  # Llama 3.2 1B's config.json, transformers 4 spelling
    "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "max_position_embeddings": 131072, "tie_word_embeddings": True,
}


def test_llama_config_from_hf_transformers4_and_5_spellings():
    old = LlamaConfig.from_hf(HF_LLAMA32)
    assert (old.num_layers, old.num_heads, old.num_kv_heads, old.head_dim) == (16, 32, 8, 64)
    assert old.rope_theta == 500000.0 and old.rope_scaling["rope_type"] == "llama3"
    assert old.tie_word_embeddings
    new_style = {k: v for k, v in HF_LLAMA32.items() if k not in ("rope_theta", "rope_scaling")}
    new_style["rope_parameters"] = {"rope_theta": 500000.0, **HF_LLAMA32["rope_scaling"]}
    new = LlamaConfig.from_hf(new_style)
    assert new.rope_theta == old.rope_theta
    assert new.rope_scaling["factor"] == 32.0
    plain = LlamaConfig.from_hf({**new_style, "rope_parameters": {"rope_type": "default",
                                                                  "rope_theta": 1e4}})
    assert plain.rope_scaling is None and plain.rope_theta == 1e4


def test_llama_gguf_names_map_onto_hugging_face_names():
    assert gguf_to_hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert gguf_to_hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert gguf_to_hf_name("blk.3.ffn_norm.weight") == \
        "model.layers.3.post_attention_layernorm.weight"
    assert gguf_to_hf_name("output.weight") == "lm_head.weight"
    assert gguf_to_hf_name("blk.0.unknown.weight") == "blk.0.unknown.weight"


def test_llama_module_tree_uses_hugging_face_names():
    config = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=12, num_layers=2,
                         num_heads=2, num_kv_heads=1, head_dim=4)
    names = [n for n, _ in Llama(config).named_parameters()]
    assert names[:3] == ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                         "model.layers.0.self_attn.q_proj.weight"]
    assert names[-1] == "lm_head.weight" and "model.norm.weight" in names


def test_llama_gguf_rope_freqs_divide_the_frequencies():
    """llama.cpp's `rope_freqs` tensor (Llama 3.1 GGUFs) divides each inverse frequency."""
    factors = (1.0, 2.0, 4.0, 8.0)
    config = LlamaConfig(vocab_size=10, hidden_size=16, intermediate_size=8, num_layers=1,
                         num_heads=2, num_kv_heads=2, head_dim=8, rope_theta=100.0,
                         rope_freqs=factors)
    rope = Llama(config).model.layers[0].self_attn.rope
    np.testing.assert_allclose(rope.inv_freq.data,
                               nn.rope_inv_freq(8, 100.0) / np.float32(factors), rtol=1e-6)


def test_llama_load_state_dict_names_missing_weights():
    config = LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=12, num_layers=1,
                         num_heads=2, num_kv_heads=1, head_dim=4, tie_word_embeddings=True)
    with pytest.raises(KeyError, match=r"missing: model\.embed_tokens\.weight"):
        Llama(config).load_state_dict({})
