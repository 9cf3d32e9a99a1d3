"""Loading Llama weights: every tensor's shape is checked against the config before it is
bound, and a mismatch names the file, the tensor and the parameter it was meant for.

The files are tiny, written here: GGUF with the `gguf` package's GGUFWriter, safetensors with
the `safetensors` package.
"""

from __future__ import annotations

import json
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from luminal_models import quants
from luminal_models.errors import ModelFileError
from luminal_models.llama import Llama, LlamaConfig
from safetensors.numpy import save_file

# hidden 64, 2 query heads and 1 KV head of 32: v_proj is (32, 64)
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 2, 1, 32, 64, 16


def tiny_llama_tensors(rng: np.random.Generator, vocab: int = VOCAB) -> dict[str, np.ndarray]:
    """GGUF name -> float32 array (NumPy row-major shapes) for a 1-layer model."""
    def w(*shape: int) -> np.ndarray:
        return (rng.normal(size=shape) * 0.1).astype(np.float32)

    return {
        "token_embd.weight": w(vocab, HIDDEN),
        "output_norm.weight": np.ones(HIDDEN, np.float32),
        "blk.0.attn_norm.weight": np.ones(HIDDEN, np.float32),
        "blk.0.attn_q.weight": w(HEADS * HEAD_DIM, HIDDEN),
        "blk.0.attn_k.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "blk.0.attn_v.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
        "blk.0.attn_output.weight": w(HIDDEN, HEADS * HEAD_DIM),
        "blk.0.ffn_norm.weight": np.ones(HIDDEN, np.float32),
        "blk.0.ffn_gate.weight": w(FFN, HIDDEN),
        "blk.0.ffn_up.weight": w(FFN, HIDDEN),
        "blk.0.ffn_down.weight": w(HIDDEN, FFN),
    }


