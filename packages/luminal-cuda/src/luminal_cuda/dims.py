"""Which dim values a recorded CUDA graph depends on, so that decode can replay one graph
while its KV cache grows.

Kernels read dims from device memory and check their real extents, so a captured graph stays
correct for any dim values whose grids and buffers it covers. The runtime therefore keys its
bindings (launches, allocation layout, captured graph) by

- the exact value of every *hard* dim: those fixing a cuBLAS call (sizes, strides, batch
  offsets are baked into it), and any dim some size does not grow with (a `n - past` slice
  would shrink when `past` is rounded up);
- a *bucket* of every other (*soft*) dim: exact up to `EXACT_UP_TO`, then the next power of
  two. Sizes are computed for the bucket's top, which bounds them since they never shrink as
  the dim grows.

A decode loop then records O(log n) graphs for n tokens instead of one per token, and a dim
value can never meet a graph recorded for launches too small for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from luminal.symbolic import Expr

EXACT_UP_TO = 16


def bucket(value: int) -> int:
    """The largest value of `value`'s bucket."""
    if value <= EXACT_UP_TO:
        return value
    return 1 << (value - 1).bit_length()


def nondecreasing(e: Expr, name: str) -> bool:
    """Whether `e` provably never decreases as dim `name` grows (others fixed, dims >= 0)."""
    if name not in e.free_vars:
        return True
    op, args = e.op, e.args
    if op in ("var", "num"):
        return True
    if op in ("add", "min", "max"):
        return all(nondecreasing(a, name) for a in args)
    if op == "mul":
        # a product of non-negative factors that each never decrease
        return all(a.vmin >= 0 and nondecreasing(a, name) for a in args)
    if op == "floordiv":
        return args[1].is_const and args[1].value > 0 and nondecreasing(args[0], name)
    return False  # mod, comparisons: not monotone in general


@dataclass(frozen=True)
class DimPolicy:
    """The hard dims (exact in keys) and soft dims (bucketed) of one program."""

    names: tuple[str, ...]  # every dim the runtime keys on
    hard: frozenset[str]

    @staticmethod
    def of(names: Iterable[str], cublas_dims: Iterable[str], sizes: Iterable[Expr]) -> DimPolicy:
        names = tuple(sorted(names))
        hard = set(cublas_dims)
        for e in sizes:
            hard |= {n for n in e.free_vars if not nondecreasing(e, n)}
        return DimPolicy(names, frozenset(hard) & set(names))

    def bound(self, dims: Mapping[str, int]) -> dict[str, int]:
        """The dim values launches and allocations are prepared for."""
        return {n: v if n in self.hard else bucket(v) for n, v in dims.items()}

    def key(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        bound = self.bound({n: dims[n] for n in self.names})
        return tuple(bound[n] for n in self.names)
