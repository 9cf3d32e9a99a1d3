"""The causal language model a GGUF file holds, by its `general.architecture`."""

from __future__ import annotations

import os

from .errors import ModelFileError
from .gemma3 import Gemma3
from .gguf_file import GGUFFile
from .llama import Llama
from .tokenizer import Tokenizer

__all__ = ["ARCHITECTURES", "load_causal_lm", "open_causal_lm"]

# GGUF's `general.architecture` -> the model class that runs it
ARCHITECTURES: dict[str, type[Llama] | type[Gemma3]] = {
    "llama": Llama, "mistral": Llama, "gemma3": Gemma3,
}


def load_causal_lm(gguf: GGUFFile, quantized: bool = True,
                   progress: bool = True) -> Llama | Gemma3:
    """The model of the file's architecture (`ARCHITECTURES`); `quantized` keeps
    block-quantized matrices as the file's bytes.

    Raises:
        ModelFileError: an architecture luminal-models does not run (the message names the
            file, its architecture and the ones supported).
    """
    return _architecture(gguf).from_gguf(gguf, quantized=quantized, progress=progress)


def _architecture(gguf: GGUFFile) -> type[Llama] | type[Gemma3]:
    name = gguf.architecture
    architecture = ARCHITECTURES.get(name) if isinstance(name, str) else None
    if architecture is None:
        raise ModelFileError(
            f"{gguf.path}: architecture {name!r} is not supported (luminal-models "
            f"runs {', '.join(map(repr, ARCHITECTURES))})")
    return architecture


def open_causal_lm(path: str | os.PathLike[str], quantized: bool = True,
                   progress: bool = True) -> tuple[Llama | Gemma3, Tokenizer]:
    """The model and tokenizer of a GGUF file, parsed once. The file's parsed metadata
    (megabytes of Python strings for a large vocabulary) is freed on return, before the
    caller compiles the model, so it does not add to the peak memory."""
    with GGUFFile(path) as gguf:
        _architecture(gguf)  # before the tokenizer, whose errors would hide this one
        tokenizer = Tokenizer.from_gguf(gguf)
        model = load_causal_lm(gguf, quantized=quantized, progress=progress)
    return model, tokenizer
