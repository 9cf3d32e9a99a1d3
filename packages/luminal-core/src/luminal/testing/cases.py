"""The op cases of the conformance kit: every high-level op, declared once for both frameworks.

A case's `fn(F, *tensors)` is written once and runs on luminal `GraphTensor`s and on torch
tensors alike: tensor methods and operators share PyTorch's names, and free functions go
through `F`, a namespace adapter (`luminal.testing.adapters`) that maps `F.cat`, `F.conv2d`,
`F.arange(...)`... onto luminal or torch.

Inputs come from generators (`normal`, `positive`, `distinct`, `indices(n)`...) whose output
dtype is the input's dtype: float32 arrays become float32 inputs, int32 arrays int32 inputs
(int64 on the torch side, as torch's indexing wants), bool arrays bool inputs.

The kit (`luminal.testing.kit`) runs each case in several variants; a case says which apply:

- `base`: the shapes as declared;
- `broadcast`: for elementwise ops, input 0 gets size 1 on its last axis and the other inputs
  lose their leading axis, so both sides broadcast;
- `permuted`, `strided`, `padded`: every input is first fed through a transposing permute, a
  `[::2]` slice, or `F.pad(x, (1, -1))` (one zero read, one element cropped) on both sides;
- `symbolic`: the axes listed in `sym` become one named symbolic dim; one compiled graph runs
  with two sizes (the declared one and `sym_size`);
- `float16`: float inputs in half precision, tolerances scaled (only for backends declaring
  float16 support).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Gen = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

# ----- input generators -----------------------------------------------------------------------


def normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def uniform(lo: float, hi: float) -> Gen:
    def gen(rng, shape):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    gen.__name__ = f"uniform({lo}, {hi})"
    return gen


positive = uniform(0.5, 2.5)


def nonzero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Magnitudes in [0.5, 2.5) with random signs: safe divisors."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * rng.uniform(0.5, 2.5, shape)).astype(np.float32)


def distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Pairwise distinct values (no ties for max/argmax), spread around zero."""
    n = math.prod(shape)
    values = (rng.permutation(n) - n / 2) * 0.25 + 0.1
    return values.reshape(shape).astype(np.float32)


