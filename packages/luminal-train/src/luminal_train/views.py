"""The adjoint of reading a buffer through a `View`.

Every edge of a luminal graph reads its producer's row-major buffer through a view, so the
gradient of a node's input arrives in the *view's* shape and has to be sent back to the
producer's buffer: each element of the view's gradient is added to the buffer position it was
read from, padding (masked) positions drop their gradient, and positions read several times
(broadcast axes, overlapping `unfold` windows) accumulate. `transpose_view` builds that
scatter-add from primitives only, with views wherever possible:

1. masked (padded) ranges are sliced away, broadcast (stride-0) axes are summed, size-1 axes
   dropped and negative strides (flips) turned into flipped views of the gradient;
2. fast paths: a permutation of the buffer is a permute + reshape, and a strided box inside it
   (slices, selects, permutes) is a permute + pad, all views;
3. anything else (steps, overlapping windows, reshapes of slices) is built axis by axis, from
   the smallest stride up, as a growing 1-D block: an axis whose stride clears the block so far
   is a pad + reshape; an axis that overlaps it adds its rows at shifted positions. With few
   rows (a kernel axis of a convolution: the col2im of its backward) that is a sum of padded
   views, one per row, which fuses into one elementwise kernel with plain affine indices; with
   few columns instead (a strided convolution's output axis) a sum over the columns, each
   spread out by the stride; otherwise a "skew": pad each row to the final extent and re-read
   the padded rows with a stride one step shorter, so that summing the rows adds every
   element at its shifted position (a reduction whose cost grows with the number of rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from luminal.shape import Shape, View, as_shape, row_major_strides
from luminal.symbolic import Expr, ExprLike, prod

if TYPE_CHECKING:
    from luminal import GraphTensor

# Stand-in value for symbolic dims when only an *order* of strides is needed.
_GUESS = 1 << 12

Dims = list[Expr]


def transpose_view(g: GraphTensor, view: View, src_shape: Sequence[ExprLike]) -> GraphTensor:
    """Scatter-add `g` (shaped like `view.shape`) into a row-major buffer of `src_shape`.

    This is the vector-Jacobian product of reading a buffer of `src_shape` through `view`.
    """
    src_shape = as_shape(src_shape)
    n_src = prod(src_shape)
    if view.is_contiguous and view.numel == n_src:
        return g.reshape(src_shape)
    g, sizes, strides, offset = _canonicalize(g, view)
    if any(d == 0 for d in sizes):  # the view reads nothing but padding
        return g.graph.full(src_shape, 0.0, g.dtype)
    out = _as_permutation(g, sizes, strides, offset, src_shape, n_src)
    if out is None:
        out = _as_box(g, sizes, strides, offset, src_shape)
    if out is None:
        out = _as_separable(g, sizes, strides, offset, src_shape)
    if out is None:
        out = _scatter_general(g, sizes, strides, offset, n_src).reshape(src_shape)
    return out


def _canonicalize(g: GraphTensor, view: View) -> tuple[GraphTensor, Dims, Dims, Expr]:
    """Reduce the view to distinct positive strides and sizes > 1, with no mask.

    Returns the matching gradient and the remaining view as (sizes, strides, offset).
    """
    offset = view.offset
    if view.mask is not None:
        # padding reads a constant 0: only the unmasked range reaches the buffer
        for k, (lo, hi) in enumerate(view.mask):
            if not (lo == 0 and hi == view.shape[k]):
                g = g._with_view(g.layout.slice(k, lo, hi))
                offset = offset + lo * view.strides[k]
    sizes = list(g.layout.shape)
    strides = list(view.strides)
    summed = [k for k, s in enumerate(strides) if s == 0 and sizes[k] != 1]
    if summed:
        g = g.sum(summed, keepdim=True)
        sizes = list(g.layout.shape)
    kept = [k for k in range(len(sizes)) if not (strides[k] == 0 or sizes[k] == 1)]
    if len(kept) != len(sizes):
        g = g.reshape([sizes[k] for k in kept])
        sizes = [sizes[k] for k in kept]
        strides = [strides[k] for k in kept]
    for k, s in enumerate(strides):
        if s.vmax < 0:  # a flipped axis: read it forwards instead
            g = g.flip(k)
            offset = offset + (sizes[k] - 1) * s
            strides[k] = -s
        elif s.vmin <= 0:
            raise NotImplementedError(f"gradient through a view whose stride {s} has no sign")
    return g, sizes, strides, offset


def _as_permutation(g: GraphTensor, sizes: Dims, strides: Dims, offset: Expr, src_shape: Shape,
                    n_src: Expr) -> GraphTensor | None:
    """Permute + reshape when the view reads every buffer element exactly once in some order
    (works for symbolic dims: strides are matched by expression equality)."""
    if offset != 0:
        return None
    chain: list[int] = []  # axes from the innermost (stride 1) outwards
    expect = Expr.const(1)
    remaining = list(range(len(sizes)))
    while remaining:
        k = next((k for k in remaining if strides[k] == expect), None)
        if k is None:
            return None
        chain.append(k)
        remaining.remove(k)
        expect = expect * sizes[k]
    if expect != n_src:
        return None
    return g.permute(list(reversed(chain))).reshape(src_shape)


def _as_box(g: GraphTensor, sizes: Dims, strides: Dims, offset: Expr,
            src_shape: Shape) -> GraphTensor | None:
    """Permute + pad when the view reads a box of the buffer (one view axis per buffer axis,
    unit steps): slices, integer selects and their permutations. Concrete shapes only."""
    exprs = (*sizes, *strides, offset, *src_shape)
    if not all(e.is_const for e in exprs):
        return None
    sizes_i = [e.value for e in sizes]
    shape_i = [e.value for e in src_shape]
    rm = [e.value for e in row_major_strides(src_shape)]
    owner: dict[int, int] = {}  # buffer axis -> view axis
    for k, s in enumerate(strides):
        axis = next((a for a in range(len(shape_i)) if rm[a] == s.value and shape_i[a] != 1
                     and a not in owner), None)
        if axis is None:
            return None
        owner[axis] = k
    starts = _axis_starts(offset.value, shape_i, rm)
    if starts is None:
        return None
    for a, n in enumerate(shape_i):
        length = sizes_i[owner[a]] if a in owner else 1
        if starts[a] + length > n:
            return None
    out = g.permute([owner[a] for a in sorted(owner)])
    out = out.reshape([sizes_i[owner[a]] if a in owner else 1 for a in range(len(shape_i))])
    pads: list[int] = []
    for a in reversed(range(len(shape_i))):
        length = sizes_i[owner[a]] if a in owner else 1
        pads += [starts[a], shape_i[a] - starts[a] - length]
    return out.pad(pads) if any(pads) else out


def _axis_starts(offset: int, shape: list[int], row_major: list[int]) -> list[int] | None:
    """The position along each buffer axis where a flat `offset` lies, or None when it is
    not a whole position (or lies before the buffer)."""
    starts, rem = [], offset
    for n, stride in zip(shape, row_major):
        starts.append(rem // stride if n != 1 else 0)
        rem -= starts[-1] * stride
    return starts if rem == 0 and min(starts, default=0) >= 0 else None


def _guess(e: Expr) -> int:
    return e.evaluate(dict.fromkeys(e.free_vars, _GUESS))


def _as_separable(g: GraphTensor, sizes: Dims, strides: Dims, offset: Expr,
                  src_shape: Shape) -> GraphTensor | None:
    """The scatter done one buffer axis at a time, when every view axis walks within one
    buffer axis (a convolution's or a pool's windows: output and kernel positions both along
    the same spatial axis): each buffer axis then gets its own 1-D scatter (`_scatter_line`),
    with the other axes along for the ride, and no index ever crosses an axis boundary.
    Concrete shapes only."""
    exprs = (*sizes, *strides, offset, *src_shape)
    if not all(e.is_const for e in exprs):
        return None
    shape_i = [e.value for e in src_shape]
    rm = [e.value for e in row_major_strides(src_shape)]
    owned: list[list[int]] = [[] for _ in shape_i]
    steps: dict[int, int] = {}
    for k, s in enumerate(strides):
        fits = [a for a in range(len(shape_i))
                if shape_i[a] != 1 and rm[a] <= s.value and s.value % rm[a] == 0]
        if not fits:
            return None
        a = max(fits, key=lambda a: rm[a])
        owned[a].append(k)
        steps[k] = s.value // rm[a]
    starts = _axis_starts(offset.value, shape_i, rm)
    if starts is None:
        return None
    for a, n in enumerate(shape_i):
        reach = sum((sizes[k].value - 1) * steps[k] for k in owned[a])
        if starts[a] + reach >= n:
            return None
    # group the view axes by buffer axis, in buffer order; then, one group at a time, move
    # the group from the front to the back and replace it by its buffer axis
    out = g.permute([k for group in owned for k in group])
    terms = 1
    for a, group in enumerate(owned):
        width = len(group)
        rest = out.ndim - width
        out = out.permute([*range(width, out.ndim), *range(width)])
        if group:
            out, extent, terms = _scatter_line(out, [sizes[k] for k in group],
                                               [Expr.const(steps[k]) for k in group], terms)
        else:
            out, extent = out.unsqueeze(rest), Expr.const(1)
        out = out._pad_axis(rest, starts[a], shape_i[a] - starts[a] - extent)
    return out


def _scatter_general(g: GraphTensor, sizes: Dims, strides: Dims, offset: Expr,
                     n_src: Expr) -> GraphTensor:
    """The flat buffer (n_src,) receiving `g`: positions offset + sum(i_k * stride_k)."""
    block, extent, _ = _scatter_line(g, sizes, strides, 1)
    return block._pad_axis(0, offset, n_src - offset - extent)


def _scatter_line(t: GraphTensor, sizes: Dims, strides: Dims,
                  terms: int) -> tuple[GraphTensor, Expr, int]:
    """(*outer, *axes) -> (*outer, extent): the last len(sizes) axes of `t` added into one
    line at positions sum(i_k * stride_k), built axis by axis from the smallest stride up.
    `terms` counts the loads per output element that shifted sums have cost so far."""
    n_outer = t.ndim - len(sizes)
    order = sorted(range(len(sizes)), key=lambda k: (_guess(strides[k]), -_guess(sizes[k])))
    block = t.permute([*range(n_outer), *(n_outer + k for k in reversed(order))])
    block = block.reshape((*block.layout.shape, 1))  # (*outer, *axes outermost first, extent)
    extent = Expr.const(1)
    for k in order:  # innermost first; the axis being merged is always second to last
        n, s = sizes[k], strides[k]
        last = block.ndim - 1
        new_extent = (n - 1) * s + extent
        if (s - extent).vmin >= 0:
            # the axis steps over the whole block: lay the rows out s apart
            block = block._pad_axis(last, 0, s - extent).flatten(-2)
            if new_extent != n * s:
                block = block._with_view(block.layout.slice(last - 1, 0, new_extent))
        elif n.is_const and terms * n.value <= MAX_SHIFTED_TERMS:
            block = _shifted_rows(block, n.value, s, extent)
            terms *= n.value
        elif extent.is_const and terms * extent.value <= MAX_SHIFTED_TERMS:
            block = _dilated_columns(block, n, s, extent.value)
            terms *= extent.value
        else:
            # rows overlap: pad every row to the final extent q, then read row r from
            # position r * (q - s) of the padded buffer, i.e. shifted right by r * s
            padded = block._pad_axis(last, 0, new_extent - extent).contiguous()
            shape = padded.layout.shape
            skew = View(
                shape,
                (*row_major_strides(shape)[:-2], new_extent - s, Expr.const(1)),
                Expr.const(0),
            )
            block = padded._with_view(skew).sum(-2)
        extent = new_extent
    return block, extent, terms


# Most loads per output element that overlapping axes may add up to as sums of shifted views
# (a 3x3 convolution's col2im takes 9); beyond it, the skew (a reduction) takes over.
MAX_SHIFTED_TERMS = 64


def _total(parts: list[GraphTensor]) -> GraphTensor:
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def _shifted_rows(block: GraphTensor, n: int, s: Expr, extent: Expr) -> GraphTensor:
    """(*outer, n, extent) -> (*outer, (n-1)*s + extent): row r added at offset r*s, as a sum
    of n padded views (a few rows, e.g. a kernel axis: no index division, no reduction)."""
    last = block.ndim - 1
    parts = []
    for r in range(n):
        row = block._slice_axis(last - 1, r, r + 1).squeeze(last - 1)
        parts.append(row._pad_axis(last - 1, r * s, (n - 1 - r) * s))
    return _total(parts)


def _dilated_columns(block: GraphTensor, n: Expr, s: Expr, extent: int) -> GraphTensor:
    """The same sum taken over the block's few columns instead of its many rows: column j,
    spread s apart (a strided convolution's output axis), added at offset j."""
    last = block.ndim - 1
    span = (n - 1) * s + 1
    parts = []
    for j in range(extent):
        col = block._slice_axis(last, j, j + 1)  # (*outer, n, 1)
        col = col._pad_axis(last, 0, s - 1).flatten(-2)  # (*outer, n*s): rows s apart
        col = col._with_view(col.layout.slice(last - 1, 0, span))
        parts.append(col._pad_axis(last - 1, j, extent - 1 - j))
    return _total(parts)
