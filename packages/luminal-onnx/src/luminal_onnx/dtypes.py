"""ONNX element types and the luminal dtypes that carry them.

int64 (ONNX's index type) is carried as int32: values are checked to fit when they enter the
graph, and outputs are handed back as int64, so users see ONNX's declared types.
"""

from __future__ import annotations

import luminal as lm
import numpy as np
from onnx import TensorProto

from .errors import OnnxImportError

# ONNX element type -> (luminal dtype it computes in, NumPy dtype ONNX declares)
_TYPES = {
    TensorProto.FLOAT: (lm.float32, np.dtype(np.float32)),
    TensorProto.FLOAT16: (lm.float16, np.dtype(np.float16)),
    TensorProto.BFLOAT16: (lm.bfloat16, lm.bfloat16.numpy),
    TensorProto.INT32: (lm.int32, np.dtype(np.int32)),
    TensorProto.INT64: (lm.int32, np.dtype(np.int64)),
    TensorProto.BOOL: (lm.bool, np.dtype(np.bool_)),
    TensorProto.UINT8: (lm.uint8, np.dtype(np.uint8)),
}


def type_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return f"element type {elem_type}"


def is_supported(elem_type: int) -> bool:
    return elem_type in _TYPES


def luminal_dtype(elem_type: int) -> lm.DType | None:
    """The luminal dtype for an ONNX element type, or None when luminal has none."""
    entry = _TYPES.get(elem_type)
    return entry[0] if entry else None


def onnx_numpy_dtype(elem_type: int) -> np.dtype | None:
    entry = _TYPES.get(elem_type)
    return entry[1] if entry else None


def to_graph_array(arr: np.ndarray, what: str) -> np.ndarray:
    """`arr` in the host type of the luminal dtype that carries it (int64 -> int32, checked)."""
    if arr.dtype == np.int64:
        if arr.size and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
            raise OnnxImportError(f"{what}: int64 values outside the int32 range luminal "
                                  f"computes indices in ({arr.min()} .. {arr.max()})")
        return arr.astype(np.int32)
    return arr
