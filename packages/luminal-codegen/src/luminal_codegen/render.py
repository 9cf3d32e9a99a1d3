"""One renderer for every C-family language: kernel IR -> source text.

`render_kernel(kernel, name, dialect)` writes a `Kernel` as a function. Everything that
differs between C, CUDA C, OpenCL C and Metal lives in a `Dialect` (each backend has its own:
luminal-cpu's C, luminal-cuda's CUDA C, luminal-rocm's OpenCL C, luminal-metal's MSL; `gpu.py`
is their GPU base):
type names, half-precision conversions, math function names, the signature and qualifiers, and
how the parallel domain is walked (OpenMP loops on a CPU, one thread per point on a GPU).

The body is emitted as straight-line code: every value becomes one local variable, placed in
the outermost loop its inputs allow (loop-invariant work is hoisted out of reduction loops,
and a subtree used twice is computed once). Loads of padding are guarded, so no index is ever
dereferenced where a view reads zero.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral

from luminal.dtypes import DType, float32
from luminal.symbolic import Expr

from .ir import (
    Binary,
    Bind,
    Cast,
    Const,
    Index,
    Kernel,
    Load,
    Reduce,
    Select,
    SoftmaxSum,
    Unary,
    Value,
    Where,
    affine,
    children,
    exprs_of,
    kernel_dims,
    map_exprs,
    top_reductions,
    walk,
)

_BOUND_PREFIXES = ("_r", "_g")  # variables bound inside a kernel body (reductions, gathers)


class Dialect:
    """The language-specific parts of rendering. The defaults are C99 with float32 math;
    subclasses override what their language spells differently."""

    name = "c"
    helper_qualifier = "static inline"
    kernel_qualifier = "static"
    restrict = "restrict"
    half_storage = "_Float16"
    # integer settings a kernel may override through `Kernel.tuning` (a searched schedule),
    # each with the inclusive range of values the dialect renders
    tunable: Mapping[str, tuple[int, int]] = {}
    # most buffers plus symbolic dims one kernel may take (None: no bound); a backend passes
    # it to `lower(..., max_args=)`, which splits larger fused kernels
    max_kernel_args: int | None = None

    def tuned(self, settings: tuple[tuple[str, int], ...]) -> Dialect:
        """This dialect with `settings` (names from `tunable`) overridden."""
        unknown = [name for name, _ in settings if name not in self.tunable]
        if unknown:
            raise ValueError(f"dialect {self.name!r} has no tunable setting {unknown}; it has "
                             f"{list(self.tunable)}")
        twin = copy.copy(self)
        for name, value in settings:
            lo, hi = self.tunable[name]
            if isinstance(value, bool) or not isinstance(value, Integral) or not lo <= value <= hi:
                raise ValueError(f"dialect {self.name!r}: setting {name}={value!r} is outside "
                                 f"its range [{lo}, {hi}] (integers)")
            setattr(twin, name, int(value))
        return twin

    # >0: the axis this many places before the last runs innermost (a loop interchange: it
    # moves to the end, the others keep their order); 0, or a kernel with no such axis, keeps
    # the last axis innermost. Every order is legal: a kernel's points are independent.
    loop_order = 0

    def ordered(self, extents: list[str], names: list[str]) -> tuple[list[str], list[str]]:
        """The domain's axes in the order `loop_order` picks (outermost first)."""
        pick = len(names) - 1 - self.loop_order
        if self.loop_order <= 0 or pick < 0:
            return extents, names
        order = [k for k in range(len(names)) if k != pick] + [pick]
        return [extents[k] for k in order], [names[k] for k in order]

    # >1: a kernel's one reduction is cut into this many chunks reduced by different threads,
    # then combined in chunk order (`split_reduction`); dialects that cannot leave it at 1
    split_k = 1

    # ----- types --------------------------------------------------------------------------
    def storage_type(self, dt: DType) -> str:
        """Element type of a buffer of `dt`."""
        return {
            "float32": "float",
            "float16": self.half_storage,
            "bfloat16": "unsigned short",
            "int32": "int",
            "bool": "unsigned char",
            "uint8": "unsigned char",
        }[dt.name]

    def compute_type(self, dt: DType) -> str:
        """Type values of `dt` are computed in (float32 for every float dtype)."""
        return "float" if dt.is_float else "int"

    def load(self, dt: DType, buf: str, index: str) -> str:
        """Element `index` of buffer `buf`, converted to its compute type."""
        ref = f"{buf}[{index}]"
        if dt.name == "float16":
            return f"((float){ref})"
        if dt.name == "bfloat16":
            return f"lm_bf16_to_f32({ref})"
        if dt.name in ("bool", "uint8"):
            return f"((int){ref})"
        return ref

    def store(self, dt: DType, value: str) -> str:
        """Convert a computed value to the buffer element type."""
        if dt.name == "float16":
            return f"(({self.half_storage})({value}))"
        if dt.name == "bfloat16":
            return f"lm_f32_to_bf16({value})"
        if dt.name in ("bool", "uint8"):
            return f"((unsigned char)({value}))"
        return value

    def store_statement(self, dt: DType, buf: str, index: str, value: str) -> str:
        """The statement writing `value` to element `index` of buffer `buf`."""
        return f"{buf}[{index}] = {self.store(dt, value)};"

    def round(self, dt: DType, value: str) -> str:
        """Round a float32 value to `dt` (identity for float32)."""
        if dt.name == "float16":
            return f"((float)({self.half_storage})({value}))"
        if dt.name == "bfloat16":
            return f"lm_bf16_round({value})"
        return value

    # ----- math ---------------------------------------------------------------------------
    # the function computing each unary op of the IR (recip is a division) and the remainder
    math_functions = {"log2": "log2f", "exp2": "exp2f", "sin": "sinf", "sqrt": "sqrtf",
                      "fmod": "fmodf"}

    def unary(self, op: str, x: str) -> str:
        if op == "recip":
            return f"(1.0f / {x})"
        return f"{self.math_functions[op]}({x})"

    def fmod(self, a: str, b: str) -> str:
        return f"{self.math_functions['fmod']}({a}, {b})"

    def float_literal(self, v: float) -> str:
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        text = repr(float(v))
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}f" if v >= 0 else f"({text}f)"

    # ----- structure ----------------------------------------------------------------------
    def signature(self, name: str, params: list[tuple[str, str, bool]], dims: list[str],
                  attributes: str = "") -> str:
        """`params`: (element type, name, written?) per buffer; dims are `long` scalars.
        `attributes` go after the kernel qualifier (e.g. OpenCL's `reqd_work_group_size`)."""
        args = [
            f"{'' if out else 'const '}{t} *{self.restrict} {n}" for t, n, out in params
        ] + [f"long {d}" for d in dims]
        return f"{self.qualifiers(attributes)} void {name}({', '.join(args)})"

    def qualifiers(self, attributes: str = "") -> str:
        """What precedes a kernel's return type: `kernel_qualifier`, then `attributes`."""
        return " ".join(q for q in (self.kernel_qualifier, attributes) if q)

    def domain(self, extents: list[str], names: list[str], body: list[str],
               simd_last: bool = False) -> list[str]:
        """Code running `body` once per point of the domain (loop variables `names`).
        `simd_last`: vectorise across the last axis (its reductions read memory strided, so
        lanes of neighbouring outputs make contiguous loads)."""
        raise NotImplementedError

    # >0: the dialect can reduce this many neighbouring outputs side by side (`reduce_lanes`)
    lanes = 0
    # steps of a row-wise `SoftmaxSum` whose logits are computed, then weighted, together
    softmax_block = 32

    def reduce_lanes(self, extents: list[str], names: list[str], declare: list[str],
                     reset: list[str], loop: str, body: list[str], final: list[str]) -> list[str]:
        """Code for a kernel whose one reduction reads memory strided while its last domain
        axis reads it contiguously: for each run of `lanes` outputs along the last axis, `reset`
        the accumulators (`declare`d as arrays indexed by `lm_j`), run `loop` (the reduction
        loop header) around `body` for every lane, then `final` per lane."""
        raise NotImplementedError

    def split_reduction(self, extents: list[str], names: list[str],
                        arrays: list[tuple[str, str]], count: int, partial: list[str],
                        final: list[str]) -> list[str]:
        """Code for a kernel whose one reduction is split into `split_k` chunks: `arrays`
        (element type, name) of `count` partial results each (`split_k` per point), which
        every thread of the kernel must see; `partial` computes chunk `lm_s` of the point
        `lm_p` (its loop variables `names` declared) into them, and `final` combines a
        point's chunks (in chunk order) and stores it, after every partial is done."""
        raise NotImplementedError

    def reduce_pragma(self, op: str, dt: DType, acc: str) -> str | None:
        """A line placed before a reduction loop accumulating into `acc` (e.g. a vectorisation
        hint; a float max also has the NaN flag `{acc}_nan`), or None."""
        return None

    def prelude(self) -> str:
        """Helper functions every kernel may call."""
        return helper_functions(self.helper_qualifier)


