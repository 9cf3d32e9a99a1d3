"""Symbolic integer expressions for shapes, strides and index arithmetic.

Expressions are hash-consed: building the same expression twice returns the same object, so
`is`, `==` and hashing are cheap. Every constructor simplifies on the way in (constant folding,
collecting like terms, range-based div/mod/min/max/comparison elimination), so the expressions
that reach a renderer are already small.

Semantics: `//` and `%` are floor division and floor modulo (Python's), comparisons yield 0/1.
Named dims (`Expr.var("seq")`) are integers >= 1; index variables carry an explicit range.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any, Union

import numpy as np

INF = 1 << 62  # stands for "no known bound" in range analysis

ExprLike = Union["Expr", int, str]

_interned: dict[tuple, Expr] = {}


class Expr:
    """An immutable, interned integer expression. Build with `Expr.var`, `Expr.const`, operators."""

    __slots__ = ("__dict__", "__weakref__", "_hash", "args", "op")

    op: str  # num var add mul floordiv mod min max lt and
    args: tuple

    def __new__(cls, op: str, args: tuple) -> Expr:
        key = (op, args)
        node = _interned.get(key)
        if node is None:
            node = object.__new__(cls)
            node.op = op
            node.args = args
            # computed once: hashing a deep expression at every lookup (views, kernels, CSE
            # keys) was a large share of compile time; args hash in O(1) the same way
            node._hash = hash(key)
            _interned[key] = node
        return node

    def __reduce__(self):
        return (Expr, (self.op, self.args))

    def __copy__(self) -> Expr:
        return self

    def __deepcopy__(self, memo) -> Expr:  # interned: a copy would be this very object
        return self

    # ----- leaves -------------------------------------------------------------------------
    @staticmethod
    def const(value: int) -> Expr:
        return Expr("num", (int(value),))

    @staticmethod
    def var(name: str, lo: int = 1, hi: int = INF) -> Expr:
        """A named integer in [lo, hi] (both inclusive). Shape dims default to [1, INF); index
        variables pass their range, which the simplifier relies on. Names starting with "_"
        are luminal's internal index variables, which kernels render as themselves, so they
        must be plain identifiers; any other name is rendered as a generated `d0, d1, ...`."""
        if name.startswith("_") and not _INTERNAL_NAME.fullmatch(name):
            raise ValueError(f"internal variable name {name!r} is not an identifier")
        return Expr("var", (name, lo, hi))

    # ----- inspection ---------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return self.op == "num"

    @property
    def value(self) -> int:
        if self.op != "num":
            raise ValueError(f"expression {self} is symbolic, not a constant")
        return self.args[0]

    @property
    def name(self) -> str:
        return self.args[0]

    @cached_property
    def vmin(self) -> int:
        return _bounds(self)[0]

    @cached_property
    def vmax(self) -> int:
        return _bounds(self)[1]

    @cached_property
    def free_vars(self) -> frozenset[str]:
        if self.op == "var":
            return frozenset((self.args[0],))
        if self.op == "num":
            return frozenset()
        out: frozenset[str] = frozenset()
        for a in self.args:
            out |= a.free_vars
        return out

    @cached_property
    def _sort_key(self) -> str:
        return str(self)

    # ----- arithmetic ---------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        return add(self, other)

    __radd__ = __add__

    def __sub__(self, other: ExprLike) -> Expr:
        return add(self, mul(to_expr(other), -1))

    def __rsub__(self, other: ExprLike) -> Expr:
        return add(to_expr(other), mul(self, -1))

    def __neg__(self) -> Expr:
        return mul(self, -1)

    def __mul__(self, other: ExprLike) -> Expr:
        return mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: ExprLike) -> Expr:
        return floordiv(self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return floordiv(other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return mod(self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return mod(other, self)

    def lt(self, other: ExprLike) -> Expr:
        return lt(self, other)

    def ge(self, other: ExprLike) -> Expr:
        return lt(other, add(self, 1))

    # Python comparisons stay Python booleans so Exprs can live in sets, dicts and sorts.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.op == "num" and self.args[0] == other
        return self is other

    def __hash__(self) -> int:
        return self._hash

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of symbolic expression {self} is undefined")

    # ----- evaluation & rendering ---------------------------------------------------------
    def substitute(self, env: Mapping[str, ExprLike]) -> Expr:
        """Replace named variables by expressions (or ints), simplifying the result."""
        if not (self.free_vars & env.keys()):
            return self
        if self.op == "var":
            return to_expr(env[self.args[0]])
        return self.with_args(a.substitute(env) for a in self.args)

    def with_args(self, args: Iterable[Expr]) -> Expr:
        """This expression's operation on `args` instead of its own, simplified as the
        operation's constructor (`add`, `floordiv`, ...) simplifies (not for leaves)."""
        return _BUILDERS[self.op](*args)

    def evaluate(self, env: Mapping[str, int] | None = None) -> int:
        """The integer value, with named variables taken from `env`."""
        if self.op == "num":
            return self.args[0]
        missing = self.free_vars - (env or {}).keys()
        if missing:
            raise UnboundDimError(sorted(missing))
        return self._python_fn(env)

    @cached_property
    def _python_fn(self) -> Callable[[Mapping[str, int]], int]:
        src = render(self, lambda n: f"env[{n!r}]", _PY_SYNTAX)
        return eval(f"lambda env: {src}", {"_min": min, "_max": max})

    @cached_property
    def numpy_fn(self) -> Callable[[Mapping[str, Any]], Any]:
        """Like `evaluate`, but variables may be NumPy integer arrays (vectorised)."""
        src = render(self, lambda n: f"env[{n!r}]", _NP_SYNTAX)
        return eval(f"lambda env: {src}", {"np": np})

    def render_c(self, names: Mapping[str, str] | None = None) -> str:
        """C-family source; named variables map through `names` (default: their own names)."""
        names = names or {}
        return render(self, lambda n: names.get(n, n), _C_SYNTAX)

    def __str__(self) -> str:
        return render(self, lambda n: n, _PY_SYNTAX_PRETTY)

    def __repr__(self) -> str:
        return f"Expr({self})"


