"""Movement ops: view changes (no data moves) and the few that need `Contiguous` or arithmetic
(cat is pad + add, gather is one-hot + sum)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import ops
from ..dtypes import DType, bool_, int32, promote
from ..errors import OpError
from ..shape import show_shape
from ..symbolic import Expr, ExprLike, lt, smax, smin, to_expr
from .base import TensorBase

if TYPE_CHECKING:
    from ..tensor import GraphTensor


def broadcast_shape(name: str, a, b) -> tuple[Expr, ...]:
    a, b = tuple(map(to_expr, a)), tuple(map(to_expr, b))
    n = max(len(a), len(b))
    a = (Expr.const(1),) * (n - len(a)) + a
    b = (Expr.const(1),) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise OpError(f"{name}: shapes {show_shape(a)} and {show_shape(b)} do not broadcast")
    return tuple(out)


def broadcast_to(t: GraphTensor, shape) -> GraphTensor:
    """View `t` at `shape` (PyTorch broadcasting: prepend 1s, expand size-1 axes)."""
    shape = tuple(map(to_expr, shape))
    if tuple(t.layout.shape) == shape:
        return t
    if t.ndim > len(shape):
        raise OpError(f"cannot broadcast {show_shape(t.layout.shape)} to {show_shape(shape)}")
    lead = len(shape) - t.ndim
    if lead:
        t = t.reshape((1,) * lead + tuple(t.layout.shape))
    broadcast_shape("expand", t.layout.shape, shape)
    return t._with_view(t.layout.expand(shape))


def _axis(dim: int, ndim: int, what: str = "dim") -> int:
    if not -max(ndim, 1) <= dim < max(ndim, 1):  # a 0-d tensor takes dim 0 or -1
        raise IndexError(f"{what} {dim} is out of range for a tensor with {ndim} dims")
    return dim % max(ndim, 1)


def _sizes(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def cat(tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    """Concatenate along `dim` (PyTorch `torch.cat`): each input padded into place, summed."""
    tensors = list(tensors)
    if not tensors:
        raise OpError("cat: expected a non-empty list of tensors")
    first = tensors[0]
    axis = _axis(dim, first.ndim)
    for t in tensors[1:]:
        ok = t.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(t.layout.shape, first.layout.shape)) if i != axis
        )
        if not ok:
            raise OpError(
                f"cat: shapes {show_shape(first.layout.shape)} and {show_shape(t.layout.shape)} "
                f"differ outside dim {dim}"
            )
    if len(tensors) == 1:
        return first
    dtype = first.dtype
    for t in tensors[1:]:
        dtype = promote(dtype, t.dtype)
    total = to_expr(0)
    for t in tensors:
        total = total + t.layout.shape[axis]
    before = to_expr(0)
    out = None
    for t in tensors:
        after = total - before - t.layout.shape[axis]
        padded = t.to(dtype)._pad_axis(axis, before, after)
        out = padded if out is None else out + padded
        before = before + t.layout.shape[axis]
    return out


def meshgrid(*tensors: GraphTensor, indexing: str = "ij") -> tuple[GraphTensor, ...]:
    """`torch.meshgrid`: 0-d or 1-D tensors broadcast to a grid (expanded views, no copy);
    indexing "xy" swaps the first two axes as NumPy does."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if not tensors:
        raise RuntimeError("meshgrid: expects a non-empty list of tensors")
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if any(t.ndim > 1 for t in tensors):
        raise RuntimeError("meshgrid: expects 0-D or 1-D tensors")
    flat = [t.reshape(-1) for t in tensors]
    order = list(range(len(flat)))
    if indexing == "xy" and len(flat) > 1:
        order[0], order[1] = 1, 0
    shape = tuple(flat[k].layout.shape[0] for k in order)
    out = []
    for k, t in enumerate(flat):
        axis = order.index(k)
        view = [1] * len(flat)
        view[axis] = t.layout.shape[0]
        out.append(t.reshape(view).expand(shape))
    return tuple(out)


