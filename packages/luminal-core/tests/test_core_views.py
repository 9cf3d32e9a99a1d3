"""Views (shape trackers) against NumPy, by brute force.

Random chains of movement ops (permute, reshape, expand, slices with any step, flips, pads
including negative ones, integer indexing, unsqueeze/squeeze) run on a luminal input and on a
NumPy array. The result must match three ways: read on the host through the final view, read
element by element through the view's symbolic index and validity expressions, and read by
flat index through `unravel` (how generated kernels address views).
"""

from __future__ import annotations

import math

import luminal as lm
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from luminal.shape import View
from luminal.symbolic import Expr


def _slice(data, t, ref):
    axis = data.draw(st.integers(0, ref.ndim - 1))
    n = ref.shape[axis]
    start = data.draw(st.none() | st.integers(-n - 1, n + 1))
    stop = data.draw(st.none() | st.integers(-n - 1, n + 1))
    step = data.draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
    index = (slice(None),) * axis + (slice(start, stop, step),)
    return t[index], ref[index]


def _index(data, t, ref):
    axis = data.draw(st.integers(0, ref.ndim - 1))
    k = data.draw(st.integers(-ref.shape[axis], ref.shape[axis] - 1))
    index = (slice(None),) * axis + (k,)
    return t[index], ref[index]


def _pad(data, t, ref):
    axis = data.draw(st.integers(0, ref.ndim - 1))
    n = ref.shape[axis]
    before = data.draw(st.integers(-(n - 1), 2))
    start = max(-before, 0)
    # crop at most what is left, keep at least one element (possibly all padding)
    after = data.draw(st.integers(max(1 - n - before, start - n), 2))
    pads = [0, 0] * (ref.ndim - 1 - axis) + [before, after]
    cropped = ref[(slice(None),) * axis + (slice(start, n - max(-after, 0)),)]
    widths = [(0, 0)] * ref.ndim
    widths[axis] = (max(before, 0), max(after, 0))
    return t.pad(pads), np.pad(cropped, widths)


def _permute(data, t, ref):
    perm = data.draw(st.permutations(range(ref.ndim)))
    return t.permute(*perm), ref.transpose(perm)


def _flip(data, t, ref):
    axis = data.draw(st.integers(0, ref.ndim - 1))
    return t.flip(axis), np.flip(ref, axis)


def _reshape(data, t, ref):
    shape = list(ref.shape)
    kind = data.draw(st.sampled_from(["merge", "split", "flat"]))
    if kind == "merge" and len(shape) >= 2:
        k = data.draw(st.integers(0, len(shape) - 2))
        shape[k : k + 2] = [shape[k] * shape[k + 1]]
    elif kind == "split":
        k = data.draw(st.integers(0, len(shape) - 1))
        divisors = [d for d in range(1, shape[k] + 1) if shape[k] % d == 0]
        d = data.draw(st.sampled_from(divisors))
        shape[k : k + 1] = [d, shape[k] // d]
    else:
        shape = [-1]
    return t.reshape(*shape), ref.reshape(shape)


def _expand(data, t, ref):
    """Broadcast a size-1 axis: a new one, or an existing one (which may be all padding)."""
    ones = [a for a, d in enumerate(ref.shape) if d == 1]
    if not ones or data.draw(st.booleans()):
        axis = data.draw(st.integers(0, ref.ndim))
        t, ref = t.unsqueeze(axis), np.expand_dims(ref, axis)
    else:
        axis = data.draw(st.sampled_from(ones))
    shape = list(ref.shape)
    shape[axis] = data.draw(st.integers(1, 3))
    return t.expand(*shape), np.broadcast_to(ref, shape)


def _squeeze(data, t, ref):
    ones = [a for a, d in enumerate(ref.shape) if d == 1]
    if not ones or ref.ndim == 1:
        return t, ref
    axis = data.draw(st.sampled_from(ones))
    return t.squeeze(axis), np.squeeze(ref, axis)


OPS = [_slice, _index, _pad, _permute, _flip, _reshape, _expand, _squeeze]


def _draw_chain(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    arr = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)  # 0 = padding
    g = lm.Graph()
    x = g.tensor(shape, name="x").set(arr)
    t, ref = x, arr
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(OPS))
        if op is _index and ref.ndim == 1:
            continue
        new_t, new_ref = op(data, t, ref)
        if new_ref.size == 0 or new_ref.size > 400:
            continue
        t, ref = new_t, new_ref
    return g, t, ref


def _read_by_expressions(view: View, buf: np.ndarray, dims) -> np.ndarray:
    """Every element through `index` and `valid`, one logical index at a time."""
    shape = tuple(d.evaluate(dims) for d in view.shape)
    out = np.zeros(shape, dtype=buf.dtype)
    for idx in np.ndindex(*shape):
        pos = [Expr.const(i) for i in idx]
        if view.valid(pos).evaluate(dims):
            out[idx] = buf[view.index(pos).evaluate(dims)]
    return out


