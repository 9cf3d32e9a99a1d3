"""Transformer building blocks: feed-forward layers and a pre-norm decoder block."""

from __future__ import annotations

from luminal import GraphTensor

from .attention import LayerCache, MultiHeadAttention
from .linear import Linear
from .module import Module
from .norm import LayerNorm, RMSNorm
from .rotary import RotaryEmbedding

__all__ = ["FeedForward", "SwiGLU", "TransformerBlock"]


class SwiGLU(Module):
    """Llama's gated MLP: `down_proj(silu(gate_proj(x)) * up_proj(x))`."""

    def __init__(self, dim: int, hidden_dim: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = Linear(dim, hidden_dim, bias)
        self.up_proj = Linear(dim, hidden_dim, bias)
        self.down_proj = Linear(hidden_dim, dim, bias)

    def forward(self, x: GraphTensor) -> GraphTensor:
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class FeedForward(Module):
    """`fc2(act(fc1(x)))` with act one of "gelu", "gelu_tanh", "relu", "silu"."""

    def __init__(self, dim: int, hidden_dim: int, activation: str = "gelu",
                 bias: bool = True) -> None:
        super().__init__()
        if activation not in ("gelu", "gelu_tanh", "relu", "silu"):
            raise ValueError(f"FeedForward: unknown activation {activation!r}")
        self.activation = activation
        self.fc1 = Linear(dim, hidden_dim, bias)
        self.fc2 = Linear(hidden_dim, dim, bias)

    def forward(self, x: GraphTensor) -> GraphTensor:
        h = self.fc1(x)
        if self.activation == "gelu":
            h = h.gelu()
        elif self.activation == "gelu_tanh":
            h = h.gelu("tanh")
        elif self.activation == "relu":
            h = h.relu()
        else:
            h = h.silu()
        return self.fc2(h)


class TransformerBlock(Module):
    """A pre-norm decoder block: `x + attn(norm(x))`, then `h + mlp(norm(h))`.

    With the defaults (RMSNorm, SwiGLU, no biases) this is a Llama / Mistral layer, with
    parameter names matching Hugging Face checkpoints (`input_layernorm`, `self_attn`,
    `post_attention_layernorm`, `mlp`).

    Args:
        dim: model width; `num_heads`, `num_kv_heads`, `head_dim`: attention shape.
        hidden_dim: feed-forward width.
        norm: "rms" or "layer"; `norm_eps` its epsilon.
        mlp: "swiglu", or an activation name for a plain two-layer `FeedForward`.
        rope: rotary embedding for the attention (shared between layers is fine).
        attn_bias: biases on the q/k/v projections; `out_bias` on the output projection
            (default: the same as `attn_bias`, as Hugging Face Llama's `attention_bias`; pass
            `out_bias=False` for Qwen2-style q/k/v-only biases).
        mlp_bias: biases on the MLP.
        causal: mask future positions; `sliding_window` limits each query to the last that
            many keys (Mistral), see `MultiHeadAttention`.
    """

    def __init__(self, dim: int, num_heads: int, hidden_dim: int, num_kv_heads: int | None = None,
                 head_dim: int | None = None, norm: str = "rms", norm_eps: float = 1e-5,
                 mlp: str = "swiglu", rope: RotaryEmbedding | None = None,
                 attn_bias: bool = False, mlp_bias: bool = False, causal: bool = True,
                 out_bias: bool | None = None, sliding_window: int | None = None) -> None:
        super().__init__()
        if norm not in ("rms", "layer"):
            raise ValueError(f"TransformerBlock: norm must be 'rms' or 'layer', got {norm!r}")
        make_norm = RMSNorm if norm == "rms" else LayerNorm
        self.input_layernorm = make_norm(dim, eps=norm_eps)
        self.self_attn = MultiHeadAttention(dim, num_heads, num_kv_heads, head_dim,
                                            bias=attn_bias, out_bias=out_bias, rope=rope,
                                            causal=causal, sliding_window=sliding_window)
        self.post_attention_layernorm = make_norm(dim, eps=norm_eps)
        self.mlp = SwiGLU(dim, hidden_dim, mlp_bias) if mlp == "swiglu" else FeedForward(
            dim, hidden_dim, mlp, mlp_bias)

    def forward(self, x: GraphTensor, cache: LayerCache | None = None,
                mask: GraphTensor | None = None, last_only: bool = False) -> GraphTensor:
        """(batch, seq, dim) -> the same shape, or only the last position's row with
        `last_only` (see `MultiHeadAttention.forward`)."""
        residual = x[:, -1:] if last_only else x
        h = residual + self.self_attn(self.input_layernorm(x), cache, mask, last_only)
        return h + self.mlp(self.post_attention_layernorm(h))