class UnboundDimError(KeyError):
    """A symbolic dim has no value: bind it with `Graph.set_dim` or by `set()`ting an input."""

    def __init__(self, names: list[str]):
        self.names = names
        super().__init__(
            f"symbolic dim {', '.join(repr(n) for n in names)} is unbound: call "
            f"g.set_dim(name, value) or set() an input whose shape uses it"
        )

    def __str__(self) -> str:
        return self.args[0]


_INTERNAL_NAME = re.compile(r"_[A-Za-z0-9_]*")
# The largest value a symbolic dim may be bound to: kernels compute indices in 64 bits, so a
# product of two dims never overflows, and a hostile value cannot wrap around.
MAX_DIM = 2**31 - 1


def check_dim_name(name: object) -> str:
    """A user's symbolic dim name, validated: a non-empty str not starting with "_" (names
    starting with "_" are reserved for the compiler's own index variables)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a symbolic dim name must be a non-empty str, got {name!r}")
    if name.startswith("_"):
        raise ValueError(f"symbolic dim name {name!r}: names starting with '_' are reserved "
                         "for luminal's own index variables")
    return name


def to_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Expr.var(check_dim_name(x))
    if isinstance(x, bool):
        return Expr.const(int(x))
    try:
        return Expr.const(int(x))
    except (TypeError, ValueError):
        raise TypeError(f"cannot use {x!r} as a dimension: expected int, str or Expr") from None


def const_or_expr(x: Expr) -> int | Expr:
    """An int when the expression is constant, else the expression (how shapes are shown)."""
    return x.value if x.op == "num" else x


# ----- range analysis -----------------------------------------------------------------------
def _sat(x: int) -> int:
    return max(-INF, min(INF, x))


def _bounds(e: Expr) -> tuple[int, int]:
    op, a = e.op, e.args
    if op == "num":
        return a[0], a[0]
    if op == "var":
        return a[1], a[2]
    if op == "add":
        return _sat(sum(t.vmin for t in a)), _sat(sum(t.vmax for t in a))
    if op == "mul":
        lo, hi = 1, 1
        for t in a:
            cands = [lo * t.vmin, lo * t.vmax, hi * t.vmin, hi * t.vmax]
            lo, hi = _sat(min(cands)), _sat(max(cands))
        return lo, hi
    if op == "floordiv":
        x, d = a
        if d.vmin > 0:
            cands = [x.vmin // d.vmin, x.vmin // d.vmax, x.vmax // d.vmin, x.vmax // d.vmax]
            return min(cands), max(cands)
        return -INF, INF
    if op == "mod":
        x, d = a
        if d.vmin > 0:
            if x.vmin >= 0 and x.vmax < d.vmin:
                return x.vmin, x.vmax
            return 0, d.vmax - 1
        return -INF, INF
    if op == "min":
        return min(t.vmin for t in a), min(t.vmax for t in a)
    if op == "max":
        return max(t.vmin for t in a), max(t.vmax for t in a)
    if op in ("lt", "and"):
        return 0, 1
    raise AssertionError(op)


# ----- smart constructors -------------------------------------------------------------------
def _split_coeff(t: Expr) -> tuple[int, Expr]:
    """A term as (integer coefficient, rest): 3*x -> (3, x)."""
    if t.op == "mul" and t.args[0].op == "num":
        rest = t.args[1:]
        return t.args[0].args[0], rest[0] if len(rest) == 1 else Expr("mul", rest)
    if t.op == "num":
        return t.args[0], Expr.const(1)
    return 1, t


def add(*terms: ExprLike) -> Expr:
    coeffs: dict[Expr, int] = {}
    constant = 0
    stack = [to_expr(t) for t in terms]
    while stack:
        t = stack.pop()
        if t.op == "add":
            stack.extend(t.args)
        elif t.op == "num":
            constant += t.args[0]
        else:
            c, rest = _split_coeff(t)
            coeffs[rest] = coeffs.get(rest, 0) + c
    fold = _fold_div_mod(coeffs) if any(t.op == "mod" for t in coeffs) else None
    if fold is not None:
        pair, whole = fold
        return add(constant, whole, *(_scale(rest, c) for rest, c in coeffs.items()
                                      if c != 0 and rest not in pair))
    parts = [_scale(rest, c) for rest, c in coeffs.items() if c != 0]
    parts.sort(key=lambda p: p._sort_key)
    if constant:
        parts.append(Expr.const(constant))
    if not parts:
        return Expr.const(0)
    if len(parts) == 1:
        return parts[0]
    return Expr("add", tuple(parts))


def _fold_div_mod(coeffs: dict[Expr, int]) -> tuple[tuple[Expr, Expr], Expr] | None:
    """A pair of terms of a sum that recombine what a division split, with what replaces it:
    k*c*(x // c) + k*(x % c) == k*x and k*c*((x // c) % d) + k*(x % c) == k*(x % (c*d)) for
    constants c, d > 0. Reshapes and transposes write indices as such digit sums; folded, a
    gather over them becomes a contiguous copy. None when the sum has no such pair."""
    for m, k in coeffs.items():
        if k == 0 or m.op != "mod" or not m.args[1].is_const or m.args[1].args[0] <= 0:
            continue
        x, c = m.args[0], m.args[1].args[0]
        q = floordiv(x, c)
        if coeffs.get(q) == k * c:
            return (m, q), mul(k, x)
        for digit, kd in coeffs.items():
            if (kd == k * c and digit.op == "mod" and digit.args[0] is q
                    and digit.args[1].is_const and digit.args[1].args[0] > 0):
                return (m, digit), mul(k, mod(x, c * digit.args[1].args[0]))
    return None


def _scale(e: Expr, c: int) -> Expr:
    if c == 1:
        return e
    if e.op == "mul":
        return Expr("mul", (Expr.const(c), *e.args))
    return Expr("mul", (Expr.const(c), e))


def mul(*factors: ExprLike) -> Expr:
    coeff = 1
    parts: list[Expr] = []
    stack = [to_expr(f) for f in factors]
    while stack:
        f = stack.pop()
        if f.op == "mul":
            stack.extend(f.args)
        elif f.op == "num":
            coeff *= f.args[0]
        else:
            parts.append(f)
    if coeff == 0:
        return Expr.const(0)
    if not parts:
        return Expr.const(coeff)
    if len(parts) == 1 and parts[0].op == "add":
        # distribute constants over sums so index terms can cancel and divide
        return add(*(mul(coeff, t) for t in parts[0].args))
    if any(p.op == "add" for p in parts):
        # a sum inside a product gives up its integer content (6*n - 12 -> 6 * (n - 2)), so
        # equal products have one form: 9 * (2*n - 4) * (n - 2) is 18 * (n - 2) * (n - 2)
        parts = [_take_content(p) if p.op == "add" else p for p in parts]
        coeff *= math.prod(c for c, _ in (p for p in parts if isinstance(p, tuple)))
        parts = [p[1] if isinstance(p, tuple) else p for p in parts]
    parts.sort(key=lambda p: p._sort_key)
    body = parts[0] if len(parts) == 1 else Expr("mul", tuple(parts))
    return _scale(body, coeff)


def _take_content(e: Expr) -> tuple[int, Expr]:
    """A sum as (gcd of its coefficients, the sum divided by it): 6*n - 12 -> (6, n - 2)."""
    g = 0
    for t in e.args:
        g = math.gcd(g, _split_coeff(t)[0])
    if g <= 1:
        return 1, e
    return g, add(*(mul(c // g, body) for c, body in map(_split_coeff, e.args)))


def _terms(e: Expr) -> tuple[Expr, ...]:
    return e.args if e.op == "add" else (e,)


def floordiv(x: ExprLike, d: ExprLike) -> Expr:
    x, d = to_expr(x), to_expr(d)
    if d.op == "num":
        dv = d.args[0]
        if dv == 0:
            raise ZeroDivisionError(f"symbolic division by zero: {x} // 0")
        if dv == 1:
            return x
        if x.op == "num":
            return Expr.const(x.args[0] // dv)
        if dv > 0:
            # (dv*q + r) // dv == q + r // dv exactly for integer q
            whole, rest = [], []
            for t in _terms(x):
                c, body = _split_coeff(t)
                (whole if c % dv == 0 else rest).append((c, body))
            quotient = add(*(mul(c // dv, b) for c, b in whole))
            remainder = add(*(mul(c, b) for c, b in rest))
            if not rest:
                return quotient
            if whole:
                return add(quotient, floordiv(remainder, dv))
            lo, hi = remainder.vmin, remainder.vmax
            if lo > -INF and hi < INF and lo // dv == hi // dv:  # one quotient on the range
                return add(quotient, lo // dv)
            if remainder.vmin >= 0 and remainder.op == "floordiv" and remainder.args[1].is_const:
                inner, d2 = remainder.args
                return floordiv(inner, d2.args[0] * dv)
            if remainder.vmin >= 0 and remainder.op == "mod":
                # (y % (dv*k)) // dv == (y // dv) % k
                inner, m = remainder.args
                if m.is_const and m.args[0] % dv == 0:
                    return mod(floordiv(inner, dv), m.args[0] // dv)
    else:
        quotient = _exact_quotient(x, d)
        if quotient is not None:
            return quotient
    return Expr("floordiv", (x, d))


def _monomial(e: Expr) -> tuple[int, list[Expr]]:
    """A term as (coefficient, factors): 6*n*m -> (6, [m, n])."""
    c, body = _split_coeff(e)
    if body == 1:
        return c, []
    return c, list(body.args) if body.op == "mul" else [body]


def _exact_quotient(x: Expr, d: Expr) -> Expr | None:
    """x / d when every term of x is a multiple of the monomial d (so // and % are exact),
    else None: (6*n*m + 3*n) // (3*n) == 2*m + 1."""
    if d.op == "add":
        # a sum divides x when x is an integer multiple of it: (6*n - 12) // (3*n - 6) == 2
        c, body = _split_coeff(d.args[0])
        for term in _terms(x):
            xc, xbody = _split_coeff(term)
            if xbody is body:
                if xc % c == 0 and mul(xc // c, d) is x:
                    return Expr.const(xc // c)
                break
    dc, dfactors = _monomial(d)
    if dc == 0:
        return None
    parts = []
    for term in _terms(x):
        c, factors = _monomial(term)
        for f in dfactors:
            if f not in factors:
                return None
            factors.remove(f)
        if c % dc:
            return None
        parts.append(mul(c // dc, *factors))
    return add(*parts)


def mod(x: ExprLike, d: ExprLike) -> Expr:
    x, d = to_expr(x), to_expr(d)
    if d.op == "num":
        dv = d.args[0]
        if dv == 0:
            raise ZeroDivisionError(f"symbolic modulo by zero: {x} % 0")
        if dv == 1:
            return Expr.const(0)
        if x.op == "num":
            return Expr.const(x.args[0] % dv)
        if dv > 0:
            kept = [t for t in _terms(x) if _split_coeff(t)[0] % dv != 0]
            x = add(*kept)
            if x.vmin >= 0 and x.vmax < dv:
                return x
            lo, hi = x.vmin, x.vmax
            if lo > -INF and hi < INF and lo // dv == hi // dv:  # one quotient on the range
                return add(x, -dv * (lo // dv))
            if x.op == "mod" and x.args[1].is_const and x.args[1].args[0] % dv == 0:
                return mod(x.args[0], dv)
    elif x.vmin >= 0 and x.vmax < d.vmin:
        return x
    elif _exact_quotient(x, d) is not None:
        return Expr.const(0)
    return Expr("mod", (x, d))


def _minmax(op: str, pick: Callable[[Iterable[int]], int], items: tuple[ExprLike, ...]) -> Expr:
    flat: list[Expr] = []
    for it in items:
        e = to_expr(it)
        flat.extend(e.args if e.op == op else (e,))
    consts = [e.args[0] for e in flat if e.op == "num"]
    rest = sorted({e for e in flat if e.op != "num"}, key=lambda p: p._sort_key)
    if consts:
        rest.append(Expr.const(pick(consts)))
    # drop an operand when another one is always at least as good (min: <=, max: >=)
    kept: list[Expr] = []
    for k, e in enumerate(rest):
        others = kept + rest[k + 1 :]
        if op == "min" and any(f.vmax <= e.vmin for f in others):
            continue
        if op == "max" and any(f.vmin >= e.vmax for f in others):
            continue
        # the same for operands whose difference is bounded although neither is, e.g.
        # min(seq - 1, seq) == seq - 1 (what slicing the last row of a symbolic axis gives)
        if e.op != "num" and any(f.op != "num" and _always(op, add(f, mul(e, -1)))
                                 for f in others):
            continue
        # absorption: max(a, min(a, b)) == a and min(a, max(a, b)) == a
        if e.op == ("max" if op == "min" else "min") and any(f in e.args for f in others):
            continue
        kept.append(e)
    return kept[0] if len(kept) == 1 else Expr(op, tuple(kept))


def _always(op: str, diff: Expr) -> bool:
    """Whether `f` with `diff` = f - e is always at least as good as `e` for `op`."""
    return diff.vmax <= 0 if op == "min" else diff.vmin >= 0


def smin(*items: ExprLike) -> Expr:
    return _minmax("min", min, items)


def smax(*items: ExprLike) -> Expr:
    return _minmax("max", max, items)


def lt(a: ExprLike, b: ExprLike) -> Expr:
    a, b = to_expr(a), to_expr(b)
    diff = add(a, mul(b, -1))  # a < b  <=>  a - b < 0
    if diff.vmax < 0:
        return Expr.const(1)
    if diff.vmin >= 0:
        return Expr.const(0)
    return Expr("lt", (a, b))


def logical_and(*items: ExprLike) -> Expr:
    parts: list[Expr] = []
    for it in items:
        e = to_expr(it)
        if e.op == "num":
            if e.args[0] == 0:
                return Expr.const(0)
            continue
        parts.extend(e.args if e.op == "and" else (e,))
    uniq = sorted(set(parts), key=lambda p: p._sort_key)
    if not uniq:
        return Expr.const(1)
    return uniq[0] if len(uniq) == 1 else Expr("and", tuple(uniq))


_BUILDERS: dict[str, Callable[..., Expr]] = {
    "add": add,
    "mul": mul,
    "floordiv": floordiv,
    "mod": mod,
    "min": smin,
    "max": smax,
    "lt": lt,
    "and": logical_and,
}


def evaluator(exprs: Iterable[ExprLike]) -> Callable[[Mapping[str, int]], tuple[int, ...]]:
    """One compiled function that evaluates every expression of `exprs`, in order.

    For hot paths that evaluate many sizes per run (a runtime binding its buffers when a dim
    changes): one Python call and one check of the bound dims instead of one per expression.
    Raises `UnboundDimError` when `env` lacks a dim the expressions use.
    """
    exprs = [to_expr(e) for e in exprs]
    needed = frozenset().union(*(e.free_vars for e in exprs))
    # Expressions are hash-consed: each distinct one is rendered and evaluated once, into a
    # local of one generated function that lays the values out in order (a single call: a
    # decode step evaluates with caches the weights just streamed through, where every
    # Python call costs)
    slot = {id(e): k for k, e in enumerate({id(e): e for e in exprs}.values())}
    distinct = {id(e): e for e in exprs}.values()
    values = "".join(f"        v{k} = {render(e, lambda n: f'env[{n!r}]', _PY_SYNTAX)}\n"
                     for k, e in enumerate(distinct))
    layout = "".join(f"v{slot[id(e)]}, " for e in exprs)
    source = (f"def evaluate(env):\n    try:\n{values}        pass\n"
              f"    except KeyError:\n        raise _unbound(env) from None\n"
              f"    return ({layout})\n")
    scope = {"_min": min, "_max": max,
             "_unbound": lambda env: UnboundDimError(sorted(needed - env.keys()))}
    exec(source, scope)
    return scope["evaluate"]


# ----- rendering ----------------------------------------------------------------------------
class _Syntax:
    def __init__(self, floordiv, mod, minf, maxf, lt, land, pretty=False):
        self.floordiv, self.mod, self.min, self.max = floordiv, mod, minf, maxf
        self.lt, self.land, self.pretty = lt, land, pretty


_PY_SYNTAX = _Syntax(
    floordiv=lambda a, b, _e: f"({a} // {b})",
    mod=lambda a, b, _e: f"({a} % {b})",
    minf="_min",
    maxf="_max",
    lt=lambda a, b: f"int({a} < {b})",
    land=lambda parts: "int(" + " and ".join(parts) + ")",
)
_NP_SYNTAX = _Syntax(
    floordiv=lambda a, b, _e: f"({a} // {b})",
    mod=lambda a, b, _e: f"({a} % {b})",
    minf="np.minimum",
    maxf="np.maximum",
    lt=lambda a, b: f"(({a} < {b}) * 1)",
    land=lambda parts: "(" + " & ".join(parts) + ")",
)
_PY_SYNTAX_PRETTY = _Syntax(
    floordiv=lambda a, b, _e: f"({a} // {b})",
    mod=lambda a, b, _e: f"({a} % {b})",
    minf="min",
    maxf="max",
    lt=lambda a, b: f"({a} < {b})",
    land=lambda parts: "(" + " & ".join(parts) + ")",
    pretty=True,
)


def _c_floordiv(a: str, b: str, e: Expr) -> str:
    # C division truncates; it equals floor division when the dividend is non-negative
    if e.args[0].vmin >= 0 and e.args[1].vmin > 0:
        return f"({a} / {b})"
    return f"lm_floordiv({a}, {b})"


def _c_mod(a: str, b: str, e: Expr) -> str:
    if e.args[0].vmin >= 0 and e.args[1].vmin > 0:
        return f"({a} % {b})"
    return f"lm_floormod({a}, {b})"


_C_SYNTAX = _Syntax(
    floordiv=_c_floordiv,
    mod=_c_mod,
    minf="lm_min",
    maxf="lm_max",
    lt=lambda a, b: f"({a} < {b})",
    land=lambda parts: "(" + " && ".join(parts) + ")",
)

def render(e: Expr, name_of: Callable[[str], str], syn: _Syntax) -> str:
    op, a = e.op, e.args
    if op == "num":
        return str(a[0]) if a[0] >= 0 else f"({a[0]})"
    if op == "var":
        return name_of(a[0])
    r = [render(x, name_of, syn) for x in a] if op != "var" else []
    if op == "add" and syn.pretty:
        # positive terms first, then "- term": (n - min(n, 2) - 1)
        terms = sorted(a, key=lambda t: _split_coeff(t)[0] < 0)
        out = ""
        for k, t in enumerate(terms):
            c, body = _split_coeff(t)
            text = render(_scale(body, abs(c)) if body.op != "num" else Expr.const(abs(c)),
                          name_of, syn)
            out += (f" - {text}" if k else f"-{text}") if c < 0 else (f" + {text}" if k else text)
        return f"({out})"
    if op == "add":
        return "(" + " + ".join(r) + ")"
    if op == "mul":
        return "(" + " * ".join(r) + ")"
    if op == "floordiv":
        return syn.floordiv(r[0], r[1], e)
    if op == "mod":
        return syn.mod(r[0], r[1], e)
    if op in ("min", "max"):
        fn = syn.min if op == "min" else syn.max
        out = r[0]
        for s in r[1:]:
            out = f"{fn}({out}, {s})"
        return out
    if op == "lt":
        return syn.lt(r[0], r[1])
    if op == "and":
        return syn.land(r)
    raise AssertionError(op)


def prod(items: Iterable[ExprLike]) -> Expr:
    return mul(*items)
