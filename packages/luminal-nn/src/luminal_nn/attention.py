"""Multi-head and grouped-query attention, with a KV cache that stays on the device.

The cache of a layer is a pair of graph inputs, in one of two forms:

- growing (`LayerCache`): shape (batch, kv_heads, past, head_dim), where `past` is a symbolic
  dim. Each execution appends the new keys and values and assigns the result back to the
  inputs (`Graph.assign`), so after `execute()` the inputs hold the longer cache on the device;
- written in place (`InPlaceLayerCache`, `KVCache(capacity=...)`): shape (batch, capacity,
  kv_heads, head_dim), allocated once; each execution writes only the new rows, at position
  `past` (`Graph.write`). Nothing of the cache's size is copied or rebound per step, which is
  what makes a decode step cheap on the host; backends whose writes cost only the rows
  written say so with `Backend.in_place_writes`.

Either way the host only advances the dim (`KVCache.advance`). Prefill (many new positions)
and decode (one) run the same compiled graph with different dim values.
"""

from __future__ import annotations

import math
import mmap

import luminal as lm
import numpy as np
from luminal import Graph, GraphTensor
from luminal.dtypes import DType
from luminal.symbolic import Expr, ExprLike, smin, to_expr

from .linear import Linear
from .module import Module
from .rotary import RotaryEmbedding

__all__ = ["InPlaceLayerCache", "KVCache", "LayerCache", "MultiHeadAttention", "causal_mask"]