def _read_by_flat_index(view: View, buf: np.ndarray, dims) -> np.ndarray:
    """Every element through the expressions of one flat loop variable, as kernels do."""
    n = view.numel.evaluate(dims)
    i = Expr.var("i", 0, max(n - 1, 0))
    axes = view.unravel(i)
    index, valid = view.index(axes), view.valid(axes)
    out = np.zeros(n, dtype=buf.dtype)
    for k in range(n):
        env = {**dims, "i": k}
        if valid.evaluate(env):
            out[k] = buf[index.evaluate(env)]
    return out.reshape(tuple(d.evaluate(dims) for d in view.shape))


@settings(max_examples=250, deadline=None)
@given(st.data())
def test_movement_chains_match_numpy(data):
    g, t, ref = _draw_chain(data)
    base = t._with_view(View.contiguous(t.node.shape)).retrieve()  # the buffer t reads
    materialised = t.contiguous().retrieve()
    g.execute()
    assert t.shape == ref.shape
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_array_equal(materialised.numpy(), ref)
    buf = base.numpy().reshape(-1)
    np.testing.assert_array_equal(_read_by_expressions(t.layout, buf, g.dims), ref)
    np.testing.assert_array_equal(_read_by_flat_index(t.layout, buf, g.dims), ref)


def _np_pad(a: np.ndarray, pads) -> np.ndarray:
    """`F.pad` in NumPy: (left, right) pairs from the last axis, negative values crop."""
    for k in range(len(pads) // 2):
        axis = a.ndim - 1 - k
        left, right = pads[2 * k], pads[2 * k + 1]
        n = a.shape[axis]
        a = a[(slice(None),) * axis + (slice(max(-left, 0), n - max(-right, 0)),)]
        widths = [(0, 0)] * a.ndim
        widths[axis] = (max(left, 0), max(right, 0))
        a = np.pad(a, widths)
    return a


class _Luminal:
    pad = staticmethod(lambda x, pads: x.pad(pads))
    expand = staticmethod(lambda x, shape: x.expand(*shape))


class _NumPy:
    pad = staticmethod(_np_pad)
    expand = staticmethod(np.broadcast_to)


@pytest.mark.parametrize(
    ("shape", "chain"),
    [
        # a size-1 axis that is all padding stays padding when expanded
        ((3, 1), lambda x, P: P.expand(P.pad(x, (1, -1)), (3, 4))),
        ((1, 3), lambda x, P: P.expand(P.pad(x, (0, 0, 1, -1)), (2, 3))),
        # reshapes that drop or keep a padded size-1 axis
        ((3, 1, 4, 1), lambda x, P: P.pad(x, (1, -1)).reshape(3, 4)),
        ((3, 1, 4), lambda x, P: P.pad(x, (0, 0, 1, -1)).reshape(12)),
        ((1, 4), lambda x, P: P.pad(x, (0, 0, 1, -1)).reshape(4)),
        ((1, 4), lambda x, P: P.pad(x, (1, 0, 0, 0)).reshape(5)),
        ((2, 3), lambda x, P: P.pad(x, (1, 1)).reshape(2, 1, 5)),
        ((2, 3), lambda x, P: P.pad(x, (1, 1, 1, 0))[1:, ::2].reshape(-1)),
    ],
)
def test_tricky_view_compositions(shape, chain):
    arr = np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)
    g = lm.Graph()
    x = g.tensor(shape, name="x").set(arr)
    t = chain(x, _Luminal)
    out = t.contiguous().retrieve()
    g.execute()
    want = chain(arr, _NumPy)
    np.testing.assert_array_equal(out.numpy(), want)
    if t.id == x.id:  # still a view of the input: check its index expressions too
        np.testing.assert_array_equal(_read_by_flat_index(t.layout, arr.reshape(-1), {}), want)


def test_views_add_no_nodes():
    g = lm.Graph()
    x = g.tensor((2, 3, 4), name="x")
    before = len(g.nodes)
    y = x.permute(2, 0, 1)[1:, :, ::2].flip(0).unsqueeze(1).expand(3, 5, 2, 2).pad((1, -1))
    assert len(g.nodes) == before and y.id == x.id and y.shape == (3, 5, 2, 2)


def test_reshape_of_a_non_mergeable_view_inserts_contiguous():
    g = lm.Graph()
    x = g.tensor((2, 3), name="x")
    y = x.T.reshape(6)  # transposed axes cannot merge into one stride
    assert y.node.op.name == "Contiguous"


def test_symbolic_view_expressions_substitute_to_concrete():
    n = Expr.var("n")
    view = View.contiguous((n, 3)).permute((1, 0)).slice(1, 1, n, 2).pad(0, 1, 0)
    for value in (2, 5):
        concrete = View.contiguous((value, 3)).permute((1, 0)).slice(1, 1, value, 2).pad(0, 1, 0)
        assert view.substitute({"n": value}) == concrete
        buf = np.arange(1, 3 * value + 1, dtype=np.float32)
        np.testing.assert_array_equal(
            _read_by_flat_index(view, buf, {"n": value}),
            _read_by_expressions(concrete, buf, {}),
        )
