"""The Llama architecture (Llama 2/3, SmolLM2, Mistral-style): config, model, weight loading.

The model is built from luminal_nn modules with Hugging Face parameter names
(`model.layers.0.self_attn.q_proj.weight`, ...), so safetensors checkpoints load by name and
GGUF tensors are renamed onto them (`GGUF_NAMES`). GGUF files converted from Hugging Face
checkpoints store the Q and K projections with their rows permuted for llama.cpp's
adjacent-pair RoPE; the loader undoes that permutation, so one model definition (half-split
RoPE, as in transformers) serves both formats and its intermediate values line up with
transformers'.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import luminal as lm
import luminal_nn as nn
import numpy as np
from luminal import GraphTensor
from luminal.quant import BLOCK_FORMATS
from tqdm.auto import tqdm

from .config_schema import (
    REQUIRED,
    get_bool,
    get_float,
    get_int,
    get_list,
    get_str,
    read_json_object,
)
from .errors import ModelFileError
from .gguf_file import GGUFFile, TensorInfo

__all__ = ["GGUF_NAMES", "Llama", "LlamaConfig", "load_gguf_weights", "load_llama"]


@dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of a Llama-family decoder.

    `rope_scaling` is a Hugging Face `rope_scaling` dict (linear or llama3) or None;
    `rope_freqs` holds explicit RoPE frequency divisors (GGUF `rope_freqs.weight`, which
    llama.cpp uses for Llama 3.1 instead of scaling metadata). `attention_bias` puts biases on
    the q, k, v and o projections and `mlp_bias` on the three MLP projections, as Hugging
    Face's `LlamaConfig`. `sliding_window` (Mistral) limits each query to the last that many
    positions, on every layer or, with `layer_types`, on the "sliding_attention" ones.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Mapping[str, Any] | None = None
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    rope_freqs: tuple[float, ...] | None = field(default=None, repr=False)
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        problems = _config_problems(self)
        if problems:
            raise ValueError("; ".join(problems))

    def layer_window(self, layer: int) -> int | None:
        """The sliding attention window of `layer` (None: full causal attention). Without
        `layer_types` the window applies to every layer, as in Mistral; with them, only to
        layers marked "sliding_attention"."""
        if self.sliding_window is None:
            return None
        if self.layer_types is not None and self.layer_types[layer] != "sliding_attention":
            return None
        return self.sliding_window

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> LlamaConfig:
        """Read the config from GGUF metadata (`{arch}.block_count`, ...), each value checked
        for its type and range (see `LIMITS`).

        Raises:
            ModelFileError: a key is missing, mistyped or out of range, or the config does not
                match the file's tensors; the message names the file and the key.
        """
        meta = gguf.metadata
        arch = gguf.architecture
        if arch not in ("llama", "mistral"):
            raise ModelFileError(
                f"{gguf.path}: architecture {arch!r} is not a Llama-family model "
                "(expected 'llama' or 'mistral')"
            )
        src = gguf.path

        def count(key: str, default: Any = REQUIRED) -> int:
            limit = LIMITS.get(key.rsplit(".", 1)[-1], MAX_DIM)
            return get_int(src, meta, f"{arch}.{key}", 1, limit, default)

        hidden, heads = count("embedding_length"), count("attention.head_count")
        head_dim = count("attention.key_length", None) or count("rope.dimension_count", None)
        if head_dim is None:
            head_dim = _derived_head_dim(src, hidden, heads)
        vocab = count("vocab_size", None) or gguf.info("token_embd.weight").shape[0]
        scaling = None
        kind = get_str(src, meta, f"{arch}.rope.scaling.type", None)
        if kind == "linear":
            factor = get_float(src, meta, f"{arch}.rope.scaling.factor", 0.0, 1e6, open_low=True)
            scaling = {"rope_type": "linear", "factor": factor}
        elif kind not in (None, "none"):
            raise ModelFileError(f"{gguf.path}: unsupported RoPE scaling type {kind!r}")
        layers = count("block_count")
        _check_layer_count(src, gguf.tensors, _GGUF_LAYER, layers)
        freqs = None
        if "rope_freqs.weight" in gguf.tensors:
            if gguf.info("rope_freqs.weight").shape != (head_dim // 2,):
                raise ModelFileError(
                    f"{gguf.path}: tensor 'rope_freqs.weight' has shape "
                    f"{gguf.info('rope_freqs.weight').shape}, the config expects "
                    f"({head_dim // 2},)")
            freqs = tuple(float(f) for f in gguf.tensor("rope_freqs.weight"))
        return _checked(src, cls,
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=count("feed_forward_length"),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=count("attention.head_count_kv", None) or heads,
            head_dim=head_dim,
            rms_norm_eps=get_float(src, meta, f"{arch}.attention.layer_norm_rms_epsilon", 0.0,
                                   1.0, 1e-5, open_low=True),
            rope_theta=get_float(src, meta, f"{arch}.rope.freq_base", 0.0, 1e12, 10000.0,
                                 open_low=True),
            rope_scaling=scaling,
            max_position_embeddings=count("context_length", 4096),
            tie_word_embeddings="output.weight" not in gguf.tensors,
            attention_bias="blk.0.attn_q.bias" in gguf.tensors,
            mlp_bias="blk.0.ffn_up.bias" in gguf.tensors,
            rope_freqs=freqs,
        )

    @classmethod
    def from_hf(cls, config: Mapping[str, Any], source: object = "config.json") -> LlamaConfig:
        """From a Hugging Face `config.json` dict (transformers 4 or 5 spelling of RoPE), each
        value checked for its type and range (see `LIMITS`).

        Raises:
            ModelFileError: a key is missing, mistyped or out of range; the message names
                `source` and the key.
        """
        src = source
        if not isinstance(config, Mapping):
            raise ModelFileError(f"{src}: must hold a JSON object, got {type(config).__name__}")

        def count(key: str, default: Any = REQUIRED) -> int:
            return get_int(src, config, key, 1, LIMITS.get(key, MAX_DIM), default)

        params = config.get("rope_parameters") or {}
        if not isinstance(params, Mapping):
            raise ModelFileError(f"{src}: rope_parameters must be an object")
        scaling = config.get("rope_scaling") or (
            params if params.get("rope_type", "default") != "default" else None)
        if scaling is not None and not isinstance(scaling, Mapping):
            raise ModelFileError(f"{src}: rope_scaling must be an object or null")
        theta = get_float(src, config, "rope_theta", 0.0, 1e12,
                          get_float(src, params, "rope_theta", 0.0, 1e12, 10000.0, open_low=True),
                          open_low=True)
        hidden, heads = count("hidden_size"), count("num_attention_heads")
        layers = count("num_hidden_layers")
        window = count("sliding_window", None)
        if not get_bool(src, config, "use_sliding_window", True):  # Qwen2-style switch
            window = None
        layer_types = get_list(src, config, "layer_types", str, None)
        head_dim = count("head_dim", None) or _derived_head_dim(src, hidden, heads)
        return _checked(src, cls,
            vocab_size=count("vocab_size"),
            hidden_size=hidden,
            intermediate_size=count("intermediate_size"),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=count("num_key_value_heads", None) or heads,
            head_dim=head_dim,
            rms_norm_eps=get_float(src, config, "rms_norm_eps", 0.0, 1.0, 1e-6, open_low=True),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=count("max_position_embeddings", 4096),
            tie_word_embeddings=get_bool(src, config, "tie_word_embeddings", False),
            attention_bias=get_bool(src, config, "attention_bias", False),
            mlp_bias=get_bool(src, config, "mlp_bias", False),
            sliding_window=window,
            layer_types=None if layer_types is None else tuple(layer_types),
        )


# Upper bounds of the config's sizes: far above any released Llama-family model, low enough
# that a hostile file cannot make the model definition itself take unbounded memory or time.
LIMITS: dict[str, int] = {
    "vocab_size": 1 << 22, "hidden_size": 1 << 16, "embedding_length": 1 << 16,
    "intermediate_size": 1 << 18, "feed_forward_length": 1 << 18,
    "num_hidden_layers": 1024, "block_count": 1024,
    "num_attention_heads": 1024, "head_count": 1024,
    "num_key_value_heads": 1024, "head_count_kv": 1024,
    "head_dim": 4096, "key_length": 4096, "dimension_count": 4096,
    "max_position_embeddings": 1 << 24, "context_length": 1 << 24, "sliding_window": 1 << 24,
}  # fmt: skip
MAX_DIM = 1 << 24  # bound of the sizes LIMITS does not name
_LAYER_KINDS = ("full_attention", "sliding_attention")
_GGUF_LAYER = re.compile(r"^blk\.(\d+)\.")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _derived_head_dim(source: object, hidden: int, heads: int) -> int:
    if hidden % heads:
        raise ModelFileError(f"{source}: the head count {heads} does not divide the hidden size "
                             f"{hidden} (and no head dim is given)")
    return hidden // heads


def _config_problems(c: LlamaConfig) -> list[str]:
    """What is inconsistent in a config (each field's own range is checked where it is read)."""
    problems = []
    if c.num_heads % c.num_kv_heads:
        problems.append(f"the KV head count {c.num_kv_heads} must divide the head count "
                        f"{c.num_heads}")
    if c.head_dim % 2:
        problems.append(f"the head dim {c.head_dim} must be even (RoPE rotates pairs)")
    if c.layer_types is not None:
        if len(c.layer_types) != c.num_layers:
            problems.append(f"layer_types has {len(c.layer_types)} entries for "
                            f"{c.num_layers} layers")
        bad = sorted({k for k in c.layer_types if k not in _LAYER_KINDS})
        if bad:
            problems.append(f"layer_types holds {bad}; known kinds: {list(_LAYER_KINDS)}")
    try:
        nn.rope_inv_freq(c.head_dim - c.head_dim % 2, c.rope_theta, c.rope_scaling)
    except (ValueError, KeyError, TypeError) as e:
        problems.append(f"rope_scaling {dict(c.rope_scaling or {})!r} is invalid: {e}")
    return problems


def _checked(source: object, cls: type[LlamaConfig], **fields: Any) -> LlamaConfig:
    try:
        return cls(**fields)
    except ValueError as e:
        raise ModelFileError(f"{source}: {e}") from None


def _check_layer_count(source: object, names: Iterable[str], pattern: re.Pattern[str],
                       layers: int) -> None:
    """The config's layer count must match the layers the file has tensors for (checked
    before the model is built, so a bogus count costs nothing)."""
    found = {int(m.group(1)) for n in names if (m := pattern.match(n))}
    if found != set(range(layers)):
        have = f"layers 0..{max(found)}" if found else "no layer tensors"
        raise ModelFileError(f"{source}: the config says {layers} layers but the file has "
                             f"{have} ({len(found)} distinct)")


class LlamaModel(nn.Module):
    """Embedding, decoder layers and the final norm (Hugging Face's `model.` prefix)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        c = config
        inv_freq = None
        if c.rope_freqs is not None:
            inv_freq = nn.rope_inv_freq(c.head_dim, c.rope_theta) / np.float32(c.rope_freqs)
        rope = nn.RotaryEmbedding(c.head_dim, c.rope_theta, c.rope_scaling, inv_freq=inv_freq)
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(
            nn.TransformerBlock(
                c.hidden_size, c.num_heads, c.intermediate_size, num_kv_heads=c.num_kv_heads,
                head_dim=c.head_dim, norm_eps=c.rms_norm_eps, rope=rope,
                attn_bias=c.attention_bias, mlp_bias=c.mlp_bias,
                sliding_window=c.layer_window(i),
            )
            for i in range(c.num_layers)
        )
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_norm_eps)


class Llama(nn.Module):
    """A Llama-family causal language model.

    Call it on int32 token ids (batch, seq) to get logits (batch, seq or 1, vocab). With a
    `KVCache` (see `new_cache`) the ids continue the cached sequence.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)

    def new_cache(self, graph: lm.Graph, batch: int = 1, length: str = "past",
                  capacity: int | None = None) -> nn.KVCache:
        """An empty KV cache for this model in `graph` (its length is the dim `length`):
        growing, or with `capacity`, of that many positions written in place."""
        c = self.config
        return nn.KVCache(graph, c.num_layers, batch, c.num_kv_heads, c.head_dim, length,
                          capacity=capacity)

    def forward(self, tokens: GraphTensor, cache: nn.KVCache | None = None,
                last_only: bool = False) -> GraphTensor:
        """Logits for `tokens` (batch, seq); `last_only` keeps only the last position, so the
        LM head (the largest matrix) and the last layer after its keys and values run once
        per sequence instead of once per token."""
        m = self.model
        h = m.embed_tokens(tokens)
        last = len(m.layers) - 1
        for i, layer in enumerate(m.layers):
            # the last layer computes only the rows it is asked for (as llama.cpp does): its
            # keys and values still cover every position
            h = layer(h, cache[i] if cache is not None else None, last_only=last_only and i == last)
        h = m.norm(h)
        return self.lm_head(h) if self.lm_head is not None else m.embed_tokens.attend(h)

    # ----- loading --------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str] | GGUFFile, quantized: bool = True,
                  progress: bool = True) -> Llama:
        """Build the model from a GGUF file.

        With `quantized`, matrices stored in a GGUF block format stay in that format (the
        file's bytes, memory-mapped where possible) and are dequantized inside the graph,
        where backends with quantized kernels never expand them; other tensors, or all of them
        without `quantized`, are dequantized to float32 at load.
        """
        if not isinstance(path, GGUFFile):
            # opened here, so closed here: that frees the parsed metadata (about 175 MB for a
            # 49k-token vocabulary) while the weights keep the file's memory map alive
            with GGUFFile(path) as opened:
                return cls.from_gguf(opened, quantized, progress)
        gguf = path
        model = cls(LlamaConfig.from_gguf(gguf))
        model.load_gguf(gguf, quantized, progress)
        return model

    def load_gguf(self, gguf: GGUFFile, quantized: bool = True, progress: bool = True) -> None:
        """Load every weight of `gguf` (renamed by `GGUF_NAMES`; Q/K rows un-permuted)."""
        load_gguf_weights(self, gguf, gguf_to_hf_name, quantized, progress, self._gguf_weight,
                          skip=("rope_freqs.weight",))

    def _gguf_weight(self, gguf: GGUFFile, info: TensorInfo, name: str,
                     raw: bool) -> np.ndarray:
        w = gguf.tensor(info.name, dequantize=not raw)
        c = self.config
        if name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            return unpermute_qk(w, c.num_heads)
        if name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            return unpermute_qk(w, c.num_kv_heads)
        return w

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike[str], progress: bool = True) -> Llama:
        """Build the model from a Hugging Face directory (config.json + *.safetensors)."""
        from .safetensors_file import SafetensorsFile

        folder = Path(path)
        if folder.is_file():
            folder = folder.parent
        config_path = folder / "config.json"
        if not config_path.is_file():
            raise ModelFileError(f"{folder}: no config.json next to the safetensors weights")
        config = LlamaConfig.from_hf(read_json_object(config_path), source=config_path)
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ModelFileError(f"{folder}: no *.safetensors files")
        opened = [SafetensorsFile(file) for file in files]  # headers only: validated, cheap
        _check_layer_count(folder, (n for st in opened for n in st.tensors), _HF_LAYER,
                           config.num_layers)
        model = cls(config)
        params = dict(model.named_parameters())
        loaded = set()
        for file, st in zip(files, opened):
            with st:
                for name in tqdm(st.tensors, desc=f"loading {file.name}", unit="tensor",
                                 disable=not progress, leave=False):
                    if name in params:
                        _check_shape(file, name, None, st.info(name).shape, params[name].shape)
                        params[name].data = st.tensor(name).astype(np.float32, copy=False)
                        loaded.add(name)
                    elif not (name.endswith("rotary_emb.inv_freq") or (
                            name == "lm_head.weight" and model.lm_head is None)):
                        raise ModelFileError(f"{file}: unexpected tensor {name!r} for this "
                                             "config")
        _check_complete(folder, params, loaded)
        return model


