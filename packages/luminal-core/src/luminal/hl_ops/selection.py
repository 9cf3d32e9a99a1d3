"""Selection ops built on the exact `Select` op (`where`): running extremes, sorting by rank,
scatter, diagonals. All are compositions of `where`, comparisons, iotas and reductions, so
their gradients come from the primitive rules and flow only into the values they pick."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..dtypes import bool_, int32, promote
from ..errors import OpError
from ..shape import show_shape
from ..symbolic import Expr, lt, to_expr
from .base import TensorBase
from .binary import lift, where
from .creation import IOTA_INDEX, iota
from .custom_vjp import with_vjp
from .movement import broadcast_to
from .reduction import ValuesIndices, _axes

if TYPE_CHECKING:
    from ..tensor import GraphTensor


def _static(n: Expr, what: str) -> int:
    if not n.is_const:
        raise OpError(f"{what}: the size of the dim is symbolic ({n}); it must be known")
    return n.value


def _causal(x: GraphTensor, n) -> GraphTensor:
    """(n, n) bool: row i sees columns j <= i."""
    i = IOTA_INDEX
    return iota(x.graph, lt(i % n, i // n + 1), (n, n), bool_)


def _positions(x: GraphTensor, n, shape) -> GraphTensor:
    """int32 0..n-1 along the last axis, viewed at `shape`."""
    return iota(x.graph, IOTA_INDEX, (n,), int32).expand(shape)


def _extreme_value(x: GraphTensor, largest: bool) -> float | int:
    if x.dtype.is_float:
        return -math.inf if largest else math.inf
    if x.dtype == bool_:
        return not largest
    info = (-(2**31), 2**31 - 1)
    return info[0] if largest else info[1]


class SelectionOps:
    # ----- running extremes and log-sum-exp --------------------------------------------
    def _cum_extreme(self, dim: int, largest: bool) -> ValuesIndices:
        a = _axes(self, dim)[0]
        if self.ndim == 0 or self.layout.shape[a] == 0:  # nothing to run over
            return ValuesIndices(self, self.graph.constant(0, int32).expand(self.layout.shape))
        x = self.movedim(a, -1)
        n = x.layout.shape[-1]
        square = (*x.layout.shape, n)  # (..., i, j): row i reads x[j] for j <= i
        seen = _causal(self, n).expand(square)
        xs = x.unsqueeze(-2).expand(square)
        fill = _extreme_value(self, largest)
        windows = where(seen, xs, fill)
        best = windows.amax(-1) if largest else windows.amin(-1)
        if self.dtype.is_float:  # a NaN is the running extreme from where it appears on
            nan_seen = where(seen, xs != xs, False).any(-1)
            best = where(nan_seen, math.nan, best)
        at_best = seen & ((xs == best.unsqueeze(-1).expand(square)) | (
            (xs != xs) & (best != best).unsqueeze(-1).expand(square)))
        idx = where(at_best, _positions(self, n, square), -1).amax(-1)  # the last one, as torch
        return ValuesIndices(best.movedim(-1, a), idx.movedim(-1, a))

    def cummax(self, dim: int) -> ValuesIndices:
        """Running maximum along `dim` and the index where it was (last) reached."""
        return self._cum_extreme(dim, largest=True)

    def cummin(self, dim: int) -> ValuesIndices:
        return self._cum_extreme(dim, largest=False)

    def logcumsumexp(self, dim: int) -> GraphTensor:
        """log(cumsum(exp(x))) along `dim`, each prefix a stable logsumexp of its window."""
        a = _axes(self, dim)[0]
        if self.ndim == 0 or self.layout.shape[a] == 0:
            return self._float()
        x = self._float().movedim(a, -1)
        n = x.layout.shape[-1]
        square = (*x.layout.shape, n)
        windows = where(_causal(self, n).expand(square), x.unsqueeze(-2).expand(square),
                        -math.inf)
        return windows.logsumexp(-1).movedim(-1, a)

    # ----- sorting by rank ---------------------------------------------------------------
    def sort(self, dim: int = -1, descending: bool = False, stable: bool = True
             ) -> ValuesIndices:
        """Sorted values and their indices (stable: ties keep their order). Each element's
        rank counts the elements before it; the sorted tensor picks by rank exactly. NaN
        sorts last ascending and first descending, as in PyTorch. O(n^2) in the dim size."""
        a = _axes(self, dim)[0]
        if self.ndim == 0 or self.layout.shape[a] == 0:
            return ValuesIndices(self, self.graph.constant(0, int32).expand(self.layout.shape))
        x = self.movedim(a, -1)
        n = x.layout.shape[-1]
        square = (*x.layout.shape, n)  # (..., i, j)
        xi = x.unsqueeze(-1).expand(square)
        xj = x.unsqueeze(-2).expand(square)
        i_pos = iota(self.graph, IOTA_INDEX // n, (n, n), int32).expand(square)
        j_pos = iota(self.graph, IOTA_INDEX % n, (n, n), int32).expand(square)
        before = _sorts_before(xj, xi, descending) | (_ties(xj, xi) & (j_pos < i_pos))
        rank = before.to(int32).sum(-1)  # (..., i): where x[i] goes
        hit = rank.unsqueeze(-2).expand(square) == i_pos  # (..., r, i): x[i] lands at r
        values = where(hit, xj, lift(x, 0).to(x.dtype)).sum(-1)
        indices = where(hit, j_pos, 0).sum(-1)
        return ValuesIndices(values.movedim(-1, a), indices.movedim(-1, a))

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True):
        return self.sort(dim, descending).indices

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
             ) -> ValuesIndices:
        a = _axes(self, dim)[0]
        n = _static(self.layout.shape[a], "topk")
        if not 0 <= k <= n:
            raise RuntimeError(f"topk: k={k} is out of range for a dim of size {n}")
        values, indices = self.sort(a, descending=largest)
        return ValuesIndices(values.narrow(a, 0, k), indices.narrow(a, 0, k))

    # ----- scatter -----------------------------------------------------------------------
    def scatter(self, dim: int, index: GraphTensor, src=None, value=None, reduce=None):
        """PyTorch `scatter`: out[index[i][j]][j] = src[i][j] (dim 0), elsewhere self.
        Duplicate indices: the last write along `dim` wins (the largest i), what PyTorch's
        CPU kernel does (its docs leave the pick unspecified). `reduce="add"/"multiply"` is
        `scatter_reduce(..., "sum"/"prod")`."""
        src = value if src is None else src
        if reduce is not None:
            kinds = {"add": "sum", "multiply": "prod"}
            if reduce not in kinds:
                raise RuntimeError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
            return self.scatter_reduce(dim, index, src, kinds[reduce])
        hit, picked, _ = _scatter_parts(self, dim, index, src)
        order = iota(self.graph, IOTA_INDEX, (hit.layout.shape[-1],), int32)
        last = where(hit, order, -1).amax(-1, keepdim=True)
        chosen = hit & (order == last)  # one source per written position: exact selection
        out = _scatter_write(self, dim, hit.any(-1), where(chosen, picked, 0).sum(-1))
        if not isinstance(src, TensorBase):
            return out
        return with_vjp(out, [self, src], lambda g: _scatter_vjp(g, dim, index, src))

    def scatter_add(self, dim: int, index: GraphTensor, src: GraphTensor) -> GraphTensor:
        return self.scatter_reduce(dim, index, src, "sum")

    def scatter_reduce(self, dim: int, index: GraphTensor, src, reduce: str,
                       include_self: bool = True) -> GraphTensor:
        """PyTorch `scatter_reduce` with reduce in sum, prod, mean, amax, amin."""
        hit, picked, me = _scatter_parts(self, dim, index, src)
        count = hit.to(int32).sum(-1)
        if reduce in ("sum", "mean"):
            total = where(hit, picked, 0).sum(-1)
            if include_self:
                total = total + me
            if reduce == "mean":
                total = total / (count + int(include_self)).maximum(1)
                if not self.dtype.is_float:
                    total = total.floor().to(self.dtype)
            out = total
        elif reduce == "prod":
            out = where(hit, picked, 1).prod(-1)
            out = out * me if include_self else out
        elif reduce in ("amax", "amin"):
            largest = reduce == "amax"
            windows = where(hit, picked, _extreme_value(self, largest))
            out = windows.amax(-1) if largest else windows.amin(-1)
            if include_self:
                out = out.maximum(me) if largest else out.minimum(me)
        else:
            raise RuntimeError(
                f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
        return _scatter_write(self, dim, count > 0, out.to(promote(self.dtype, out.dtype)))

    # ----- diagonals ---------------------------------------------------------------------
    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> GraphTensor:
        """The diagonal of dims (dim1, dim2) as the last dim (a strided view, no copy)."""
        a, b = _axes(self, dim1)[0], _axes(self, dim2)[0]
        if a == b:
            raise RuntimeError(f"diagonal: dim1 and dim2 must differ, both are {a}")
        x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
        rows = _static(x.layout.shape[-2], "diagonal")
        cols = _static(x.layout.shape[-1], "diagonal")
        length = max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0)
        start = offset if offset >= 0 else -offset * cols
        flat = x.contiguous_if_view().flatten(-2)
        if length == 0:
            return flat[..., :0]
        return flat[..., start : start + (length - 1) * (cols + 1) + 1 : cols + 1]

    def diag(self, diagonal: int = 0) -> GraphTensor:
        """1-D: the square matrix with self on diagonal `diagonal`; 2-D: that diagonal."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError(f"diag: expected a 1-D or 2-D tensor, got {self.ndim}-D")
        n = _static(self.layout.shape[0], "diag") + abs(diagonal)
        i = IOTA_INDEX
        row, col = i // n, i % n
        on = iota(self.graph, lt(col - row - diagonal, 1) * lt(row + diagonal - col, 1),
                  (n, n), bool_)
        vals = self._pad_axis(0, 0, abs(diagonal))
        # above the main diagonal value r sits in row r, below it in column r
        src = vals.unsqueeze(1 if diagonal >= 0 else 0).expand((n, n))
        return where(on, src, 0)

    # ----- data-dependent shapes ----------------------------------------------------------
    def nonzero(self, as_tuple: bool = False):
        raise NotImplementedError(_DATA_DEPENDENT.format(name="nonzero"))

    def masked_select(self, mask: GraphTensor):
        raise NotImplementedError(_DATA_DEPENDENT.format(name="masked_select"))