def helper_functions(qualifier: str) -> str:
    """The helper functions generated code calls (floor division and modulo of symbolic
    expressions, safe integer ops, bfloat16 conversions), each declared with `qualifier`."""
    return f"""\
{qualifier} long lm_floordiv(long a, long b) {{
    long q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0)));
}}
{qualifier} long lm_floormod(long a, long b) {{
    long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
{qualifier} long lm_min(long a, long b) {{ return a < b ? a : b; }}
{qualifier} long lm_max(long a, long b) {{ return a > b ? a : b; }}
{qualifier} int lm_imod(int a, int b) {{ return (b == 0 || b == -1) ? 0 : a % b; }}
{qualifier} int lm_f2i(float x) {{
  return (x > -2147483649.0f && x < 2147483648.0f) ? (int)x : (int)0x80000000u;
}}
{qualifier} float lm_bf16_to_f32(unsigned short h) {{
  union {{ unsigned int u; float f; }} c; c.u = (unsigned int)h << 16; return c.f;
}}
{qualifier} unsigned short lm_f32_to_bf16(float x) {{
  union {{ unsigned int u; float f; }} c; c.f = x;
  if ((c.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((c.u >> 16) | 0x40u);
  return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}}
{qualifier} float lm_bf16_round(float x) {{ return lm_bf16_to_f32(lm_f32_to_bf16(x)); }}
"""