def load_gguf_weights(model: nn.Module, gguf: GGUFFile, rename: Callable[[str], str],
                      quantized: bool, progress: bool,
                      read: Callable[[GGUFFile, TensorInfo, str, bool], np.ndarray],
                      skip: tuple[str, ...] = ()) -> None:
    """Load every tensor of `gguf` (but `skip`) into the parameter `rename(name)` of `model`.

    With `quantized`, matrices in a block format of `KEPT_QUANTIZED` stay the file's bytes
    (the parameter becomes an `nn.QuantizedParameter`); `read(gguf, info, name, raw)` fetches
    a tensor (raw bytes or float32). Every parameter must be loaded, with its shape.
    """
    params = dict(model.named_parameters())
    infos = [i for i in gguf.tensors.values() if i.name not in skip]
    loaded = set()
    for info in tqdm(infos, desc=f"loading {gguf.path.name}", unit="tensor",
                     disable=not progress, leave=False):
        name = rename(info.name)
        if name not in params:
            raise ModelFileError(f"{gguf.path}: unexpected tensor {info.name!r} for a "
                                 f"{type(model).__name__} model with "
                                 f"{model.config.num_layers} layers")
        _check_shape(gguf.path, info.name, name, info.shape, params[name].shape)
        keep = quantized and info.qtype.name.lower() in KEPT_QUANTIZED and len(info.shape) == 2
        wanted = nn.QuantizedParameter(info.shape, info.qtype.name) if keep else (
            nn.Parameter(info.shape))
        if type(params[name]) is not type(wanted) or (
                keep and params[name].qtype != wanted.qtype):
            # a quantized weight is a different kind of parameter (raw bytes in, float out)
            module_path, _, attr = name.rpartition(".")
            setattr(model.get_submodule(module_path), attr, wanted)
            params[name] = wanted
        params[name].data = read(gguf, info, name, keep)
        loaded.add(name)
    _check_complete(gguf.path, params, loaded)


