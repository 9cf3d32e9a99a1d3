"""A Llama-style decoder built from luminal-core's high-level ops (RMSNorm, rotary attention
with grouped KV heads and a causal softmax, SwiGLU MLP): SmolLM2-135M's shapes by default.
Used by the compile-time tests and by benchmarks/cpu_bench.py."""

from __future__ import annotations

from dataclasses import dataclass

import luminal as lm
import luminal_nn.functional as F
import numpy as np


@dataclass(frozen=True)
class Config:
    hidden: int = 576
    heads: int = 9
    kv_heads: int = 3
    ffn: int = 1536
    layers: int = 30
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


WEIGHTS = ("attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w_gate", "w_up", "w_down")


def weight_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    hd = cfg.head_dim
    return {
        "attn_norm": (cfg.hidden,), "wq": (cfg.hidden, cfg.hidden),
        "wk": (cfg.kv_heads * hd, cfg.hidden), "wv": (cfg.kv_heads * hd, cfg.hidden),
        "wo": (cfg.hidden, cfg.hidden), "ffn_norm": (cfg.hidden,),
        "w_gate": (cfg.ffn, cfg.hidden), "w_up": (cfg.ffn, cfg.hidden),
        "w_down": (cfg.hidden, cfg.ffn),
    }


def random_weights(cfg: Config, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, shape in weight_shapes(cfg).items():
        scale = 1.0 if len(shape) == 1 else shape[-1] ** -0.5
        base = 1.0 if len(shape) == 1 else 0.0
        out[name] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    return out


def rope_tables(seq: int, head_dim: int, theta: float = 100000.0) -> tuple[np.ndarray, ...]:
    inv = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.outer(np.arange(seq), inv)
    ang = np.concatenate([ang, ang], axis=-1)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = lm.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def block(cfg: Config, x, w: dict, cos, sin):
    """One decoder layer on x (seq, hidden); `w` maps WEIGHTS to graph tensors."""
    seq, hd = x.shape[0], cfg.head_dim
    h = F.rms_norm(x, (cfg.hidden,), w["attn_norm"], eps=cfg.eps)
    q = F.linear(h, w["wq"]).reshape(seq, cfg.heads, hd).permute(1, 0, 2)
    k = F.linear(h, w["wk"]).reshape(seq, cfg.kv_heads, hd).permute(1, 0, 2)
    v = F.linear(h, w["wv"]).reshape(seq, cfg.kv_heads, hd).permute(1, 0, 2)
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + F.linear(att.permute(1, 0, 2).reshape(seq, cfg.hidden), w["wo"])
    h = F.rms_norm(x, (cfg.hidden,), w["ffn_norm"], eps=cfg.eps)
    mlp = F.silu(F.linear(h, w["w_gate"])) * F.linear(h, w["w_up"])
    return x + F.linear(mlp, w["w_down"])


def build(cfg: Config, seq: int | str = "seq"):
    """A graph of `cfg.layers` decoder layers; returns (graph, x, cos, sin, weights, out)."""
    g = lm.Graph()
    x = g.tensor((seq, cfg.hidden), name="x")
    cos = g.tensor((seq, cfg.head_dim), name="cos")
    sin = g.tensor((seq, cfg.head_dim), name="sin")
    shapes = weight_shapes(cfg)
    weights = []
    h = x
    for layer in range(cfg.layers):
        w = {n: g.tensor(shapes[n], name=f"l{layer}.{n}") for n in WEIGHTS}
        weights.append(w)
        h = block(cfg, h, w, cos, sin)
    return g, x, cos, sin, weights, h.retrieve()