# A reduction over fewer elements than this is a plain loop (a pooling window): the compiler
# unrolls it, where a vectorised one pays its masked vector and horizontal epilogue per window.
SIMD_REDUCE_MIN = 16


@dataclass
class Scope:
    """Statements generated at one loop depth, and the names of the values computed there."""

    depth: int
    lines: list[str] = field(default_factory=list)
    names: dict[Value, str] = field(default_factory=dict)


def _bound(name: str) -> bool:
    return name.startswith(_BOUND_PREFIXES)


class BodyWriter:
    """Emits the statements computing a value tree (see the module docstring)."""

    def __init__(self, dialect: Dialect, names: dict[str, str], reduce_pragmas: bool = True,
                 first: int = 0):
        """`first`: the number of the first local variable (writers emitting into one
        function number their values apart)."""
        self.d = dialect
        self.reduce_pragmas = reduce_pragmas
        self.names = names
        self.root = Scope(0)
        self.scope_of: dict[str, Scope] = {}
        self._deps: dict[int, frozenset[str]] = {}
        self.count = first

    def expr(self, e: Expr) -> str:
        return e.render_c(self.names)

    def deps(self, v: Value) -> frozenset[str]:
        """The bound variables `v` depends on."""
        got = self._deps.get(id(v))
        if got is not None:
            return got
        own: set[str] = set()
        if isinstance(v, (Load, Index, Where)):
            for e in exprs_of_shallow(v):
                own |= {n for n in e.free_vars if _bound(n)}
        for c in children(v):
            own |= self.deps(c)
        if isinstance(v, (Reduce, SoftmaxSum, Bind)):
            own.discard(v.var.name)
            if not isinstance(v, Bind):
                own |= {n for n in v.size.free_vars if _bound(n)}
        got = self._deps[id(v)] = frozenset(own)
        return got

    def target(self, v: Value) -> Scope:
        scopes = [self.scope_of[n] for n in self.deps(v)]
        return max(scopes, key=lambda s: s.depth) if scopes else self.root

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count - 1}"

    def emit_store(self, kernel: Kernel) -> str:
        """Emit `kernel`'s output value (its lines into `root`) and return the statement that
        stores it."""
        value = self.emit(kernel.out.value)
        out = kernel.out.buf
        return self.d.store_statement(kernel.params[out].dtype, f"p{out}",
                                      self.expr(kernel.out.index), value)

    def emit(self, v: Value) -> str:
        """A C expression (usually a variable name) holding `v`."""
        if isinstance(v, Const):
            return self.const(v.value, v.dtype)
        scope = self.target(v)
        got = scope.names.get(v)
        if got is not None:
            return got
        if isinstance(v, Reduce):
            name = self.reduce(v, scope)
        elif isinstance(v, SoftmaxSum):
            name = self.softmax_sum(v, scope)
        elif isinstance(v, Bind):
            name = self.bind(v, scope)
        else:
            code = self.code(v)
            name = self.fresh()
            scope.lines.append(f"{self.d.compute_type(v.dtype)} {name} = {code};")
        scope.names[v] = name
        return name

    def const(self, value, dt: DType) -> str:
        if dt.is_float:
            return self.d.float_literal(float(value))
        return str(int(value))

    def code(self, v: Value) -> str:
        d = self.d
        if isinstance(v, Load):
            if v.valid == 0:  # never read (a concatenation's other part): no address to compute
                return self.const(0, v.dtype)
            ref = d.load(v.dtype, f"p{v.buf}", self.expr(v.index))
            if v.valid == 1:
                return ref
            return f"({self.expr(v.valid)} ? {ref} : {self.const(0, v.dtype)})"
        if isinstance(v, Index):
            e = self.expr(v.expr)
            if v.dtype.name == "bool":
                return f"(({e}) != 0)"
            return f"(({d.compute_type(v.dtype)})({e}))"
        if isinstance(v, Where):
            x = self.emit(v.x)
            return f"({self.expr(v.cond)} ? {x} : {self.const(0, v.dtype)})"
        if isinstance(v, Unary):
            return d.round(v.dtype, d.unary(v.op, self.emit(v.x)))
        if isinstance(v, Binary):
            return self.binary(v)
        if isinstance(v, Cast):
            return self.cast(v)
        if isinstance(v, Select):
            c, x, y = self.emit(v.cond), self.emit(v.x), self.emit(v.y)
            return f"({c} ? {x} : {y})"
        raise TypeError(f"cannot render {type(v).__name__}")

    def binary(self, v: Binary) -> str:
        a, b = self.emit(v.a), self.emit(v.b)
        kind = v.a.dtype
        if v.op == "lt":
            return f"({a} < {b})"
        if kind.is_float:
            code = {"add": f"({a} + {b})", "mul": f"({a} * {b})"}.get(v.op) or self.d.fmod(a, b)
            return self.d.round(v.dtype, code)
        if kind.name == "bool":
            return {"add": f"({a} | {b})", "mul": f"({a} & {b})"}.get(v.op) or f"lm_imod({a}, {b})"
        if v.op == "mod":
            return f"lm_imod({a}, {b})"
        sym = "+" if v.op == "add" else "*"
        # unsigned arithmetic wraps like NumPy's int32 instead of overflowing (undefined in C)
        code = f"(int)((unsigned int){a} {sym} (unsigned int){b})"
        return f"(({code}) & 255)" if kind.name == "uint8" else code

    def cast(self, v: Cast) -> str:
        x, src, dst = self.emit(v.x), v.x.dtype, v.dtype
        if dst.name == "bool":
            return f"({x} != 0)"
        if dst.is_float:
            return self.d.round(dst, f"((float){x})")
        if src.is_float:
            x = f"lm_f2i({x})"
        return f"({x} & 255)" if dst.name == "uint8" else f"((int){x})"

    def reduce(self, r: Reduce, scope: Scope) -> str:
        acc = _Accumulator(r, self.fresh())
        inner = Scope(scope.depth + 1)
        self.scope_of[r.var.name] = inner
        body = self.emit(r.body)
        var, size = self.names.get(r.var.name, r.var.name), self.expr(r.size)
        short = r.size.is_const and r.size.value < SIMD_REDUCE_MIN
        pragma = (self.d.reduce_pragma(r.op, r.dtype, acc.name)
                  if self.reduce_pragmas and not short else None)
        scope.lines.extend(acc.declare())
        if pragma:
            scope.lines.append(pragma)
        scope.lines.append(f"for (long {var} = 0; {var} < {size}; {var}++) {{")
        scope.lines.extend("  " + line for line in [*inner.lines, acc.update(body)])
        scope.lines.append("}")
        result = self.fresh()
        value = self.d.round(r.dtype, acc.result())
        scope.lines.append(f"{self.d.compute_type(r.dtype)} {result} = {value};")
        return result

    def softmax_sum(self, s: SoftmaxSum, scope: Scope) -> str:
        """One pass over `s.var` with a running max, sum and accumulator (`OnlineSoftmax`)."""
        online = OnlineSoftmax(self.d, self.fresh())
        inner = Scope(scope.depth + 1)
        self.scope_of[s.var.name] = inner
        logit, body = self.emit(s.logit), self.emit(s.body)
        var, size = self.names.get(s.var.name, s.var.name), self.expr(s.size)
        scope.lines.extend(online.declare())
        scope.lines.append(f"for (long {var} = 0; {var} < {size}; {var}++) {{")
        scope.lines.extend("  " + line for line in [*inner.lines, *online.step(logit)])
        scope.lines.append("  " + online.accumulate(online.acc, body))
        scope.lines.append("}")
        result = self.fresh()
        value = self.d.round(s.dtype, online.result(online.acc))
        scope.lines.append(f"{self.d.compute_type(s.dtype)} {result} = {value};")
        return result

    def bind(self, b: Bind, scope: Scope) -> str:
        var = self.names.get(b.var.name, b.var.name)
        value = self.emit(b.value)
        scope.lines.append(f"long {var} = (long)({value});")
        self.scope_of[b.var.name] = scope
        return self.emit(b.body)


