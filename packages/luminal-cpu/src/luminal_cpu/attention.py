"""Prefill attention of the default compile as one `SoftmaxSum` kernel, which `flash` renders
as tiles.

The default lowering runs attention as seven calls over the whole score matrix of every
query and key (rows: the queries of all heads, batch axes: the key/value heads they share):

    S = Q K^T                    a float `Matmul` (its batch, m query rows, n keys, k columns)
    L = f(S, ...)                elementwise in the scores: scale, mask, softcap, anything
    M = -max_key L               a row reduction
    E = exp2((L + M) * c)        c > 0: log2(e), softmax's natural base
    R = 1 / sum_key E            a row reduction
    P = E * R                    the weights
    O = P V                      a float `Matmul` over the same batch and rows

`fuse(program)` replaces such a run of consecutive calls, when the six intermediates are
temporaries read only inside it, by one call of a `Kernel` over (batch..., rows, value
columns):
`SoftmaxSum(key, n, L' * c, V)`, where L' is the logit kernel's value at (row, key) with the
score read as the dot product of the query and key rows. The logit kernel may have any domain
of rows * n points whose axes split at the boundary of a key row (`_positions`), so its other
inputs (a mask buffer, a bias) are read at the same elements as before. When `flash` takes
the kernel it runs as tiles with an online softmax and never stores the scores; otherwise
(a constant query count below `flash.MIN_QUERIES`) the seven calls stay. A symbolic query
count (the generation loop's one graph for prefill and decode) becomes a `FusedAttention`,
which decides at run time: the tiles for `flash.MIN_QUERIES` queries or more, else the
seven kernels as before (decode's one token: its small-M products are the runtime's tuned
matrix-vector paths, 1.7x faster than the row-wise `SoftmaxSum` at 1000 cached keys).

Numerics: the weights are exp2(L * c - max(L * c)) rather than exp2((L - max L) * c), the
sums accumulate block by block (online softmax) and the output is acc / sum rather than
acc * (1 / sum): the same softmax up to float rounding (a few ulp of the weights). NaN and
infinities behave as in the decomposition (`SoftmaxSum`'s semantics): an all -inf row, a NaN
or an infinite logit gives NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from luminal.symbolic import Expr
from luminal_codegen import Call, Kernel, Program, dim_names, kernel_dims
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import (
    Binary,
    Bind,
    Const,
    KernelLike,
    Load,
    Matmul,
    MatOperand,
    Param,
    Reduce,
    SoftmaxSum,
    Store,
    Unary,
    Value,
    loop_var,
    map_exprs,
    map_loads,
    reduce_var,
    walk,
)

from . import flash
from .dialect import C

CHAIN = 7  # calls of the decomposition (module docstring)


@dataclass(frozen=True)
class FusedAttention:
    """`kernel` (tiled by `flash`) when its queries are at least `flash.MIN_QUERIES`, else
    the `chain` of kernels it replaces, called with `args` (parameter numbers of this
    kernel). Parameters: the kernel's, then the chain's six intermediates (written by the
    chain only: the tiles leave them alone)."""

    kernel: Kernel
    chain: tuple[KernelLike, ...]
    args: tuple[tuple[int, ...], ...]
    temps: tuple[Param, ...]
    queries: Expr  # the query count: the extent of the kernel's query axis

    @property
    def params(self) -> tuple[Param, ...]:
        return (*self.kernel.params, *self.temps)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(sorted({d for k in (self.kernel, *self.chain) for d in kernel_dims(k)}))


def render(fused: FusedAttention, name: str, source: Callable[[KernelLike, str], str]) -> str:
    """C for `fused`: the tiled kernel and the chain's kernels (`source(kernel, name)` renders
    one), and `name` choosing between them."""
    names = dim_names(fused.dims)
    parts = [flash.render(fused.kernel, flash.match(fused.kernel), f"{name}_tiles")]
    parts += [source(k, f"{name}_c{j}") for j, k in enumerate(fused.chain)]
    params = [(C.storage_type(p.dtype), f"p{k}", p.output) for k, p in enumerate(fused.params)]

    def call(callee: str, kernel: KernelLike, args) -> str:
        dims = [names[d] for d in kernel_dims(kernel)]
        return f"{callee}({', '.join([*(f'p{a}' for a in args), *dims])});"

    lines = [
        C.signature(name, params, [names[d] for d in fused.dims]) + " {",
        f"  if (({fused.queries.render_c(names)}) >= {flash.MIN_QUERIES}) {{",
        "    " + call(f"{name}_tiles", fused.kernel, range(len(fused.kernel.params))),
        "    return;",
        "  }",
        *("  " + call(f"{name}_c{j}", k, a) for j, (k, a) in enumerate(zip(fused.chain,
                                                                          fused.args))),
        "}",
    ]
    return "\n".join([*parts, *lines]) + "\n"


def _divides(d: Expr, x: Expr) -> Expr | None:
    """x / d when d divides x exactly (symbolically), else None."""
    q = x // d
    return q if q * d == x else None


def _positions(domain: tuple[Expr, ...], row: Expr, key: Expr, n: Expr) -> list[Expr] | None:
    """The loop variables of a kernel over `domain` (row-major over rows x n scores) at score
    (row, key), key < n, or None when an axis straddles key rows unevenly. Spelled without
    the flat position row * n + key where possible: an axis of whole key rows is row // Q,
    one within a key row (key // P) % d, one holding key rows and keys (row % Q) * n + key,
    with no division by the symbolic n that the simplifier could not remove (it cannot
    know key < n)."""
    out = []
    for j, d in enumerate(domain):
        inner = Expr.const(1)
        for e in domain[j + 1:]:
            inner = inner * e
        rows = _divides(n, inner)
        if rows is not None:  # inner axes hold whole key rows
            v = row // rows
            out.append(v if j == 0 else v % d)
            continue
        per = _divides(inner, n)  # keys per step of this axis
        if per is None:
            return None
        if _divides(per, d) is not None:  # the axis holds rows: Q of them
            q = d // per
            out.append((row % q) * per + key // inner)
        elif _divides(d, per) is not None:  # the axis is within a key row
            out.append((key // inner) % d)
        else:
            return None
    return out


def _loads_of(value: Value, args: tuple[int, ...]) -> Value:
    """`value` with its loads reading program buffers (`args` maps the kernel's params)."""
    return map_loads(value, lambda x: replace(x, buf=args[x.buf]))


def _chain(program: Program, at: int, readers: dict[int, list[int]]
           ) -> tuple[Kernel | FusedAttention, tuple[int, ...]] | None:
    """The attention kernel and its arguments replacing calls at..at+6, or None."""
    calls = program.calls[at:at + CHAIN]
    if len(calls) < CHAIN:
        return None
    ks = [program.kernels[c.kernel] for c in calls]
    s, lg, mx, ex, sm, nm, pv = ks
    if not (isinstance(s, Matmul) and isinstance(pv, Matmul)
            and all(isinstance(k, Kernel) for k in ks[1:6])
            and isinstance(s.b, MatOperand) and isinstance(pv.b, MatOperand)):
        return None
    if any(p.dtype.name != "float32" for k in (s, pv) for p in k.params):
        return None
    outs = [calls[0].args[s.out], *(c.args[k.out.buf] for c, k in zip(calls[1:6], ks[1:6]))]
    # the intermediates: temporaries read only by the chain
    for buf in outs:
        if (program.buffers[buf].role != "temp"
                or any(not at < r < at + CHAIN for r in readers.get(buf, ()))):
            return None
    sb, lb, mb, eb, rb, nb = outs
    m, n, batch = s.m, s.n, s.batch
    bflat = flat_index(batch, s.batch_vars) if batch else Expr.const(0)
    if s.out_offset != bflat * m * n or s.out_stride != n:
        return None
    rows = m
    for d in batch:
        rows = rows * d
    one = Expr.const(1)
    f32 = s.params[0].dtype
    # M = -max L, E = exp2((L + M) * c), R = 1 / sum E, P = E * R
    neg = Binary("mul", Reduce("max", reduce_var(0, n), n,
                               Load(lb, n * loop_var(0, rows) + reduce_var(0, n), one, f32),
                               f32), Const(-1.0, f32), f32)
    if (mx.domain != (rows,) or mx.out.index != loop_var(0, rows)
            or _loads_of(mx.out.value, calls[2].args) != neg):
        return None
    i0, i1 = loop_var(0, rows), loop_var(1, n)
    flat = n * i0 + i1
    if any(k.domain != (rows, n) or k.out.index != flat for k in (ex, nm)):
        return None
    e_val = _loads_of(ex.out.value, calls[3].args)
    if not (isinstance(e_val, Unary) and e_val.op == "exp2" and isinstance(e_val.x, Binary)
            and e_val.x.op == "mul" and isinstance(e_val.x.b, Const)
            and e_val.x.b.value > 0 and e_val.x.b.value != float("inf")):
        return None
    scale = e_val.x.b
    if e_val.x.a != Binary("add", Load(lb, flat, one, f32), Load(mb, i0, one, f32), f32):
        return None
    total = Unary("recip", Reduce("sum", reduce_var(0, n), n,
                                  Load(eb, n * i0 + reduce_var(0, n), one, f32), f32), f32)
    if (sm.domain != (rows,) or sm.out.index != i0
            or _loads_of(sm.out.value, calls[4].args) != total):
        return None
    if _loads_of(nm.out.value, calls[5].args) != Binary(
            "mul", Load(eb, flat, one, f32), Load(rb, i0, one, f32), f32):
        return None
    if (pv.batch != batch or pv.m != m or pv.k != n or calls[6].args[pv.a.buf] != nb
            or pv.a.offset != bflat * m * n or pv.a.stride_row != n or pv.a.stride_k != one
            or not pv.n.is_const):
        return None
    if any(p.dtype.name != "float32" for p in (lg.params[0], mx.params[0], ex.params[0],
                                                sm.params[0], nm.params[0])):
        return None
    # the logit kernel: elementwise over the scores, stored in order
    lflat = flat_index(lg.domain, lg.loop_vars)
    size = one
    for d in lg.domain:
        size = size * d
    if size != rows * n or lg.out.index != lflat:
        return None
    l_val = _loads_of(lg.out.value, calls[1].args)
    for v in walk(l_val):
        if isinstance(v, (Reduce, SoftmaxSum, Bind)):
            return None
        if isinstance(v, Load) and v.buf == sb and (v.index != lflat or v.valid != one):
            return None

    # the kernel: domain (batch..., m, value columns), the batch variables its loop variables
    nbatch = len(batch)
    domain = (*batch, m, pv.n)
    lv = [loop_var(k, d) for k, d in enumerate(domain)]
    query, lane = lv[nbatch], lv[nbatch + 1]
    to_loop = {f"_b{k}": lv[k] for k in range(nbatch)}
    qrow = (bflat.substitute(to_loop) * m if batch else Expr.const(0)) + query
    key, c = reduce_var(0, n), reduce_var(1, s.k)

    def at(op: MatOperand, mm: Matmul, row: Expr, k: Expr, args: tuple[int, ...]) -> Load:
        return Load(args[op.buf], op.offset.substitute(to_loop) + row * op.stride_row.substitute(
            to_loop) + k * op.stride_k.substitute(to_loop), one, mm.params[op.buf].dtype)

    dot = Reduce("sum", c, s.k, Binary("mul", at(s.a, s, query, c, calls[0].args),
                                       at(s.b, s, key, c, calls[0].args), f32), f32)
    pos = _positions(lg.domain, qrow, key, n)
    if pos is None:
        return None
    env = {v.name: p for v, p in zip(lg.loop_vars, pos)}
    # L's variables first: the dot product's are the new kernel's
    logit = map_loads(map_exprs(l_val, lambda e: e.substitute(env)),
                      lambda x: dot if x.buf == sb else x)
    body = at(pv.b, pv, lane, key, calls[6].args)
    value = SoftmaxSum(key, n, Binary("mul", logit, scale, f32), body, f32)
    out = Load(calls[6].args[pv.out], pv.out_offset.substitute(to_loop)
               + query * pv.out_stride.substitute(to_loop) + lane, one, f32)
    # parameters: the output first, then every buffer the value reads
    bufs = [out.buf]
    dtypes = {}
    for v in walk(value):
        if isinstance(v, Load):
            dtypes[v.buf] = v.dtype
            if v.buf not in bufs:
                bufs.append(v.buf)
    number = {b: k for k, b in enumerate(bufs)}
    value = map_loads(value, lambda x: replace(x, buf=number[x.buf]))
    kernel = Kernel((Param(f32, True), *(Param(dtypes[b]) for b in bufs[1:])), domain,
                    Store(0, out.index, value))
    att = flash.match(kernel)
    if att is None:
        return None
    queries = kernel.domain[att.query_axis]
    if queries.is_const:
        return kernel, tuple(bufs)
    # the chain's own calls at run time for few queries: its buffers as parameters, the
    # intermediates after the kernel's
    every = [*bufs, *outs]
    number = {b: k for k, b in enumerate(every)}
    temps = tuple(Param(program.buffers[b].dtype, True) for b in outs)
    fused = FusedAttention(kernel, tuple(ks), tuple(tuple(number.setdefault(b, len(number))
                                                          for b in c.args) for c in calls),
                           temps, queries)
    extra = [b for b in number if b not in every]  # read by the chain alone (its kernels')
    if extra:
        return None
    return fused, tuple(every)


def fuse(program: Program) -> Program:
    """`program` with each run of attention's seven calls that `flash` can tile replaced by
    one kernel (module docstring)."""
    readers: dict[int, list[int]] = {}
    for i, call in enumerate(program.calls):
        kernel = program.kernels[call.kernel]
        for p, buf in zip(kernel.params, call.args):
            if not p.output:
                readers.setdefault(buf, []).append(i)
    kernels = list(program.kernels)
    calls: list[Call] = []
    fused: dict[Kernel | FusedAttention, int] = {}
    i = 0
    while i < len(program.calls):
        got = _chain(program, i, readers)
        if got is None:
            calls.append(program.calls[i])
            i += 1
            continue
        kernel, args = got
        if kernel not in fused:
            fused[kernel] = len(kernels)
            kernels.append(kernel)
        calls.append(Call(fused[kernel], args))
        i += CHAIN
    if not fused:
        return program
    used = sorted({c.kernel for c in calls})
    renumber = {old: new for new, old in enumerate(used)}
    return replace(program, kernels=[kernels[k] for k in used],
                   calls=[Call(renumber[c.kernel], c.args) for c in calls])
