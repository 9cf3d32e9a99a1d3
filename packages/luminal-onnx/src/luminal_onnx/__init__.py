"""luminal-onnx: ONNX models as luminal graphs, on any luminal backend.

    import luminal_onnx
    model = luminal_onnx.load("model.onnx")
    outputs = model.run({"images": batch}, backend="cpu")   # dict of NumPy arrays
"""

from .errors import NeedsStaticInputError, OnnxImportError, UnsupportedError
from .model import OnnxModel, load, read_model, run
from .registry import supported_operators

__version__ = "0.1.0"

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
