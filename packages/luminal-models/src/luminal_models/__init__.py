"""luminal_models: model definitions for luminal plus their weight loaders and tokenizers.

The loader layer is plain NumPy and needs no graph: :class:`GGUFFile` and
:class:`SafetensorsFile` read weights, :mod:`luminal_models.quants` decodes GGUF block formats,
:class:`Tokenizer` rebuilds a model's tokenizer from GGUF metadata, and :func:`smollm2_path`
finds (or downloads once) the default SmolLM2 weights. Names are imported lazily so that
``import luminal_models`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "GGUFError": "errors",
    "DownloadError": "errors",
    "HubError": "errors",
    "ModelFileError": "errors",
    "SafetensorsError": "errors",
    "TokenizerError": "errors",
    "GGUFFile": "gguf_file",
    "TensorInfo": "gguf_file",
    "SafetensorsFile": "safetensors_file",
    "SafetensorInfo": "safetensors_file",
    "QuantType": "quants",
    "dequantize": "quants",
    "quantize": "quants",
    "split_blocks": "quants",
    "Tokenizer": "tokenizer",
    "IncrementalDecoder": "tokenizer",
    "resolve_model": "hub",
    "smollm2_path": "hub",
    "gemma3_path": "hub",
    "Gemma3": "gemma3",
    "load_causal_lm": "causal_lm",
    "CT2Error": "errors",
    "CT2File": "ct2_file",
    "Bert": "bert",
    "SentenceEncoder": "bert",
    "Whisper": "whisper",
    "Transcriber": "transcribe",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'luminal_models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
