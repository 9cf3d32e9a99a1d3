"""Normalisation layers: `LayerNorm` and `RMSNorm` (PyTorch semantics)."""

from __future__ import annotations

from collections.abc import Sequence

from luminal import GraphTensor

from . import functional as F
from . import init
from .module import Module, Parameter

__all__ = ["LayerNorm", "RMSNorm"]


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalise over the trailing `normalized_shape` dims to zero mean and unit variance,
    then scale by `weight` and shift by `bias`."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        affine = elementwise_affine
        self.weight = Parameter(self.normalized_shape, init=init.ones) if affine else None
        self.bias = Parameter(self.normalized_shape, init=init.zeros) if affine and bias else None

    def forward(self, x: GraphTensor) -> GraphTensor:
        g = x.graph
        return F.layer_norm(
            x, self.normalized_shape,
            self.weight.tensor(g) if self.weight is not None else None,
            self.bias.tensor(g) if self.bias is not None else None,
            self.eps,
        )

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """`x / sqrt(mean(x**2) + eps) * weight` over the trailing dims (Llama's norm).

    `eps=None` uses PyTorch's default, float32's machine epsilon.
    """

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.weight = Parameter(self.normalized_shape, init=init.ones) if elementwise_affine \
            else None

    def forward(self, x: GraphTensor) -> GraphTensor:
        weight = self.weight.tensor(x.graph) if self.weight is not None else None
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"