class _Accumulator:
    """The C of one reduction's accumulator: a scalar, or with `lane` an array element per
    output (`acc[lane]`) when outputs are reduced side by side."""

    def __init__(self, r: Reduce, name: str, lane: str = ""):
        self.r, self.name, self.lane = r, name, lane
        dt = r.dtype
        if dt.name == "bool":
            self.kind, self.ctype, self.init = "or", "int", "0"
        elif not dt.is_float:
            self.kind = "sum_int" if r.op == "sum" else "max"
            self.ctype = "unsigned int" if r.op == "sum" else "int"
            self.init = "0u" if r.op == "sum" else "(int)0x80000000u"
        else:
            self.kind, self.ctype = ("sum" if r.op == "sum" else "max_nan"), "float"
            self.init = "0.0f" if r.op == "sum" else "-INFINITY"

    def ref(self, suffix: str = "") -> str:
        return f"{self.name}{suffix}" + (f"[{self.lane}]" if self.lane else "")

    def declare(self, lanes: int = 0) -> list[str]:
        """Declarations: initialised scalars, or uninitialised arrays of `lanes` (see reset)."""
        nan = self.kind == "max_nan"  # max propagates NaN like NumPy, through a flag
        if lanes:
            return [f"{self.ctype} {self.name}[{lanes}];"] + (
                [f"int {self.name}_nan[{lanes}];"] if nan else [])
        return [f"{self.ctype} {self.name} = {self.init};"] + (
            [f"int {self.name}_nan = 0;"] if nan else [])

    def reset(self) -> list[str]:
        lines = [f"{self.ref()} = {self.init};"]
        return lines + ([f"{self.ref('_nan')} = 0;"] if self.kind == "max_nan" else [])

    def update(self, v: str) -> str:
        acc = self.ref()
        if self.kind == "or":
            return f"{acc} |= {v};"
        if self.kind in ("sum", "sum_int"):
            return f"{acc} += {'(unsigned int)' if self.kind == 'sum_int' else ''}{v};"
        update = f"{acc} = {v} > {acc} ? {v} : {acc};"
        return update + (f" {self.ref('_nan')} |= {v} != {v};" if self.kind == "max_nan" else "")

    def result(self) -> str:
        acc = self.ref()
        if self.kind == "max_nan":
            return f"({self.ref('_nan')} ? NAN : {acc})"
        return f"(int){acc}" if self.kind == "sum_int" else acc


