"""Index arithmetic for fusion: where a view reads its source, per source axis.

Fusing a producer into its consumer means evaluating the producer at the element the
consumer's view reads. A view gives a flat position in the producer's row-major buffer; the
producer's own input views need per-axis indices. `source_axes` recovers them: directly for
permutes and broadcasts (no division), otherwise by unravelling the flat position, with the
validity mask narrowing the index ranges first so the simplifier can drop the divisions that
padding would otherwise leave behind.
"""

from __future__ import annotations

from collections.abc import Sequence

from luminal.shape import Shape, View, row_major_strides
from luminal.symbolic import Expr, add, mul


def flat_index(shape: Shape, axes: Sequence[Expr]) -> Expr:
    """Row-major flat position of per-axis index `axes` in a buffer of `shape`."""
    return add(*(mul(i, s) for i, s in zip(axes, row_major_strides(shape))))


def unravel(flat: Expr, shape: Shape) -> list[Expr]:
    """Per-axis indices of row-major position `flat` in `shape`."""
    if any(d == 0 for d in shape):  # an empty tensor: no position is ever read (nor a % 0)
        return [Expr.const(0)] * len(shape)
    out: list[Expr] = []
    stride = Expr.const(1)
    for k in range(len(shape) - 1, -1, -1):
        d = shape[k]
        if d == 1:
            out.append(Expr.const(0))
            continue
        q = flat // stride
        out.append(q if k == 0 else q % d)
        stride = mul(stride, d)
    return out[::-1]


def _groups(a: Shape, b: Shape) -> list[tuple[list[int], list[int]]] | None:
    """Consecutive axis groups of `a` and `b` with equal products (size-1 axes stand alone)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and a[i] == 1:
            groups.append(([i], []))
            i += 1
            continue
        if j < len(b) and b[j] == 1:
            groups.append(([], [j]))
            j += 1
            continue
        if i >= len(a) or j >= len(b):
            return None
        ga, gb, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if not (pa.is_const and pb.is_const):
                return None
            if pa.value < pb.value and i < len(a):
                ga.append(i)
                pa, i = mul(pa, a[i]), i + 1
            elif pb.value < pa.value and j < len(b):
                gb.append(j)
                pb, j = mul(pb, b[j]), j + 1
            else:
                return None
        groups.append((ga, gb))
    return groups


def _reshaped(view: View, src_shape: Shape, axes: Sequence[Expr]) -> list[Expr] | None:
    """Source indices when `view` permutes, broadcasts and reshapes the whole source (no
    slice, no pad): the view's axes, ordered by stride, then walk the source row-major, so the
    source index follows group by group, dividing only where a group splits or merges axes."""
    if view.mask is not None or view.offset != 0:
        return None
    remaining = [k for k, (d, s) in enumerate(zip(view.shape, view.strides))
                 if not (s == 0 or d == 1)]
    inner_first: list[int] = []
    stride = Expr.const(1)
    while remaining:
        found = [k for k in remaining if view.strides[k] == stride]
        if len(found) != 1:
            return None
        inner_first.append(found[0])
        remaining.remove(found[0])
        stride = mul(stride, view.shape[found[0]])
    order = inner_first[::-1]
    shape = tuple(view.shape[k] for k in order)
    groups = _groups(shape, tuple(src_shape))
    if groups is None:
        return None
    out = [Expr.const(0)] * len(src_shape)
    for ga, gb in groups:
        if not gb:
            continue
        flat = flat_index(tuple(shape[k] for k in ga), [axes[order[k]] for k in ga])
        for k, e in zip(gb, unravel(flat, tuple(src_shape[k] for k in gb))):
            out[k] = e
    return out


def _narrowed(view: View, axes: Sequence[Expr]) -> tuple[list[Expr], dict[str, Expr]]:
    """`axes` with plain variables swapped for copies whose range is the mask's valid range
    (so range-based simplification applies), and the map back to the original variables."""
    if view.mask is None:
        return list(axes), {}
    out, back = [], {}
    for k, (i, (lo, hi)) in enumerate(zip(axes, view.mask)):
        narrower = lo.is_const and hi.is_const and (lo.value > i.vmin or hi.value <= i.vmax)
        if i.op == "var" and narrower:
            lo_v, hi_v = max(lo.value, i.vmin), min(hi.value - 1, i.vmax)
            if lo_v <= hi_v:
                tmp = Expr.var(f"{i.name}_valid{k}", lo_v, hi_v)
                back[tmp.name] = i
                out.append(tmp)
                continue
        out.append(i)
    return out, back


def _boxed(view: View, src_shape: Shape, axes: Sequence[Expr]) -> list[Expr] | None:
    """Source indices when `view` reads a box of the source: every view axis that moves
    steps along one source axis with that axis's own stride (slices, pads, permutes,
    broadcasts; a concatenation's inputs), so source axis a is read at `start_a + axes[k]`
    with no division. The box (the mask's valid range) must lie inside the source. Concrete
    shapes only."""
    exprs = (*view.shape, *view.strides, view.offset, *src_shape)
    if not all(e.is_const for e in exprs):
        return None
    shape = [d.value for d in src_shape]
    rm = [s.value for s in row_major_strides(src_shape)]
    owner: dict[int, int] = {}  # source axis -> view axis
    for k, (d, st) in enumerate(zip(view.shape, view.strides)):
        if d.value == 1 or st.value == 0:
            continue
        a = next((a for a in range(len(shape)) if shape[a] != 1 and rm[a] == st.value), None)
        if a is None or a in owner:
            return None
        owner[a] = k
    lo = [0] * len(view.shape)
    hi = [d.value for d in view.shape]
    if view.mask is not None:
        lo = [m[0].value if m[0].is_const else None for m in view.mask]
        hi = [m[1].value if m[1].is_const else None for m in view.mask]
        if None in lo or None in hi:
            return None
    if any(h <= low for low, h in zip(lo, hi)):
        return None  # nothing valid: any index will do, but let the general path decide
    # the first valid element, unravelled, gives each source axis its start
    first = view.offset.value + sum(low * st.value for low, st in zip(lo, view.strides))
    if first < 0:
        return None
    out: list[Expr] = []
    for a in range(len(shape)):
        pos, first = divmod(first, rm[a])
        k = owner.get(a)
        if k is None:
            if not 0 <= pos < shape[a]:
                return None
            out.append(Expr.const(pos))
            continue
        if not (pos >= 0 and pos + hi[k] - 1 - lo[k] < shape[a]):
            return None
        out.append(axes[k] + (pos - lo[k]))
    return out


def source_axes(view: View, src_shape: Shape, axes: Sequence[Expr]) -> list[Expr]:
    """Per-axis indices into a source of `src_shape` that `view` reads at `axes`.

    Only meaningful where `view.valid(axes)` holds (padding reads no source element).
    """
    direct = _reshaped(view, src_shape, axes)
    if direct is None:
        direct = _boxed(view, src_shape, axes)
    if direct is not None:
        return direct
    narrowed, back = _narrowed(view, axes)
    out = unravel(view.index(narrowed), src_shape)
    return [e.substitute(back) for e in out] if back else out