def halves(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 0.5 in [-4, 4]: exact ties for comparisons, rounding and sign at 0."""
    return (rng.integers(-8, 9, shape) * 0.5).astype(np.float32)


def ints(lo: int, hi: int, nonzero: bool = False) -> Gen:
    """int32 in [lo, hi]; with `nonzero`, zeros become `hi` (safe integer divisors)."""

    def gen(rng, shape):
        out = rng.integers(lo, hi + 1, shape).astype(np.int32)
        return np.where(out == 0, hi, out).astype(np.int32) if nonzero else out

    gen.__name__ = f"ints({lo}, {hi})"
    return gen


def indices(n: int) -> Gen:
    """int32 indices in [0, n)."""
    return ints(0, n - 1)


def integral_floats(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Whole numbers in [-3, 3] as float32 (exponents that keep negative bases real)."""
    return rng.integers(-3, 4, shape).astype(np.float32)


def bools(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.random(shape) < 0.5


def specials(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Normal values with inf, -inf and NaN mixed in (selection must not spread them)."""
    out = rng.standard_normal(shape).astype(np.float32)
    pick = rng.random(shape)
    out[pick < 0.3] = np.inf
    out[(pick >= 0.3) & (pick < 0.45)] = -np.inf
    out[(pick >= 0.45) & (pick < 0.55)] = np.nan
    return out


def choices(*values: float) -> Gen:
    """float32 values drawn from `values` (edge points: 0, +-1, +-inf, NaN...)."""

    def gen(rng, shape):
        return rng.choice(np.array(values, np.float32), shape).astype(np.float32)

    return gen


def bytes_(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """uint8 values over the whole range (wrapping negation, ~, min)."""
    return rng.integers(0, 256, shape).astype(np.uint8)


def int_edges(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """int32 values including INT_MIN, INT_MAX, 0 and -1 (overflow-prone spots)."""
    edges = np.array([-(2**31), 2**31 - 1, 0, -1, 1, -7, 12345, -98765], np.int32)
    return rng.choice(edges, shape).astype(np.int32)


def gen_dtype(gen: Gen) -> np.dtype:
    """The dtype a generator produces (and so the dtype of the input it feeds)."""
    return gen(np.random.default_rng(0), (1,)).dtype


# ----- the case type --------------------------------------------------------------------------

VARIANTS = ("base", "broadcast", "permuted", "strided", "padded", "symbolic", "float16")
SYM_DIM = "n"  # the name the symbolic variant gives its dim


@dataclass(frozen=True)
class Case:
    """One op test: `fn(F, *inputs)` on inputs of `shapes` drawn from `gen`.

    `gen` is one generator for every input or one per input. `elementwise` enables the
    broadcast variant and, unless `sym` says otherwise, a symbolic axis 0. `sym` lists
    (input, axis) pairs that share the symbolic dim; `()` means no symbolic variant. `skip`
    names variants that do not apply to this case.
    """

    name: str
    fn: Callable
    shapes: tuple[tuple[int, ...], ...]
    gen: Gen | tuple[Gen, ...] = normal
    atol: float = 1e-5
    rtol: float = 1e-4
    elementwise: bool = False
    sym: tuple[tuple[int, int], ...] | None = None
    sym_size: int | None = None
    skip: frozenset[str] = field(default_factory=frozenset)

    def gens(self) -> tuple[Gen, ...]:
        g = self.gen
        return tuple(g) if isinstance(g, (tuple, list)) else (g,) * len(self.shapes)

    def sym_axes(self) -> tuple[tuple[int, int], ...]:
        """The (input, axis) pairs of the symbolic variant (empty: no such variant)."""
        if self.sym is not None:
            return self.sym
        if not self.elementwise or not self.shapes or not self.shapes[0]:
            return ()
        rank, size = len(self.shapes[0]), self.shapes[0][0]
        return tuple((i, 0) for i, s in enumerate(self.shapes) if len(s) == rank and s[0] == size)

    def second_size(self) -> int:
        """The other value the symbolic dim takes (the first is the declared size)."""
        i, a = self.sym_axes()[0]
        return self.sym_size if self.sym_size is not None else self.shapes[i][a] + 2

    def tolerances(self, variant: str) -> tuple[float, float]:
        """(atol, rtol); float16 scales them to half precision's ~3 significant digits."""
        if variant != "float16":
            return self.atol, self.rtol
        return max(self.atol * 100, 1e-2), max(self.rtol * 100, 1e-2)

    def variants(self) -> tuple[str, ...]:
        """The variants that apply to this case (before backend dtype support is considered)."""
        ranks = [len(s) for s in self.shapes]
        float_in = any(gen_dtype(g).kind == "f" for g in self.gens())
        ok = {
            "base": True,
            "broadcast": self.elementwise and len(self.shapes) > 1 and min(ranks, default=0) >= 2,
            "permuted": any(r >= 2 for r in ranks),
            "strided": any(r >= 1 for r in ranks),
            "padded": any(r >= 1 for r in ranks),
            "symbolic": bool(self.sym_axes()),
            "float16": float_in,
        }
        return tuple(v for v in VARIANTS if ok[v] and v not in self.skip)


def _case(name: str, fn: Callable, *shapes: tuple[int, ...], **kw) -> Case:
    if "skip" in kw:
        kw["skip"] = frozenset(kw["skip"])
    return Case(name, fn, tuple(shapes), **kw)


def unary(name: str, fn: Callable, gen: Gen = normal, shape=(4, 6), **kw) -> Case:
    return _case(name, fn, shape, gen=gen, elementwise=True, **kw)


def binary(name: str, fn: Callable, gen: Gen | tuple = normal, shape=(3, 5), **kw) -> Case:
    return _case(name, fn, shape, shape, gen=gen, elementwise=True, **kw)


NO_ZERO = {"padded"}  # the padded variant reads zeros: skip it where 0 is outside the domain

# ----- elementwise ----------------------------------------------------------------------------

ELEMENTWISE = [
    unary("neg", lambda F, x: -x),
    unary("abs", lambda F, x: x.abs(), halves),
    unary("sign", lambda F, x: x.sign(), halves),
    unary("sqrt", lambda F, x: x.sqrt(), positive),
    unary("rsqrt", lambda F, x: x.rsqrt(), positive, skip=NO_ZERO),
    unary("exp", lambda F, x: x.exp(), uniform(-4, 4)),
    unary("exp2", lambda F, x: x.exp2(), uniform(-4, 4)),
    unary("log", lambda F, x: x.log(), positive),
    unary("log2", lambda F, x: x.log2(), positive),
    unary("sin", lambda F, x: x.sin(), uniform(-6, 6)),
    unary("cos", lambda F, x: x.cos(), uniform(-6, 6)),
    unary("tanh", lambda F, x: x.tanh(), uniform(-5, 5)),
    unary("F.tanh", lambda F, x: F.tanh(x)),
    unary("sigmoid", lambda F, x: x.sigmoid(), uniform(-8, 8)),
    unary("F.sigmoid", lambda F, x: F.sigmoid(x)),
    unary("relu", lambda F, x: x.relu(), halves),
    unary("F.relu", lambda F, x: F.relu(x)),
    unary("gelu", lambda F, x: F.gelu(x), uniform(-4, 4)),
    unary("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh"), uniform(-4, 4)),
    unary("silu", lambda F, x: F.silu(x), uniform(-6, 6)),
    unary("softplus", lambda F, x: F.softplus(x), uniform(-6, 6)),
    unary("softplus_beta", lambda F, x: F.softplus(x, beta=2.0, threshold=4.0), uniform(-4, 4)),
    unary("leaky_relu", lambda F, x: F.leaky_relu(x, 0.1)),
    unary("leaky_relu_default", lambda F, x: F.leaky_relu(x)),
    unary("elu", lambda F, x: F.elu(x)),
    unary("hardswish", lambda F, x: F.hardswish(x), uniform(-5, 5)),
    unary("mish", lambda F, x: F.mish(x), uniform(-5, 5)),
    unary("erf", lambda F, x: x.erf(), uniform(-3, 3)),
    unary("clamp", lambda F, x: x.clamp(-0.5, 0.5)),
    unary("clamp_min", lambda F, x: x.clamp(min=0.25)),
    unary("clamp_max", lambda F, x: x.clamp(max=-0.25)),
    unary("floor", lambda F, x: x.floor(), uniform(-5, 5)),
    unary("ceil", lambda F, x: x.ceil(), uniform(-5, 5)),
    unary("round", lambda F, x: x.round(), uniform(-5, 5)),
    unary("round_halves", lambda F, x: x.round(), halves),
    unary("trunc", lambda F, x: x.trunc(), uniform(-5, 5)),
    unary("floor_halves", lambda F, x: x.floor() + x.ceil() * 10 + x.trunc() * 100, halves),
    unary("reciprocal", lambda F, x: x.reciprocal(), nonzero, skip=NO_ZERO),
    unary("square", lambda F, x: x.square()),
    unary("pow2", lambda F, x: x**2),
    unary("pow3_neg_base", lambda F, x: x**3, halves),
    unary("pow5_neg_base", lambda F, x: x**5, uniform(-2, 2)),
    unary("pow_neg1", lambda F, x: x**-1, nonzero, skip=NO_ZERO),
    unary("pow_neg2", lambda F, x: x**-2.0, nonzero, skip=NO_ZERO),
    unary("pow0", lambda F, x: x**0, halves),
    unary("pow_half", lambda F, x: x**0.5, positive),
    unary("pow_frac", lambda F, x: x**2.5, positive),
    unary("pow_frac_neg_base", lambda F, x: x**1.5, uniform(-2, 2)),
    unary("pow_odd_big", lambda F, x: x**7, uniform(-1.5, 1.5)),
    unary("rpow", lambda F, x: 2.0**x, uniform(-3, 3)),
    unary("add_scalar", lambda F, x: x + 1.5),
    unary("radd_scalar", lambda F, x: 2 + x),
    unary("sub_scalar", lambda F, x: x - 0.75),
    unary("rsub_scalar", lambda F, x: 2.0 - x),
    unary("mul_scalar", lambda F, x: x * 3),
    unary("div_scalar", lambda F, x: x / 4.0),
    unary("rdiv_scalar", lambda F, x: 3.0 / x, nonzero, skip=NO_ZERO),
    unary("lt_scalar", lambda F, x: x < 0.5, halves),
    unary("ge_scalar", lambda F, x: x >= 0.5, halves),
    unary("eq_scalar", lambda F, x: x == 0.5, halves),
    unary("ne_scalar", lambda F, x: x != 0.5, halves),
    unary("mod_scalar", lambda F, x: x % 1.5, uniform(-5, 5)),
    unary("floordiv_scalar", lambda F, x: x // 1.5, uniform(-5, 5)),
    unary("chain", lambda F, x: ((x * 2).exp() + 1).log().sqrt() - x.abs() / 3, uniform(-2, 2)),
    binary("add", lambda F, a, b: a + b),
    binary("sub", lambda F, a, b: a - b),
    binary("mul", lambda F, a, b: a * b),
    binary("div", lambda F, a, b: a / b, (normal, nonzero), skip=NO_ZERO),
    binary("maximum", lambda F, a, b: F.maximum(a, b), halves),
    binary("minimum", lambda F, a, b: F.minimum(a, b), halves),
    binary("lt", lambda F, a, b: a < b, halves),
    binary("le", lambda F, a, b: a <= b, halves),
    binary("gt", lambda F, a, b: a > b, halves),
    binary("ge", lambda F, a, b: a >= b, halves),
    binary("eq", lambda F, a, b: a == b, halves),
    binary("ne", lambda F, a, b: a != b, halves),
    binary("pow", lambda F, a, b: a**b, (positive, normal)),
    binary("pow_neg_base", lambda F, a, b: a.pow(b), (halves, integral_floats)),
    binary("pow_neg_base_frac", lambda F, a, b: a**b, (uniform(-2, -0.5), uniform(0.1, 0.9))),
    binary("mod", lambda F, a, b: a % b, (uniform(-5, 5), nonzero), skip=NO_ZERO),
    binary("floordiv", lambda F, a, b: a // b, (uniform(-5, 5), nonzero), skip=NO_ZERO),
    binary("fmod", lambda F, a, b: a.fmod(b), (uniform(-5, 5), nonzero), skip=NO_ZERO),
    binary("clamp_tensor", lambda F, x, lo: x.clamp(min=lo), halves),
    binary("where_scalar", lambda F, a, b: F.where(a > b, a, 0.0)),
    binary("masked_fill_inf", lambda F, x, m: x.masked_fill(m, -math.inf), (normal, bools)),
    _case("where", lambda F, c, x, y: F.where(c, x, y), (3, 5), (3, 5), (3, 5),
          gen=(bools, normal, normal), elementwise=True),
    _case("clamp_tensors", lambda F, x, lo, hi: x.clamp(lo, lo + hi.abs()), (3, 5), (3, 5),
          (3, 5), elementwise=True),
    # integer and bool arithmetic: int32 stays int32 (torch: int64, compared by value)
    binary("int_add", lambda F, a, b: a + b * 3 - 1, ints(-9, 9)),
    binary("int_mul", lambda F, a, b: a * b, ints(-9, 9)),
    binary("int_floordiv", lambda F, a, b: a // b, (ints(-20, 20), ints(-5, 5, nonzero=True)),
           skip=NO_ZERO),
    binary("int_mod", lambda F, a, b: a % b, (ints(-20, 20), ints(-5, 5, nonzero=True)),
           skip=NO_ZERO),
    binary("int_truediv", lambda F, a, b: a / b, (ints(-20, 20), ints(-5, 5, nonzero=True)),
           skip=NO_ZERO),
    binary("int_compare", lambda F, a, b: (a < b) | (a == b + 1), ints(-3, 3)),
    binary("int_maximum", lambda F, a, b: F.maximum(a, b), ints(-9, 9)),
    unary("int_neg_abs", lambda F, x: -x + x.abs(), ints(-9, 9)),
    unary("int_scalar_float", lambda F, x: x * 0.5 + 1, ints(-9, 9)),
    unary("int_to_float", lambda F, x: x.float() / 3, ints(-9, 9)),
    unary("float_to_int", lambda F, x: (x * 3).int(), uniform(-5, 5)),
    binary("bool_and", lambda F, a, b: a & b, bools),
    binary("bool_or", lambda F, a, b: a | b, bools),
    binary("bool_xor", lambda F, a, b: a ^ b, bools),
    unary("bool_not", lambda F, x: ~x, bools),
    binary("bool_where", lambda F, c, x: F.where(c, x, -x), (bools, normal)),
    unary("bool_to_float", lambda F, x: x.float() * 2 - 1, bools),
    binary("bool_add", lambda F, a, b: (a + b, a * b, a + 2), bools),
    unary("int_pow", lambda F, x: (x**2, x**3, x**0, x**5), ints(-5, 5)),
    unary("int_pow_float", lambda F, x: x**0.5, ints(0, 9)),
    binary("int_pow_tensor", lambda F, x, e: x**e, (ints(-4, 4), ints(0, 3))),
    unary("int_scalar_floordiv_mod", lambda F, x: x // 3 + x % -4, ints(-9, 9)),
    unary("int_clamp", lambda F, x: (x.clamp(-1, 2), x.clamp(min=0.5)), ints(-3, 3)),
    unary("int_unary", lambda F, x: (x.abs() * x.sign(), x.relu(), x.square(), x.floor()),
          ints(-3, 3)),
    unary("int_float_unary", lambda F, x: (x.exp(), x.sigmoid(), x / 2), ints(-3, 3)),
    binary("where_int_scalar", lambda F, c, x: (F.where(c, x, 1.5), F.where(c, x, 7)),
           (bools, ints(-3, 3))),
    unary("nan_compare", lambda F, x: (x.log() == x.log(), x.log() != x.log(),
                                       x.log() <= 0, x.log() >= 0, x.log().isnan()), halves),
    unary("inf_compare", lambda F, x: ((x / 0) == (x / 0), (x / 0) <= 0, (x / 0).isinf()),
          halves, skip=NO_ZERO),
    unary("eq_float_int", lambda F, x: (x == 1, x <= 1, x >= -1), halves),
    unary("logical_not", lambda F, x: x.logical_not(), halves),
    unary("log1p_expm1", lambda F, x: (x.abs().log1p(), x.expm1())),
    unary("frac_tan", lambda F, x: (x.frac(), x.tan()), uniform(-1.2, 1.2)),
    unary("div_rounding", lambda F, x: (x.div(0.7, rounding_mode="floor"),
                                        x.div(0.7, rounding_mode="trunc"))),
    unary("int_div_trunc", lambda F, x: x.div(2, rounding_mode="trunc"), ints(-5, 5)),
    unary("remainder", lambda F, x: x.remainder(-1.5)),
    unary("add_sub_alpha", lambda F, x: x.sub(x * x, alpha=2) + x.add(1, alpha=3)),
    unary("masked_fill", lambda F, x: x.masked_fill(x > 0, 2.0)),
]

# ----- reductions -----------------------------------------------------------------------------

S3 = (3, 4, 5)
SYM0 = ((0, 0),)  # the symbolic variant on input 0, axis 0


def red(name: str, fn: Callable, gen: Gen = normal, shape=S3, sym=SYM0, **kw) -> Case:
    return _case(name, fn, shape, gen=gen, sym=sym, **kw)


REDUCTIONS = [
    red("sum_all", lambda F, x: x.sum()),
    red("sum_dim", lambda F, x: x.sum(1)),
    red("sum_dim0", lambda F, x: x.sum(0)),
    red("sum_neg_keepdim", lambda F, x: x.sum(-1, keepdim=True)),
    red("sum_dims", lambda F, x: x.sum((0, 2))),
    red("sum_dims_keepdim", lambda F, x: x.sum((-1, 0), keepdim=True)),
    red("sum_int", lambda F, x: x.sum(1), ints(-9, 9)),
    red("sum_bool", lambda F, x: x.sum(-1), bools),
    red("max_all", lambda F, x: x.max(), distinct),
    red("max_dim", lambda F, x: x.max(dim=1), distinct),
    red("max_dim_keepdim", lambda F, x: x.max(-1, keepdim=True), distinct),
    red("amax_dims", lambda F, x: x.amax((0, 2)), distinct),
    red("min_all", lambda F, x: x.min(), distinct),
    red("min_dim", lambda F, x: x.min(dim=0), distinct),
    red("amin_keepdim", lambda F, x: x.amin(-2, keepdim=True), distinct),
    red("max_int", lambda F, x: x.amax(1), ints(-50, 50)),
    red("mean_all", lambda F, x: x.mean()),
    red("mean_dim", lambda F, x: x.mean(1)),
    red("mean_dim0", lambda F, x: x.mean(0)),
    red("mean_dims_keepdim", lambda F, x: x.mean((0, -1), keepdim=True)),
    red("var_dim", lambda F, x: x.var(1)),
    red("var_all", lambda F, x: x.var()),
    red("var_biased", lambda F, x: x.var(-1, correction=0, keepdim=True)),
    red("var_unbiased_false", lambda F, x: x.var(0, unbiased=False)),
    red("std_all", lambda F, x: x.std()),
    red("std_dims", lambda F, x: x.std((0, 2))),
    red("prod_dim", lambda F, x: x.prod(1), uniform(-1.5, 1.5)),
    red("prod_all", lambda F, x: x.prod(), uniform(0.7, 1.3), atol=1e-5, rtol=1e-3),
    red("prod_zero", lambda F, x: x.prod(-1), halves),
    red("argmax_all", lambda F, x: x.argmax(), distinct),
    red("argmax_dim", lambda F, x: x.argmax(1), distinct),
    red("argmax_dim0", lambda F, x: x.argmax(0), distinct),
    red("argmax_keepdim", lambda F, x: x.argmax(-1, keepdim=True), distinct),
    red("argmin_all", lambda F, x: x.argmin(), distinct),
    red("argmin_dim", lambda F, x: x.argmin(0), distinct),
    red("argmax_ties", lambda F, x: x.argmax(-1), ints(0, 2)),
    red("softmax", lambda F, x: x.softmax(-1), uniform(-5, 5)),
    red("softmax_dim0", lambda F, x: x.softmax(0), uniform(-5, 5)),
    red("F.softmax", lambda F, x: F.softmax(x, dim=1)),
    red("log_softmax", lambda F, x: x.log_softmax(1), uniform(-5, 5)),
    red("F.log_softmax", lambda F, x: F.log_softmax(x, dim=-1)),
    red("logsumexp", lambda F, x: x.logsumexp(1), uniform(-5, 5)),
    red("logsumexp_dims", lambda F, x: x.logsumexp((0, 2)), uniform(-5, 5)),
    red("logsumexp_keepdim", lambda F, x: x.logsumexp(-1, keepdim=True)),
    red("cumsum", lambda F, x: x.cumsum(1)),
    red("cumsum_dim0", lambda F, x: x.cumsum(0)),
    red("cumsum_neg", lambda F, x: x.cumsum(-1)),
    red("cumsum_int", lambda F, x: x.cumsum(-1), ints(-9, 9)),
    red("prod_int", lambda F, x: x.prod(1), ints(-3, 3)),
    red("all_any", lambda F, x: (x.all(1), x.any(0), x.all(), x.any()), bools),
    red("norm", lambda F, x: (x.norm(), x.norm(dim=1), x.norm(p=1, dim=0))),
    red("cumprod", lambda F, x: x.cumprod(1), uniform(-1.5, 1.5)),
    red("sum_1d", lambda F, x: x.sum(0), shape=(7,)),
    red("softmax_1d", lambda F, x: x.softmax(0), shape=(7,)),
]

# ----- movement -------------------------------------------------------------------------------

S = (2, 3, 4)


def mv(name: str, fn: Callable, shape=S, gen: Gen = normal, **kw) -> Case:
    return _case(name, fn, shape, gen=gen, **kw)


MOVEMENT = [
    mv("reshape", lambda F, x: x.reshape(6, 4)),
    mv("reshape_infer", lambda F, x: x.reshape(4, -1, 3)),
    mv("reshape_flat", lambda F, x: x.reshape(-1), sym=SYM0),
    mv("reshape_tuple", lambda F, x: x.reshape((3, 8))),
    # torch's view() refuses the transposed input; luminal's copies (Contiguous) instead
    mv("view", lambda F, x: x.view(2, 12), skip={"permuted"}),
    mv("permute", lambda F, x: x.permute(2, 0, 1), sym=SYM0),
    mv("permute_neg", lambda F, x: x.permute(-1, -3, -2)),
    mv("transpose", lambda F, x: x.transpose(0, 2), sym=SYM0),
    mv("transpose_neg", lambda F, x: x.transpose(-1, -2)),
    mv("permute_reshape", lambda F, x: x.permute(1, 0, 2).reshape(3, 8)),
    mv("transpose_flatten", lambda F, x: x.transpose(0, 1).flatten()),
    mv("expand", lambda F, x: x.expand(2, 3, 4), shape=(3, 1)),
    mv("expand_neg1", lambda F, x: x.expand(-1, 5), shape=(3, 1), sym=SYM0),
    mv("expand_reshape", lambda F, x: x.expand(2, 3, 4).reshape(6, 4), shape=(3, 1)),
    mv("unsqueeze", lambda F, x: x.unsqueeze(0), sym=SYM0),
    mv("unsqueeze_neg", lambda F, x: x.unsqueeze(-1)),
    mv("unsqueeze_mid", lambda F, x: x.unsqueeze(2)),
    mv("squeeze_all", lambda F, x: x.squeeze(), shape=(3, 1, 4, 1)),
    mv("squeeze_dim", lambda F, x: x.squeeze(1), shape=(3, 1, 4, 1)),
    mv("squeeze_noop", lambda F, x: x.squeeze(0), shape=(3, 1, 4, 1)),
    mv("flatten", lambda F, x: x.flatten(), sym=SYM0),
    mv("flatten_start", lambda F, x: x.flatten(1)),
    mv("flatten_range", lambda F, x: x.flatten(0, 1)),
    mv("getitem_int", lambda F, x: x[1], sym=SYM0),
    mv("getitem_neg_int", lambda F, x: x[-1]),
    mv("getitem_slice", lambda F, x: x[:, 1:3]),
    mv("getitem_step", lambda F, x: x[:, ::2], sym=SYM0),
    mv("getitem_step_start", lambda F, x: x[..., 1::2]),
    mv("getitem_neg_slice", lambda F, x: x[:, -2:, :-1]),
    mv("getitem_none", lambda F, x: x[None]),
    mv("getitem_ellipsis", lambda F, x: x[..., 0]),
    mv("getitem_mixed", lambda F, x: x[1, ..., None, ::3]),
    mv("getitem_int_int", lambda F, x: x[0, -1, 1:4:2]),
    mv("getitem_clamped", lambda F, x: x[:, 1:10]),
    mv("getitem_empty", lambda F, x: x[:, 2:1] .sum(1) + 1),
    mv("getitem_sym_slice", lambda F, x: x[1:], sym=SYM0),
    mv("getitem_sym_step", lambda F, x: x[::2] * 2, sym=SYM0, shape=(5, 3)),
    mv("pad", lambda F, x: F.pad(x, (1, 2)), sym=SYM0),
    mv("pad_2d", lambda F, x: F.pad(x, (1, 1, 2, 0))),
    mv("pad_3d", lambda F, x: F.pad(x, (0, 1, 1, 0, 1, 1))),
    mv("pad_negative", lambda F, x: F.pad(x, (-1, 2))),
    mv("pad_negative_both", lambda F, x: F.pad(x, (1, -2, -1, 1))),
    mv("pad_value", lambda F, x: F.pad(x, (1, 2, 0, 1), value=1.5)),
    mv("pad_value_negative", lambda F, x: F.pad(x, (2, -1), value=-3.0)),
    mv("pad_sym_axis", lambda F, x: F.pad(x, (0, 0, 0, 0, 2, 1)), sym=SYM0),
    mv("pad_then_slice", lambda F, x: F.pad(x, (2, 2))[..., 1:-1:2]),
    mv("pad_int", lambda F, x: F.pad(x, (1, 1)) * 2, gen=ints(-5, 5)),
    _case("cat", lambda F, a, b: F.cat([a, b], dim=0), (2, 3), (4, 3), sym=SYM0),
    _case("cat_last", lambda F, a, b, c: F.cat([a, b, c], dim=-1), (2, 3), (2, 1), (2, 4),
          sym=((0, 0), (1, 0), (2, 0))),
    _case("cat_mid", lambda F, a, b: F.cat((a, b), 1), (2, 3, 4), (2, 2, 4)),
    _case("cat_int", lambda F, a, b: F.cat([a, b], dim=1), (2, 3), (2, 2), gen=ints(-9, 9)),
    _case("stack", lambda F, a, b: F.stack([a, b]), (2, 3), (2, 3), sym=((0, 0), (1, 0))),
    _case("stack_dim1", lambda F, a, b, c: F.stack([a, b, c], dim=1), (2, 3), (2, 3), (2, 3)),
    _case("stack_neg", lambda F, a, b: F.stack([a, b], dim=-1), (2, 3), (2, 3)),
    mv("split", lambda F, x: x.split(2, dim=2)),
    mv("split_uneven", lambda F, x: x.split(2, dim=1)),
    mv("split_sections", lambda F, x: x.split([1, 3], dim=-1), sym=SYM0),
    mv("chunk", lambda F, x: x.chunk(2, 0)),
    mv("chunk_uneven", lambda F, x: x.chunk(3, -1)),
    mv("repeat", lambda F, x: x.repeat(2, 1, 3)),
    mv("repeat_new_dims", lambda F, x: x.repeat(2, 1, 2, 1), shape=(3, 1, 2)),
    mv("flip", lambda F, x: x.flip(0), sym=SYM0),
    mv("flip_dims", lambda F, x: x.flip((0, 2))),
    mv("flip_neg", lambda F, x: x.flip(-1)),
    mv("movement_chain", lambda F, x: x.permute(2, 0, 1)[1:, :, ::2].flip(1).reshape(3, -1)),
    mv("movement_chain2", lambda F, x: F.pad(x.transpose(0, 1), (1, 0))[::2].expand(2, 2, 2, 5),
       shape=(1, 3, 4)),
    mv("contiguous", lambda F, x: x.transpose(0, 2).contiguous().reshape(-1)),
    mv("roll", lambda F, x: (x.roll(1, 1), x.roll(-3, -1))),
    mv("movedim", lambda F, x: x.movedim(0, 2), sym=SYM0),
    mv("repeat_interleave", lambda F, x: x.repeat_interleave(2, 1)),
    mv("unflatten_narrow", lambda F, x: x.unflatten(2, (2, 2)).narrow(1, 1, 2)),
    mv("transposes", lambda F, x: (x.mT, x[0].T, x[1].t())),
    _case("getitem_tensor_index", lambda F, x, i: x[:, i], S, (5,), gen=(normal, indices(3))),
    _case("getitem_tensor_index_2d", lambda F, x, i: x[i], S, (2, 2), gen=(normal, indices(2))),
    _case("cat_mixed_dtypes", lambda F, a, b: F.cat([a, b]), (2, 3), (2, 3),
          gen=(ints(-3, 3), normal)),
]

# ----- matmul, gather, creation ---------------------------------------------------------------

LINALG = [
    _case("matmul_1d_1d", lambda F, a, b: a @ b, (5,), (5,), sym=((0, 0), (1, 0))),
    _case("matmul_1d_2d", lambda F, a, b: a @ b, (4,), (4, 3)),
    _case("matmul_2d_1d", lambda F, a, b: a @ b, (3, 4), (4,), sym=SYM0),
    _case("matmul_2d", lambda F, a, b: a @ b, (3, 4), (4, 5), sym=SYM0),
    _case("matmul_2d_sym_k", lambda F, a, b: a.matmul(b), (3, 4), (4, 5), sym=((0, 1), (1, 0))),
    _case("matmul_batched", lambda F, a, b: a @ b, (2, 3, 4), (2, 4, 5), sym=((0, 0), (1, 0))),
    _case("matmul_broadcast_batch", lambda F, a, b: F.matmul(a, b), (2, 1, 3, 4), (3, 4, 5)),
    _case("matmul_batch_2d", lambda F, a, b: a @ b, (2, 3, 4), (4, 5)),
    _case("matmul_2d_batch", lambda F, a, b: a @ b, (3, 4), (2, 4, 5)),
    _case("matmul_1d_batch", lambda F, a, b: a @ b, (4,), (2, 4, 5)),
    _case("matmul_int", lambda F, a, b: a @ b, (3, 4), (4, 2), gen=ints(-5, 5)),
    _case("linear", lambda F, x, w, b: F.linear(x, w, b), (2, 3, 4), (5, 4), (5,), sym=SYM0),
    _case("gather", lambda F, x, i: x.gather(1, i), (3, 5), (3, 4), gen=(normal, indices(5)),
          sym=((0, 0), (1, 0))),
    _case("gather_dim0", lambda F, x, i: x.gather(0, i), (3, 5), (2, 5), gen=(normal, indices(3))),
    _case("gather_smaller", lambda F, x, i: x.gather(-1, i), (3, 4, 5), (2, 4, 3),
          gen=(normal, indices(5))),
    _case("embedding", lambda F, i, w: F.embedding(i, w), (2, 3), (10, 4),
          gen=(indices(10), normal), sym=SYM0),
    _case("embedding_1d", lambda F, i, w: F.embedding(i, w), (5,), (7, 3),
          gen=(indices(7), normal)),
    _case("arange", lambda F: F.arange(6)),
    _case("arange_start_step", lambda F: F.arange(2, 11, 3)),
    _case("arange_negative_step", lambda F: F.arange(10, 0, -3)),
    _case("arange_float", lambda F: F.arange(0.0, 2.0, 0.25)),
    _case("arange_use", lambda F, x: x * F.arange(4), (3, 4)),
    _case("ones", lambda F: F.ones((2, 3))),
    _case("zeros", lambda F: F.zeros((3,))),
    _case("full", lambda F: F.full((2, 2), 3.5)),
    _case("full_int", lambda F: F.full((2, 3), 7)),
    _case("ones_tril", lambda F: F.ones((4, 4)).tril()),
    _case("ones_triu_diag", lambda F: F.ones((3, 5)).triu(1)),
    _case("tril", lambda F, x: x.tril(), (4, 5)),
    _case("tril_diag", lambda F, x: x.tril(1), (4, 5)),
    _case("tril_neg_diag", lambda F, x: x.tril(-1), (2, 4, 4), sym=SYM0),
    _case("triu", lambda F, x: x.triu(), (4, 5)),
    _case("triu_neg_diag", lambda F, x: x.triu(-2), (2, 5, 4)),
    _case("tril_sym_square", lambda F, x: x.tril(), (4, 4), sym=((0, 0), (0, 1))),
]

# ----- neural-network functions ---------------------------------------------------------------

CONV_TOL = {"atol": 1e-4, "rtol": 1e-4}

NN = [
    _case("conv1d", lambda F, x, w: F.conv1d(x, w), (2, 4, 10), (6, 4, 3), **CONV_TOL),
    _case("conv1d_bias_stride_pad", lambda F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
          (2, 4, 9), (6, 4, 3), (6,), **CONV_TOL),
    _case("conv1d_dilation_groups", lambda F, x, w: F.conv1d(x, w, dilation=2, groups=2),
          (2, 4, 11), (6, 2, 3), **CONV_TOL),
    _case("conv1d_sym_length", lambda F, x, w: F.conv1d(x, w, padding=1), (1, 3, 8), (2, 3, 3),
          sym=((0, 2),), **CONV_TOL),
    _case("conv2d", lambda F, x, w: F.conv2d(x, w), (2, 3, 6, 6), (4, 3, 3, 3), **CONV_TOL),
    _case("conv2d_bias", lambda F, x, w, b: F.conv2d(x, w, b), (1, 3, 5, 5), (4, 3, 3, 3), (4,),
          sym=SYM0, **CONV_TOL),
    _case("conv2d_stride_pad", lambda F, x, w: F.conv2d(x, w, stride=2, padding=1),
          (2, 3, 7, 7), (4, 3, 3, 3), **CONV_TOL),
    _case("conv2d_asym", lambda F, x, w: F.conv2d(x, w, stride=(1, 2), padding=(2, 1)),
          (1, 2, 6, 7), (3, 2, 3, 2), **CONV_TOL),
    _case("conv2d_dilation", lambda F, x, w: F.conv2d(x, w, dilation=2, padding=2),
          (1, 2, 7, 7), (3, 2, 3, 3), **CONV_TOL),
    _case("conv2d_groups", lambda F, x, w: F.conv2d(x, w, groups=2, padding=1),
          (2, 4, 5, 5), (6, 2, 3, 3), **CONV_TOL),
    _case("conv2d_depthwise", lambda F, x, w: F.conv2d(x, w, groups=4, stride=2),
          (1, 4, 6, 6), (4, 1, 3, 3), **CONV_TOL),
    _case("conv2d_1x1", lambda F, x, w: F.conv2d(x, w), (2, 4, 3, 3), (5, 4, 1, 1), **CONV_TOL),
    # symbolic spatial dims (H and W one dim) with no padding: out (n - 2) x (n - 2)
    _case("conv2d_sym_spatial", lambda F, x, w, b: F.conv2d(x, w, b), (1, 2, 5, 5),
          (3, 2, 3, 3), (3,), sym=((0, 2), (0, 3)), **CONV_TOL),
    # string padding and unbatched (C, L) / (C, H, W) input, as in PyTorch
    _case("conv1d_same_unbatched", lambda F, x, w: F.conv1d(x, w, padding="same"), (3, 7),
          (2, 3, 4), sym=((0, 1),), **CONV_TOL),
    _case("conv2d_same_valid", lambda F, x, w: (F.conv2d(x, w, padding="same", dilation=2),
                                                F.conv2d(x, w, padding="valid")),
          (2, 5, 6), (3, 2, 2, 3), **CONV_TOL),
    _case("max_pool2d", lambda F, x: F.max_pool2d(x, 2), (2, 3, 6, 6), gen=distinct),
    _case("max_pool2d_stride_pad", lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1),
          (1, 2, 7, 7), gen=distinct, sym=SYM0),
    _case("max_pool2d_ceil", lambda F, x: F.max_pool2d(x, 3, stride=2, ceil_mode=True),
          (1, 2, 6, 6), gen=distinct),
    _case("max_pool2d_ceil_pad", lambda F, x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True),
          (1, 1, 5, 6), gen=distinct),
    _case("max_pool2d_dilation", lambda F, x: F.max_pool2d(x, 2, dilation=2), (1, 2, 6, 6),
          gen=distinct),
    _case("max_pool2d_negative", lambda F, x: F.max_pool2d(x, 3, 1, 1), (1, 1, 4, 4),
          gen=uniform(-5, -1)),
    _case("max_pool2d_sym_ceil", lambda F, x: F.max_pool2d(x, 2, ceil_mode=True),
          (1, 2, 5, 4), gen=distinct, sym=((0, 2),), sym_size=6),
    _case("avg_pool2d", lambda F, x: F.avg_pool2d(x, 2), (2, 3, 6, 6)),
    _case("avg_pool2d_sym", lambda F, x: (F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                                          F.avg_pool2d(x, 2, ceil_mode=True)),
          (1, 2, 6, 5), sym=((0, 2), (0, 3)), sym_size=7),
    _case("avg_pool2d_pad", lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1), (1, 2, 7, 7)),
    _case("avg_pool2d_pad_exclude", lambda F, x: F.avg_pool2d(
        x, 3, stride=2, padding=1, count_include_pad=False), (1, 2, 7, 7)),
    _case("avg_pool2d_ceil", lambda F, x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True),
          (1, 2, 6, 6)),
    _case("avg_pool2d_ceil_pad", lambda F, x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True),
          (1, 1, 5, 6)),
    _case("avg_pool2d_ceil_pad_exclude", lambda F, x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (1, 1, 6, 5)),
    _case("layer_norm", lambda F, x, w, b: F.layer_norm(x, (8,), w, b), (2, 3, 8), (8,), (8,),
          sym=SYM0),
    _case("layer_norm_2d", lambda F, x: F.layer_norm(x, (3, 8)), (2, 3, 8)),
    _case("layer_norm_eps", lambda F, x: F.layer_norm(x, [8], eps=1e-2), (4, 8)),
    _case("rms_norm", lambda F, x, w: F.rms_norm(x, (8,), w, eps=1e-6), (2, 5, 8), (8,),
          sym=SYM0),
    _case("rms_norm_default_eps", lambda F, x: F.rms_norm(x, [4, 8]), (3, 4, 8)),
    _case("interpolate_scale", lambda F, x: F.interpolate(x, scale_factor=2), (1, 2, 3, 4)),
    _case("interpolate_size", lambda F, x: F.interpolate(x, size=(5, 7)), (1, 2, 3, 4)),
    _case("interpolate_down", lambda F, x: F.interpolate(x, size=(2, 3), mode="nearest"),
          (2, 1, 5, 7)),
    _case("interpolate_frac_scale", lambda F, x: F.interpolate(x, scale_factor=1.5),
          (1, 1, 4, 3)),
    _case("interpolate_1d", lambda F, x: F.interpolate(x, scale_factor=3), (1, 2, 4)),
    _case("interpolate_sym", lambda F, x: F.interpolate(x, scale_factor=2), (1, 2, 3, 4),
          sym=((0, 2),)),
    _case("sdpa", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
          (2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), sym=((1, 2), (2, 2))),
    _case("sdpa_causal", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v,
          is_causal=True), (2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8),
          sym=((0, 2), (1, 2), (2, 2))),
    _case("sdpa_scale_mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m, scale=0.3), (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), (4, 6)),
    _case("sdpa_bool_mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m | F.ones((4, 6)).tril(2).bool()), (1, 2, 4, 8), (1, 2, 6, 8),
        (1, 2, 6, 8), (4, 6), gen=(normal, normal, normal, bools)),
]