class OnlineSoftmax:
    """The C of a `SoftmaxSum`: the running max `m`, the running sum of weights `l` and a NaN
    flag, shared by one accumulator or by a row of them. A new max rescales what was summed
    by `exp2(old max - new max)`; while every logit so far is -inf nothing is weighted yet
    (weights 0, scale 1), so `0 * body` still turns an infinite body into NaN as the
    decomposition does."""

    def __init__(self, dialect: Dialect, name: str):
        self.d, self.name = dialect, name
        self.m, self.l, self.nan = f"{name}_m", f"{name}_l", f"{name}_nan"
        self.c, self.p, self.acc = f"{name}_c", f"{name}_p", f"{name}_acc"

    def declare(self, row: int = 0) -> list[str]:
        acc = f"float {self.acc}[{row}];" if row else f"float {self.acc} = 0.0f;"
        return [f"float {self.m} = -INFINITY, {self.l} = 0.0f; int {self.nan} = 0;", acc]

    def step(self, logit: str) -> list[str]:
        """Statements folding one logit into the max and the sum (and setting the scale `c`
        of what was accumulated and the weight `p` of this step)."""
        exp2 = self.d.unary
        return [
            f"float {self.name}_mn = {logit} > {self.m} ? {logit} : {self.m};",
            f"{self.nan} |= {logit} != {logit};",
            f"float {self.c} = {self.name}_mn == -INFINITY ? 1.0f : "
            f"{exp2('exp2', f'{self.m} - {self.name}_mn')};",
            f"float {self.p} = {self.name}_mn == -INFINITY ? 0.0f : "
            f"{exp2('exp2', f'{logit} - {self.name}_mn')};",
            f"{self.l} = {self.l} * {self.c} + {self.p}; {self.m} = {self.name}_mn;",
        ]

    def accumulate(self, acc: str, body: str) -> str:
        return f"{acc} = {acc} * {self.c} + {self.p} * {body};"

    def block_step(self, logits: str, weights: str, count: str) -> list[str]:
        """Statements folding `count` logits (array `logits`) at once: the new max, the scale
        `c` of what was accumulated, and the weights into array `weights`."""
        exp2, mn = self.d.unary, f"{self.name}_mn"
        return [
            f"float {mn} = {self.m}; int {mn}_nan = 0;",
            *filter(None, [self.d.reduce_pragma("max", float32, mn)]),
            f"for (long lm_jj = 0; lm_jj < {count}; lm_jj++) {{",
            f"  {mn} = {logits}[lm_jj] > {mn} ? {logits}[lm_jj] : {mn};",
            f"  {mn}_nan |= {logits}[lm_jj] != {logits}[lm_jj];",
            "}",
            f"{self.nan} |= {mn}_nan;",
            f"float {self.c} = {mn} == -INFINITY ? 1.0f : {exp2('exp2', f'{self.m} - {mn}')};",
            f"float {self.name}_s = 0.0f;",
            *filter(None, [self.d.reduce_pragma("sum", float32, f"{self.name}_s")]),
            f"for (long lm_jj = 0; lm_jj < {count}; lm_jj++) {{",
            f"  {weights}[lm_jj] = {mn} == -INFINITY ? 0.0f : "
            f"{exp2('exp2', f'{logits}[lm_jj] - {mn}')};",
            f"  {self.name}_s += {weights}[lm_jj];",
            "}",
            f"{self.l} = {self.l} * {self.c} + {self.name}_s; {self.m} = {mn};",
        ]

    def result(self, acc: str) -> str:
        return f"(({self.nan} || {self.m} == -INFINITY) ? NAN : {acc} / {self.l})"


