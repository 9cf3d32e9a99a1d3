"""The causal language model a GGUF file holds, by its `general.architecture`."""

from __future__ import annotations

from .gemma3 import Gemma3
from .gguf_file import GGUFFile
from .llama import Llama

__all__ = ["load_causal_lm"]


def load_causal_lm(gguf: GGUFFile, quantized: bool = True,
                   progress: bool = True) -> Llama | Gemma3:
    """`Gemma3` for a gemma3 file, else `Llama` (which checks for a Llama-family
    architecture); `quantized` keeps block-quantized matrices as the file's bytes."""
    architecture = Gemma3 if gguf.architecture == "gemma3" else Llama
    return architecture.from_gguf(gguf, quantized=quantized, progress=progress)
