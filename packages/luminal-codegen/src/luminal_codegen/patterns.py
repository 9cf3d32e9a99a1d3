"""Recognising the special kernels in a primitive graph: matmul, quantized matmul and gather.

The frontend writes a matrix product as `SumReduce(Mul(a.expand, b.expand))` over the last
axis (hl_ops/matmul.py), an embedding lookup as that product with a one-hot matrix built from
`LessThan` against an `Iota`, and a quantized weight as the primitive decomposition of
`luminal.quant.dequantize`, whose output node carries a `Dequantized` tag (`node.dequantized`).
Each pattern is checked against the views, so a match is exact: the special kernel computes what
the primitive subgraph computes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from luminal import ops
from luminal.ir import Graph, Node
from luminal.shape import View, row_major_strides
from luminal.symbolic import INF, Expr, logical_and, lt, to_expr

from .indexing import flat_index, source_axes
from .ir import (
    Binary,
    Bind,
    Cast,
    Const,
    Index,
    Reduce,
    Select,
    Value,
    Where,
    affine,
    batch_var,
    exprs_of,
    guard_loads,
    map_exprs,
)

M_VAR = Expr.var("_m", 0, INF)
N_VAR = Expr.var("_n", 0, INF)
K_VAR = Expr.var("_k", 0, INF)


@dataclass(frozen=True)
class Operand:
    """A matmul operand: `node`'s buffer read at `offset + row*stride_row + k*stride_k`."""

    node: int
    offset: Expr  # over batch variables and dims
    stride_row: Expr
    stride_k: Expr


@dataclass(frozen=True)
class QuantWeight:
    """A matmul operand that is the dequantization of the raw bytes in input `node`."""

    node: int
    qtype: str
    rows: Expr
    cols: Expr
    k_contiguous: bool


@dataclass(frozen=True)
class MatmulMatch:
    """`reduce` (a SumReduce over the last axis of `mul`) is out(b, m, n) = sum_k a*b, stored
    into the buffer of node `out` at `out_offset + m*out_stride + n`."""

    reduce: int
    mul: int
    batch: tuple[Expr, ...]
    m: Expr
    n: Expr
    k: Expr
    a: Operand
    b: Operand | QuantWeight
    out: int
    out_offset: Expr
    out_stride: Expr


def _is_identity(edge, src: Node) -> bool:
    return edge.view.is_contiguous and tuple(edge.view.shape) == tuple(src.shape)


def _transparent(graph: Graph, node: Node) -> bool:
    """A node whose values are its input's, read through an unpadded view: a copy
    (`Contiguous`) or an exact float widening (float16/bfloat16 -> float32)."""
    edge = node.inputs[0] if node.inputs else None
    if edge is None or edge.view.mask is not None:
        return False
    if isinstance(node.op, ops.Contiguous):
        return True
    src = graph.nodes[edge.src]
    return (isinstance(node.op, ops.Cast) and node.dtype.is_float and src.dtype.is_float
            and src.dtype.itemsize <= node.dtype.itemsize)


def operand_sources(graph: Graph, edge, idx: tuple[Expr, ...]) -> list[tuple[Node, Expr]]:
    """The buffers an operand may read, and the flat index it reads at `idx` in each: the
    edge's source, then through each copy or widening behind it (so a matmul can read, say,
    the float16 weight or the un-repeated KV heads instead of a materialised copy)."""
    node, view, axes = graph.nodes[edge.src], edge.view, idx
    out = [(node, view.index(axes))]
    while _transparent(graph, node):
        axes = tuple(source_axes(view, node.shape, axes))
        view = node.inputs[0].view
        node = graph.nodes[node.inputs[0].src]
        out.append((node, view.index(axes)))
    return out


def _index_vars(batch: tuple[Expr, ...], m: Expr | None, n: Expr, k: Expr) -> tuple[Expr, ...]:
    """The index of the Mul's axes; an axis of extent 1 reads index 0 (its stride is moot)."""
    def pick(var: Expr, extent: Expr) -> Expr:
        return Expr.const(0) if extent == 1 else var

    bvars = tuple(pick(batch_var(j, d), d) for j, d in enumerate(batch))
    mvar = () if m is None else (pick(M_VAR, m),)
    return (*bvars, *mvar, pick(N_VAR, n), pick(K_VAR, k))


def _operand(graph: Graph, edge, row_var: Expr, other_var: Expr, idx) -> Operand | None:
    """The operand read through `edge` if its index is affine and ignores `other_var`."""
    if edge.view.mask is not None:
        return None
    for src, index in reversed(operand_sources(graph, edge, idx)):
        split = affine(index, (row_var, other_var, K_VAR))
        if split is None or not src.dtype.is_float:
            continue
        (c_row, c_other, c_k), rest = split
        if c_other == 0:
            return Operand(src.id, rest, c_row, c_k)
    return None