class LayerCache:
    """Keys and values of one attention layer: two inputs (batch, kv_heads, length, head_dim).

    `order`, an optional int tensor (new_batch,), says which cached sequence each row of the
    new keys continues (beam search reorders and duplicates hypotheses between steps); the
    cache's batch dim is then the previous step's, and becomes new_batch after the update.
    """

    def __init__(self, graph: Graph, shape: tuple, name: str, dtype: DType,
                 order: GraphTensor | None = None):
        self.graph = graph
        self.k = graph.tensor(shape, name=f"{name}.k", dtype=dtype)
        self.v = graph.tensor(shape, name=f"{name}.v", dtype=dtype)
        self.order = order

    @property
    def length(self) -> Expr:
        """The number of cached positions (a symbolic dim)."""
        return to_expr(self.k.shape[2])

    def update(self, k_new: GraphTensor, v_new: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
        """Append (batch, kv_heads, seq, head_dim) keys and values; return the whole cache.

        The result is assigned back to the cache inputs, so the next execution sees it.
        """
        past_k, past_v = self.k, self.v
        if self.order is not None:
            past_k, past_v = past_k.index_select(0, self.order), past_v.index_select(0, self.order)
        k = lm.cat([past_k, k_new.to(self.k.dtype)], dim=2)
        v = lm.cat([past_v, v_new.to(self.v.dtype)], dim=2)
        self.graph.assign(self.k, k)
        self.graph.assign(self.v, v)
        return k, v


class InPlaceLayerCache:
    """Keys and values of one attention layer in two inputs of fixed capacity,
    (batch, capacity, kv_heads, head_dim), of which the first `length` positions are valid.

    Position-major, so that with batch 1 the rows a step writes are one contiguous block
    (a runtime can compute the new keys straight into the cache).
    """

    def __init__(self, graph: Graph, shape: tuple[int, int, int, int], length: str, name: str,
                 dtype: DType):
        # the length as the slice of the cache's first positions sees it (clamped to the
        # capacity): the causal mask and RoPE offset then agree with the keys' shape
        self.graph, self.length = graph, smin(to_expr(length), shape[1])
        self.k = graph.tensor(shape, name=f"{name}.k", dtype=dtype)
        self.v = graph.tensor(shape, name=f"{name}.v", dtype=dtype)

    def update(self, k_new: GraphTensor, v_new: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
        """Write (batch, kv_heads, seq, head_dim) keys and values at position `length`; return
        the cached and new ones together, (batch, kv_heads, length + seq, head_dim)."""
        return self._update(self.k, k_new), self._update(self.v, v_new)

    def _update(self, cache: GraphTensor, new: GraphTensor) -> GraphTensor:
        rows = new.to(cache.dtype).transpose(1, 2).contiguous_if_view()  # (b, seq, kv, d)
        self.graph.write(cache, rows, 1, self.length)
        # the cached rows are read from the input and the new ones from `rows`: the run must
        # not read the positions it writes (Graph.write)
        return lm.cat([cache[:, :self.length], rows], dim=1).transpose(1, 2)


def _untouched_zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Zeros in fresh anonymous memory: pages are only made resident when written, so a cache
    of the model's whole context costs memory for the positions used. (`np.zeros` may reuse
    freed heap memory, which calloc must clear: every page resident at once.)"""
    nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype, count=int(np.prod(shape))).reshape(shape)


class KVCache:
    """The caches of every attention layer of a model, sharing one symbolic length dim.

    Args:
        graph: the graph the cache lives in.
        num_layers: how many layer caches (`cache[i]` is layer i's).
        batch, num_kv_heads, head_dim: the static dims of each layer's K and V.
        length: name of the symbolic dim counting cached positions.
        capacity: None for growing caches (`LayerCache`); else the most positions the cache
            holds, allocated once and written in place (`InPlaceLayerCache`). The buffers are
            zero-filled lazily by the OS, so only the positions written take memory.
    """

    def __init__(self, graph: Graph, num_layers: int, batch: int, num_kv_heads: int,
                 head_dim: int, length: str = "past", dtype: DType = lm.float32,
                 capacity: int | None = None):
        self.graph, self.length_dim, self.capacity = graph, length, capacity
        if capacity is None:
            shape = (batch, num_kv_heads, length, head_dim)
            self.layers: list[LayerCache] | list[InPlaceLayerCache] = [
                LayerCache(graph, shape, f"kv_cache.{i}", dtype) for i in range(num_layers)]
            self._empty = np.zeros((batch, num_kv_heads, 0, head_dim), dtype.numpy)
        else:
            if capacity < 1:
                raise ValueError(f"KVCache: capacity must be >= 1, got {capacity}")
            shape = (batch, capacity, num_kv_heads, head_dim)
            self.layers = [InPlaceLayerCache(graph, shape, length, f"kv_cache.{i}", dtype)
                           for i in range(num_layers)]
            for layer in self.layers:
                layer.k.set(_untouched_zeros(shape, dtype.numpy))
                layer.v.set(_untouched_zeros(shape, dtype.numpy))
        self.reset()

    def __getitem__(self, layer: int) -> LayerCache | InPlaceLayerCache:
        return self.layers[layer]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def length(self) -> int:
        """Positions cached so far (the current value of the length dim)."""
        return self.graph.dims.get(self.length_dim, 0)

    def reset(self) -> None:
        """Empty every layer's cache (binds the length dim to 0)."""
        if self.capacity is None:
            for layer in self.layers:  # the growing caches' shapes imply the length dim
                layer.k.set(self._empty)
                layer.v.set(self._empty)
        self.graph.set_dim(self.length_dim, 0)

    def advance(self, n: int) -> None:
        """After an `execute()` that appended `n` positions, bump the length dim to match."""
        dims = self.graph.dims
        self.graph.set_dim(self.length_dim, dims.get(self.length_dim, 0) + n)


def causal_mask(graph: Graph, seq: ExprLike, offset: ExprLike = 0,
                window: int | None = None) -> GraphTensor:
    """Bool (seq, offset + seq): query i (at position p = offset + i) sees keys 0 .. p, or
    with a sliding `window` only the last `window` of them, keys p - window + 1 .. p (as
    Hugging Face's Mistral: key j is visible when p - window < j <= p). Built once per graph
    and arguments: the layers of a model share it."""
    seq, offset = to_expr(seq), to_expr(offset)
    window = None if window is None else int(window)

    def build() -> GraphTensor:
        rows = graph.arange(seq) + offset
        cols = graph.arange(offset + seq)
        keep = cols.unsqueeze(0) <= rows.unsqueeze(1)
        if window is not None:
            keep = keep & (cols.unsqueeze(0) > rows.unsqueeze(1) - window)
        return keep
    return graph.shared(("causal mask", seq, offset, window), build)


class MultiHeadAttention(Module):
    """Self-attention with `num_heads` query heads sharing `num_kv_heads` key/value heads.

    `num_kv_heads == num_heads` is classic multi-head attention; fewer is grouped-query
    attention (each KV head serves `num_heads // num_kv_heads` query heads, without copying
    the keys). Projections are named as in Hugging Face Llama checkpoints (`q_proj`, `k_proj`,
    `v_proj`, `o_proj`).

    Args:
        embed_dim: model width.
        num_heads, num_kv_heads: query and key/value head counts.
        head_dim: per-head width (default `embed_dim // num_heads`).
        bias: biases on the q/k/v projections; `out_bias` on the output projection (default:
            the same as `bias`).
        rope: rotary embedding applied to queries and keys (positions continue after the
            cache).
        causal: mask future positions.
        sliding_window: with `causal`, each query sees only the last `sliding_window` keys
            (itself included), as Mistral's sliding-window attention; None: all of them.
            Cached keys stay in the cache and are masked out.
    """

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int | None = None,
                 head_dim: int | None = None, bias: bool = False, out_bias: bool | None = None,
                 rope: RotaryEmbedding | None = None, causal: bool = True,
                 sliding_window: int | None = None) -> None:
        super().__init__()
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads % kv:
            raise ValueError(f"attention: num_heads ({num_heads}) must be a multiple of "
                             f"num_kv_heads ({kv})")
        if sliding_window is not None and (not causal or int(sliding_window) < 1):
            raise ValueError(f"attention: sliding_window ({sliding_window}) must be a positive "
                             "int, and needs causal=True")
        self.num_heads, self.num_kv_heads = num_heads, kv
        self.head_dim = head_dim or embed_dim // num_heads
        self.causal = causal
        self.sliding_window = None if sliding_window is None else int(sliding_window)
        d = self.head_dim
        self.q_proj = Linear(embed_dim, num_heads * d, bias)
        self.k_proj = Linear(embed_dim, kv * d, bias)
        self.v_proj = Linear(embed_dim, kv * d, bias)
        self.o_proj = Linear(num_heads * d, embed_dim, bias if out_bias is None else out_bias)
        self.rope = rope

    def forward(self, x: GraphTensor, cache: LayerCache | None = None,
                mask: GraphTensor | None = None, last_only: bool = False) -> GraphTensor:
        """(batch, seq, embed_dim) -> (batch, seq, embed_dim), or (batch, 1, embed_dim) with
        `last_only`.

        `mask` (bool, broadcastable to (seq, keys)) is combined with the causal mask;
        keys = cached positions + seq. `last_only` computes only the last position's output
        (the query, scores and output projection of one row) while every position's keys and
        values still reach the cache: what a prompt's last layer needs when only the next
        token's logits are wanted.
        """
        b, s = x.shape[0], x.shape[1]
        h, kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        queries = x[:, -1:] if last_only else x
        rows = 1 if last_only else s
        q = self.q_proj(queries).unflatten(-1, (h, d)).transpose(1, 2)  # (b, h, rows, d)
        k = self.k_proj(x).unflatten(-1, (kv, d)).transpose(1, 2)  # (b, kv, s, d)
        v = self.v_proj(x).unflatten(-1, (kv, d)).transpose(1, 2)
        offset = cache.length if cache is not None else to_expr(0)
        first = offset + s - 1 if last_only else offset  # position of the first query row
        if self.rope is not None:
            q, k = self.rope(q, first), self.rope(k, offset)
        if cache is not None:
            k, v = cache.update(k, v)
        # Group the query heads of each KV head on a new axis: keys broadcast over it as a
        # stride-0 view instead of being repeated.
        q = q.unflatten(1, (kv, h // kv))  # (b, kv, rep, rows, d)
        scores = (q @ k.unsqueeze(2).transpose(-1, -2)) * (1.0 / math.sqrt(d))
        keep = (causal_mask(x.graph, rows, first, self.sliding_window) if self.causal
                else None)
        if mask is not None:
            mask = mask.to(lm.bool)
            if last_only and mask.ndim >= 2:
                mask = mask[..., -1:, :]
            keep = mask if keep is None else keep & mask
        if keep is not None:
            scores = lm.where(keep, scores, -math.inf)
        out = scores.softmax(-1) @ v.unsqueeze(2)  # (b, kv, rep, rows, d)
        out = out.flatten(1, 2).transpose(1, 2).reshape((b, rows, h * d))
        return self.o_proj(out)

    def extra_repr(self) -> str:
        window = f", sliding_window={self.sliding_window}" if self.sliding_window else ""
        return (f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, "
                f"head_dim={self.head_dim}{window}")
