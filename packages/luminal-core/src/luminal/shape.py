"""Views: how an op reads its input buffer.

A `View` maps a logical index (one index per axis of `shape`) onto an element of a flat,
row-major buffer: `offset + sum(i_k * strides[k])`, valid only where every masked axis has
`lo_k <= i_k < hi_k` (elsewhere the view reads 0: that is padding). Permute, expand (stride 0),
slice (with steps, including negative ones for flip) and pad are metadata changes on the view;
reshape is too whenever the strides allow it, otherwise the caller materialises with
`Contiguous` first. Every field is a symbolic `Expr`, so views work for symbolic dims.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from .symbolic import (
    Expr,
    ExprLike,
    add,
    const_or_expr,
    logical_and,
    lt,
    mul,
    prod,
    smax,
    smin,
    to_expr,
)

Shape = tuple[Expr, ...]


def as_shape(dims: Sequence[ExprLike]) -> Shape:
    return tuple(to_expr(d) for d in dims)


def show_shape(shape: Sequence[Expr]) -> str:
    """A shape as text, like a Python tuple: (2, seq, 4) or (5,)."""
    inner = ", ".join(str(const_or_expr(d)) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def row_major_strides(shape: Shape) -> Shape:
    strides, acc = [], Expr.const(1)
    for d in reversed(shape):
        strides.append(acc)
        acc = mul(acc, d)
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class View:
    shape: Shape
    strides: Shape
    offset: Expr
    mask: tuple[tuple[Expr, Expr], ...] | None = None  # per-axis valid [lo, hi), None = all
    # computed on first use; slots rather than an instance dict: a compiled model keeps tens
    # of thousands of views, and a dict each cost about 8 MB for SmolLM2
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)
    _contiguous: bool | None = field(default=None, init=False, repr=False, compare=False)

    @staticmethod
    def contiguous(shape: Sequence[ExprLike]) -> View:
        shape = as_shape(shape)
        return View(shape, row_major_strides(shape), Expr.const(0))

    def __hash__(self) -> int:
        # computed once: views are dict keys in every pass (CSE, lowering, digests)
        h = self._hash
        if h is None:
            h = hash((self.shape, self.strides, self.offset, self.mask))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self):  # the cached hash is per process (str hashes are salted)
        return (View, (self.shape, self.strides, self.offset, self.mask))

    def __copy__(self) -> View:
        return self

    def __deepcopy__(self, memo) -> View:  # immutable: copying a graph need not copy its views
        return self

    # ----- properties ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Expr:
        return prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """Reads a row-major buffer front to back: no copy is needed to materialise it."""
        # cached: asked on every read of a result, and symbolic strides are slow to build
        if self._contiguous is None:
            object.__setattr__(self, "_contiguous", self._compute_contiguous())
        return self._contiguous

    def _compute_contiguous(self) -> bool:
        return (
            self.mask is None
            and self.offset == 0
            and all(
                s == r or d == 1
                for s, r, d in zip(self.strides, row_major_strides(self.shape), self.shape)
            )
        )

    # ----- movement -----------------------------------------------------------------------
    def permute(self, axes: Sequence[int]) -> View:
        mask = None if self.mask is None else tuple(self.mask[a] for a in axes)
        return View(
            tuple(self.shape[a] for a in axes),
            tuple(self.strides[a] for a in axes),
            self.offset,
            mask,
        )

    def expand(self, shape: Sequence[ExprLike]) -> View:
        """Broadcast size-1 axes to `shape` (stride 0). Ranks must match."""
        shape = as_shape(shape)
        strides = tuple(
            s if new == old else Expr.const(0)
            for old, new, s in zip(self.shape, shape, self.strides)
        )
        mask = None
        if self.mask is not None:
            # an expanded axis repeats its one element: all valid or all padding
            mask = tuple(
                m if new == old else (Expr.const(0), mul(new, _reads_index_zero(m)))
                for m, old, new in zip(self.mask, self.shape, shape)
            )
        return View(shape, strides, self.offset, mask)

    def slice(self, axis: int, start: ExprLike, stop: ExprLike, step: int = 1) -> View:
        """Elements start, start+step, ... (< stop for step>0, > stop for step<0) of `axis`.

        Bounds must already be clamped into range (the high-level op does that).
        """
        start, stop = to_expr(start), to_expr(stop)
        if step == 0:
            raise ValueError("slice step cannot be zero")
        if step > 0:
            size = (stop - start + (step - 1)) // step
        else:
            size = (start - stop + (-step - 1)) // (-step)
        shape = list(self.shape)
        strides = list(self.strides)
        shape[axis] = size
        strides[axis] = mul(self.strides[axis], step)
        offset = add(self.offset, mul(start, self.strides[axis]))
        mask = self.mask
        if mask is not None:
            lo, hi = mask[axis]
            # new index j maps to old index start + j*step; valid iff lo <= old < hi
            if step > 0:
                new_lo = (lo - start + (step - 1)) // step
                new_hi = (hi - start + (step - 1)) // step
            else:
                s = -step
                new_lo = (start - hi + 1 + (s - 1)) // s
                new_hi = (start - lo + 1 + (s - 1)) // s
            new_lo = smin(smax(new_lo, 0), size)
            new_hi = smin(smax(new_hi, new_lo), size)
            mask = (*mask[:axis], (new_lo, new_hi), *mask[axis + 1 :])
        return View(tuple(shape), tuple(strides), offset, mask)

    def unfold(self, axis: int, size: ExprLike, step: int = 1, dilation: int = 1) -> View:
        """Sliding windows over `axis`: it becomes the window count, and a new last axis of
        length `size` walks each window (PyTorch `Tensor.unfold`). Needs no mask on `axis`."""
        size = to_expr(size)
        n = self.shape[axis]
        count = (n - (size - 1) * dilation - 1) // step + 1
        stride = self.strides[axis]
        shape = (*self.shape[:axis], count, *self.shape[axis + 1 :], size)
        strides = (*self.strides[:axis], mul(stride, step), *self.strides[axis + 1 :])
        strides = (*strides, mul(stride, dilation))
        mask = None
        if self.mask is not None:
            mask = (*self.mask[:axis], (Expr.const(0), count), *self.mask[axis + 1 :])
            mask = (*mask, (Expr.const(0), size))
        return View(shape, strides, self.offset, mask)

    def axis_masked(self, axis: int) -> bool:
        if self.mask is None:
            return False
        lo, hi = self.mask[axis]
        return not (lo == 0 and hi == self.shape[axis])

    def pad(self, axis: int, before: ExprLike, after: ExprLike) -> View:
        """Add `before`/`after` zeros around `axis` (both >= 0)."""
        before, after = to_expr(before), to_expr(after)
        shape = list(self.shape)
        shape[axis] = add(self.shape[axis], before, after)
        offset = add(self.offset, mul(before, self.strides[axis], -1))
        lo, hi = (Expr.const(0), self.shape[axis]) if self.mask is None else self.mask[axis]
        new_mask = (add(lo, before), add(hi, before))
        full = [(Expr.const(0), d) for d in self.shape] if self.mask is None else list(self.mask)
        full[axis] = new_mask
        return View(tuple(shape), self.strides, offset, tuple(full))

    def reshape(self, shape: Sequence[ExprLike]) -> View | None:
        """The same elements under a new row-major shape, or None when no view can express it."""
        shape = as_shape(shape)
        if self.is_contiguous:
            return View.contiguous(shape)
        groups = _match_groups(self.shape, shape)
        if groups is None:
            return None
        strides: list[Expr] = []
        mask: list[tuple[Expr, Expr]] = []
        for old_axes, new_axes in groups:
            non_unit = [a for a in old_axes if self.shape[a] != 1]
            for a, a_next in itertools.pairwise(non_unit):
                if self.strides[a] != mul(self.strides[a_next], self.shape[a_next]):
                    return None
            acc = self.strides[non_unit[-1]] if non_unit else Expr.const(0)
            group_strides = []
            for n in reversed(new_axes):
                group_strides.append(acc)
                acc = mul(acc, shape[n])
            strides.extend(reversed(group_strides))
            group_mask = self._reshape_group_mask(old_axes, non_unit, [shape[n] for n in new_axes])
            if group_mask is None:
                return None
            mask.extend(group_mask)
        has_mask = self.mask is not None
        return View(shape, tuple(strides), self.offset, tuple(mask) if has_mask else None)

    def _reshape_group_mask(self, old_axes: list[int], non_unit: list[int],
                            new_dims: list[Expr]) -> list[tuple[Expr, Expr]] | None:
        """Masks of the new axes that replace `old_axes`, or None when a mask cannot follow.

        A mask survives a reshape only where the group has at most one non-unit axis on each
        side: that axis keeps its range, and the size-1 axes (valid or padding as a whole) fold
        into it as a 0/1 factor.
        """
        full = [(Expr.const(0), d) for d in new_dims]
        if self.mask is None or not any(self.axis_masked(a) for a in old_axes):
            return full
        big_new = [k for k, d in enumerate(new_dims) if d != 1]
        if len(non_unit) > 1 or len(big_new) > 1 or not new_dims:
            return None
        unit_valid = logical_and(
            *(_reads_index_zero(self.mask[a]) for a in old_axes if a not in non_unit)
        )
        lo, hi = self.mask[non_unit[0]] if non_unit else (Expr.const(0), Expr.const(1))
        k = big_new[0] if big_new else 0
        full[k] = (mul(lo, unit_valid), mul(hi, unit_valid))
        return full

    # ----- index expressions --------------------------------------------------------------
    def index(self, idx: Sequence[Expr]) -> Expr:
        """Flat buffer position read at logical index `idx` (one expression per axis)."""
        return add(self.offset, *(mul(i, s) for i, s in zip(idx, self.strides)))

    def valid(self, idx: Sequence[Expr]) -> Expr:
        """1 where logical index `idx` reads real data, 0 where it reads padding."""
        if self.mask is None:
            return Expr.const(1)
        conds = []
        for i, (lo, hi) in zip(idx, self.mask):
            conds.append(lt(i, hi))
            conds.append(lt(add(lo, -1), i))
        return logical_and(*conds)

    def unravel(self, flat: Expr) -> list[Expr]:
        """Per-axis indices of row-major flat logical index `flat`."""
        out = []
        stride = Expr.const(1)
        for d in reversed(self.shape):
            out.append((flat // stride) % d if d != 1 else Expr.const(0))
            stride = mul(stride, d)
        return list(reversed(out))

    def substitute(self, env: dict[str, int]) -> View:
        """The view with named dims replaced by values."""
        sub = lambda e: e.substitute(env)  # noqa: E731
        mask = None if self.mask is None else tuple((sub(a), sub(b)) for a, b in self.mask)
        return View(
            tuple(map(sub, self.shape)), tuple(map(sub, self.strides)), sub(self.offset), mask
        )

    def span(self) -> Expr:
        """One past the largest buffer position any valid element reads (buffer size needed)."""
        return add(self.offset, *(mul(add(d, -1), s) for d, s in zip(self.shape, self.strides)), 1)


def _reads_index_zero(mask: tuple[Expr, Expr]) -> Expr:
    """1 when an axis masked [lo, hi) reads real data at index 0, else 0."""
    lo, hi = mask
    return logical_and(lt(lo, 1), lt(0, hi))


def _match_groups(old: Shape, new: Shape) -> list[tuple[list[int], list[int]]] | None:
    """Split two shapes of equal size into consecutive groups with equal products."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(old) or j < len(new):
        og, ng = [], []
        op_, np_ = Expr.const(1), Expr.const(1)
        # take size-1 axes on their own so they never block a match
        if i < len(old) and old[i] == 1 and not (j < len(new) and new[j] == 1):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(new) and new[j] == 1 and not (i < len(old) and old[i] == 1):
            groups.append(([], [j]))
            j += 1
            continue
        if i >= len(old) or j >= len(new):
            return None
        og.append(i)
        op_ = old[i]
        i += 1
        ng.append(j)
        np_ = new[j]
        j += 1
        while op_ != np_:
            if op_.is_const and np_.is_const:
                if op_.value < np_.value:
                    if i >= len(old):
                        return None
                    op_ = mul(op_, old[i])
                    og.append(i)
                    i += 1
                else:
                    if j >= len(new):
                        return None
                    np_ = mul(np_, new[j])
                    ng.append(j)
                    j += 1
            else:
                # symbolic: grow the side whose product does not yet contain the other
                if i < len(old) and (j >= len(new) or len(og) <= len(ng)):
                    op_ = mul(op_, old[i])
                    og.append(i)
                    i += 1
                elif j < len(new):
                    np_ = mul(np_, new[j])
                    ng.append(j)
                    j += 1
                else:
                    return None
        groups.append((og, ng))
    return groups