_DATA_DEPENDENT = (
    "{name}: its output shape depends on the values of the input, and a luminal graph fixes "
    "every shape when it is built (before any data is read); keep the shape static instead, "
    "e.g. where(mask, x, 0) or a boolean mask multiplied into a reduction"
)


def _sorts_before(a: GraphTensor, b: GraphTensor, descending: bool) -> GraphTensor:
    """a strictly before b in the sort order; NaN is the largest value (PyTorch)."""
    if not a.dtype.is_float:
        return a > b if descending else a < b
    a_nan, b_nan = a != a, b != b
    if descending:
        return (a > b) | (a_nan & ~b_nan)
    return (a < b) | (~a_nan & b_nan)


def _ties(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    if not a.dtype.is_float:
        return a == b
    return (a == b) | ((a != a) & (b != b))


def _scatter_parts(x: GraphTensor, dim: int, index: GraphTensor, src):
    """For scatter along `dim` over the region `index` covers: `hit` (..., p, j): index[j]
    is p, `picked` the src value j broadcast to that shape, and x's own values (..., p),
    all with the scattered dim moved last."""
    a = _axes(x, dim)[0]
    if index.ndim != x.ndim:
        raise RuntimeError(
            f"scatter: index {show_shape(index.layout.shape)} and self "
            f"{show_shape(x.layout.shape)} need the same number of dims")
    if index.dtype.is_float:
        raise RuntimeError(f"scatter: index must be an integer tensor, got {index.dtype.name}")
    region = x
    for ax, d in enumerate(index.layout.shape):
        if ax != a:
            region = region._slice_axis(ax, 0, d)
    if not isinstance(src, TensorBase):
        src = lift(x, src).to(x.dtype).expand(index.layout.shape)
    elif src.dtype != x.dtype:
        raise RuntimeError(f"scatter: src dtype {src.dtype.name} must be self's "
                           f"{x.dtype.name}")
    for ax, (di, dx) in enumerate(zip(index.layout.shape, x.layout.shape)):
        if ax != a and di.is_const and dx.is_const and di.value > dx.value:
            raise RuntimeError(f"scatter: index {show_shape(index.layout.shape)} is larger "
                               f"than self {show_shape(x.layout.shape)} in dim {ax}")
    for ax, d in enumerate(index.layout.shape):
        src = src._slice_axis(ax, 0, d)
    n = x.layout.shape[a]
    positions = iota(x.graph, IOTA_INDEX, (n,), int32)
    idx = index.to(int32).movedim(a, -1).unsqueeze(-2)  # (..., 1, j)
    shape = (*idx.layout.shape[:-2], n, idx.layout.shape[-1])
    hit = broadcast_to(idx, shape) == positions.unsqueeze(-1).expand(shape)
    picked = broadcast_to(src.to(x.dtype).movedim(a, -1).unsqueeze(-2), shape)
    return hit, picked, region.movedim(a, -1)


def _scatter_vjp(g: GraphTensor, dim: int, index: GraphTensor, src: GraphTensor):
    """PyTorch's scatter gradients: self gets g where nothing was written; every src value
    the index reads gets g at its target, duplicates included (torch's `gather`), and src
    beyond the index's extent gets 0."""
    g_src = g.gather(dim, index)
    for ax, (have, want) in enumerate(zip(g_src.layout.shape, src.layout.shape)):
        if have != want:
            g_src = g_src._pad_axis(ax, 0, to_expr(want) - have)
    return [g.scatter(dim, index, value=0.0), g_src]


def _scatter_write(x: GraphTensor, dim: int, written: GraphTensor, value: GraphTensor):
    """x with its region replaced by `value` where `written` (both with dim moved last)."""
    a = _axes(x, dim)[0]
    value, written = value.movedim(-1, a), written.movedim(-1, a)
    for ax, (have, want) in enumerate(zip(value.layout.shape, x.layout.shape)):
        if have != want:  # the region index covered: pad back to x's extent, unwritten
            value = value._pad_axis(ax, 0, to_expr(want) - have)
            written = written._pad_axis(ax, 0, to_expr(want) - have)
    return where(written, value.to(x.dtype), x)