def stack(tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    tensors = list(tensors)
    if not tensors:
        raise OpError("stack: expected a non-empty list of tensors")
    axis = _axis(dim, tensors[0].ndim + 1)
    for t in tensors[1:]:
        if tuple(t.layout.shape) != tuple(tensors[0].layout.shape):
            raise OpError(
                f"stack: shapes {show_shape(tensors[0].layout.shape)} and "
                f"{show_shape(t.layout.shape)} differ"
            )
    return cat([t.unsqueeze(axis) for t in tensors], dim=axis)


class MovementOps:
    # ----- pure views ---------------------------------------------------------------------
    def reshape(self, *shape) -> GraphTensor:
        """A new shape with the same elements; one dim may be -1. A view when the strides
        allow it, otherwise the data is made contiguous first."""
        shape = list(_sizes(shape))
        numel = self.layout.numel
        if sum(1 for d in shape if isinstance(d, int) and d == -1) > 1:
            raise OpError(f"reshape: only one dim can be -1 in {tuple(shape)}")
        if -1 in [d for d in shape if isinstance(d, int)]:
            known = to_expr(1)
            for d in shape:
                if not (isinstance(d, int) and d == -1):
                    known = known * to_expr(d)
            inferred = numel // known
            if not inferred * known == numel:
                raise OpError(
                    f"reshape: cannot view {show_shape(self.layout.shape)} as {tuple(shape)}"
                )
            shape = [inferred if isinstance(d, int) and d == -1 else d for d in shape]
        new = tuple(map(to_expr, shape))
        total = to_expr(1)
        for d in new:
            total = total * d
        if not total == numel:
            raise OpError(
                f"reshape: shape {show_shape(self.layout.shape)} ({numel} elements) cannot "
                f"become {show_shape(new)} ({total} elements)"
            )
        if tuple(new) == tuple(self.layout.shape):
            return self
        view = self.layout.reshape(new)
        if view is None:
            base = self.contiguous()
            view = base.layout.reshape(new)
            return base._with_view(view)
        return self._with_view(view)

    def view_as(self, other: GraphTensor) -> GraphTensor:
        return self.reshape(other.layout.shape)

    def view(self, *shape) -> GraphTensor:
        """PyTorch `view(shape)`; `view(dtype)` (a bitcast) is not supported."""
        if len(shape) == 1 and isinstance(shape[0], DType):
            raise TypeError(f"view({shape[0]!r}): reinterpreting the bits of a tensor as "
                            f"another dtype (bitcast) is not supported; use .to() to convert")
        return self.reshape(*shape)

    def permute(self, *dims) -> GraphTensor:
        dims = [_axis(d, self.ndim) for d in _sizes(dims)]
        if sorted(dims) != list(range(self.ndim)):
            raise OpError(
                f"permute: {tuple(dims)} is not a permutation of the dims of a tensor with "
                f"shape {show_shape(self.layout.shape)}"
            )
        return self._with_view(self.layout.permute(dims))

    def transpose(self, dim0: int, dim1: int) -> GraphTensor:
        perm = list(range(self.ndim))
        a, b = _axis(dim0, self.ndim), _axis(dim1, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(perm)

    def t(self) -> GraphTensor:
        if self.ndim > 2:
            raise OpError(f"t() expects a tensor with <= 2 dims, got {self.ndim}")
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self) -> GraphTensor:
        return self.permute(list(reversed(range(self.ndim))))

    @property
    def mT(self) -> GraphTensor:
        return self.transpose(-2, -1)

    def movedim(self, source: int, destination: int) -> GraphTensor:
        src, dst = _axis(source, self.ndim), _axis(destination, self.ndim)
        order = [i for i in range(self.ndim) if i != src]
        order.insert(dst, src)
        return self.permute(order)

    def expand(self, *sizes) -> GraphTensor:
        sizes = list(_sizes(sizes))
        if len(sizes) < self.ndim:
            raise OpError(
                f"expand: {tuple(sizes)} has fewer dims than {show_shape(self.layout.shape)}"
            )
        lead = len(sizes) - self.ndim
        cur = (to_expr(1),) * lead + tuple(self.layout.shape)
        target = []
        for i, s in enumerate(sizes):
            if isinstance(s, int) and s == -1:
                if i < lead:
                    raise OpError("expand: -1 is not allowed for new leading dims")
                target.append(cur[i])
            else:
                s = to_expr(s)
                if not (cur[i] == s or cur[i] == 1):
                    raise OpError(
                        f"expand: cannot expand shape {show_shape(self.layout.shape)} to "
                        f"{show_shape([to_expr(x) for x in sizes])}"
                    )
                target.append(s)
        return broadcast_to(self, target)

    def expand_as(self, other: GraphTensor) -> GraphTensor:
        return self.expand(other.layout.shape)

    def broadcast_to(self, shape) -> GraphTensor:
        return self.expand(*shape)

    def unsqueeze(self, dim: int) -> GraphTensor:
        axis = _axis(dim, self.ndim + 1)
        shape = list(self.layout.shape)
        shape.insert(axis, to_expr(1))
        return self.reshape(shape)

    def squeeze(self, dim: int | Sequence[int] | None = None) -> GraphTensor:
        if dim is None:
            axes = {i for i, d in enumerate(self.layout.shape) if d == 1}
        else:
            dims = [dim] if isinstance(dim, int) else dim
            axes = {a for a in (_axis(d, self.ndim) for d in dims)
                    if self.ndim and self.layout.shape[a] == 1}  # a 0-d tensor stays as is
        return self.reshape([d for i, d in enumerate(self.layout.shape) if i not in axes])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> GraphTensor:
        if self.ndim == 0:
            return self.reshape(1)
        a, b = _axis(start_dim, self.ndim), _axis(end_dim, self.ndim)
        shape = list(self.layout.shape)
        merged = to_expr(1)
        for d in shape[a : b + 1]:
            merged = merged * d
        return self.reshape([*shape[:a], merged, *shape[b + 1:]])

    def unflatten(self, dim: int, sizes: Sequence[int]) -> GraphTensor:
        a = _axis(dim, self.ndim)
        shape = list(self.layout.shape)
        return self.reshape(shape[:a] + list(sizes) + shape[a + 1 :])

    def _slice_axis(self, axis: int, start, stop, step: int = 1) -> GraphTensor:
        """Python slice semantics (clamped, negative indices from the end) on one axis."""
        n = self.layout.shape[axis]
        if step == 0:
            raise OpError("slice step cannot be zero")

        def norm(i, default):
            if i is None:
                return default
            i = to_expr(i)
            if i.is_const and i.value < 0:
                i = n + i
            return i

        if step > 0:
            lo = smin(smax(norm(start, to_expr(0)), 0), n)
            hi = smin(smax(norm(stop, n), lo), n)
        else:
            lo = smin(smax(norm(start, n - 1), -1), n - 1)
            hi = smin(smax(norm(stop, to_expr(-1)), -1), lo)
        view = self.layout
        if view.axis_masked(axis) and step != 1:
            base = self.contiguous()
            return base._with_view(base.layout.slice(axis, lo, hi, step))
        return self._with_view(view.slice(axis, lo, hi, step))

    def narrow(self, dim: int, start: ExprLike, length: ExprLike) -> GraphTensor:
        a = _axis(dim, self.ndim)
        return self._slice_axis(a, start, to_expr(start) + to_expr(length))

    def __getitem__(self, index) -> GraphTensor:
        """PyTorch indexing: ints, slices, None, Ellipsis, and advanced indices (integer
        tensors, lists, tuples) that broadcast together; their dims go where the advanced
        indices stand when they are adjacent, else first. Advanced indices pick exactly
        (`index_select`), negative values count from the end."""
        if not isinstance(index, tuple):
            index = (index,)
        index = tuple(_as_index_tensor(self, i) for i in index)
        n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis")
        if n_real > self.ndim:
            raise IndexError(
                f"too many indices ({n_real}) for a tensor of shape {show_shape(self.layout.shape)}"
            )
        expanded: list = []
        for i in index:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(i)
        out = self
        axis = 0
        drop: list[int] = []
        advanced: list[tuple[int, GraphTensor]] = []
        for i in expanded:
            if i is None:
                out = out.unsqueeze(axis)
                axis += 1
            elif isinstance(i, slice):
                if axis < out.ndim:
                    out = out._slice_axis(axis, i.start, i.stop, 1 if i.step is None else i.step)
                axis += 1
            elif isinstance(i, TensorBase):
                if i.dtype == bool_:
                    raise IndexError(
                        "boolean mask indexing has a data-dependent shape, which a luminal "
                        "graph cannot have: use where(mask, x, 0) instead")
                if i.dtype.is_float:
                    raise IndexError(f"tensors used as indices must be integer, got {i.dtype.name}")
                advanced.append((axis, i))
                axis += 1
            else:
                size = out.layout.shape[axis]
                k = to_expr(i)
                if k.is_const and k.value < 0:
                    k = size + k
                if size.is_const and k.is_const and not 0 <= k.value < size.value:
                    raise IndexError(
                        f"index {i} is out of bounds for dim {axis} with size {size.value}"
                    )
                # an integer index is in range (checked above when static): no clamping, so
                # the axis has size exactly 1 even when its size is symbolic
                out = out._with_view(out.layout.slice(axis, k, k + 1))
                drop.append(axis)
                axis += 1
        if drop:
            shape = [d for a, d in enumerate(out.layout.shape) if a not in drop]
            out = out.reshape(shape)
            advanced = [(a - sum(1 for d in drop if d < a), t) for a, t in advanced]
        return _advanced_index(out, advanced) if advanced else out

    def _pad_axis(self, axis: int, before: ExprLike, after: ExprLike) -> GraphTensor:
        before, after = to_expr(before), to_expr(after)
        if before == 0 and after == 0:
            return self
        return self._with_view(self.layout.pad(axis, before, after))

    def pad(self, pad: Sequence[int], mode: str = "constant", value: float = 0.0):
        """PyTorch `F.pad`: pairs (left, right) from the last dim backwards; negative pads
        crop. Modes constant (with `value`), reflect, replicate and circular."""
        if len(pad) % 2 or len(pad) // 2 > self.ndim:
            raise OpError(f"pad: {tuple(pad)} must hold a (left, right) pair per padded dim")
        if mode != "constant":
            return _pad_from_edges(self, pad, mode)
        out = self
        for k in range(len(pad) // 2):
            axis = self.ndim - 1 - k
            left, right = pad[2 * k], pad[2 * k + 1]
            if (isinstance(left, int) and left < 0) or (isinstance(right, int) and right < 0):
                n = out.layout.shape[axis]
                out = out._slice_axis(axis, max(-left, 0) if isinstance(left, int) else 0,
                                      n - max(-right, 0) if isinstance(right, int) else n)
                left = max(left, 0) if isinstance(left, int) else left
                right = max(right, 0) if isinstance(right, int) else right
            out = out._pad_axis(axis, left, right)
        if value != 0:
            inside = self.graph.constant(True, bool_).expand(self.layout.shape).pad(pad)
            out = out.where(inside, value)
        return out

    def clone(self) -> GraphTensor:
        """A copy in a fresh buffer (PyTorch `clone`); gradients flow through it."""
        return self.contiguous()

    def detach(self) -> GraphTensor:
        """The same values, cut from autograd: a copy marked so that no gradient flows back
        through it (luminal-train's `grad` treats it as a constant)."""
        out = self.contiguous()
        out.node.meta["detach"] = True
        return out

    def flip(self, *dims) -> GraphTensor:
        axes = [_axis(d, self.ndim) for d in _sizes(dims)]
        if len(set(axes)) != len(axes):
            raise OpError(f"flip: dims {tuple(_sizes(dims))} name a dim more than once")
        out = self
        for a in axes:
            out = out._slice_axis(a, None, None, -1)
        return out

    def roll(self, shifts, dims=None) -> GraphTensor:
        """PyTorch `roll`: without `dims` the flattened tensor rolls and keeps its shape;
        `shifts` and `dims` may be tuples (one roll per pair)."""
        if dims is None and isinstance(shifts, (tuple, list)) and len(shifts) == 1:
            shifts = shifts[0]
        if dims is None:
            if not isinstance(shifts, int):
                raise RuntimeError("roll: without dims, shifts must be a single int")
            return self.flatten().roll(shifts, 0).reshape(self.layout.shape)
        if isinstance(shifts, (tuple, list)) or isinstance(dims, (tuple, list)):
            shifts = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
            dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
            if len(shifts) != len(dims):
                raise RuntimeError(f"roll: shifts {shifts} and dims {dims} differ in length")
            out = self
            for s, d in zip(shifts, dims):
                out = out.roll(s, d)
            return out
        dim = dims
        a = _axis(dim, self.ndim)
        n = self.layout.shape[a]
        if not n.is_const:
            raise OpError(f"roll: dim {dim} has the symbolic size {n}; roll needs a static "
                             f"size on the rolled dim")
        s = shifts % n.value if n.value else 0
        if s == 0:
            return self
        return cat([self._slice_axis(a, n.value - s, None), self._slice_axis(a, 0, n.value - s)], a)

    def repeat(self, *sizes) -> GraphTensor:
        """Tile the tensor (PyTorch `Tensor.repeat`)."""
        sizes = _sizes(sizes)
        if len(sizes) < self.ndim:
            raise OpError(f"repeat: needs at least {self.ndim} sizes, got {len(sizes)}")
        x = self.reshape((1,) * (len(sizes) - self.ndim) + tuple(self.layout.shape))
        shape = list(x.layout.shape)
        inter = []
        for d in shape:
            inter += [to_expr(1), d]
        x = x.reshape(inter)
        target = []
        for r, d in zip(sizes, shape):
            target += [to_expr(r), d]
        x = x.expand(target)
        return x.reshape([to_expr(r) * d for r, d in zip(sizes, shape)])

    def repeat_interleave(self, repeats: int, dim: int | None = None) -> GraphTensor:
        """Each element `repeats` times along `dim` (without `dim`: of the flattened tensor)."""
        if not isinstance(repeats, int):
            raise NotImplementedError(
                "repeat_interleave: only an int repeats is supported (a tensor of repeats "
                "gives a data-dependent shape)")
        if dim is None:
            return self.flatten().repeat_interleave(repeats, 0)
        a = _axis(dim, self.ndim)
        x = self.unsqueeze(a + 1)
        shape = list(x.layout.shape)
        shape[a + 1] = to_expr(repeats)
        return x.expand(shape).flatten(a, a + 1)

    def unfold(self, dimension: int, size: int, step: int) -> GraphTensor:
        """Sliding windows as a view (PyTorch `Tensor.unfold`)."""
        a = _axis(dimension, self.ndim)
        n = self.layout.shape[a] if self.ndim else to_expr(1)
        k = to_expr(size)  # a window size may be symbolic (cumsum's is the dim itself)
        if step <= 0 or (k.is_const and (k.value < 0 or (n.is_const and k.value > n.value))):
            raise OpError(f"unfold: size {size} and step {step} do not fit dim {dimension} of "
                          f"{show_shape(self.layout.shape)} (need 0 <= size <= {n}, step > 0)")
        x = self.contiguous() if self.layout.axis_masked(a) else self
        return x._with_view(x.layout.unfold(a, size, step))

    def split(self, split_size_or_sections, dim: int = 0) -> list[GraphTensor]:
        a = _axis(dim, self.ndim)
        n = self.layout.shape[a]
        if isinstance(split_size_or_sections, int):
            if not n.is_const:
                raise OpError(
                    f"split({split_size_or_sections}, dim={dim}): dim {dim} has the symbolic "
                    f"size {n}, so the number of pieces is unknown at build time; pass the "
                    f"section sizes instead (split([a, b, ...], dim))"
                )
            step = split_size_or_sections
            sizes = [min(step, n.value - i) for i in range(0, n.value, step)]
        else:
            sizes = list(split_size_or_sections)
            total = sum(sizes)
            if n.is_const and total != n.value:
                raise OpError(f"split: sections {sizes} do not sum to the dim size {n.value}")
        out, start = [], 0
        for s in sizes:
            out.append(self._slice_axis(a, start, start + s))
            start += s
        return out

    def chunk(self, chunks: int, dim: int = 0) -> list[GraphTensor]:
        a = _axis(dim, self.ndim)
        n = self.layout.shape[a]
        if not n.is_const:
            raise OpError(
                f"chunk({chunks}, dim={dim}): dim {dim} has the symbolic size {n}, so the chunk "
                f"sizes are unknown at build time; use split([a, b, ...], dim) with explicit "
                f"sizes, or narrow()"
            )
        step = -(-n.value // chunks)
        return self.split(step, a)

    # ----- data-dependent indexing (one-hot) ----------------------------------------------
    def index_select(self, dim: int, index: GraphTensor) -> GraphTensor:
        """Rows of `dim` picked by the 1-D int tensor `index` (one-hot matmul; backends turn
        it into a gather)."""
        a = _axis(dim, self.ndim)
        if index.ndim != 1:
            raise OpError(
                f"index_select: index must be 1-D, got {show_shape(index.layout.shape)}"
            )
        n = self.layout.shape[a]
        check_ids(index, n)
        onehot = one_hot_mask(index, n)  # (k, n)
        moved = self.movedim(a, -1).unsqueeze(-2)  # (..., 1, n)
        return _pick(onehot, moved).movedim(-1, a)  # (..., k) moved back

    def gather(self, dim: int, index: GraphTensor) -> GraphTensor:
        """PyTorch `torch.gather`: out[i][j] = self[i][index[i][j]] for dim=1, etc."""
        a = _axis(dim, self.ndim)
        if index.ndim != self.ndim:
            raise OpError(
                f"gather: index {show_shape(index.layout.shape)} and input "
                f"{show_shape(self.layout.shape)} need the same number of dims"
            )
        x = self
        for ax, (di, dx) in enumerate(zip(index.layout.shape, self.layout.shape)):
            if ax != a and di.is_const and dx.is_const and di.value > dx.value:
                raise OpError(f"gather: index {show_shape(index.layout.shape)} is larger than "
                              f"input {show_shape(self.layout.shape)} in dim {ax}")
            if ax != a and di != dx:
                x = x._slice_axis(ax, 0, di)
        n = self.layout.shape[a]
        check_ids(index, n)
        onehot = one_hot_mask(index, n)  # index.shape + (n,)
        xs = x.movedim(a, -1).unsqueeze(a)  # shape with 1 at a, n last
        return _pick(onehot, xs)

    def tril(self, diagonal: int = 0) -> GraphTensor:
        return self.where(_tri_mask(self, diagonal, lower=True), self.graph.constant(
            0, self.dtype))

    def triu(self, diagonal: int = 0) -> GraphTensor:
        return self.where(_tri_mask(self, diagonal, lower=False), self.graph.constant(
            0, self.dtype))


def _as_index_tensor(x: GraphTensor, i):
    """A list or tuple inside an index becomes an int32 index tensor (bound data)."""
    if not isinstance(i, (list, tuple)):
        return i
    import numpy as np

    arr = np.asarray(i)
    if arr.dtype == bool:
        raise IndexError("boolean list indices have a data-dependent shape: use where()")
    if arr.size and arr.dtype.kind not in "iu":
        raise IndexError(f"list indices must be integers, got {i!r}")
    arr = arr.astype(np.int32)
    return x.graph.tensor(arr.shape, dtype=int32).set(arr)


def _advanced_index(x: GraphTensor, advanced: list) -> GraphTensor:
    """x indexed at its axes `advanced` [(axis, int tensor)]: the index tensors broadcast to
    B, and each output element picks x at the flat position those indices name."""
    axes = [a for a, _ in advanced]
    shape = ()
    for _, t in advanced:
        shape = broadcast_shape("index", shape, t.layout.shape)
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = x.permute(axes + rest)
    sizes = [x.layout.shape[a] for a in axes]
    flat = None
    for (_, t), n in zip(advanced, sizes):
        t = broadcast_to(t.to(int32), shape)
        t = (t + n).where(t < 0, t)  # negative indices count from the end
        flat = t if flat is None else flat * n + t
    total = sizes[0]
    for n in sizes[1:]:
        total = total * n
    table = moved.reshape((total, *[x.layout.shape[a] for a in rest]))
    out = table.index_select(0, flat.reshape(-1)).reshape((*shape, *table.layout.shape[1:]))
    if axes == list(range(axes[0], axes[0] + len(axes))) and axes[0] > 0:
        b, first = len(shape), axes[0]  # adjacent: the index dims go where they stood
        order = list(range(b, b + first)) + list(range(b)) + list(range(b + first, out.ndim))
        out = out.permute(order)
    return out


def _pad_from_edges(x: GraphTensor, pad: Sequence[int], mode: str) -> GraphTensor:
    """Reflect, replicate or circular padding: each padded dim is a cat of slices of x."""
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(
            f"pad: mode {mode!r} is not supported (constant, reflect, replicate, circular)")
    # negative pads crop: first for circular, last for reflect and replicate (whose positive
    # pads read the uncropped input), as in PyTorch
    crop = [min(p, 0) for p in pad]
    crop_first = mode == "circular" and any(crop)
    out = x.pad(crop) if crop_first else x
    for k in range(len(pad) // 2):
        axis = x.ndim - 1 - k
        left, right = max(pad[2 * k], 0), max(pad[2 * k + 1], 0)
        n = out.layout.shape[axis]
        n = n.value if n.is_const else None
        if n is None:
            raise OpError(f"pad: mode {mode!r} needs a static size on dim {axis}, got "
                          f"{show_shape(out.layout.shape)}")
        limit = n - 1 if mode == "reflect" else n
        if mode != "replicate" and (left > limit or right > limit):
            raise RuntimeError(f"pad: {mode} padding ({left}, {right}) must be below the size "
                               f"{n} of dim {axis}")
        if mode == "reflect":
            if not left and not right:  # (with n == 1, n - 2 below would wrap to the end)
                continue
            stop = n - 2 - right  # a negative stop would count from the end: none instead
            parts = [out._slice_axis(axis, left, 0, -1), out,
                     out._slice_axis(axis, n - 2, stop if stop >= 0 else None, -1)]
        elif mode == "replicate":
            edge = list(out.layout.shape)
            lo, hi = out._slice_axis(axis, 0, 1), out._slice_axis(axis, n - 1, n)
            parts = [lo.expand([left if i == axis else d for i, d in enumerate(edge)]), out,
                     hi.expand([right if i == axis else d for i, d in enumerate(edge)])]
        else:
            parts = [out._slice_axis(axis, n - left, n), out, out._slice_axis(axis, 0, right)]
        out = cat([p for p in parts if p.layout.shape[axis] != 0], axis)
    return out.pad(crop) if any(crop) and not crop_first else out


def check_ids(index: GraphTensor, n: Expr) -> None:
    """Record that ids `index` pick among `n` (embedding, gather, index_select, one_hot): when
    they are a graph input (or its cast), the reference backend raises IndexError for ids
    outside [0, n). Compiled backends do not check: an id outside picks nothing (a zero row or
    value, never a read out of bounds). Computed ids are not checked (losses map an ignored
    target to a safe id before they gather)."""
    source = index.node
    if isinstance(source.op, ops.Cast) and len(source.inputs) == 1:
        source = index.graph.nodes[source.inputs[0].src]
    if isinstance(source.op, ops.Input):
        index.graph.index_bounds.setdefault(source.id, []).append(n)


def one_hot_mask(index: GraphTensor, n: Expr) -> GraphTensor:
    """(index == arange(n)) with a trailing axis of size n, as bool."""
    from .creation import IOTA_INDEX, iota

    idx = index.to(int32).unsqueeze(-1)
    ar = iota(index.graph, IOTA_INDEX, (n,), int32)
    shape = (*index.layout.shape, n)
    return idx.expand(shape) == ar.expand(shape)


def _pick(onehot: GraphTensor, values: GraphTensor) -> GraphTensor:
    """sum over the last axis of where(onehot, values, 0): the one value each row of the
    one-hot selects, exactly (inf and NaN elsewhere in `values` never reach it). Device
    compilers turn it into a gather."""
    return values.where(onehot, values.graph.constant(0, values.dtype)).sum(-1)


def _tri_mask(x: GraphTensor, k: int, lower: bool) -> GraphTensor:
    from .creation import IOTA_INDEX, iota

    if x.ndim < 2:
        raise OpError(f"tril/triu expect at least 2 dims, got {show_shape(x.layout.shape)}")
    rows, cols = x.layout.shape[-2], x.layout.shape[-1]
    if rows == 0 or cols == 0:  # an empty mask (and i % 0 is undefined)
        return x.graph.constant(False, bool_).expand(x.layout.shape)
    i = IOTA_INDEX
    col, row = i % cols, (i // cols) % rows
    keep = lt(col - row, k + 1) if lower else lt(row - col, 1 - k)
    return iota(x.graph, keep, (rows, cols), bool_).expand(x.layout.shape)