def exprs_of_shallow(v: Value):
    """The symbolic expressions of `v` itself (not of its children)."""
    if isinstance(v, Load):
        return (v.index, v.valid)
    if isinstance(v, Index):
        return (v.expr,)
    if isinstance(v, Where):
        return (v.cond,)
    return ()


def dim_names(dims: tuple[str, ...]) -> dict[str, str]:
    """C identifiers of a kernel's symbolic dims (their names may be any string)."""
    return {name: f"d{k}" for k, name in enumerate(dims)}


def _render_lanes(kernel: Kernel, r: Reduce, dialect: Dialect, names: dict[str, str],
                  extents: list[str], loop_names: list[str]) -> list[str]:
    """The domain of a strided reduction (see `Dialect.reduce_lanes`)."""
    inner = BodyWriter(dialect, names)
    inner.scope_of[r.var.name] = inner.root  # nothing is hoisted out of the reduction loop
    acc = _Accumulator(r, "lm_acc", lane="lm_j")
    value = inner.emit(r.body)
    body = [*inner.root.lines, acc.update(value)]
    outer = BodyWriter(dialect, names)
    result = f"{dialect.compute_type(r.dtype)} lm_red = {dialect.round(r.dtype, acc.result())};"
    outer.root.lines.append(result)
    outer.root.names[r] = "lm_red"
    stored = outer.emit(kernel.out.value)
    out_dt = kernel.params[kernel.out.buf].dtype
    final = [*outer.root.lines, dialect.store_statement(
        out_dt, f"p{kernel.out.buf}", outer.expr(kernel.out.index), stored)]
    var = names.get(r.var.name, r.var.name)
    loop = f"for (long {var} = 0; {var} < {outer.expr(r.size)}; {var}++) {{"
    return dialect.reduce_lanes(extents, loop_names, acc.declare(dialect.lanes), acc.reset(),
                                loop, body, final)


# Most partial results a split reduction keeps (`split_k` per point; on a CPU in a thread's
# stack): a split pays only where there are few points to share among the threads.
SPLIT_SCRATCH = 1 << 14


def splittable(kernel: Kernel, parts: int) -> Reduce | None:
    """The reduction of a kernel that can be split into `parts` chunks: its only one, with
    no reduction, online softmax or bound index inside the kernel besides it, over a domain
    of known size with at most `SPLIT_SCRATCH` partial results."""
    values = list(walk(kernel.out.value))
    found = [v for v in values if isinstance(v, Reduce)]
    if parts <= 1 or len(found) != 1 or any(isinstance(v, (Bind, SoftmaxSum)) for v in values):
        return None
    if not all(d.is_const for d in kernel.domain):
        return None
    if math.prod(d.value for d in kernel.domain) * parts > SPLIT_SCRATCH:
        return None
    return found[0]


