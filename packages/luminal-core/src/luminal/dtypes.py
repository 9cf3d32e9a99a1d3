"""Element types of graph tensors, and their host (NumPy / ml_dtypes) counterparts."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    is_float: bool
    numpy: np.dtype

    def __repr__(self) -> str:
        return f"lm.{self.name}"


float32 = DType("float32", 4, True, np.dtype(np.float32))
float16 = DType("float16", 2, True, np.dtype(np.float16))
bfloat16 = DType("bfloat16", 2, True, np.dtype(ml_dtypes.bfloat16))
int32 = DType("int32", 4, False, np.dtype(np.int32))
bool_ = DType("bool", 1, False, np.dtype(np.bool_))
# raw bytes: the storage of quantized weights (see `luminal.quant`), read through `Cast`
uint8 = DType("uint8", 1, False, np.dtype(np.uint8))

ALL = (float32, float16, bfloat16, int32, bool_, uint8)
_BY_NAME = {d.name: d for d in ALL}
_BY_NUMPY = {d.numpy: d for d in ALL}


def dtype_of(x: DType | str | np.dtype | type) -> DType:
    """Normalise a luminal dtype, a name ('float16'), or a NumPy dtype into a `DType`."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    try:
        npd = np.dtype(x)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    names = ", ".join(_BY_NAME)
    raise TypeError(f"unsupported dtype {x!r}: luminal tensors are one of {names}")


def promote(a: DType, b: DType) -> DType:
    """The dtype of a binary op on `a` and `b` (PyTorch's rules for these types)."""
    if a == b:
        return a
    order = [bool_, uint8, int32, bfloat16, float16, float32]
    if {a, b} == {float16, bfloat16}:
        return float32
    return max(a, b, key=order.index)


def compute_dtype(d: DType) -> np.dtype:
    """The host type arithmetic is done in: half types compute (and accumulate) in float32."""
    return np.dtype(np.float32) if d.is_float else d.numpy
