"""`GraphTensor`: a handle to a node's output seen through a view.

Movement ops only change the view (no node is added); every other op adds a node whose input
edge records the view. The high-level ops live in `hl_ops/`, grouped by kind, as mixins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from . import ops
from .dtypes import DType, bfloat16, dtype_of
from .hl_ops.base import TensorBase
from .hl_ops.binary import BinaryOps
from .hl_ops.matmul import MatmulOps
from .hl_ops.movement import MovementOps
from .hl_ops.reduction import ReductionOps
from .hl_ops.selection import SelectionOps
from .hl_ops.unary import UnaryOps
from .host_views import read_view
from .shape import show_shape
from .symbolic import Expr, UnboundDimError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


_HOST_FLOATS = (bfloat16.numpy,)  # float types NumPy does not know as kind "f"


class GraphTensor(TensorBase, UnaryOps, BinaryOps, MovementOps, ReductionOps, SelectionOps,
                  MatmulOps):
    """A lazy tensor in a `Graph`. Nothing runs until the graph is compiled and executed.

    `layout` is the `View` through which this tensor reads its node's output buffer (its
    `shape` is `layout.shape`); `view(*shape)` is PyTorch's reshape-as-a-view.
    """

    __slots__ = ()
    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    # ----- data in & out ------------------------------------------------------------------
    def set(self, data: ArrayLike) -> GraphTensor:
        """Bind host data to this input (converted to the tensor's dtype); binds the values of
        symbolic dims in its shape. Returns self, so `g.tensor(...).set(x)` chains."""
        node = self.node
        if not isinstance(node.op, ops.Input):
            raise TypeError(
                f"set() works on inputs made by Graph.tensor(), not on the result of {node.op.name}"
            )
        name = node.op.label_name
        arr = _host_array(data, self.dtype, name)
        dims = _bind_dims(name, node.shape, arr.shape, self.graph.dims)
        self.graph.dims.update(dims)  # only once every dim agrees: a failed set() binds nothing
        self.graph.set_data(node.id, arr)
        return self

    def retrieve(self) -> GraphTensor:
        """Mark this tensor to be read with `.numpy()` after `execute()`."""
        self.graph.mark_retrieved(self.id)
        return self

    def keep(self) -> GraphTensor:
        """Keep this tensor's value alive on the device across executions (no copy back)."""
        self.graph.mark_kept(self.id)
        return self

    def numpy(self) -> np.ndarray:
        """The value after `execute()`, as a NumPy array of this tensor's shape and dtype."""
        flat = self.graph.fetch(self.id)  # first: it explains a node compilation removed
        node = self.node
        if self.layout.is_contiguous and self.layout.shape == node.shape:
            dims = self.graph.dims
            return flat.reshape(tuple(d.evaluate(dims) for d in self.layout.shape))
        return read_view(flat.reshape(-1), self.layout, self.graph.dims)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def item(self) -> float | int | bool:
        return self.numpy().item()

    def tolist(self):
        return self.numpy().tolist()

    def to(self, dtype: DType | str) -> GraphTensor:
        """Convert to another dtype (a `Cast` node; a no-op when it already is)."""
        dtype = dtype_of(dtype)
        if dtype == self.dtype:
            return self
        return self._new(ops.Cast(dtype), self)

    def float(self) -> GraphTensor:
        return self.to("float32")

    def half(self) -> GraphTensor:
        return self.to("float16")

    def int(self) -> GraphTensor:
        return self.to("int32")

    def bool(self) -> GraphTensor:
        return self.to("bool")

    def type(self, dtype: DType | str) -> GraphTensor:
        return self.to(dtype)

    def contiguous(self) -> GraphTensor:
        """Materialise this view into a row-major buffer (a `Contiguous` node)."""
        return self._new(ops.Contiguous(), self)

    def contiguous_if_view(self) -> GraphTensor:
        """Self when it reads its node's buffer as is, else `contiguous()`."""
        if self.layout.is_contiguous and self.layout.shape == self.node.shape:
            return self
        return self.contiguous()

    def __repr__(self) -> str:
        return f"GraphTensor(node={self.id}, shape={show_shape(self.layout.shape)}, {self.dtype!r})"

    def __bool__(self) -> bool:
        raise TypeError(
            "a GraphTensor has no value at graph-build time: use .numpy() after execute()"
        )

    def __iter__(self):
        n = len(self)
        return (self[i] for i in range(n))


def _host_array(data: ArrayLike, dtype: DType, name: str) -> np.ndarray:
    """`data` as a C-contiguous NumPy array of `dtype`'s host type."""
    arr = np.asarray(data)
    numeric = arr.dtype.kind in "biuf" or arr.dtype in _HOST_FLOATS
    if not numeric:
        raise TypeError(
            f"input {name!r}: cannot use {type(data).__name__} data of dtype {arr.dtype} as "
            f"{dtype.name}: pass numbers (a NumPy array, a list, a scalar)"
        )
    # ascontiguousarray alone would turn a 0-d array into shape (1,)
    with np.errstate(invalid="ignore", over="ignore"):  # values that do not fit: see below
        out = arr.astype(dtype.numpy, order="C", copy=False).reshape(arr.shape)
    if out.dtype != arr.dtype and out.size and not _safe_cast(arr.dtype, out.dtype):
        _check_fits(arr, out, dtype, name)
    return out


def _safe_cast(src: np.dtype, dst: np.dtype) -> bool:
    try:
        return bool(np.can_cast(src, dst, "safe"))
    except TypeError:  # ml_dtypes' bfloat16 has no casting table entry for some pairs
        return False


def _check_fits(arr: np.ndarray, out: np.ndarray, dtype: DType, name: str) -> None:
    """Refuse values that `dtype` cannot hold instead of wrapping them or making them inf.

    The rule: floats become a float dtype rounded to nearest (NaN and inf stay), but a finite
    value too large for it is an error; integers and integral floats become int32 / uint8
    only when in range (a fraction, NaN or inf is an error); anything becomes bool as
    NumPy does (non-zero is True).
    """
    if dtype.name == "bool":
        return
    if dtype.is_float:
        bad = np.isinf(out) & np.isfinite(arr) if arr.dtype.kind == "f" else np.isinf(out)
        if bad.any():
            value = arr[bad].flat[0].item()
            raise ValueError(f"input {name!r}: value {value!r} does not fit in {dtype.name} "
                             f"(largest finite value {float(ml_dtypes.finfo(out.dtype).max):g})")
        return
    info = np.iinfo(out.dtype)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.trunc(arr)) | (arr < info.min) | (arr > info.max)
    elif arr.dtype.kind in "iu":
        bad = (arr < info.min) | (arr > info.max)
    else:
        return
    if bad.any():
        raise ValueError(f"input {name!r}: value {arr[bad].flat[0].item()!r} does not fit in "
                         f"{dtype.name} (integers in [{info.min}, {info.max}])")