def _render_split(kernel: Kernel, r: Reduce, dialect: Dialect, names: dict[str, str],
                  extents: list[str], loop_names: list[str]) -> list[str]:
    """The domain of a kernel whose reduction `r` is split into `dialect.split_k` chunks
    (see `Dialect.split_reduction`)."""
    parts = dialect.split_k
    partial = BodyWriter(dialect, names)
    steps = Scope(1)
    partial.scope_of[r.var.name] = steps
    value = partial.emit(r.body)
    acc = _Accumulator(r, "lm_acc")
    part = _Accumulator(r, "lm_part", lane=f"lm_p * {parts} + lm_s")
    var, size = names.get(r.var.name, r.var.name), partial.expr(r.size)
    pragma = dialect.reduce_pragma(r.op, r.dtype, acc.name)
    nan = acc.kind == "max_nan"
    partial_lines = [
        *partial.root.lines, *acc.declare(),
        f"const long lm_chunk = (({size}) + {parts - 1}) / {parts};",
        f"const long lm_k1 = lm_s * lm_chunk + lm_chunk < ({size}) ? lm_s * lm_chunk + lm_chunk"
        f" : ({size});",
        *([pragma] if pragma else []),
        f"for (long {var} = lm_s * lm_chunk; {var} < lm_k1; {var}++) {{",
        *("  " + x for x in [*steps.lines, acc.update(value)]), "}",
        f"{part.ref()} = {acc.name};", *([f"{part.ref('_nan')} = {acc.name}_nan;"] if nan else []),
    ]
    final = BodyWriter(dialect, names)
    merge_nan = [f"  {acc.name}_nan |= {part.ref('_nan')};"] if nan else []
    final.root.lines += [
        *acc.declare(), f"for (long lm_s = 0; lm_s < {parts}; lm_s++) {{",
        "  " + acc.update(part.ref()), *merge_nan, "}",
        f"{dialect.compute_type(r.dtype)} lm_red = {dialect.round(r.dtype, acc.result())};"]
    final.root.names[r] = "lm_red"
    store = final.emit_store(kernel)
    arrays = [(part.ctype, part.name)] + ([("int", f"{part.name}_nan")] if nan else [])
    points = math.prod(d.value for d in kernel.domain) * parts
    return dialect.split_reduction(extents, loop_names, arrays, points, partial_lines,
                                   [*final.root.lines, store])


def _strided_reduction(kernel: Kernel) -> bool:
    """Whether the kernel reduces along strided memory while its last domain axis walks memory
    contiguously (e.g. a sum over rows): then vectorising across outputs beats vectorising the
    reduction."""
    if not kernel.domain:
        return False
    last = kernel.loop_vars[-1]
    reductions = [v for v in walk(kernel.out.value) if isinstance(v, Reduce)]
    if not reductions or any(isinstance(v, (Bind, SoftmaxSum)) for v in walk(kernel.out.value)):
        return False
    strided = False
    for v in walk(kernel.out.value):
        if not isinstance(v, Load):
            continue
        split = affine(v.index, (last, *(r.var for r in reductions)))
        if split is None or any(last.name in e.free_vars for e in (v.valid,)):
            return False
        coefs, _ = split
        if not (coefs[0] == 1 or coefs[0] == 0):
            return False
        strided = strided or any(c != 0 and c != 1 for c in coefs[1:])
    store = affine(kernel.out.index, (last,))
    return strided and store is not None and store[0][0] == 1


# Longest last domain axis a `SoftmaxSum` is rendered row-wise for (an accumulator array of
# this many floats per point).
ROW_LIMIT = 256
ROW_VAR = "_rrow"  # "_r" prefix: a loop variable bound inside the body, like a reduction's


def row_softmax(kernel: Kernel) -> SoftmaxSum | None:
    """The `SoftmaxSum` of a kernel that can run row-wise: the one in the tree, outside every
    reduction, its logit not reading the last domain axis (short and static), so that the
    logit is computed once per step for a whole row of outputs (attention's dot product
    of a query and a key, shared by every value column)."""
    if not kernel.domain:
        return None
    last = kernel.domain[-1]
    found = [v for v in walk(kernel.out.value) if isinstance(v, SoftmaxSum)]
    if len(found) != 1 or not (last.is_const and 1 < last.value <= ROW_LIMIT):
        return None
    if any(isinstance(v, Bind) for v in walk(kernel.out.value)):
        return None
    if any(found[0] in set(walk(r.body)) for r in top_reductions(kernel.out.value)):
        return None
    lane = kernel.loop_vars[-1].name
    if any(lane in e.free_vars for e in exprs_of(found[0].logit)):
        return None
    return found[0]


