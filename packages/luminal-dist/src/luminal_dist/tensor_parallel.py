"""Tensor-parallel inference for decoder language models (Megatron-style): the Llama family
and Gemma 3.

`TensorParallel(backend).shard(model)` rewrites a loaded model in place before its graph is
built: each rank keeps a contiguous group of key/value heads with their query heads (the
column-parallel rows of q/k/v_proj, the row-parallel columns of o_proj) and a slice of the MLP
width (rows of gate/up_proj, columns of down_proj). Each of the two row-parallel projections
of a layer ends in one all-reduce (sum) of the partial hidden states, its bias added once after
it. Embeddings, norms (Gemma's per-head QK-norms included) and the LM head stay replicated, so
every rank computes the same logits. Uneven splits are fine (SmolLM2's 3 KV heads over 2
ranks: 2 and 1). With fewer KV heads than ranks, each KV head is replicated on `size // kv`
ranks, which split its query heads (Gemma 3 270M's one KV head and 4 query heads over 2
ranks: 2 query heads each), as vLLM and Megatron do.

Blocks are found by shape, not by class: an attention block is a module with `q_proj`,
`k_proj`, `v_proj` and `o_proj` linears and `num_heads`, `num_kv_heads` and `head_dim`
attributes (Hugging Face's names); a gated MLP (SwiGLU, Gemma's GeGLU) is a module with
`gate_proj`, `up_proj` and `down_proj` linears, its activation applied elementwise.

`TensorParallel` is then the compiler of the model's graph (a `Distributed` around the
backend).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import luminal_nn as nn
import luminal_nn.functional as F
import numpy as np
from luminal import GraphTensor

from .comm import Communicator, OnCommunicator, world
from .ops import all_reduce
from .staged import Distributed


class RowParallel(nn.Module):
    """`linear` applied to this rank's slice of the input features, summed over the ranks;
    the bias (kept out of the partial sums) is added once afterwards."""

    def __init__(self, linear: nn.Linear, comm: Communicator) -> None:
        super().__init__()
        self.weight, self.bias, self.comm = linear.weight, linear.bias, comm

    def forward(self, x: GraphTensor) -> GraphTensor:
        y = all_reduce(F.linear(x, self.weight.tensor(x.graph)), "sum", self.comm)
        return y if self.bias is None else y + self.bias.tensor(x.graph)


def _sliced(param: nn.Parameter | None, rows: np.ndarray | None = None,
            cols: np.ndarray | None = None) -> nn.Parameter | None:
    if param is None:
        return None
    if isinstance(param, nn.QuantizedParameter):
        raise ValueError("tensor parallelism slices float weights: load the model with "
                         "quantized=False")
    data = param.data
    if data is None:
        raise ValueError("tensor parallelism shards a loaded model: its weights are not set")
    if rows is not None:
        data = data[rows]
    if cols is not None:
        data = data[:, cols]
    out = nn.Parameter(data.shape, param.dtype)
    out.data = np.ascontiguousarray(data)
    return out


def _slice_linear(linear: nn.Linear, rows: np.ndarray) -> None:
    linear.weight = _sliced(linear.weight, rows=rows)
    linear.bias = _sliced(linear.bias, rows=rows)
    linear.out_features = len(rows)


def _units(width: int, part: np.ndarray) -> np.ndarray:
    """Row indices of units `part` (heads, of `width` rows each)."""
    return (part[:, None] * width + np.arange(width)).reshape(-1)


def head_share(heads: int, kv: int, size: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """The key/value heads and query heads rank `rank` of `size` keeps (see the module
    docstring); every kept KV head keeps the same number of query heads, as attention's
    grouping needs."""
    group = heads // kv
    if kv >= size:
        mine = np.array_split(np.arange(kv), size)[rank]
        return mine, _units(group, mine)
    if size % kv or group < size // kv:
        raise ValueError(f"{kv} key/value heads and {heads} query heads cannot be split over "
                         f"{size} ranks (fewer KV heads than ranks needs the rank count to be "
                         "a multiple of the KV heads, with a query head for every rank)")
    per = size // kv  # ranks sharing one replicated KV head
    head = rank // per
    return np.array([head]), head * group + np.array_split(np.arange(group), per)[rank % per]


def _has_linears(module: Any, *names: str) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in names)


def is_attention(module: Any) -> bool:
    """Whether `module` is an attention block `TensorParallel` shards."""
    return (_has_linears(module, "q_proj", "k_proj", "v_proj", "o_proj")
            and all(hasattr(module, a) for a in ("num_heads", "num_kv_heads", "head_dim")))


def is_gated_mlp(module: Any) -> bool:
    """Whether `module` is a gated MLP `TensorParallel` shards."""
    return _has_linears(module, "gate_proj", "up_proj", "down_proj")


class TensorParallel(OnCommunicator):
    """Shards decoder language models (Llama family, Gemma 3) over the ranks of `comm` and
    compiles their graphs for `backend` (see the module docstring).

    Args:
        backend: a backend or compiler chain ending in one.
        comm: the communicator (default: this job's world).
        size: the expected number of ranks (`--tensor-parallel N`): an error when the job
            has another size.
    """

    def __init__(self, backend: Any, comm: Communicator | None = None,
                 size: int | None = None) -> None:
        self.comm = comm if comm is not None else world()
        if size is not None and size != self.comm.size:
            raise ValueError(
                f"tensor parallelism over {size} ranks, but this job has {self.comm.size}: "
                f"launch it with `mpiexec -n {size} ...` (or `luminal launch -n {size} ...`)")
        self.backend = backend
        self.distributed = Distributed(backend, self.comm)

    def shard(self, model: Any) -> Any:
        """Keep this rank's share of every attention and MLP block of `model` (in place);
        returns the model."""
        if self.size == 1:
            return model
        modules = list(model.named_modules())
        attn = [m for _, m in modules if is_attention(m)]
        mlps = [m for _, m in modules if is_gated_mlp(m)]
        if not attn:
            raise ValueError(f"{type(model).__name__} has no attention blocks to shard (modules "
                             "with q_proj, k_proj, v_proj and o_proj linears)")
        for name, module in modules:
            if is_attention(module):
                self._shard_attention(name, module)
            elif is_gated_mlp(module):
                self._shard_mlp(module)
        config = getattr(model, "config", None)
        if dataclasses.is_dataclass(config):
            # the KV cache is built from the config: it must hold this rank's KV heads
            local = {"num_heads": attn[0].num_heads, "num_kv_heads": attn[0].num_kv_heads,
                     "intermediate_size": mlps[0].gate_proj.out_features if mlps else None}
            model.config = dataclasses.replace(config, **{
                k: v for k, v in local.items() if v is not None and hasattr(config, k)})
        return model

    def _shard_attention(self, name: str, attn: Any) -> None:
        try:
            mine, q_heads = head_share(attn.num_heads, attn.num_kv_heads, self.size, self.rank)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
        q_rows, kv_rows = _units(attn.head_dim, q_heads), _units(attn.head_dim, mine)
        _slice_linear(attn.q_proj, q_rows)
        _slice_linear(attn.k_proj, kv_rows)
        _slice_linear(attn.v_proj, kv_rows)
        o = attn.o_proj
        o.weight = _sliced(o.weight, cols=q_rows)
        attn.o_proj = RowParallel(o, self.comm)
        attn.num_heads, attn.num_kv_heads = len(q_heads), len(mine)

    def _shard_mlp(self, mlp: Any) -> None:
        width = mlp.gate_proj.out_features
        if width < self.size:
            raise ValueError(f"an MLP of width {width} cannot be split over {self.size} ranks")
        mine = np.array_split(np.arange(width), self.size)[self.rank]
        _slice_linear(mlp.gate_proj, mine)
        _slice_linear(mlp.up_proj, mine)
        down = mlp.down_proj
        down.weight = _sliced(down.weight, cols=mine)
        mlp.down_proj = RowParallel(down, self.comm)

    def compile(self, graph: Any) -> None:
        self.distributed.compile(graph)

    def __repr__(self) -> str:
        return f"TensorParallel({self.backend!r}, {self.comm!r})"
