"""The core lowering plus the CUDA backend's own pattern: fused attention.

`CudaLowering` runs core's fusion decisions unchanged and adds one step after the matmul
search: every recognised attention takes its two matmuls and the softmax between them out of
the ordinary lowering, forces its q, k, v sources into buffers, and becomes one `Attention`
kernel. Nothing inside an attention is ever built, so no (queries x keys) buffer exists.
"""

from __future__ import annotations

from luminal.graph import Graph, Node
from luminal.symbolic import Expr
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import (
    KernelLike,
    Load,
    MatOperand,
    Param,
    Program,
    Store,
    loop_var,
    map_loads,
)
from luminal_codegen.lower import Lowering, ValueBuilder

from .attention import Attention, AttentionMatch, Dot, match_attention, score_axes
from .quant import QUANT_KERNELS


class CudaLowering(Lowering):
    """`Lowering` that also fuses attention (`fuse_attention=False` turns that off)."""

    def __init__(self, graph: Graph, fuse_attention: bool = True):
        self.fuse_attention = fuse_attention
        self.attention: dict[int, AttentionMatch] = {}
        super().__init__(graph, quant_kernels=QUANT_KERNELS)

    def _find_matmuls(self) -> None:
        super()._find_matmuls()
        if not self.fuse_attention:
            return
        taken: set[int] = set()
        for node in self.order:
            if node.id in taken:
                continue
            match = match_attention(self.graph, node, self.users, self.matmuls)
            if match is not None and not (match.interior & taken):
                self.attention[node.id] = match
                taken |= match.interior | {node.id}
        for m in self.attention.values():
            self.matmuls.pop(m.out, None)
            self.matmuls.pop(m.qk, None)

    def _decide_buffers(self) -> None:
        super()._decide_buffers()
        for m in self.attention.values():
            self.materialised -= m.interior
            self.materialised |= {m.out, m.q.node, m.k.node, m.v.node}

    def build_kernel(self, node: Node) -> tuple[KernelLike, list[int]]:
        match = self.attention.get(node.id)
        if match is None:
            return super().build_kernel(node)
        return self._build_attention(node, match)

    def _build_attention(self, node: Node, m: AttentionMatch) -> tuple[Attention, list[int]]:
        graph = self.graph

        def has_buffer(n: Node) -> bool:
            return n.id not in m.interior and self._has_buffer(n)

        params = [node.id, m.q.node, m.k.node, m.v.node]
        domain = tuple(node.shape)
        axes = tuple(loop_var(k, d) for k, d in enumerate(domain))
        # the primitive decomposition: what the kernel computes, and every buffer it reads
        plain = ValueBuilder(graph, has_buffer, params).compute(node, axes, Expr.const(1))
        score_params = list(params)
        builder = ValueBuilder(graph, lambda n: n.id == m.qk or has_buffer(n), score_params)
        score = builder.compute(graph.nodes[m.scores], score_axes(m.batch), Expr.const(1))
        slot: dict[int, int] = {}
        for k, nid in enumerate(score_params):
            if nid != m.qk:
                if nid not in params:
                    params.append(nid)
                slot[k] = params.index(nid)

        def relink(load: Load):
            if score_params[load.buf] == m.qk:
                return Dot(load.dtype)
            return Load(slot[load.buf], load.index, load.valid, load.dtype)

        score = map_loads(score, relink)
        kparams = tuple(Param(graph.nodes[n].dtype, output=(k == 0)) for k, n in enumerate(params))

        def operand(op, buf: int) -> MatOperand:
            return MatOperand(buf, op.offset, op.stride_row, op.stride_k)

        kernel = Attention(
            kparams, domain, Store(0, flat_index(node.shape, axes), plain),
            m.batch, m.sq, m.sk, m.d, m.dv, operand(m.q, 1), operand(m.k, 2), operand(m.v, 3),
            m.out_offset, m.out_stride, score, m.log2e,
        )
        return kernel, params


def lower(graph: Graph, fuse_attention: bool = True) -> Program:
    """`luminal_codegen.lower` with the CUDA backend's fused attention."""
    return CudaLowering(graph, fuse_attention).program()
