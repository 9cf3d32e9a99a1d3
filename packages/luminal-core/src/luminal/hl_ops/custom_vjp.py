"""High-level ops whose PyTorch gradient is not the gradient of their composition.

`pow` is built from exp2/log2 and selections so that its *value* is PyTorch's at 0, inf and
negative bases; differentiating that composition would give NaN or the wrong infinity at
those points (0 * inf inside the chain rule). `scatter` with duplicate indices keeps one
value, but PyTorch's gradient reaches every duplicate. PyTorch defines these derivatives by
formulas instead, and so does luminal: the op's output node carries a `CustomVjp`
(`node.meta["vjp"]`), which luminal-train's autograd applies in place of differentiating the
primitives inside.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tensor import GraphTensor

VJP_META = "vjp"


@dataclass(frozen=True)
class CustomVjp:
    """`inputs`: the tensors the op reads; `rule(g)`: their gradients, each in its input's
    shape, given the output's gradient `g` (None where none flows)."""

    inputs: tuple[GraphTensor, ...]
    rule: Callable[[GraphTensor], Sequence[GraphTensor | None]]


def with_vjp(out: GraphTensor, inputs: Sequence[GraphTensor],
             rule: Callable[[GraphTensor], Sequence[GraphTensor | None]]) -> GraphTensor:
    """`out`'s values in a node of their own that carries `rule` as its gradient."""
    marked = out.contiguous()
    marked.node.meta[VJP_META] = CustomVjp(tuple(inputs), rule)
    return marked
