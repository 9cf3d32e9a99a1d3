"""The 12 primitive ops, graph leaves, and their reference semantics.

Every primitive reads its inputs through the views on its input edges; binary ops take operands
of equal logical shape (broadcasting is an explicit stride-0 view). The `reference` method of an
op defines its semantics on NumPy arrays that have already been read through those views; the
reference backend runs it, every other backend is tested against it.

| op          | semantics                                                           |
|-------------|---------------------------------------------------------------------|
| Log2        | log2(x)                                                             |
| Exp2        | 2 ** x                                                              |
| Sin         | sin(x) (radians)                                                    |
| Sqrt        | sqrt(x)                                                             |
| Recip       | 1 / x                                                               |
| Add         | a + b                                                               |
| Mul         | a * b                                                               |
| Mod         | truncated remainder: a - trunc(a / b) * b (sign of a, like C fmod)  |
| LessThan    | 1 where a < b else 0, as bool                                       |
| SumReduce   | sum over one axis, which is removed                                 |
| MaxReduce   | max over one axis, which is removed (empty axis gives -inf)         |
| Contiguous  | materialise the input view into a fresh row-major buffer            |

Half-precision inputs are computed (and reductions accumulated) in float32, then rounded to the
node's dtype. Integer tensors support Add, Mul, Mod, LessThan, the reductions and Contiguous.

Besides the primitives a graph holds leaves (`Input`, `Constant`), `Cast`, a dtype
conversion owned by the dtype system, and `Select` (`cond ? a : b`), the one op selection
needs to be exact: its primitive decomposition `a*c + b*(1-c)` turns an inf or NaN in the
branch not taken into NaN, so every backend implements it (the codegen backends as a C
ternary, `PrimitiveBackend` through its gather) and autograd routes gradients through it.
Backends add ops of their own (fused kernels, matmul); each such op supplies `reference()`
equal to its primitive decomposition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .dtypes import DType, bool_, compute_dtype
from .shape import Shape
from .symbolic import Expr

IOTA_VAR = "_iota"  # names starting with "_" are reserved for luminal


class Op:
    """Base of every graph op. Subclasses are small dataclasses; equality means same op."""

    primitive = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def output_shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def output_dtype(self, dtypes: Sequence[DType]) -> DType:
        return dtypes[0]

    def reference(self, xs: list[np.ndarray], dtype: DType, dims: Mapping[str, int]) -> np.ndarray:
        raise NotImplementedError(f"{self.name} has no reference implementation")

    def label(self) -> str:
        """Short text for graph printouts."""
        return self.name


# ----- leaves -------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Input(Op):
    """Data bound from the host with `GraphTensor.set()`. Identity matters, not value."""

    label_name: str

    def label(self) -> str:
        return f"Input {self.label_name}"


@dataclass(frozen=True)
class Constant(Op):
    """A scalar: a number, or a symbolic expression over dims evaluated at run time."""

    value: float | Expr

    def output_shape(self, shapes: Sequence[Shape]) -> Shape:
        return ()

    def reference(self, xs, dtype, dims):
        v = self.value.evaluate(dims) if isinstance(self.value, Expr) else self.value
        return np.asarray(v, dtype=compute_dtype(dtype))

    def label(self) -> str:
        return f"Const {self.value}"


@dataclass(frozen=True)
class Iota(Op):
    """A tensor whose value is a symbolic expression of its flat index (the variable named
    `IOTA_VAR`) and of dims.

    Like `Constant`, a leaf: arange, positions and masks come from it without any data.
    """

    expr: Expr
    shape: tuple[Expr, ...]

    def output_shape(self, shapes):
        return self.shape

    def reference(self, xs, dtype, dims):
        shape = tuple(d.evaluate(dims) for d in self.shape)
        n = int(np.prod(shape))
        env: dict = dict(dims)
        env[IOTA_VAR] = np.arange(n, dtype=np.int64)
        flat = np.broadcast_to(np.asarray(self.expr.numpy_fn(env)), (n,))
        return flat.reshape(shape).astype(compute_dtype(dtype))

    def label(self) -> str:
        return f"Iota {self.expr}"


@dataclass(frozen=True)
class Cast(Op):
    """Convert to another dtype (float -> int truncates toward zero; nonzero -> True)."""

    dtype: DType

    def output_dtype(self, dtypes):
        return self.dtype

    def reference(self, xs, dtype, dims):
        x = xs[0]
        if dtype == bool_:
            return x != 0
        if not dtype.is_float and np.issubdtype(x.dtype, np.floating):
            x = np.trunc(x)
        return x.astype(compute_dtype(dtype))

    def label(self) -> str:
        return f"Cast {self.dtype.name}"


@dataclass(frozen=True)
class Select(Op):
    """`a` where the bool `cond` is true, else `b` (inputs: cond, a, b; equal logical shapes,
    a and b of one dtype). Exact: the branch not taken never reaches the result."""

    def output_dtype(self, dtypes):
        return dtypes[1]

    def output_shape(self, shapes):
        return shapes[1]

    def reference(self, xs, dtype, dims):
        return np.where(xs[0], xs[1], xs[2])


# ----- primitives ---------------------------------------------------------------------------
class Primitive(Op):
    primitive = True


class Unary(Primitive):
    fn = staticmethod(lambda x: x)

    def reference(self, xs, dtype, dims):
        with np.errstate(all="ignore"):
            return type(self).fn(xs[0])

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return f"{self.name}()"


class Log2(Unary):
    fn = staticmethod(np.log2)


class Exp2(Unary):
    fn = staticmethod(np.exp2)


class Sin(Unary):
    fn = staticmethod(np.sin)


class Sqrt(Unary):
    fn = staticmethod(np.sqrt)


class Recip(Unary):
    fn = staticmethod(np.reciprocal)

    def reference(self, xs, dtype, dims):
        with np.errstate(all="ignore"):
            return np.float32(1.0) / xs[0]


class Binary(Unary):
    fn = staticmethod(lambda a, b: a)

    def reference(self, xs, dtype, dims):
        with np.errstate(all="ignore"):  # inf * 0 is NaN by definition, not a warning
            return type(self).fn(xs[0], xs[1])


class Add(Binary):
    fn = staticmethod(np.add)  # on bools: or


class Mul(Binary):
    fn = staticmethod(np.multiply)  # on bools: and


class Mod(Binary):
    def reference(self, xs, dtype, dims):
        a, b = xs
        if np.issubdtype(a.dtype, np.integer):
            safe_b = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, np.fmod(a, safe_b))
        with np.errstate(all="ignore"):
            return np.fmod(a, b)


class LessThan(Binary):
    fn = staticmethod(np.less)

    def output_dtype(self, dtypes):
        return bool_


@dataclass(frozen=True)
class SumReduce(Primitive):
    axis: int

    def output_shape(self, shapes):
        s = shapes[0]
        return s[: self.axis] + s[self.axis + 1 :]

    def reference(self, xs, dtype, dims):
        return np.sum(xs[0], axis=self.axis, dtype=xs[0].dtype)

    def label(self) -> str:
        return f"SumReduce({self.axis})"


@dataclass(frozen=True)
class MaxReduce(Primitive):
    axis: int

    def output_shape(self, shapes):
        s = shapes[0]
        return s[: self.axis] + s[self.axis + 1 :]

    def reference(self, xs, dtype, dims):
        x = xs[0]
        if x.shape[self.axis] == 0:
            fill = -np.inf if np.issubdtype(x.dtype, np.floating) else (
                False if x.dtype == np.bool_ else np.iinfo(x.dtype).min)
            shape = x.shape[: self.axis] + x.shape[self.axis + 1 :]
            return np.full(shape, fill, dtype=x.dtype)
        return np.max(x, axis=self.axis)

    def label(self) -> str:
        return f"MaxReduce({self.axis})"


class Contiguous(Unary):
    pass


PRIMITIVES: tuple[type[Op], ...] = (
    Log2, Exp2, Sin, Sqrt, Recip, Add, Mul, Mod, LessThan, SumReduce, MaxReduce, Contiguous,
)
UNARY = (Log2, Exp2, Sin, Sqrt, Recip, Contiguous)
BINARY = (Add, Mul, Mod, LessThan)
REDUCE = (SumReduce, MaxReduce)