# ----- PyTorch parity: exact selection, integer exactness, the wider op set -------------------
# Base variant only (plus a few): these pin semantics, the variants above pin views.
ONLY_BASE = frozenset(v for v in VARIANTS if v != "base")


def parity(name: str, fn: Callable, *shapes: tuple[int, ...], gen=normal, **kw) -> Case:
    kw.setdefault("skip", ONLY_BASE)
    return _case(name, fn, *shapes, gen=gen, **kw)


PARITY = [
    parity("where_non_finite", lambda F, x: (F.where(x > 0, x.log(), 0.0),
                                             x.masked_fill(x < 0, -math.inf)), (4, 6),
           gen=specials),
    parity("select_ops_non_finite", lambda F, x: (x.relu(), x.clamp(-1.0, 1.0), x.abs(),
                                                  x.tril(), F.pad(x, (1, 1), value=math.inf)),
           (4, 6), gen=specials),
    parity("index_non_finite", lambda F, x, i: (x[i], x[:, i[:4]], x.gather(1, i[:4, None])),
           (6, 5), (6,), gen=(specials, indices(5))),
    parity("int_exact", lambda F, a, b: (F.minimum(a, b), a.amin(0), a & b, a | b, a ^ b, ~a,
                                         a >> 3), (4, 6), (4, 6), gen=int_edges),
    parity("int_pow_exact", lambda F, x: (x ** 7, x ** 2), (4, 6), gen=ints(-12, 12)),
    parity("inverse_trig", lambda F, x: (x.asin(), x.acos(), x.atan(), x.atanh(), x.asinh(),
                                         x.sinh(), x.cosh()), (4, 6), gen=uniform(-0.99, 0.99)),
    parity("activations_more", lambda F, x: (F.selu(x), F.celu(x, 0.7), F.hardtanh(x),
                                             F.logsigmoid(x), F.softsign(x)), (4, 6)),
    parity("sort", lambda F, x: (x.sort(1).values, x.sort(0, descending=True).indices,
                                 x.topk(2, 1).values), (4, 6), gen=distinct),
    parity("cummax_logcumsumexp", lambda F, x: (x.cummax(1).values, x.cummin(0).indices,
                                                x.logcumsumexp(1)), (4, 6), gen=distinct),
    parity("scatter", lambda F, x, i, s: (x.scatter(1, i, s),
                                          x.scatter_reduce(1, i, s, "amax")), (3, 5), (3, 2),
           (3, 2), gen=(normal, indices(5), normal)),
    parity("scatter_duplicates", lambda F, x, i, s: (
        x.scatter(1, i, s), x.scatter_add(1, i, s), x.scatter_reduce(1, i, s, "mean"),
        x.scatter_reduce(1, i, s, "prod", include_self=False), x.scatter_reduce(1, i, s, "amin")),
        (3, 5), (3, 6), (3, 6), gen=(normal, indices(2), specials)),
    parity("einsum", lambda F, a, b: (F.einsum("ij,jk->ik", a, b), F.einsum("ij->j", a)),
           (3, 4), (4, 5)),
    parity("conv_transpose2d", lambda F, x, w: F.conv_transpose2d(x, w, stride=2, padding=1,
                                                                  output_padding=1),
           (1, 2, 4, 4), (2, 3, 3, 3)),
    parity("conv3d_avg_pool3d", lambda F, x, w: (F.conv3d(x, w, padding=1),
                                                 F.avg_pool3d(x, 2)), (1, 2, 4, 4, 4),
           (2, 2, 3, 3, 3)),
    parity("interpolate_bilinear", lambda F, x: (
        F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False),
        F.interpolate(x, size=(2, 5), mode="bilinear", align_corners=True)), (1, 2, 3, 4)),
    # PyTorch blends uint8 in int16 fixed point, rounding between the two passes: bit for bit
    parity("interpolate_bilinear_uint8", lambda F, x: (
        F.interpolate(x, size=(5, 7), mode="bilinear"),
        F.interpolate(x, scale_factor=(1.7, 0.6), mode="bilinear", align_corners=True)),
        (2, 3, 6, 9), gen=bytes_, atol=0.0, rtol=0.0),
    parity("pad_modes", lambda F, x: (F.pad(x, (2, 1, 1, 0), mode="reflect"),
                                      F.pad(x, (1, 2, 0, 1), mode="replicate"),
                                      F.pad(x, (1, 1, 2, 2), mode="circular")), (1, 2, 4, 5)),
    parity("pow_edges", lambda F, b, e: (b ** e, b ** 0.3, b ** -0.5, b ** 3.0, 2.0 ** e),
           (6, 7), (6, 7), gen=(choices(-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0,
                                        math.inf, math.nan),
                                choices(-2.0, -1.0, -0.5, 0.0, 0.3, 1.0, 2.0, 2.5, 3.0,
                                        math.inf, -math.inf, math.nan))),
    parity("rounding_non_finite", lambda F, x: (x.trunc(), x.floor(), x.ceil(), x.round()),
           (4, 6), gen=specials),
    parity("diagonal_einsum_trace", lambda F, x: (x.diagonal(1), x.diagonal(-1, 0, 1),
                                                  F.einsum("ii", x[:, :4])), (4, 5)),
    # (values that stay in int32 after the shift: torch computes the case in int64)
    parity("shift_by_tensor", lambda F, a, n: (a << n, a >> n), (4, 6), (4, 6),
           gen=(ints(-1000, 1000), ints(0, 20))),
    parity("int_trunc_div_uint8", lambda F, a, b, u: (
        a.div(b, rounding_mode="trunc"), a.div(b.float(), rounding_mode="trunc"), u.amin(1), ~u,
        -u, F.minimum(a > 0, b > 0)), (4, 6), (4, 6), (4, 6),
        gen=(ints(-200, 200), ints(-60, 60, nonzero=True), bytes_)),
    parity("max_pool_unpool_non_finite", lambda F, x: (
        *F.max_pool2d(x, 2, return_indices=True),
        F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)), (1, 2, 4, 6),
        gen=specials),
    parity("sign_copysign_norm", lambda F, x, y: (x.sign(), x.copysign(y), x.isposinf(),
                                                  x.norm(0, 1), x.norm(-math.inf, 1)), (4, 6),
           (4, 6), gen=(specials, choices(-1.0, -0.0, 0.0, 2.0, math.inf, math.nan))),
    parity("einsum_ellipsis", lambda F, a, b: (F.einsum("...id,...jd->...ij", a, b),
                                               F.einsum("...ii->...", a[..., :3, :3])),
           (2, 3, 4), (2, 5, 4)),
]

CASES: tuple[Case, ...] = tuple(ELEMENTWISE + REDUCTIONS + MOVEMENT + LINALG + NN + PARITY)


def get_case(name: str) -> Case:
    """The case called `name`."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no conformance case named {name!r}")


def select(cases: Sequence[Case | str] | None) -> tuple[Case, ...]:
    """Cases given as `Case` objects or names; None means all of them."""
    if cases is None:
        return CASES
    return tuple(c if isinstance(c, Case) else get_case(c) for c in cases)
