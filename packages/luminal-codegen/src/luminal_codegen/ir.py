"""The kernel IR: what a device backend compiles, independent of the device.

A `Program` is a list of calls to kernels over planned buffers. A kernel is either

- a `Kernel`: a parallel iteration space (`domain`, one loop variable per axis, every point
  independent) whose body is one `Store` of a `Value` tree. Values read buffers through
  symbolic index/validity expressions (`Load`), compute with the primitive arithmetic
  (`Unary`, `Binary`, `Cast`, `Where`, `Select`), reduce over inner loops (`Reduce`, an
  accumulator per point, so no atomics are needed) and gather (`Bind` turns a loaded integer
  into an index variable); or
- a `Matmul`: a (batched) matrix product over strided or quantized operands, which backends
  map to their tuned GEMM/GEMV (or BLAS) routine.

Every index, size and offset is a `luminal.symbolic.Expr` over loop variables (`loop_var`,
`reduce_var`, `batch_var`: names starting with "_", which luminal reserves) and symbolic
dims; the dims a kernel needs become its scalar arguments (`kernel_dims`). All IR objects are
frozen and compare structurally, so identical kernels (the same layer repeated) dedupe by
equality.

Float values of any float dtype are computed in float32; a value whose dtype is float16 or
bfloat16 is rounded to that dtype, as the reference backend rounds every node's output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace

from luminal import ops
from luminal.dtypes import DType
from luminal.symbolic import INF, Expr, logical_and

UNARY_OPS = tuple(op.code for op in ops.MATH)
BINARY_OPS = tuple(op.code for op in ops.BINARY)
REDUCE_OPS = ("sum", "max")


def _var(prefix: str, k: int, extent: Expr) -> Expr:
    hi = extent.value - 1 if extent.is_const else INF
    return Expr.var(f"_{prefix}{k}", 0, max(hi, 0))


def loop_var(k: int, extent: Expr) -> Expr:
    """The variable of domain axis `k` (range [0, extent))."""
    return _var("i", k, extent)


def reduce_var(k: int, extent: Expr) -> Expr:
    """The variable of the `k`-th reduction loop of a kernel."""
    return _var("r", k, extent)


def batch_var(k: int, extent: Expr) -> Expr:
    """The variable of batch axis `k` of a `Matmul`."""
    return _var("b", k, extent)


# ----- values --------------------------------------------------------------------------------
class Value:
    """Base of the expression tree of a kernel body. Every value has a `dtype`."""

    dtype: DType


def _node(cls: type) -> type:
    """A frozen dataclass whose hash is computed once: trees share subtrees, and hashing them
    again at every level would cost time exponential in the depth of the sharing."""
    cls = dataclass(frozen=True)(cls)
    field_hash = cls.__hash__

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = field_hash(self)
            object.__setattr__(self, "_hash", h)
        return h

    cls.__hash__ = __hash__
    return cls


@_node
class Load(Value):
    """`buf[index]` where `valid` is nonzero, else 0 (the index is not evaluated there)."""

    buf: int
    index: Expr
    valid: Expr
    dtype: DType


@_node
class Const(Value):
    value: float | int | bool
    dtype: DType


@_node
class Index(Value):
    """An integer expression of loop variables and dims as a value (iota, symbolic consts)."""

    expr: Expr
    dtype: DType


@_node
class Unary(Value):
    op: str  # one of UNARY_OPS
    x: Value
    dtype: DType


@_node
class Binary(Value):
    """`op` on operands of one dtype; "lt" yields a bool, the others the operands' dtype."""

    op: str  # one of BINARY_OPS
    a: Value
    b: Value
    dtype: DType


@_node
class Cast(Value):
    """Convert (float -> int truncates toward zero, nonzero -> true)."""

    x: Value
    dtype: DType


@_node
class Where(Value):
    """`x` where `cond` is nonzero, else 0: padding of an inlined producer."""

    cond: Expr
    x: Value
    dtype: DType


@_node
class Select(Value):
    """`x` where the bool value `cond` is true, else `y` (the graph's `Select` op)."""

    cond: Value
    x: Value
    y: Value
    dtype: DType


@_node
class Reduce(Value):
    """Sum or max of `body` over `var` in [0, size): an accumulator and an inner loop."""

    op: str  # one of REDUCE_OPS
    var: Expr
    size: Expr
    body: Value
    dtype: DType


@_node
class SoftmaxSum(Value):
    """`sum_var softmax_var(logit) * body`: the softmax over `var` in [0, size) of `logit` (base
    2: weights `exp2(logit - max logit)`, normalised) weighting `body`, computed in one pass
    with a running max, sum and accumulator (online softmax), so no vector of weights is
    stored. Its semantics are those of the primitive decomposition, NaN and infinities
    included: a NaN logit, an infinite logit or a row whose logits are all -inf gives NaN."""

    var: Expr
    size: Expr
    logit: Value
    body: Value
    dtype: DType