def _quant_operand(graph: Graph, edge, idx, n: Expr, k: Expr,
                   kernels: Collection[str]) -> QuantWeight | None:
    """The dequantized weight read through `edge`, W[n, k] or W[k, n], if it is one in a
    format of `kernels`."""
    src = graph.nodes[edge.src]
    tag = src.dequantized
    if tag is None or tag.qtype not in kernels or edge.view.mask is not None:
        return None
    raw = graph.nodes.get(graph.resolve(tag.raw))
    if raw is None or not isinstance(raw.op, ops.Input):
        return None
    rows, cols = to_expr(tag.rows), to_expr(tag.cols)
    split = affine(edge.view.index(idx), (M_VAR, N_VAR, K_VAR))
    if split is None:
        return None
    (c_m, c_n, c_k), rest = split
    if not (c_m == 0 and rest == 0):
        return None
    if c_k == 1 and c_n == cols and n == rows and k == cols:
        return QuantWeight(raw.id, tag.qtype, rows, cols, k_contiguous=True)
    if c_n == 1 and c_k == cols and k == rows and n == cols:
        return QuantWeight(raw.id, tag.qtype, rows, cols, k_contiguous=False)
    return None


def match_matmul(graph: Graph, node: Node, users: dict[int, list[int]],
                 quant_kernels: Collection[str] = frozenset()) -> MatmulMatch | None:
    """The matmul `node` computes, if it is a SumReduce over the last axis of a Mul of two
    operands where the left one ignores the n axis and the right one the m axis. A right
    operand dequantized from a format of `quant_kernels` (lower-case `luminal.quant` names)
    is matched as a `QuantWeight`; other formats stay float products of their decomposition."""
    if not isinstance(node.op, ops.SumReduce) or not node.dtype.is_float:
        return None
    edge = node.inputs[0]
    mul = graph.nodes[edge.src]
    if not isinstance(mul.op, ops.Mul) or users[mul.id] != [node.id] or mul.id in graph.outputs():
        return None
    rank = len(mul.shape)
    if node.op.axis != rank - 1 or rank < 2 or not _is_identity(edge, mul):
        return None
    has_m = rank >= 3
    batch = tuple(mul.shape[: rank - 3]) if has_m else ()
    m = mul.shape[rank - 3] if has_m else Expr.const(1)
    n, k = mul.shape[rank - 2], mul.shape[rank - 1]
    if all(d.is_const and d.value == 1 for d in (*batch, m, n)):
        # one dot product (a norm's sum of squares over a single row) is a reduction: a GEMM
        # call for it costs more than the reduction kernel (cuBLAS took 63 us on an H200 for
        # 640 values, a block reduction 5 us), and would cut the norm's epilogue off it
        return None
    idx = _index_vars(batch, m if has_m else None, n, k)
    for ea, eb in (mul.inputs, mul.inputs[::-1]):
        a = _operand(graph, ea, M_VAR, N_VAR, idx)
        if a is None:
            continue
        b = (_quant_operand(graph, eb, idx, n, k, quant_kernels)
             or _operand(graph, eb, N_VAR, M_VAR, idx))
        if b is not None:
            out, offset, stride = _destination(graph, node, users, idx[:-1])
            return MatmulMatch(node.id, mul.id, batch, m, n, k, a, b, out, offset, stride)
    return None


def fold_batch(match: MatmulMatch) -> MatmulMatch:
    """The same product with fewer batch axes: axes of extent 1 are dropped, and trailing
    batch axes that the right operand ignores and along which the left operand's rows and the
    output's rows simply continue (a linear layer or a convolution applied to a batch of
    images) become rows of one taller matrix, so the GEMM gets one large problem instead of
    many small ones."""
    old = [batch_var(j, d) for j, d in enumerate(match.batch)]
    kept = [j for j, d in enumerate(match.batch) if d != 1]
    a, b = match.a, match.b
    m, out_offset, out_stride = match.m, match.out_offset, match.out_stride
    a_row = a.stride_row
    while kept:
        var = old[kept[-1]]
        a_split = affine(a.offset, (var,))
        o_split = affine(out_offset, (var,))
        if a_split is None or o_split is None or (
            isinstance(b, Operand) and var.name in b.offset.free_vars):
            break
        (ca,), a_rest = a_split
        (co,), o_rest = o_split
        if m == 1:
            a_row, out_stride = ca, co
        elif not (ca == m * a_row and co == m * out_stride):
            break
        m = m * match.batch[kept[-1]]
        a = Operand(a.node, a_rest, a_row, a.stride_k)
        out_offset = o_rest
        kept.pop()
    if len(kept) == len(match.batch):
        return match
    env = {old[j].name: batch_var(i, match.batch[j]) for i, j in enumerate(kept)}
    a = Operand(a.node, a.offset.substitute(env), a_row, a.stride_k)
    if isinstance(b, Operand):
        b = Operand(b.node, b.offset.substitute(env), b.stride_row, b.stride_k)
    return MatmulMatch(match.reduce, match.mul, tuple(match.batch[j] for j in kept), m,
                       match.n, match.k, a, b, match.out, out_offset.substitute(env),
                       out_stride)