def _check_shape(source: Any, file_name: str, name: str | None, got: tuple[int, ...],
                 want: tuple[int, ...]) -> None:
    """A ModelFileError naming the file and the tensor (and the model parameter it loads
    into, where the file's name differs) unless its shape is the config-derived `want`."""
    if tuple(got) != tuple(want):
        also = f" ({name})" if name is not None and name != file_name else ""
        raise ModelFileError(f"{source}: tensor {file_name!r}{also} has shape {tuple(got)}, "
                             f"the config expects {tuple(want)}")


def _check_complete(source: Any, params: Mapping[str, nn.Parameter], loaded: set[str]) -> None:
    missing = [n for n in params if n not in loaded]
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ModelFileError(f"{source}: {len(missing)} weights are missing: {shown}")


# GGUF block formats that luminal.quant.dequantize reads (and backends fuse into matmuls).
KEPT_QUANTIZED = tuple(BLOCK_FORMATS)

# GGUF tensor name -> Hugging Face name (`{i}` is the layer).
GGUF_NAMES: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
    # attention_bias / mlp_bias checkpoints
    "blk.{i}.attn_q.bias": "model.layers.{i}.self_attn.q_proj.bias",
    "blk.{i}.attn_k.bias": "model.layers.{i}.self_attn.k_proj.bias",
    "blk.{i}.attn_v.bias": "model.layers.{i}.self_attn.v_proj.bias",
    "blk.{i}.attn_output.bias": "model.layers.{i}.self_attn.o_proj.bias",
    "blk.{i}.ffn_gate.bias": "model.layers.{i}.mlp.gate_proj.bias",
    "blk.{i}.ffn_up.bias": "model.layers.{i}.mlp.up_proj.bias",
    "blk.{i}.ffn_down.bias": "model.layers.{i}.mlp.down_proj.bias",
}
_LAYER = re.compile(r"^blk\.(\d+)\.")


