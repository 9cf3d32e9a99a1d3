"""How a rendered kernel is launched: its NDRange as expressions over the symbolic dims, and
their evaluation for one set of dim values."""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr, ExprLike, to_expr

# Work-group size of elementwise and reduction kernels: four AMD wavefronts; on PoCL it halves
# the time of memory-bound kernels compared with 64. Devices with a lower limit get theirs.
ELEMENTWISE_GROUP = 256


def ceil_to(e: ExprLike, multiple: int) -> Expr:
    """`e` rounded up to a multiple of `multiple` (global sizes must divide by local sizes)."""
    return (to_expr(e) + (multiple - 1)) // multiple * multiple


@dataclass(frozen=True)
class LaunchSpec:
    """One kernel function: `name`, the dims it takes as trailing `long` arguments (in this
    order), its global and local sizes, and `when`: launched only where it is nonzero (a
    matmul keeps a GEMV and a GEMM and picks one by the symbolic row count)."""

    name: str
    dims: tuple[str, ...]
    global_size: tuple[Expr, ...]
    local_size: tuple[int, ...]
    when: Expr | int = 1


class ExprTable:
    """Distinct expressions, evaluated once per set of dim values.

    A model repeats its layers, so thousands of launch sizes and buffer sizes are a few dozen
    distinct (hash-consed) expressions; evaluating each once keeps a run whose dims changed
    (every decode step) cheap.
    """

    def __init__(self) -> None:
        self._slots: dict[Expr, int] = {}

    def slot(self, e: ExprLike) -> int:
        """The index of `e`'s value in what `evaluate` returns."""
        return self._slots.setdefault(to_expr(e), len(self._slots))

    def evaluate(self, dims: dict[str, int]) -> list[int]:
        return [e.evaluate(dims) for e in self._slots]
