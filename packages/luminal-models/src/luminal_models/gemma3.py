"""Gemma 3 (text): config, model and GGUF loading.

Where it differs from Llama (`llama.py`):

- the token embeddings are scaled by sqrt(hidden_size), and the output head is the embedding
  table (tied; 262,144 rows for Gemma 3);
- every block has four RMSNorms (sandwich norms): before and after attention, before and after
  the MLP, each output norm applied before the residual add;
- queries and keys get an RMSNorm over the head dim (QK-norm) before RoPE, and scores are
  scaled by query_pre_attn_scalar ** -0.5 (the head dim for the small models);
- the MLP is GeGLU: down(gelu_tanh(gate(x)) * up(x));
- layers alternate sliding-window attention (window 512, RoPE base 10,000) with a global
  layer (RoPE base 1,000,000) every `sliding_window_pattern`-th layer.

GGUF files store Gemma's norm weights as 1 + w (the converter folds Hugging Face's `(1 + w)`
scaling in), so they load into plain RMSNorms; Q and K rows are not permuted (llama.cpp runs
Gemma with NeoX-style, half-split RoPE, as transformers does). The file carries neither the
local RoPE base nor the layer pattern: both are fixed for the architecture, as in llama.cpp
and transformers.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import partial

import luminal as lm
import luminal_nn as nn
import numpy as np
from luminal import GraphTensor

from .config_schema import REQUIRED, get_float, get_int
from .errors import ModelFileError
from .gguf_file import GGUFFile, TensorInfo
from .llama import (
    _GGUF_LAYER,
    LIMITS,
    MAX_DIM,
    _check_layer_count,
    _checked,
    gguf_to_hf_name,
    load_gguf_weights,
)

__all__ = ["GEMMA3_GGUF_NAMES", "Gemma3", "Gemma3Config"]

LOCAL_ROPE_THETA = 10_000.0  # the sliding layers' RoPE base (fixed for Gemma 3)
SLIDING_WINDOW_PATTERN = 6  # every 6th layer is global


@dataclass(frozen=True)
class Gemma3Config:
    """Hyperparameters of a Gemma 3 text decoder (names as Hugging Face's Gemma3TextConfig)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_local_base_freq: float = LOCAL_ROPE_THETA
    sliding_window: int = 512
    sliding_window_pattern: int = SLIDING_WINDOW_PATTERN
    query_pre_attn_scalar: float = 256.0
    max_position_embeddings: int = 32768

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"the KV head count {self.num_kv_heads} must divide the head count "
                             f"{self.num_heads}")
        if self.head_dim % 2:
            raise ValueError(f"the head dim {self.head_dim} must be even (RoPE rotates pairs)")

    def is_sliding(self, layer: int) -> bool:
        """Whether `layer` uses sliding-window attention (all but every pattern-th layer)."""
        return (layer + 1) % self.sliding_window_pattern != 0

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> Gemma3Config:
        """Read the config from `gemma3.*` metadata, each value checked for type and range.

        Raises:
            ModelFileError: not a gemma3 file, or a key is missing, mistyped or out of range.
        """
        if gguf.architecture != "gemma3":
            raise ModelFileError(f"{gguf.path}: architecture {gguf.architecture!r} is not "
                                 "'gemma3'")
        meta, src = gguf.metadata, gguf.path

        def count(key: str, default: object = REQUIRED) -> int:
            limit = LIMITS.get(key.rsplit(".", 1)[-1], MAX_DIM)
            return get_int(src, meta, f"gemma3.{key}", 1, limit, default)

        layers = count("block_count")
        _check_layer_count(src, gguf.tensors, _GGUF_LAYER, layers)
        head_dim = count("attention.key_length", 256)
        return _checked(src, cls,
            vocab_size=gguf.info("token_embd.weight").shape[0],
            hidden_size=count("embedding_length"),
            intermediate_size=count("feed_forward_length"),
            num_layers=layers,
            num_heads=count("attention.head_count"),
            num_kv_heads=count("attention.head_count_kv", None) or count("attention.head_count"),
            head_dim=head_dim,
            rms_norm_eps=get_float(src, meta, "gemma3.attention.layer_norm_rms_epsilon", 0.0,
                                   1.0, 1e-6, open_low=True),
            rope_theta=get_float(src, meta, "gemma3.rope.freq_base", 0.0, 1e12, 1_000_000.0,
                                 open_low=True),
            sliding_window=count("attention.sliding_window", 512),
            query_pre_attn_scalar=float(head_dim),
            max_position_embeddings=count("context_length", 32768),
        )