def gguf_to_hf_name(name: str, table: Mapping[str, str] = GGUF_NAMES) -> str:
    """The Hugging Face name of a GGUF tensor by `table` (unknown names come back
    unchanged)."""
    m = _LAYER.match(name)
    key = _LAYER.sub("blk.{i}.", name) if m else name
    hf = table.get(key)
    return name if hf is None else hf.replace("{i}", m.group(1) if m else "")


def unpermute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo the GGUF converter's Q/K row permutation.

    The converter reorders each head's rows from halves [x0..x(d/2-1), x(d/2)..] to adjacent
    pairs [x0, x(d/2), x1, x(d/2+1), ...] for llama.cpp's RoPE. Rows are independent, so this
    works on float rows and on rows of quantized blocks alike.
    """
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_llama(path: str | os.PathLike[str], quantized: bool = True,
               progress: bool = True) -> Llama:
    """A Llama from a `.gguf` file or a Hugging Face safetensors directory / file
    (`quantized` applies to GGUF, see `Llama.from_gguf`)."""
    p = Path(path)
    if p.suffix.lower() == ".gguf":
        return Llama.from_gguf(p, quantized, progress)
    if p.is_dir() or p.suffix.lower() == ".safetensors":
        return Llama.from_safetensors(p, progress)
    raise ModelFileError(f"{p}: expected a .gguf file or a safetensors directory")

