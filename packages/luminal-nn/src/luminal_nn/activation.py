"""Activation modules: thin wrappers over the tensor methods, for use in `Sequential`."""

from __future__ import annotations

from luminal import GraphTensor

from .module import Module

__all__ = ["GELU", "LeakyReLU", "ReLU", "SiLU", "Sigmoid", "Softmax", "Tanh"]


class ReLU(Module):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.relu()


class GELU(Module):
    """`approximate="none"` (erf) or `"tanh"`, as in PyTorch."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.gelu(self.approximate)


class SiLU(Module):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.silu()


class Sigmoid(Module):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.sigmoid()


class Tanh(Module):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.tanh()


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.leaky_relu(self.negative_slope)


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: GraphTensor) -> GraphTensor:
        return x.softmax(self.dim)
