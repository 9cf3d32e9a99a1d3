"""Dense layers: `Linear`, `Embedding`, `Identity`."""

from __future__ import annotations

from luminal import GraphTensor

from . import functional as F
from . import init
from .module import Module, Parameter, QuantizedParameter

__all__ = ["Embedding", "Identity", "Linear"]


class Identity(Module):
    def forward(self, x: GraphTensor) -> GraphTensor:
        return x


class Linear(Module):
    """`y = x @ weight.T + bias` with `weight` of shape (out_features, in_features), as in
    PyTorch, so checkpoints load unchanged."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter((out_features, in_features), init=init.uniform_fan_in(in_features))
        self.bias = (
            Parameter((out_features,), init=init.uniform_fan_in(in_features)) if bias else None
        )

    def forward(self, x: GraphTensor) -> GraphTensor:
        g = x.graph
        bias = self.bias.tensor(g) if self.bias is not None else None
        return F.linear(x, self.weight.tensor(g), bias)

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    """A lookup table: integer ids of any shape -> rows of `weight` (num_embeddings, dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter((num_embeddings, embedding_dim), init=init.normal())

    def forward(self, ids: GraphTensor) -> GraphTensor:
        if isinstance(self.weight, QuantizedParameter):
            return self.weight.rows(ids)  # decode only the looked-up rows
        return F.embedding(ids, self.weight.tensor(ids.graph))

    def attend(self, x: GraphTensor) -> GraphTensor:
        """`x @ weight.T`: scores against every row, i.e. a language-model head tied to this
        table."""
        return F.linear(x, self.weight.tensor(x.graph))

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