class Gemma3Attention(nn.Module):
    """Grouped-query attention with RMSNorm on queries and keys (per head) before RoPE."""

    def __init__(self, c: Gemma3Config, rope: nn.RotaryEmbedding, window: int | None) -> None:
        super().__init__()
        h, kv, d = c.num_heads, c.num_kv_heads, c.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = h, kv, d
        self.scale = c.query_pre_attn_scalar ** -0.5
        self.window = window
        self.q_proj = nn.Linear(c.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, c.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(d, eps=c.rms_norm_eps)
        self.k_norm = nn.RMSNorm(d, eps=c.rms_norm_eps)
        self.rope = rope

    def forward(self, x: GraphTensor, cache: nn.LayerCache | None = None,
                last_only: bool = False) -> GraphTensor:
        """`last_only`: only the last position's output (see `nn.MultiHeadAttention`)."""
        b, s = x.shape[0], x.shape[1]
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        rows = 1 if last_only else s
        queries = x[:, -1:] if last_only else x
        q = self.q_norm(self.q_proj(queries).unflatten(-1, (h, d))).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).unflatten(-1, (kv, d))).transpose(1, 2)
        v = self.v_proj(x).unflatten(-1, (kv, d)).transpose(1, 2)
        offset = cache.length if cache is not None else 0
        first = offset + s - 1 if last_only else offset  # position of the first query row
        q, k = self.rope(q, first), self.rope(k, offset)
        if cache is not None:
            k, v = cache.update(k, v)
        q = q.unflatten(1, (kv, h // kv))  # (b, kv, rep, rows, d): keys broadcast over rep
        scores = (q @ k.unsqueeze(2).transpose(-1, -2)) * self.scale
        keep = nn.causal_mask(x.graph, rows, first, self.window)
        scores = lm.where(keep, scores, -math.inf)
        out = scores.softmax(-1) @ v.unsqueeze(2)
        return self.o_proj(out.flatten(1, 2).transpose(1, 2).reshape((b, rows, h * d)))


class Gemma3MLP(nn.Module):
    """GeGLU: down(gelu_tanh(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.down_proj(self.gate_proj(x).gelu("tanh") * self.up_proj(x))


class Gemma3Block(nn.Module):
    """One decoder layer with sandwich norms."""

    def __init__(self, c: Gemma3Config, rope: nn.RotaryEmbedding, window: int | None) -> None:
        super().__init__()
        eps = c.rms_norm_eps
        self.input_layernorm = nn.RMSNorm(c.hidden_size, eps=eps)
        self.self_attn = Gemma3Attention(c, rope, window)
        self.post_attention_layernorm = nn.RMSNorm(c.hidden_size, eps=eps)
        self.pre_feedforward_layernorm = nn.RMSNorm(c.hidden_size, eps=eps)
        self.mlp = Gemma3MLP(c.hidden_size, c.intermediate_size)
        self.post_feedforward_layernorm = nn.RMSNorm(c.hidden_size, eps=eps)

    def forward(self, x: GraphTensor, cache: nn.LayerCache | None = None,
                last_only: bool = False) -> GraphTensor:
        attended = self.self_attn(self.input_layernorm(x), cache, last_only)
        h = (x[:, -1:] if last_only else x) + self.post_attention_layernorm(attended)
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


class Gemma3Model(nn.Module):
    """Embedding, decoder layers and the final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, c: Gemma3Config) -> None:
        super().__init__()
        local = nn.RotaryEmbedding(c.head_dim, c.rope_local_base_freq)
        full = nn.RotaryEmbedding(c.head_dim, c.rope_theta)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            Gemma3Block(c, local, c.sliding_window) if c.is_sliding(i) else
            Gemma3Block(c, full, None)
            for i in range(c.num_layers))
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)


class Gemma3(nn.Module):
    """A Gemma 3 causal language model (text).

    Call it on int32 token ids (batch, seq) to get logits (batch, seq or 1, vocab), with the
    same interface as `Llama` (so `Generator` runs either).
    """

    def __init__(self, config: Gemma3Config) -> None:
        super().__init__()
        self.config = config
        self.model = Gemma3Model(config)

    def new_cache(self, graph: lm.Graph, batch: int = 1, length: str = "past",
                  capacity: int | None = None) -> nn.KVCache:
        """An empty KV cache for this model in `graph` (its length is the dim `length`):
        growing, or with `capacity`, of that many positions written in place."""
        c = self.config
        return nn.KVCache(graph, c.num_layers, batch, c.num_kv_heads, c.head_dim, length,
                          capacity=capacity)

    def forward(self, tokens: GraphTensor, cache: nn.KVCache | None = None,
                last_only: bool = False) -> GraphTensor:
        """Logits for `tokens` (batch, seq); `last_only` keeps only the last position."""
        m = self.model
        # the scale is rounded to float32 first, as transformers computes it
        h = m.embed_tokens(tokens) * float(np.float32(math.sqrt(self.config.hidden_size)))
        last = len(m.layers) - 1
        for i, layer in enumerate(m.layers):
            h = layer(h, cache[i] if cache is not None else None, last_only=last_only and i == last)
        return m.embed_tokens.attend(m.norm(h))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str] | GGUFFile, quantized: bool = True,
                  progress: bool = True) -> Gemma3:
        """Build the model from a gemma3 GGUF file; with `quantized`, block-quantized
        matrices stay in their format (see `Llama.from_gguf`)."""
        if not isinstance(path, GGUFFile):
            with GGUFFile(path) as opened:
                return cls.from_gguf(opened, quantized, progress)
        model = cls(Gemma3Config.from_gguf(path))
        rename = partial(gguf_to_hf_name, table=GEMMA3_GGUF_NAMES)
        load_gguf_weights(model, path, rename, quantized, progress, _read)
        return model


def _read(gguf: GGUFFile, info: TensorInfo, name: str, raw: bool) -> np.ndarray:
    return gguf.tensor(info.name, dequantize=not raw)


# GGUF tensor name -> Hugging Face name (`{i}` is the layer).
GEMMA3_GGUF_NAMES: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.attn_q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "blk.{i}.attn_k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
    "blk.{i}.post_attention_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
    "blk.{i}.post_ffw_norm.weight": "model.layers.{i}.post_feedforward_layernorm.weight",
}