@_node
class Bind(Value):
    """`body` with index variable `var` set to the integer `value` (a data-dependent index)."""

    var: Expr
    value: Value
    body: Value
    dtype: DType




# ----- kernels -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """A buffer argument of a kernel: its element type and whether the kernel writes it."""

    dtype: DType
    output: bool = False


@dataclass(frozen=True)
class Store:
    buf: int
    index: Expr
    value: Value


@dataclass(frozen=True)
class Kernel:
    """`out` stored at every point of `domain` (loop variables `loop_var(k, domain[k])`).

    `tuning` overrides settings of the dialect that renders it, `(name, value)` pairs from its
    `Dialect.tunable` (a searched schedule's choice, see `Schedule.tuning`)."""

    params: tuple[Param, ...]
    domain: tuple[Expr, ...]
    out: Store
    # keyword-only, so that subclasses (a backend's own kernel kinds) may add required fields
    tuning: tuple[tuple[str, int], ...] = field(default=(), kw_only=True)

    @property
    def loop_vars(self) -> tuple[Expr, ...]:
        return tuple(loop_var(k, d) for k, d in enumerate(self.domain))


@dataclass(frozen=True)
class MatOperand:
    """Element (row, k) of batch `b` is at `offset + row*stride_row + k*stride_k`, where
    `offset` may use the batch variables; row is m for the left operand, n for the right."""

    buf: int
    offset: Expr
    stride_row: Expr
    stride_k: Expr


@dataclass(frozen=True)
class QuantOperand:
    """A GGUF block-quantized matrix W (`rows` x `cols`, blocks along each row), shared by
    every batch. `k_contiguous`: the product reads W[n, k] (x @ W.T); else W[k, n] (x @ W)."""

    buf: int
    qtype: str  # a `luminal.quant` block format (lower case) the backend has a kernel for
    rows: Expr
    cols: Expr
    k_contiguous: bool


@dataclass(frozen=True)
class Matmul:
    """out(b, m, n) = sum_k a(b, m, k) * b(b, n, k), stored at
    `out_offset + m*out_stride + n` of buffer `out` (`out_offset` over the batch variables; a
    plain matmul writes (batch..., m, n) contiguously, a fused permute writes elsewhere).
    Products and sums are in float32; the result is rounded to the output's dtype.

    `tuning` overrides settings of the backend's matmul call, `(name, value)` pairs (a
    searched schedule's choice, see `Schedule.tuning`; luminal-cpu: `quant_activations`, how a
    quantized matvec holds x)."""

    params: tuple[Param, ...]
    batch: tuple[Expr, ...]
    m: Expr
    n: Expr
    k: Expr
    a: MatOperand
    b: MatOperand | QuantOperand
    out: int
    out_offset: Expr
    out_stride: Expr
    tuning: tuple[tuple[str, int], ...] = field(default=(), kw_only=True)

    @property
    def batch_vars(self) -> tuple[Expr, ...]:
        return tuple(batch_var(k, d) for k, d in enumerate(self.batch))


KernelLike = Kernel | Matmul


# ----- programs ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BufferSpec:
    """A buffer of the program. `node` is the graph node whose value it holds; `role` is
    "input" (bound from `graph.data`), "output" (retrieved, kept or assigned: never reused)
    or "temp" (an intermediate: placed by the memory plan)."""

    node: int
    dtype: DType
    numel: Expr
    role: str


@dataclass(frozen=True)
class Call:
    """Run `kernels[kernel]` with its parameters bound to these buffer indices."""

    kernel: int
    args: tuple[int, ...]


@dataclass
class Program:
    """A whole graph lowered to kernels: run `calls` in order."""

    kernels: list[KernelLike]
    calls: list[Call]
    buffers: list[BufferSpec]
    dims: tuple[str, ...]


# ----- traversal -----------------------------------------------------------------------------
_EXPR_FIELDS = {
    Load: ("index", "valid"), Index: ("expr",), Where: ("cond",), Reduce: ("var", "size"),
    SoftmaxSum: ("var", "size"), Bind: ("var",),
}


def children(v: Value) -> tuple[Value, ...]:
    """The value operands of `v`."""
    return tuple(getattr(v, f.name) for f in fields(v) if isinstance(getattr(v, f.name), Value))


def walk(v: Value) -> Iterator[Value]:
    """Every value of the tree under `v` (shared subtrees once), parents before children."""
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(children(x))


def exprs_of(v: Value) -> Iterator[Expr]:
    """Every symbolic expression used under `v`."""
    for x in walk(v):
        for name in _EXPR_FIELDS.get(type(x), ()):
            yield getattr(x, name)


