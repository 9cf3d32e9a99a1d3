"""Fused attention: recognising softmax(f(q @ k^T)) @ v and rendering it as one kernel.

The frontend's attention (`functional.scaled_dot_product_attention`, luminal-nn's
`MultiHeadAttention`) reaches the compiler as primitives:

    QK = SumReduce(Mul(q, k))                      a matmul over the head dim
    X  = f(QK, ...)                                scale, causal/padding masks: elementwise
    E  = Exp2(Mul(Add(X, Mul(MaxReduce(X), -1)), log2(e)))
    P  = Mul(E, Recip(SumReduce(E)))               softmax over the keys
    O  = SumReduce(Mul(P, v))                      a matmul over the keys

`match_attention` checks that shape exactly (every intermediate used only inside it, every
edge from QK to X an identity view) and the kernel computes O in one pass over the keys with an
online softmax: no (queries x keys) matrix is ever stored. `f` is whatever the graph says,
built as a value tree with the dot product as a placeholder (`Dot`), so scales, causal masks
from iotas, boolean or additive mask inputs and KV-cache offsets all fuse. The same kernel
serves prefill (many queries) and decode (one query against the cache).

`Attention` is a `Kernel` whose value is the primitive decomposition of O, so everything that
walks kernels (dims, memory planning) sees its true inputs, and a backend without the fused
kernel could still render it plainly.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import ops
from luminal.dtypes import DType
from luminal.graph import Edge, Graph, Node
from luminal.symbolic import INF, Expr
from luminal_codegen import patterns
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import Kernel, MatOperand, Value, batch_var

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256  # per-thread accumulators and the shared query row are sized by it
THREADS = 256  # the block size of every kernel: attention can share a launch too

I_VAR = Expr.var("_qi", 0, INF)
# "_r" prefix: the renderer treats it as a loop variable, so per-key work stays in the loop
# and everything else (batch offsets, per-query mask terms) is hoisted out of it
J_VAR = Expr.var("_rj", 0, INF)


@dataclass(frozen=True)
class Dot(Value):
    """Placeholder for q[i] . k[j] inside the score function."""

    dtype: DType


@dataclass(frozen=True)
class AttentionMatch:
    """Node ids of one recognised attention and what the kernel needs of them."""

    out: int  # the node O is stored into: O, or a permuting copy of it (heads back to rows)
    out_offset: Expr  # O[b, i, :] starts at out_offset + i*out_stride (batch vars in offset)
    out_stride: Expr
    qk: int  # QK
    scores: int  # X
    log2e: float  # the exponent's multiplier (log2(e) in the frontend)
    q: patterns.Operand  # rows: queries, k: head dim
    k: patterns.Operand  # rows: keys, k: head dim
    v: patterns.Operand  # rows: value dim, k: keys
    batch: tuple[Expr, ...]
    sq: Expr
    sk: Expr
    d: Expr
    dv: Expr
    interior: frozenset[int]  # every node the kernel replaces (O excluded)


@dataclass(frozen=True)
class Attention(Kernel):
    """One fused attention: `out[b, i, :] = softmax_j(score(b, i, j)) @ v[b, j, :]`, with
    `score` a value tree over batch vars, `I_VAR`, `J_VAR` and `Dot()`; row (b, i) of the
    result is stored at `out_offset + i*out_stride`. Params: 0 out, 1 q, 2 k, 3 v, then the
    buffers `score` loads."""

    batch: tuple[Expr, ...]
    sq: Expr
    sk: Expr
    d: Expr
    dv: Expr
    q: MatOperand
    k: MatOperand
    v: MatOperand
    out_offset: Expr
    out_stride: Expr
    score: Value
    log2e: float


def _only_users(users: dict[int, list[int]], node: int, allowed: set[int]) -> bool:
    return bool(users[node]) and set(users[node]) <= allowed


def _const(graph: Graph, node: Node, edge_index: int) -> float | None:
    src = graph.nodes[node.inputs[edge_index].src]
    if isinstance(src.op, ops.Constant) and not isinstance(src.op.value, Expr):
        return float(src.op.value)
    return None


def _identity(graph: Graph, node: Node, k: int) -> bool:
    e = node.inputs[k]
    return e.view.is_contiguous and tuple(e.view.shape) == tuple(graph.nodes[e.src].shape)


def _reads_row(edge: Edge, node: Node, src: Node) -> bool:
    """Whether `node` (shape (..., rows, cols)) reads `src` at (..., row, 0) or (..., row),
    i.e. one value per row broadcast along the last axis (a reduction result re-expanded)."""
    idx = [Expr.var(f"_x{k}", 0, INF) for k in range(len(node.shape))]
    want = idx[:-1] + ([Expr.const(0)] if len(src.shape) == len(node.shape) else [])
    if edge.view.mask is not None or len(want) != len(src.shape):
        return False
    idx = [Expr.const(0) if d == 1 else i for i, d in zip(idx, node.shape)]
    want = [Expr.const(0) if d == 1 else w for w, d in zip(want, src.shape)]
    return edge.view.index(idx) == flat_index(src.shape, want)


def _last_axis_reduce(graph: Graph, node: Node, kind: type, of: int) -> bool:
    return (isinstance(node.op, kind) and node.op.axis == len(graph.nodes[of].shape) - 1
            and node.inputs[0].src == of and _identity(graph, node, 0))


def _pick(graph: Graph, node: Node, kind: type) -> tuple[int, int] | None:
    """(index of the input that is a `kind` node, index of the other one)."""
    for k in (0, 1):
        if isinstance(graph.nodes[node.inputs[k].src].op, kind):
            return k, 1 - k
    return None


def _split_exp(graph: Graph, e: Node) -> tuple[Node, Node, Node, float] | None:
    """E = Exp2(Mul(Add(X, Mul(Mx, -1)), c)) -> (X, the Add, the Mul by -1, c)."""
    if not isinstance(e.op, ops.Exp2) or not _identity(graph, e, 0):
        return None
    scaled = graph.nodes[e.inputs[0].src]
    if not isinstance(scaled.op, ops.Mul) or (pick := _pick(graph, scaled, ops.Add)) is None:
        return None
    c = _const(graph, scaled, pick[1])
    shifted = graph.nodes[scaled.inputs[pick[0]].src]
    if c is None or not _identity(graph, scaled, pick[0]):
        return None
    for j in (0, 1):
        x, neg = (graph.nodes[shifted.inputs[t].src] for t in (j, 1 - j))
        if not (_identity(graph, shifted, j) and isinstance(neg.op, ops.Mul)
                and _reads_row(shifted.inputs[1 - j], shifted, neg)):
            continue
        if (t := _pick(graph, neg, ops.MaxReduce)) is not None and _const(graph, neg, t[1]) == -1.0:
            return x, shifted, neg, c
    return None


def match_attention(graph: Graph, node: Node, users: dict[int, list[int]],
                    matmuls: dict[int, patterns.MatmulMatch]) -> AttentionMatch | None:
    """The attention stored into `node` (its output, or a permuting copy the output matmul
    writes into directly), if the subgraph is exactly the pattern above."""
    pv = matmuls.get(node.id)
    if pv is None or not isinstance(pv.b, patterns.Operand):
        return None
    p = graph.nodes[pv.a.node]
    # P = Mul(E, Recip(S)) read as P[b, i, j]; S = SumReduce(E); R = Recip(S) per row
    if not isinstance(p.op, ops.Mul) or not _reads_plainly(pv, p):
        return None
    if (pick := _pick(graph, p, ops.Recip)) is None or not _identity(graph, p, pick[1]):
        return None
    r, e = graph.nodes[p.inputs[pick[0]].src], graph.nodes[p.inputs[pick[1]].src]
    s = graph.nodes[r.inputs[0].src]
    if not (_reads_row(p.inputs[pick[0]], p, r) and _reads_row(r.inputs[0], r, s)
            and _last_axis_reduce(graph, s, ops.SumReduce, e.id)):
        return None
    split = _split_exp(graph, e)
    if split is None:
        return None
    x, shifted, neg, log2e = split
    mx = graph.nodes[next(i.src for i in neg.inputs
                          if isinstance(graph.nodes[i.src].op, ops.MaxReduce))]
    if abs(log2e - LOG2E) > 1e-6 or not _last_axis_reduce(graph, mx, ops.MaxReduce, x.id):
        return None
    found = _score_path(graph, x, matmuls)
    if found is None:
        return None
    qk, path = found
    if qk.out != qk.reduce or not isinstance(qk.b, patterns.Operand) or not (
        len(qk.batch) == len(pv.batch) and all(a == b for a, b in zip(qk.batch, pv.batch))
        and qk.m == pv.m and qk.n == pv.k
    ):
        return None
    scaled = graph.nodes[e.inputs[0].src]
    interior = {pv.mul, p.id, e.id, r.id, s.id, scaled.id, shifted.id, neg.id, mx.id,
                qk.reduce, qk.mul, *path} | ({pv.reduce} if pv.out != pv.reduce else set())
    if interior & graph.outputs():
        return None
    for n in interior - {qk.mul}:
        if not _only_users(users, n, interior | {node.id}):
            return None
    if not all(d.is_const and 0 < d.value <= MAX_HEAD_DIM for d in (qk.k, pv.n)):
        return None  # the kernel sizes its registers and shared memory by the head dims
    return AttentionMatch(pv.out, pv.out_offset, pv.out_stride, qk.reduce, x.id, log2e, qk.a,
                          qk.b, pv.b, pv.batch, pv.m, pv.k, qk.k, pv.n, frozenset(interior))


def _reads_plainly(pv: patterns.MatmulMatch, p: Node) -> bool:
    """Whether the P @ V matmul reads P[b, i, j] at P's own row-major position."""
    def pick(var: Expr, extent: Expr) -> Expr:
        return Expr.const(0) if extent == 1 else var

    bvars = [pick(batch_var(k, d), d) for k, d in enumerate(pv.batch)]
    i, j = pick(patterns.M_VAR, pv.m), pick(patterns.K_VAR, pv.k)
    got = pv.a.offset + i * pv.a.stride_row + j * pv.a.stride_k
    return tuple(p.shape) == (*pv.batch, pv.m, pv.k) and got == flat_index(p.shape, (*bvars, i, j))


