"""Rotary position embeddings (RoPE), with Llama 3 and linear frequency scaling.

Positions come from the graph (`offset + arange(seq)`, where `offset` may be a symbolic dim such
as the KV-cache length), so one compiled graph serves every position. The frequencies are
computed on the host once and bound as a non-persistent buffer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import luminal as lm
import numpy as np
from luminal import GraphTensor
from luminal.symbolic import Expr, ExprLike, to_expr

from .module import Buffer, Module

__all__ = ["RotaryEmbedding", "rope_inv_freq"]


def rope_inv_freq(dim: int, theta: float = 10000.0,
                  scaling: Mapping[str, Any] | None = None) -> np.ndarray:
    """The `dim // 2` inverse frequencies `theta ** (-2i / dim)`, rescaled as `scaling` says.

    `scaling` follows Hugging Face's `rope_scaling` dicts: `{"rope_type": "linear", "factor": f}`
    or `{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}` (`"type"` is accepted for `"rope_type"`). None or
    `"default"` leaves the frequencies alone.
    """
    if dim % 2:
        raise ValueError(f"rope: the rotated dim must be even, got {dim}")
    inv = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        pass
    elif kind == "linear":
        inv = inv / float(scaling["factor"])
    elif kind == "llama3":
        inv = _llama3(inv, scaling)
    else:
        raise ValueError(f"rope: unsupported rope scaling type {kind!r} "
                         "(supported: default, linear, llama3)")
    return inv.astype(np.float32)


def _llama3(inv: np.ndarray, s: Mapping[str, Any]) -> np.ndarray:
    """Llama 3.1's schedule: long wavelengths are divided by `factor`, short ones kept, and
    the band between blends the two (as in Meta's reference and transformers)."""
    factor = float(s["factor"])
    low, high = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_ctx = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_ctx / low, inv / factor, inv)
    smooth = (old_ctx / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, blended, scaled)


class RotaryEmbedding(Module):
    """Rotate pairs of features of (..., seq, head_dim) tensors by position-dependent angles.

    Args:
        head_dim: size of the last axis (all of it is rotated).
        theta: the frequency base.
        scaling: a Hugging Face `rope_scaling` dict (see `rope_inv_freq`).
        interleaved: rotate adjacent pairs (x[2i], x[2i+1]) as llama.cpp and Meta's original
            code do, instead of halves (x[i], x[i + d/2]) as Hugging Face does. GGUF files
            converted from Hugging Face checkpoints have their Q/K rows permuted for the
            interleaved form.
        inv_freq: explicit inverse frequencies (overrides theta and scaling), e.g. from a GGUF
            file's `rope_freqs` tensor.
    """

    def __init__(self, head_dim: int, theta: float = 10000.0,
                 scaling: Mapping[str, Any] | None = None, interleaved: bool = False,
                 inv_freq: np.ndarray | None = None) -> None:
        super().__init__()
        self.head_dim, self.theta, self.interleaved = head_dim, theta, interleaved
        freqs = rope_inv_freq(head_dim, theta, scaling) if inv_freq is None else inv_freq
        if freqs.shape != (head_dim // 2,):
            raise ValueError(f"rope: inv_freq has shape {freqs.shape}, expected ({head_dim // 2},)")
        self.inv_freq = Buffer(np.asarray(freqs, np.float32), persistent=False)

    def angles(self, graph: lm.Graph, seq: ExprLike, offset: ExprLike = 0):
        """(cos, sin), each (seq, head_dim // 2), for positions offset .. offset + seq - 1.
        Built once per graph, frequencies, `seq` and `offset`: every layer sharing this
        module reads the same two tensors."""
        start = to_expr(offset) if not isinstance(offset, str) else Expr.var(offset)
        seq = to_expr(seq)
        inv_freq = self.inv_freq.tensor(graph)

        def build():
            pos = graph.arange(start, start + seq).to(lm.float32)
            freqs = pos.unsqueeze(-1) * inv_freq.unsqueeze(0)
            return freqs.cos(), freqs.sin()
        return graph.shared(("rope angles", inv_freq.id, seq, start), build)

    def forward(self, x: GraphTensor, offset: ExprLike = 0) -> GraphTensor:
        """Rotate `x` (..., seq, head_dim) whose first row sits at position `offset`."""
        seq, dim = x.shape[-2], x.shape[-1]
        if not dim == self.head_dim:
            raise ValueError(f"rope: expected a last dim of {self.head_dim}, got {dim}")
        cos, sin = self.angles(x.graph, seq, offset)
        half = self.head_dim // 2
        if self.interleaved:
            pairs = x.unflatten(-1, (half, 2))
            a, b = pairs[..., 0], pairs[..., 1]
            return lm.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
        a, b = x[..., :half], x[..., half:]
        return lm.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def extra_repr(self) -> str:
        return f"{self.head_dim}, theta={self.theta}, interleaved={self.interleaved}"
