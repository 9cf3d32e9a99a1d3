"""luminal-onnx: ONNX models as luminal graphs, on any luminal backend.

    import luminal_onnx
    model = luminal_onnx.load("model.onnx")
    outputs = model.run({"images": batch}, backend="cpu")   # dict of NumPy arrays

The names below are imported on first use: the plugin entry point (`luminal_onnx.plugin`)
imports this package whenever luminal loads its plugins, and `onnx` itself costs about 13 MB
of resident memory that a process which never reads an ONNX file should not pay.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import NeedsStaticInputError, OnnxImportError, UnsupportedError

if TYPE_CHECKING:
    from .model import OnnxModel, load, read_model, run
    from .registry import supported_operators

__version__ = "0.1.0"

# public name -> the submodule defining it
_EXPORTS = {
    "OnnxModel": "model",
    "load": "model",
    "read_model": "model",
    "run": "model",
    "supported_operators": "registry",
}

__all__ = [
    "NeedsStaticInputError",
    "OnnxImportError",
    "OnnxModel",
    "UnsupportedError",
    "load",
    "read_model",
    "run",
    "supported_operators",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'luminal_onnx' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
