"""The causal language model a GGUF file holds, by its `general.architecture`."""

from __future__ import annotations

import os

from .gemma3 import Gemma3
from .gguf_file import GGUFFile
from .llama import Llama
from .tokenizer import Tokenizer

__all__ = ["load_causal_lm", "open_causal_lm"]


def load_causal_lm(gguf: GGUFFile, quantized: bool = True,
                   progress: bool = True) -> Llama | Gemma3:
    """`Gemma3` for a gemma3 file, else `Llama` (which checks for a Llama-family
    architecture); `quantized` keeps block-quantized matrices as the file's bytes."""
    architecture = Gemma3 if gguf.architecture == "gemma3" else Llama
    return architecture.from_gguf(gguf, quantized=quantized, progress=progress)


def open_causal_lm(path: str | os.PathLike[str], quantized: bool = True,
                   progress: bool = True) -> tuple[Llama | Gemma3, Tokenizer]:
    """The model and tokenizer of a GGUF file, parsed once. The file's parsed metadata
    (megabytes of Python strings for a large vocabulary) is freed on return, before the
    caller compiles the model, so it does not add to the peak memory."""
    with GGUFFile(path) as gguf:
        tokenizer = Tokenizer.from_gguf(gguf)
        model = load_causal_lm(gguf, quantized=quantized, progress=progress)
    return model, tokenizer
