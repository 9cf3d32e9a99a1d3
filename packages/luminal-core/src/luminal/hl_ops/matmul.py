"""Matrix products: broadcast multiply + SumReduce over the shared axis (backends recognise
the pattern and call a matmul kernel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..dtypes import promote
from ..errors import OpError
from ..shape import show_shape
from .movement import broadcast_shape

if TYPE_CHECKING:
    from ..tensor import GraphTensor


def matmul(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """`torch.matmul`: 1-D/2-D/batched with broadcast batch dims."""
    if a.ndim == 0 or b.ndim == 0:
        raise OpError("matmul: both operands need at least 1 dim")
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        a = a.unsqueeze(0)
    if squeeze_b:
        b = b.unsqueeze(1)
    m, k = a.layout.shape[-2:]
    k2, n = b.layout.shape[-2:]
    if not k == k2:
        raise OpError(
            f"matmul: shapes {show_shape(a.layout.shape)} and {show_shape(b.layout.shape)} "
            f"cannot be multiplied ({k} != {k2})"
        )
    batch = broadcast_shape("matmul", a.layout.shape[:-2], b.layout.shape[:-2])
    dtype = promote(a.dtype, b.dtype)
    a = a.to(dtype).unsqueeze(-2)  # (..., m, 1, k)
    bt = b.to(dtype).transpose(-1, -2).unsqueeze(-3)  # (..., 1, n, k)
    out_shape = (*batch, m, n, k)
    prod = a.expand(out_shape) * bt.expand(out_shape)
    out = prod.sum(-1)
    if squeeze_a:
        out = out.squeeze(-2)
    if squeeze_b:
        out = out.squeeze(-1)
    return out


class MatmulOps:
    def matmul(self, other: GraphTensor) -> GraphTensor:
        return matmul(self, other)

    def __matmul__(self, other: GraphTensor) -> GraphTensor:
        return matmul(self, other)

    def __rmatmul__(self, other: GraphTensor) -> GraphTensor:
        return matmul(other, self)

    def mm(self, other: GraphTensor) -> GraphTensor:
        if self.ndim != 2 or other.ndim != 2:
            raise OpError("mm: both operands must be 2-D")
        return matmul(self, other)

    def bmm(self, other: GraphTensor) -> GraphTensor:
        if self.ndim != 3 or other.ndim != 3:
            raise OpError("bmm: both operands must be 3-D")
        return matmul(self, other)

    def dot(self, other: GraphTensor) -> GraphTensor:
        return matmul(self, other)
