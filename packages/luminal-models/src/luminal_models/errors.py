"""Exceptions raised by luminal_models' loaders.

Each message starts with the file it is about, so a failure deep inside model loading still says
which file was wrong and, where it applies, which tensor and byte offset.
"""

from __future__ import annotations

__all__ = [
    "CT2Error",
    "ContextLengthError",
    "DownloadError",
    "GGUFError",
    "HubError",
    "ModelFileError",
    "SafetensorsError",
    "TokenizerError",
]


class ModelFileError(ValueError):
    """A weight file is missing, malformed or holds something this package cannot use."""


class GGUFError(ModelFileError):
    """A GGUF file is missing, malformed, truncated or uses an unsupported tensor type."""


class CT2Error(ModelFileError):
    """A CTranslate2 model.bin is missing, malformed, truncated or of an unsupported version."""


class SafetensorsError(ModelFileError):
    """A safetensors file is missing, malformed or truncated."""


class TokenizerError(ModelFileError):
    """A model's tokenizer metadata is missing or describes a tokenizer we do not implement."""


class HubError(RuntimeError):
    """A default model could not be found, downloaded or verified."""


class DownloadError(HubError):
    """Fetching a model failed (typically no network); the message says how to fetch it by hand."""


class ContextLengthError(ValueError):
    """The tokens to feed do not fit in what is left of a generator's context."""