def _render_row(kernel: Kernel, dialect: Dialect, names: dict[str, str], extents: list[str],
                loop_names: list[str]) -> list[str]:
    """The domain of a row-wise `SoftmaxSum` kernel: the outer axes in parallel; per point a
    pass over the softmax axis in blocks of `Dialect.softmax_block` steps (their logits, then
    one rescale and their exponentials side by side, then the row of accumulators updated),
    then the row is stored."""
    width, block = kernel.domain[-1].value, dialect.softmax_block
    row = Expr.var(ROW_VAR, 0, width - 1)
    last = kernel.loop_vars[-1].name
    value = map_exprs(kernel.out.value, lambda e: e.substitute({last: row}))
    index = kernel.out.index.substitute({last: row})
    (s,) = (v for v in walk(value) if isinstance(v, SoftmaxSum))
    var = names.get(s.var.name, s.var.name)
    # the logits in one pass over the block, the weighted rows in a second: two writers, so
    # each pass computes only its own part (the second numbers its values after the first's)
    logits = BodyWriter(dialect, names)
    logits.scope_of[s.var.name] = logit_step = Scope(1)
    logit = logits.emit(s.logit)
    rows = BodyWriter(dialect, names, first=logits.count)
    rows.scope_of[s.var.name], rows.scope_of[ROW_VAR] = (body_step := Scope(1)), (lane := Scope(2))
    body = rows.emit(s.body)
    outer = BodyWriter(dialect, names, first=rows.count)
    outer.scope_of[ROW_VAR] = outer.root
    o = OnlineSoftmax(dialect, "lm_sm")
    acc = f"{o.acc}[{ROW_VAR}]"
    outer.root.lines.append(f"float lm_sm_o = {dialect.round(s.dtype, o.result(acc))};")
    outer.root.names[s] = "lm_sm_o"
    stored = outer.emit(value)
    out_dt = kernel.params[kernel.out.buf].dtype
    store = dialect.store_statement(out_dt, f"p{kernel.out.buf}", outer.expr(index), stored)
    row_loop = f"for (long {ROW_VAR} = 0; {ROW_VAR} < {width}; {ROW_VAR}++) {{"
    steps = "for (long lm_jj = 0; lm_jj < lm_nb; lm_jj++) {"
    at = f"const long {var} = lm_jb + lm_jj;"
    size = logits.expr(s.size)
    per_block = [
        f"const long lm_nb = {size} - lm_jb < {block} ? {size} - lm_jb : {block};",
        f"float lm_x[{block}], lm_w[{block}];",
        steps, *("  " + x for x in [at, *logit_step.lines, f"lm_x[lm_jj] = {logit};"]), "}",
        *o.block_step("lm_x", "lm_w", "lm_nb"),
        f"{row_loop} {acc} *= {o.c}; }}",
        steps, *("  " + x for x in [at, *body_step.lines, row_loop,
                                    *("  " + y for y in [*lane.lines,
                                                         f"{acc} += lm_w[lm_jj] * {body};"]),
                                    "}"]), "}",
    ]
    body_lines = [
        *logits.root.lines, *rows.root.lines, *o.declare(width),
        f"{row_loop} {acc} = 0.0f; }}",
        f"for (long lm_jb = 0; lm_jb < {size}; lm_jb += {block}) {{",
        *("  " + x for x in per_block), "}",
        row_loop, *("  " + x for x in [*outer.root.lines, store]), "}",
    ]
    return dialect.domain(extents[:-1], loop_names[:-1], body_lines)


def buffer_params(kernel: Kernel, dialect: Dialect) -> list[tuple[str, str, bool]]:
    """`(C element type, name, written)` of `kernel`'s buffers `p0, p1, ...`, the form
    `Dialect.signature` takes."""
    return [(dialect.storage_type(p.dtype), f"p{k}", p.output)
            for k, p in enumerate(kernel.params)]


def render_kernel(kernel: Kernel, name: str, dialect: Dialect) -> str:
    """Source of one function computing `kernel` in `dialect`. Its arguments are the buffers
    `p0, p1, ...` (in `kernel.params` order) then the dims of `kernel_dims(kernel)`."""
    if kernel.tuning:
        dialect = dialect.tuned(kernel.tuning)
    dims = kernel_dims(kernel)
    names = dim_names(dims)
    simd_last = _strided_reduction(kernel)
    extents = [e.render_c(names) for e in kernel.domain]
    loop_names = [v.name for v in kernel.loop_vars]
    params = buffer_params(kernel, dialect)
    lines = [dialect.signature(name, params, [names[d] for d in dims]) + " {"]
    if row_softmax(kernel) is not None:
        code = _render_row(kernel, dialect, names, extents, loop_names)
        return "\n".join([*lines, *("  " + x for x in code), "}"]) + "\n"
    split = splittable(kernel, dialect.split_k)
    if split is not None:
        code = _render_split(kernel, split, dialect, names, extents, loop_names)
        return "\n".join([*lines, *("  " + x for x in code), "}"]) + "\n"
    top = top_reductions(kernel.out.value)
    if simd_last and dialect.lanes and len(top) == 1:
        code = _render_lanes(kernel, top[0], dialect, names, extents, loop_names)
        return "\n".join([*lines, *("  " + x for x in code), "}"]) + "\n"
    writer = BodyWriter(dialect, names, reduce_pragmas=not simd_last)
    store = writer.emit_store(kernel)
    body = [*writer.root.lines, store]
    lines += ["  " + line for line in dialect.domain(extents, loop_names, body, simd_last)]
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["BodyWriter", "Dialect", "OnlineSoftmax", "Scope", "buffer_params", "dim_names",
           "helper_functions", "render_kernel", "row_softmax"]