def map_exprs(v: Value, fn: Callable[[Expr], Expr]) -> Value:
    """`v` with every symbolic expression replaced by `fn(expr)`."""
    memo: dict[int, Value] = {}

    def go(x: Value) -> Value:
        got = memo.get(id(x))
        if got is not None:
            return got
        changes = {name: fn(getattr(x, name)) for name in _EXPR_FIELDS.get(type(x), ())}
        for f in fields(x):
            child = getattr(x, f.name)
            if isinstance(child, Value):
                changes[f.name] = go(child)
        out = replace(x, **changes) if changes else x
        memo[id(x)] = out
        return out

    return go(v)


def map_values(v: Value, fn: Callable[[Value], Value | None]) -> Value:
    """`v` with each node for which `fn` returns a value replaced by it (and not looked
    into), every other node rebuilt from its rewritten children (shared subtrees once)."""
    memo: dict[int, Value] = {}

    def go(x: Value) -> Value:
        got = memo.get(id(x))
        if got is not None:
            return got
        out = fn(x)
        if out is None:
            changes = {f.name: go(getattr(x, f.name)) for f in fields(x)
                       if isinstance(getattr(x, f.name), Value)}
            out = replace(x, **changes) if changes else x
        memo[id(x)] = out
        return out

    return go(v)


def map_loads(v: Value, fn: Callable[[Load], Value]) -> Value:
    """`v` with every `Load` replaced by `fn(load)` (shared subtrees rewritten once)."""
    return map_values(v, lambda x: fn(x) if isinstance(x, Load) else None)


def guard_loads(v: Value, cond: Expr) -> Value:
    """`v` with `cond` added to the validity of every load: no load under `v` then reads
    memory where `cond` is false (for values used only where `cond` holds)."""
    return map_loads(v, lambda x: replace(x, valid=logical_and(x.valid, cond)))


def kernel_exprs(k: KernelLike) -> Iterator[Expr]:
    """Every symbolic expression a kernel uses (sizes included)."""
    if isinstance(k, Kernel):
        yield from k.domain
        yield k.out.index
        yield from exprs_of(k.out.value)
        return
    yield from (*k.batch, k.m, k.n, k.k, k.out_offset, k.out_stride)
    yield from (k.a.offset, k.a.stride_row, k.a.stride_k)
    if isinstance(k.b, MatOperand):
        yield from (k.b.offset, k.b.stride_row, k.b.stride_k)
    else:
        yield from (k.b.rows, k.b.cols)


def kernel_dims(k: KernelLike) -> tuple[str, ...]:
    """The symbolic dims a kernel reads (its scalar arguments), sorted."""
    names: set[str] = set()
    for e in kernel_exprs(k):
        names |= e.free_vars
    return tuple(sorted(n for n in names if not n.startswith("_")))


def kernel_arguments(k: KernelLike) -> int:
    """How many arguments a kernel is called with: its buffers and its symbolic dims."""
    return len(k.params) + len(kernel_dims(k))


def top_reductions(v: Value) -> list[Reduce]:
    """The reductions of a tree that are not inside another reduction's body (nor inside a
    `SoftmaxSum`, which is a reduction of its own kind)."""
    out, stack, seen = [], [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Reduce):
            out.append(x)
        elif not isinstance(x, SoftmaxSum):
            stack.extend(children(x))
    return out


def domain_size(k: Kernel) -> Expr:
    """The number of points of a kernel's domain."""
    points = Expr.const(1)
    for d in k.domain:
        points = points * d
    return points


# ----- affine analysis -----------------------------------------------------------------------
def affine(e: Expr, variables: tuple[Expr, ...]) -> tuple[list[Expr], Expr] | None:
    """Split `e` into `sum(coef[k] * variables[k]) + rest`, where neither the coefficients nor
    `rest` use any of `variables`; None when `e` is not affine in them (e.g. a var under //)."""
    names = {v.name: k for k, v in enumerate(variables)}
    coefs = [Expr.const(0)] * len(variables)
    rest = Expr.const(0)
    for term in e.args if e.op == "add" else (e,):
        used = term.free_vars & names.keys()
        if not used:
            rest = rest + term
            continue
        if len(used) > 1:
            return None
        k = names[next(iter(used))]
        var = variables[k]
        if term is var:
            coefs[k] = coefs[k] + 1
            continue
        if term.op != "mul" or var not in term.args:
            return None
        factors = list(term.args)
        factors.remove(var)
        coef = Expr.const(1)
        for f in factors:
            coef = coef * f
        if coef.free_vars & names.keys():
            return None
        coefs[k] = coefs[k] + coef
    return coefs, rest