def _write_llama_gguf(path: Path, tensors: dict[str, np.ndarray], q8: bool = True) -> Path:
    """A tiny Llama GGUF; with `q8`, the 2-D matrices are stored as Q8_0 blocks."""
    w = GGUFWriter(path, arch="llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    for name, x in tensors.items():
        if q8 and x.ndim == 2:
            raw = quants.quantize(x, quants.Q8_0).reshape(x.shape[0], -1)
            w.add_tensor(name, raw, raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _logits(model: Llama, ids: list[int]) -> np.ndarray:
    g = lm.Graph()
    out = model(g.tensor((1, len(ids)), dtype=lm.int32).set([ids])).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    g.execute()
    return out.numpy()


@pytest.mark.parametrize("q8", [True, False], ids=["q8_0", "f32"])
def test_llama_gguf_loads_a_well_formed_tiny_file(tmp_path: Path, q8: bool):
    tensors = tiny_llama_tensors(np.random.default_rng(0))
    path = _write_llama_gguf(tmp_path / "tiny.gguf", tensors, q8)
    model = Llama.from_gguf(path, progress=False)
    assert model.config.num_kv_heads == KV_HEADS and model.config.head_dim == HEAD_DIM
    assert _logits(model, [1, 2, 3]).shape == (1, 3, VOCAB)


@pytest.mark.parametrize("q8", [True, False], ids=["q8_0", "f32"])
@pytest.mark.parametrize("quantized", [True, False], ids=["kept", "decoded"])
def test_llama_gguf_shape_mismatch_names_file_and_tensor(tmp_path: Path, q8: bool,
                                                         quantized: bool):
    """A (64, 64) attn_v where the config wants (32, 64) fails at load, not in forward."""
    tensors = tiny_llama_tensors(np.random.default_rng(0))
    tensors["blk.0.attn_v.weight"] = np.zeros((64, HIDDEN), np.float32)
    path = _write_llama_gguf(tmp_path / "bad.gguf", tensors, q8)
    with pytest.raises(ModelFileError) as e:
        Llama.from_gguf(path, quantized=quantized, progress=False)
    assert str(e.value) == (
        f"{path}: tensor 'blk.0.attn_v.weight' (model.layers.0.self_attn.v_proj.weight) has "
        "shape (64, 64), the config expects (32, 64)")


def test_llama_gguf_norm_and_embedding_mismatches_are_caught(tmp_path: Path):
    tensors = tiny_llama_tensors(np.random.default_rng(0))
    tensors["blk.0.ffn_norm.weight"] = np.ones(HIDDEN + 1, np.float32)
    path = _write_llama_gguf(tmp_path / "norm.gguf", tensors)
    with pytest.raises(ModelFileError, match=r"tensor 'blk\.0\.ffn_norm\.weight' \(model\.layers"
                                             r"\.0\.post_attention_layernorm\.weight\) has shape "
                                             r"\(65,\), the config expects \(64,\)"):
        Llama.from_gguf(path, progress=False)


def _hf_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Hugging Face name -> array for the same 1-layer model (untied head)."""
    from luminal_models.llama import gguf_to_hf_name

    out = {gguf_to_hf_name(k): v for k, v in tiny_llama_tensors(rng).items()}
    out["lm_head.weight"] = (rng.normal(size=(VOCAB, HIDDEN)) * 0.1).astype(np.float32)
    return out


def _write_hf_dir(folder: Path, tensors: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": FFN,
        "num_hidden_layers": 1, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 64, "tie_word_embeddings": False,
    }))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_llama_safetensors_shape_mismatch_names_file_and_tensor(tmp_path: Path):
    tensors = _hf_tensors(np.random.default_rng(0))
    folder = _write_hf_dir(tmp_path / "ok", tensors)
    assert Llama.from_safetensors(folder, progress=False).config == LlamaConfig.from_hf(
        json.loads((folder / "config.json").read_text()))
    tensors["model.layers.0.self_attn.v_proj.weight"] = np.zeros((64, HIDDEN), np.float32)
    bad = _write_hf_dir(tmp_path / "bad", tensors)
    with pytest.raises(ModelFileError) as e:
        Llama.from_safetensors(bad, progress=False)
    assert str(e.value) == (
        f"{bad / 'model.safetensors'}: tensor 'model.layers.0.self_attn.v_proj.weight' has "
        "shape (64, 64), the config expects (32, 64)")


# ----- attention_bias and sliding windows, against transformers ------------------------------

def _hf_logits(hf, ids: list[int]) -> np.ndarray:
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits.numpy()


def _biased_llama(transformers):
    import torch

    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
        max_position_embeddings=64, tie_word_embeddings=False, attention_bias=True,
        mlp_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # biases start at zero: make them matter
        for name, p in hf.named_parameters():
            if name.endswith(".bias"):
                p.uniform_(-0.5, 0.5)
    return hf


IDS = [3, 17, 42, 5, 77, 11, 60, 2, 9]


def test_llama_attention_bias_safetensors_matches_transformers(tmp_path: Path):
    """`attention_bias=True` gives q/k/v *and* o_proj biases (HF LlamaAttention)."""
    transformers = pytest.importorskip("transformers")
    hf = _biased_llama(transformers)
    assert "model.layers.0.self_attn.o_proj.bias" in hf.state_dict()
    hf.save_pretrained(tmp_path)
    model = Llama.from_safetensors(tmp_path, progress=False)
    assert model.config.attention_bias and model.config.mlp_bias
    assert model.model.layers[0].self_attn.o_proj.bias is not None
    np.testing.assert_allclose(_logits(model, IDS), _hf_logits(hf, IDS), atol=1e-4, rtol=0)


def test_llama_attention_bias_gguf_matches_transformers(tmp_path: Path):
    """The same biased model written as llama.cpp's converter would (Q/K weights *and*
    biases row-permuted for adjacent-pair RoPE) loads from GGUF with the same logits."""
    transformers = pytest.importorskip("transformers")
    hf = _biased_llama(transformers)
    c = hf.config
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}

    def permute(w: np.ndarray, heads: int) -> np.ndarray:  # convert_hf_to_gguf's permute
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2) \
            .reshape(w.shape)

    hf_to_gguf = {
        "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
        "output_norm.weight", "lm_head.weight": "output.weight"}
    from luminal_models.llama import GGUF_NAMES

    for i in range(c.num_hidden_layers):
        for gguf_name, hf_name in GGUF_NAMES.items():
            if "{i}" in gguf_name:
                hf_to_gguf[hf_name.format(i=i)] = gguf_name.format(i=i)
    w = GGUFWriter(tmp_path / "biased.gguf", arch="llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(10000.0)
    for hf_name, x in sd.items():
        if ".q_proj." in hf_name:
            x = permute(x, c.num_attention_heads)
        elif ".k_proj." in hf_name:
            x = permute(x, c.num_key_value_heads)
        w.add_tensor(hf_to_gguf[hf_name], np.ascontiguousarray(x, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = Llama.from_gguf(tmp_path / "biased.gguf", progress=False)
    assert model.config.attention_bias and model.config.mlp_bias
    np.testing.assert_allclose(_logits(model, IDS), _hf_logits(hf, IDS), atol=1e-4, rtol=0)


def test_llama_mistral_sliding_window_matches_transformers(tmp_path: Path):
    """A Mistral checkpoint whose sliding window (3) is shorter than the sequence (9): the
    window is applied through the attention mask, in one forward and in cached decoding."""
    transformers = pytest.importorskip("transformers")
    import torch
    from luminal_models.generate import Generator

    config = transformers.MistralConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
        max_position_embeddings=64, sliding_window=3, tie_word_embeddings=False)
    torch.manual_seed(1)
    hf = transformers.MistralForCausalLM(config).eval()
    hf.save_pretrained(tmp_path)
    model = Llama.from_safetensors(tmp_path, progress=False)
    assert model.config.sliding_window == 3
    assert model.model.layers[1].self_attn.sliding_window == 3
    want = _hf_logits(hf, IDS)
    hf.config.sliding_window = None  # the window changes the result here
    assert not np.allclose(_hf_logits(hf, IDS), want, atol=1e-3)
    np.testing.assert_allclose(_logits(model, IDS), want, atol=1e-4, rtol=0)
    gen = Generator(model)
    got = [gen.forward(IDS[:5])] + [gen.forward([t]) for t in IDS[5:]]
    np.testing.assert_allclose(np.stack(got), want[0, 4:], atol=1e-4, rtol=0)


def test_llama_config_sliding_window_per_layer_and_switch():
    base = {"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "sliding_window": 4}
    assert LlamaConfig.from_hf(base).layer_window(1) == 4
    assert LlamaConfig.from_hf({**base, "use_sliding_window": False}).sliding_window is None
    mixed = LlamaConfig.from_hf({**base, "layer_types": ["full_attention",
                                                         "sliding_attention"]})
    assert (mixed.layer_window(0), mixed.layer_window(1)) == (None, 4)
    with pytest.raises(ModelFileError, match="layer_types has 1 entries for 2 layers"):
        LlamaConfig.from_hf({**base, "layer_types": ["full_attention"]})