def _bind_dims(name: str, shape: tuple[Expr, ...], have: tuple[int, ...],
               dims: dict[str, int]) -> dict[str, int]:
    """The symbolic dim values that array shape `have` implies for an input of `shape`
    (checked against constant dims and compound dim expressions)."""

    def mismatch(detail: str = "") -> ValueError:
        return ValueError(
            f"input {name!r} expects shape {show_shape(shape)} but got an array of shape "
            f"{have}{detail}"
        )

    if len(have) != len(shape):
        raise mismatch(f" (rank {len(have)} instead of {len(shape)})")
    bound: dict[str, int] = {}
    for want, size in zip(shape, have):
        if want.is_const and want.value != size:
            raise mismatch()
        if want.op == "var" and bound.setdefault(want.name, size) != size:
            raise mismatch(f": dim {want.name!r} would be both {bound[want.name]} and {size}")
    env = {**dims, **bound}
    for want, size in zip(shape, have):
        if not want.is_const and want.op != "var":
            try:
                value = want.evaluate(env)
            except UnboundDimError as e:
                raise ValueError(f"input {name!r}: {e}") from None
            if value != size:
                raise mismatch(f": dim {want} is {value} with {_show_env(want, env)}")
    return bound


def _show_env(e: Expr, env: dict[str, int]) -> str:
    return ", ".join(f"{k}={env[k]}" for k in sorted(e.free_vars))
