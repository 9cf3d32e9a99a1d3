"""`transpose_view` against a brute-force scatter-add, on random chains of movement ops."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.host_views import concrete_view
from luminal_train.views import transpose_view


def scatter_reference(grad, view, src_size: int) -> np.ndarray:
    """Add each element of `grad` at the buffer position `view` reads it from."""
    shape, strides, offset, mask = concrete_view(view, {})
    out = np.zeros(src_size, dtype=np.float64)
    for idx in np.ndindex(*shape):
        if mask is not None and not all(lo <= i < hi for i, (lo, hi) in zip(idx, mask)):
            continue
        out[offset + sum(i * s for i, s in zip(idx, strides))] += grad[idx]
    return out


def random_view(x: lm.GraphTensor, rng: np.random.Generator, steps: int) -> lm.GraphTensor:
    """Apply `steps` random movement ops, keeping only those that stay views of `x`'s node
    (a reshape the strides cannot express would copy)."""
    for _ in range(steps):
        before = x
        nd = x.ndim
        shape = [d.value for d in x.layout.shape]
        kind = rng.choice(["permute", "slice", "step", "flip", "pad", "expand", "unsqueeze",
                           "select", "unfold", "reshape"])
        a = int(rng.integers(nd)) if nd else 0
        if kind == "permute" and nd > 1:
            x = x.permute(list(rng.permutation(nd)))
        elif kind == "slice" and nd and shape[a] > 1:
            lo = int(rng.integers(shape[a] - 1))
            x = x.narrow(a, lo, int(rng.integers(1, shape[a] - lo + 1)))
        elif kind == "step" and nd and shape[a] > 2:
            x = x._slice_axis(a, int(rng.integers(2)), None, int(rng.choice([2, 3, -2])))
        elif kind == "flip" and nd:
            x = x.flip(a)
        elif kind == "pad" and nd:
            pads = [0] * (2 * nd)
            pads[2 * (nd - 1 - a)] = int(rng.integers(3))
            pads[2 * (nd - 1 - a) + 1] = int(rng.integers(3))
            x = x.pad(pads)
        elif kind == "expand" and nd < 5:
            x = x.unsqueeze(a).expand([*shape[:a], int(rng.integers(2, 4)), *shape[a:]])
        elif kind == "unsqueeze" and nd < 5:
            x = x.unsqueeze(a)
        elif kind == "select" and nd > 1:
            x = x[(slice(None),) * a + (int(rng.integers(shape[a])),)]
        elif kind == "unfold" and nd and shape[a] >= 3 and not x.layout.axis_masked(a):
            x = x.unfold(a, int(rng.integers(2, shape[a] + 1)), int(rng.integers(1, 3)))
        elif kind == "reshape" and nd > 1 and shape[-1] * shape[-2] <= 64:
            x = x.reshape([*shape[:-2], shape[-2] * shape[-1]])
        if x.id != before.id:
            x = before
    return x


@pytest.mark.parametrize("seed", range(120))
def test_train_transpose_view_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    src_shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 4))))
    g = lm.Graph()
    x = g.tensor(src_shape, name="x")
    read = random_view(x, rng, int(rng.integers(1, 5)))
    view = read.layout
    vshape = tuple(d.value for d in view.shape)
    grad_in = g.tensor(vshape, name="g")
    out = transpose_view(grad_in, view, src_shape).retrieve()
    gval = rng.standard_normal(vshape).astype(np.float32)
    x.set(np.zeros(src_shape, np.float32))
    grad_in.set(gval)
    g.execute()
    want = scatter_reference(gval.astype(np.float64), view, int(np.prod(src_shape)))
    np.testing.assert_allclose(out.numpy().reshape(-1), want, rtol=1e-5, atol=1e-5)
    assert out.numpy().shape == src_shape


def test_train_transpose_view_symbolic_dims() -> None:
    """Broadcasts, transposes and slices of symbolic shapes stay one graph for every size."""
    g = lm.Graph()
    x = g.tensor(("n", 6), name="x")
    cases = [
        x.T.unsqueeze(0).expand(3, 6, "n"),
        x[:, 1:4],
        x[1:, ::2],
        x.flip(0).unfold(1, 3, 1),
    ]
    grads, outs = [], []
    for read in cases:
        gi = g.tensor(read.layout.shape, name="g")
        grads.append(gi)
        outs.append(transpose_view(gi, read.layout, x.node.shape).retrieve())
    g.compile(lm.GenericCompiler())
    rng = np.random.default_rng(0)
    for n in (3, 5):
        g.set_dim("n", n)
        x.set(np.zeros((n, 6), np.float32))
        vals = []
        for gi, read in zip(grads, cases):
            shape = tuple(d.evaluate({"n": n}) for d in read.layout.shape)
            vals.append(rng.standard_normal(shape).astype(np.float32))
            gi.set(vals[-1])
        g.execute()
        for val, read, out in zip(vals, cases, outs):
            want = scatter_reference(val, read.layout.substitute({"n": n}), n * 6)
            np.testing.assert_allclose(out.numpy().reshape(-1), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, unfold, path", [
    ((5, 20), (1, 3, 1), "_shifted_rows"),      # a 3-wide kernel: three shifted views
    ((300,), (0, 3, 2), "_dilated_columns"),    # stride 2, 149 windows: three spread columns
    ((300,), (0, 100, 1), "skew"),              # 100-wide windows, 201 of them: the skew
])
def test_train_transpose_view_overlap_paths(shape, unfold, path, monkeypatch) -> None:
    """Each way of adding overlapping windows back, against the brute-force scatter."""
    from luminal_train import views

    used = []
    for name in ("_shifted_rows", "_dilated_columns"):
        real = getattr(views, name)
        monkeypatch.setattr(views, name, lambda *a, _r=real, _n=name: used.append(_n) or _r(*a))
    g = lm.Graph()
    x = g.tensor(shape, name="x").set(np.zeros(shape, np.float32))
    view = x.unfold(*unfold).layout
    vshape = tuple(d.value for d in view.shape)
    grad_in = g.tensor(vshape, name="g")
    out = transpose_view(grad_in, view, shape).retrieve()
    gval = np.random.default_rng(1).standard_normal(vshape).astype(np.float32)
    grad_in.set(gval)
    g.execute()
    assert (used or ["skew"]) == [path]
    want = scatter_reference(gval.astype(np.float64), view, int(np.prod(shape)))
    np.testing.assert_allclose(out.numpy().reshape(-1), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", range(12))
def test_train_transpose_view_of_convolution_windows(seed: int) -> None:
    """The windows of a convolution or pool (random kernel, stride, dilation, crop), laid out
    as im2col reads them: scattered back one buffer axis at a time, like brute force."""
    rng = np.random.default_rng(1000 + seed)
    shape = (2, 3, int(rng.integers(5, 9)), int(rng.integers(5, 9)))
    g = lm.Graph()
    x = g.tensor(shape, name="x").set(np.zeros(shape, np.float32))
    win = x[:, :, int(rng.integers(2)):, : shape[3] - int(rng.integers(2))]
    for axis in (2, 3):
        dil = int(rng.integers(1, 3))
        size = int(rng.integers(1, 4))
        while (size - 1) * dil + 1 > win.layout.shape[axis].value:
            size -= 1
        step = int(rng.integers(1, 4))
        win = win._with_view(win.layout.unfold(axis, size, step, dil))
    view = win.permute(0, 2, 3, 1, 4, 5).layout
    vshape = tuple(d.value for d in view.shape)
    grad_in = g.tensor(vshape, name="g")
    out = transpose_view(grad_in, view, shape).retrieve()
    gval = rng.standard_normal(vshape).astype(np.float32)
    grad_in.set(gval)
    g.execute()
    want = scatter_reference(gval.astype(np.float64), view, int(np.prod(shape)))
    np.testing.assert_allclose(out.numpy().reshape(-1), want, rtol=1e-5, atol=1e-4)
