"""Pieces every hand-written matmul kernel of a generated-code backend shares (luminal-rocm's
OpenCL C, luminal-metal's MSL): operand names and accessors, batch decoding, the output store.

The kernel body itself (tiling, vector widths, cooperative reductions) is the backend's: this
module only spells the IR's `Matmul` fields in a dialect.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr

from .ir import Matmul, MatOperand, QuantOperand, kernel_dims
from .render import Dialect


@dataclass(frozen=True)
class MatmulCtx:
    """What every matmul kernel shares: names, operand accessors, batch decoding. Inside a
    kernel, `M N K`, the batch variables and `a_off a_row a_k` (`b_...` for a strided B) are
    locals declared by `header()`."""

    mm: Matmul
    dialect: Dialect
    names: dict[str, str]

    def expr(self, e: Expr) -> str:
        return e.render_c(self.names)

    @property
    def quant(self) -> QuantOperand | None:
        return self.mm.b if isinstance(self.mm.b, QuantOperand) else None

    def dtype(self, param: int):
        return self.mm.params[param].dtype

    def signature(self, name: str, attr: str = "") -> str:
        quant = self.quant
        params = [
            ("uchar" if quant and k == quant.buf else self.dialect.storage_type(p.dtype),
             f"p{k}", p.output)
            for k, p in enumerate(self.mm.params)
        ]
        dims = [self.names[d] for d in kernel_dims(self.mm)]
        return self.dialect.signature(name, params, dims, attr)

    def header(self, batch_index: str) -> list[str]:
        """Sizes, the batch variables decoded from `batch_index`, operand offsets."""
        mm = self.mm
        lines = [f"const long M = {self.expr(mm.m)}, N = {self.expr(mm.n)}, "
                 f"K = {self.expr(mm.k)};"]
        rest = batch_index
        for k in range(len(mm.batch) - 1, -1, -1):
            var, extent = mm.batch_vars[k].name, self.expr(mm.batch[k])
            lines.append(f"const long {var} = {rest} % ({extent});" if k else
                         f"const long {var} = {rest};")
            rest = f"({rest} / ({extent}))"
        lines.append(self._operand_consts("a", mm.a))
        if isinstance(mm.b, MatOperand):
            lines.append(self._operand_consts("b", mm.b))
        return lines

    def _operand_consts(self, tag: str, op: MatOperand) -> str:
        return (f"const long {tag}_off = {self.expr(op.offset)}, {tag}_row = "
                f"{self.expr(op.stride_row)}, {tag}_k = {self.expr(op.stride_k)};")

    def a_index(self, row: str, k: str) -> str:
        return f"a_off + ({row}) * a_row + ({k}) * a_k"

    def b_index(self, n: str, k: str) -> str:
        return f"b_off + ({n}) * b_row + ({k}) * b_k"

    def load_a(self, row: str, k: str) -> str:
        a = self.mm.a.buf
        return self.dialect.load(self.dtype(a), f"p{a}", self.a_index(row, k))

    def load_b(self, n: str, k: str) -> str:
        b = self.mm.b
        if isinstance(b, QuantOperand):
            row, col = (n, k) if b.k_contiguous else (k, n)
            blocks = f"({self.expr(b.cols)} / 32)"
            return (f"lm_deq_{b.qtype}(p{b.buf}, ({row}) * {blocks} + ({col}) / 32, "
                    f"(int)(({col}) % 32))")
        return self.dialect.load(self.dtype(b.buf), f"p{b.buf}", self.b_index(n, k))

    def out_index(self, row: str, col: str) -> str:
        """Where out(b, row, col) goes: a fused permute of the product stores it at a batch
        offset and row stride other than a contiguous (batch, M, N) array's."""
        mm = self.mm
        return f"{self.expr(mm.out_offset)} + ({row}) * ({self.expr(mm.out_stride)}) + ({col})"

    def store(self, index: str, value: str) -> str:
        out = self.mm.out
        return self.dialect.store_statement(self.dtype(out), f"p{out}", index, value)


def function(signature: str, body: list[str]) -> str:
    """A kernel function: `signature`, then `body` indented in braces."""
    return "\n".join([signature + " {", *("  " + s for s in body), "}"]) + "\n"


def batch_size(mm: Matmul) -> Expr:
    """How many (M, N) products `mm` computes: the product of its batch extents."""
    out = Expr.const(1)
    for d in mm.batch:
        out = out * d
    return out