def _score_path(graph: Graph, x: Node, matmuls: dict[int, patterns.MatmulMatch]
                ) -> tuple[patterns.MatmulMatch, list[int]] | None:
    """The one QK matmul X is an elementwise function of, and the nodes between them (X
    included), each reading the previous one through an identity view."""
    path: list[int] = []
    node = x
    while node.id not in matmuls:
        elementwise = (ops.Unary, ops.Cast, ops.Select)  # Select: where() masks
        if not isinstance(node.op, elementwise) or isinstance(node.op, ops.Contiguous):
            return None
        path.append(node.id)
        # follow the operand that depends on a matmul of X's shape; the rest is the mask
        nxt = [k for k, e in enumerate(node.inputs)
               if _depends_on_matmul(graph, graph.nodes[e.src], matmuls, x.shape)]
        if len(nxt) != 1 or not _identity(graph, node, nxt[0]):
            return None
        node = graph.nodes[node.inputs[nxt[0]].src]
    return matmuls[node.id], path


def _depends_on_matmul(graph: Graph, node: Node, matmuls: dict, shape: tuple) -> bool:
    """Whether a matmul feeds `node` through nodes of `shape` only (the score chain; a mask
    branch has the mask's own shape, so the search stays short)."""
    stack, seen = [node.id], set()
    while stack:
        nid = stack.pop()
        n = graph.nodes[nid]
        if nid in seen or tuple(n.shape) != tuple(shape):
            continue
        if nid in matmuls:
            return True
        seen.add(nid)
        stack.extend(e.src for e in n.inputs)
    return False


def score_axes(batch: tuple[Expr, ...]) -> tuple[Expr, ...]:
    """The index at which the score function is built: batch vars, query, key."""
    return (*(batch_var(k, d) for k, d in enumerate(batch)), I_VAR, J_VAR)