def _destination(graph: Graph, node: Node, users: dict[int, list[int]],
                 out_idx: tuple[Expr, ...]) -> tuple[int, Expr, Expr]:
    """Where the matmul stores element `out_idx` = (batch..., m, n): its own buffer, or, when
    its only reader is a `Contiguous` that permutes it keeping n innermost (attention's
    heads back to rows), straight into that copy's buffer, which makes the copy free."""
    own = flat_index(node.shape, out_idx)
    own_split = affine(own, (M_VAR, N_VAR))
    readers = users[node.id]
    if len(readers) == 1 and node.id not in graph.outputs():
        copy = graph.nodes[readers[0]]
        if isinstance(copy.op, ops.Contiguous):
            place = _permuted_position(copy, node, out_idx)
            split = None if place is None else affine(place, (M_VAR, N_VAR))
            if split is not None and split[0][1] == 1:
                return copy.id, split[1], split[0][0]
    (m_coef, _), rest = own_split
    return node.id, rest, m_coef


def _permuted_position(copy: Node, src: Node, src_idx: tuple[Expr, ...]) -> Expr | None:
    """Flat position in `copy`'s buffer of `src` element `src_idx`, when `copy` reads `src`
    through a plain permutation (every element once, no padding)."""
    view = copy.inputs[0].view
    if view.mask is not None or view.offset != 0 or len(view.shape) != len(src.shape):
        return None
    strides = row_major_strides(src.shape)
    axes = []
    for size, stride in zip(view.shape, view.strides):
        found = [k for k, (d, s) in enumerate(zip(src.shape, strides))
                 if s == stride and d == size and k not in axes]
        if len(found) != 1:
            return None
        axes.append(found[0])
    return flat_index(copy.shape, [src_idx[k] for k in axes])


def might_be_one_hot(graph: Graph, node: Node) -> bool:
    """Cheap structural filter before `match_gather`: a comparison, or a Cast of one."""
    if isinstance(node.op, ops.Cast):
        node = graph.nodes[node.inputs[0].src]
    return isinstance(node.op, ops.LessThan)


def _one_hot_index(v: Value, var: Expr) -> Value | None:
    """P when `v` is `(P == var)` as the frontend writes it, with P an integer not using var:
    `Cast(LessThan(Add(LessThan(P, Q), LessThan(Q, P)), True))`, Q = Index(var), cast to the
    product's dtype (any: a float table, or raw quantized bytes)."""
    if isinstance(v, Cast) and v.x.dtype.name == "bool":
        v = v.x
    is_not = isinstance(v, Binary) and v.op == "lt" and isinstance(v.b, Const)
    if not (is_not and v.b.value is True):
        return None
    ne = v.a
    if not (isinstance(ne, Binary) and ne.op == "add"):
        return None
    x, y = ne.a, ne.b
    if not (isinstance(x, Binary) and isinstance(y, Binary) and x.op == y.op == "lt"):
        return None
    if not (x.a == y.b and x.b == y.a):
        return None
    for p, q in ((x.a, x.b), (x.b, x.a)):
        if isinstance(q, Index) and q.expr is var and not p.dtype.is_float and not any(
            var.name in e.free_vars for e in exprs_of(p)
        ):
            return p
    return None


def as_gather(r: Reduce) -> Value | None:
    """`r` rewritten as a row gather when it sums a one-hot selection over its variable:
    sum_k onehot(P)[k] * W[k] or sum_k where(onehot(P)[k], W[k], 0) == W[P] (0 when P is
    out of range)."""
    if r.op != "sum":
        return None
    body = r.body
    if isinstance(body, Binary) and body.op == "mul":
        candidates = ((body.a, body.b), (body.b, body.a))
    elif isinstance(body, Select) and isinstance(body.y, Const) and body.y.value == 0:
        candidates = ((body.cond, body.x),)
    else:
        return None
    for hot, other in candidates:
        p = _one_hot_index(hot, r.var)
        if p is None:
            continue
        g = Expr.var("_g" + r.var.name[2:], -INF, INF)
        inside = logical_and(lt(g, r.size), lt(-1, g))
        row = guard_loads(map_exprs(other, lambda e, g=g: e.substitute({r.var.name: g})), inside)
        picked = Where(inside, row, other.dtype) if other.dtype == r.dtype else Cast(
            Where(inside, row, other.dtype), r.dtype)
        return Bind(g, p, picked, r.dtype)
    return None


def expands(view: View) -> bool:
    """Whether the view reads some element more than once: a broadcast axis, or axes whose
    strides overlap (the sliding windows of a convolution read each input up to kernel-size
    times), as far as constant strides tell."""
    axes = [(s, d) for d, s in zip(view.shape, view.strides) if d != 1]
    if any(s == 0 for s, _ in axes):
        return True
    if not all(s.is_const and d.is_const for s, d in axes):
        return False
    reach = 0  # the largest flat offset the smaller-stride axes span together
    for stride, extent in sorted((abs(s.value), d.value) for s, d in axes):
        if stride <= reach:
            return True
        reach += stride * (extent - 1)
    return False
