"""Edge cases found by an audit: non-finite values through the composed ops (softplus,
logsumexp, softmax, argmax with NaN, log1p), symbolic dims through conv / pool / reshape(-1),
convolution conveniences (unbatched input, string padding), dims bound to 0, and the messages
of the errors users meet. Values are compared with PyTorch (or NumPy), never with luminal."""

from __future__ import annotations

import importlib.util
import math
import warnings
from pathlib import Path

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.symbolic import Expr

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="PyTorch is not installed")
INF, NAN = np.inf, np.nan
README = Path(__file__).resolve().parents[1] / "README.md"


def run(fn, *arrays):
    """`fn` on reference-backend inputs holding `arrays`; its output(s) as NumPy arrays."""
    g = lm.Graph()
    ts = [g.tensor(a.shape, dtype=str(a.dtype)).set(a) for a in arrays]
    out = fn(*ts)
    outs = [o.retrieve() for o in (out if isinstance(out, (tuple, list)) else (out,))]
    g.compile(lm.GenericCompiler())
    g.execute()
    got = [o.numpy() for o in outs]
    return got if isinstance(out, (tuple, list)) else got[0]


def torch_of(fn, *arrays):
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. padding="same" with an even kernel
        out = fn(*(torch.from_numpy(a) for a in arrays))
    if isinstance(out, (tuple, list)):
        return [o.numpy() for o in out]
    return out.numpy()


def assert_close(got, want, rtol=1e-5, atol=0.0):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=rtol, atol=atol)  # NaN equals NaN, inf equals inf


# ----- non-finite values --------------------------------------------------------------------
EXTREMES = np.array([100.0, 50.0, -100.0, 19.0, 21.0, -20.0, 0.0, 1e-3, -1e-3, 3.9, 4.1,
                     -4.1, 1.99, 2.0, 2.01, INF, -INF, NAN], np.float32)


@needs_torch
@pytest.mark.parametrize("kw", [{}, {"beta": 2.0, "threshold": 4.0}, {"beta": 0.5},
                                {"beta": -1.0, "threshold": 3.0}], ids=str)
def test_softplus_never_overflows(kw):
    import torch

    got = run(lambda x: F.softplus(x, **kw), EXTREMES)
    assert_close(got, torch_of(lambda x: torch.nn.functional.softplus(x, **kw), EXTREMES))


@needs_torch
def test_activations_at_infinities():
    import torch

    got = run(lambda x: (x.elu(), F.mish(x), x.sigmoid(), x.tanh()), EXTREMES)
    want = torch_of(lambda x: (torch.nn.functional.elu(x), torch.nn.functional.mish(x),
                               x.sigmoid(), x.tanh()), EXTREMES)
    for g_out, w_out in zip(got, want):
        assert_close(g_out, w_out, rtol=2e-5, atol=1e-7)


@needs_torch
def test_log1p_is_accurate_near_zero_and_at_infinities():
    x = np.array([1e-10, -1e-10, 5e-8, 1e-5, 0.0, -0.5, -1.0, -2.0, 1.0, 1e10, 3e38, INF,
                  -INF, NAN], np.float32)
    assert_close(run(lambda t: t.log1p(), x), torch_of(lambda t: t.log1p(), x), rtol=2e-7)


ROWS = np.array([[-INF, -INF, -INF], [INF, 1.0, -INF], [1.0, 2.0, -INF], [NAN, 1.0, 2.0],
                 [1e38, 3e38, -3e38], [-1e30, -2e30, -3e30], [1.0, 2.0, 3.0]], np.float32)


@needs_torch
def test_logsumexp_of_infinite_rows():
    got = run(lambda x: (x.logsumexp(1), x.logsumexp(-1, keepdim=True), x.logsumexp((0, 1))),
              ROWS)
    want = torch_of(lambda x: (x.logsumexp(1), x.logsumexp(-1, keepdim=True),
                               x.logsumexp((0, 1))), ROWS)
    for g_out, w_out in zip(got, want):
        assert g_out.shape == w_out.shape
        assert_close(g_out, w_out, rtol=1e-6)
    assert run(lambda x: x.logsumexp(1), ROWS)[:2].tolist() == [-INF, INF]


@needs_torch
def test_softmax_of_infinite_rows_matches_torch():
    """An all -inf row (and a row holding +inf) is NaN in PyTorch too; -inf entries of an
    otherwise finite row are 0 (softmax) and -inf (log_softmax)."""
    got = run(lambda x: (x.softmax(1), x.log_softmax(1), F.softmax(x, 0)), ROWS[:4])
    want = torch_of(lambda x: (x.softmax(1), x.log_softmax(1), x.softmax(0)), ROWS[:4])
    for g_out, w_out in zip(got, want):
        assert_close(g_out, w_out, rtol=1e-6, atol=1e-7)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_argmax_argmin_pick_the_first_nan(dtype):
    x = np.array([[1.0, NAN, 3.0, NAN], [1.0, 2.0, 4.0, 4.0], [NAN, NAN, NAN, NAN],
                  [INF, -INF, 0.0, NAN], [-INF, INF, 0.0, 0.0], [2.0, 1.0, 1.0, 2.0]],
                 np.float32)
    if dtype == "int32":
        x = np.nan_to_num(x, nan=7, posinf=9, neginf=-9).astype(np.int32)
    fns = (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.argmax(0),
           lambda t: t.argmin(0, keepdim=True), lambda t: t.argmax(), lambda t: t.argmin(),
           lambda t: t.max(1).indices, lambda t: t.min(1).indices)
    for fn in fns:
        got = run(fn, x)
        want = torch_of(lambda t, fn=fn: fn(t.long() if dtype == "int32" else t), x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@needs_torch
def test_where_is_exact_for_non_finite_branches():
    """where() selects (a Select op): an inf or NaN in the branch not taken never reaches the
    result, in where itself and in the ops built on it."""
    import torch

    x = np.array([[2.0, 0.0, -1.0, 0.5], [1e-20, -3.0, np.inf, np.nan]], np.float32)
    got = run(lambda t: (lm.where(t > 0, t.log(), 0.0), t ** 0.5, t ** 2.5, t ** -1.0,
                         F.pad(t, (1, 1), value=-math.inf), t.masked_fill(t < 0, -math.inf),
                         F.elu(t), t.clamp(-1.0, 1.0), t.relu()), x)
    want = torch_of(lambda t: (torch.where(t > 0, t.log(), 0.0), t ** 0.5, t ** 2.5,
                               t ** -1.0, torch.nn.functional.pad(t, (1, 1), value=-math.inf),
                               t.masked_fill(t < 0, -math.inf), torch.nn.functional.elu(t),
                               t.clamp(-1.0, 1.0), t.relu()), x)
    for g_out, w_out in zip(got, want):
        assert_close(g_out, w_out, rtol=1e-6)


def test_prod_limitation_is_documented():
    text = README.read_text()
    assert "Selection is exact" in text and "2^24" in text


# ----- symbolic dims --------------------------------------------------------------------------
def test_reshape_infers_minus_one_with_symbolic_dims():
    g = lm.Graph()
    x = g.tensor(("n", 2, 3), name="x")
    y = x[1:].reshape(x[1:].shape[0], -1)
    assert y.shape == (Expr.var("n") - 1, 6)
    z = x[2:].reshape(-1, 3)
    assert str(x[2:].shape[0]) == "(n - min(n, 2))"  # what can be simplified, is
    outs = [y.retrieve(), z.retrieve()]
    g.compile(lm.GenericCompiler())
    for n in (3, 6):
        data = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
        x.set(data)
        g.execute()
        np.testing.assert_array_equal(outs[0].numpy(), data[1:].reshape(n - 1, -1))
        np.testing.assert_array_equal(outs[1].numpy(), data[2:].reshape(-1, 3))


@needs_torch
@pytest.mark.parametrize("spatial", [1, 2])
def test_conv_with_symbolic_spatial_dims_and_no_padding(spatial):
    """One compiled graph, the spatial dims at two values (the im2col reshape used to fail)."""
    import torch

    rng = np.random.default_rng(0)
    g = lm.Graph()
    x = g.tensor((2, 3, *["n"] * spatial), name="x")
    w = g.tensor((4, 3, *[3] * spatial), name="w")
    conv = F.conv1d if spatial == 1 else F.conv2d
    tconv = torch.nn.functional.conv1d if spatial == 1 else torch.nn.functional.conv2d
    y = conv(x, w).retrieve()
    g.compile(lm.GenericCompiler())
    wd = rng.standard_normal((4, 3, *[3] * spatial)).astype(np.float32)
    w.set(wd)
    for n in (5, 8):
        xd = rng.standard_normal((2, 3, *[n] * spatial)).astype(np.float32)
        x.set(xd)
        g.execute()
        assert_close(y.numpy(), torch_of(tconv, xd, wd), rtol=1e-4, atol=1e-5)


@needs_torch
def test_pools_and_interpolate_with_a_symbolic_spatial_dim():
    import torch

    tf = torch.nn.functional
    fns = [
        (lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
         lambda t: tf.max_pool2d(t, 3, 2, 1, ceil_mode=True)),
        (lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False),
         lambda t: tf.avg_pool2d(t, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
        (lambda t: F.avg_pool2d(t, 2, ceil_mode=True), lambda t: tf.avg_pool2d(t, 2,
                                                                                ceil_mode=True)),
        (lambda t: F.interpolate(t, scale_factor=2.0),
         lambda t: tf.interpolate(t, scale_factor=2.0)),
    ]
    g = lm.Graph()
    x = g.tensor((1, 2, "h", 5), name="x")
    outs = [fn(x).retrieve() for fn, _ in fns]
    g.compile(lm.GenericCompiler())
    rng = np.random.default_rng(1)
    for h in (5, 6, 8):
        xd = rng.standard_normal((1, 2, h, 5)).astype(np.float32)
        x.set(xd)
        g.execute()
        for out, (_, tfn) in zip(outs, fns):
            assert_close(out.numpy(), torch_of(tfn, xd), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda x: x[0].chunk(2, 1), ["chunk(2, dim=1)", "symbolic size n"]),
        (lambda x: x[0].split(2, 1), ["split(2, dim=1)", "symbolic size n"]),
        (lambda x: x[0].roll(1, 1), ["roll", "dim 1", "symbolic size n"]),
        (lambda x: F.interpolate(x, scale_factor=1.5), ["interpolate", "spatial dim 0", "n"]),
        (lambda x: F.interpolate(x, size=(4, 5)), ["interpolate", "spatial dim 0", "n"]),
        (lambda x: F.conv2d(x, x), ["conv2d", "kernel size", "symbolic"]),
    ],
)
def test_ops_that_need_a_static_size_name_the_op_and_dim(build, words):
    x = lm.Graph().tensor((1, 1, "n", "n"), name="x")
    with pytest.raises(ValueError) as err:
        build(x)
    for word in words:
        assert word in str(err.value)


def test_a_dim_bound_to_zero():
    """0 is fine where the dim is only a size (an empty KV cache extended by cat, a sum over
    no elements); slicing it gives a clear error naming the dim, not a crash in NumPy."""
    g = lm.Graph()
    cache = g.tensor((1, "past", 2), name="cache")
    new = g.tensor((1, "seq", 2), name="new")
    total = lm.cat([cache, new], 1).sum(1).retrieve()
    cache.set(np.zeros((1, 0, 2), np.float32))
    new.set(np.ones((1, 3, 2), np.float32))
    g.execute()
    np.testing.assert_array_equal(total.numpy(), np.full((1, 2), 3.0))

    for bind in ("set", "set_dim"):
        g = lm.Graph()
        x = g.tensor(("n", 2), name="x")
        (x[1:] * 2).retrieve()
        if bind == "set":
            x.set(np.zeros((0, 2), np.float32))
        else:
            x = g.ones(("n", 2))
            (x[1:] * 2).retrieve()
            g.set_dim("n", 0)
        with pytest.raises(ValueError, match=r"symbolic dim 'n' is bound to 0.*>= 1"):
            g.execute()


def test_a_dim_bound_to_zero_is_checked_once_per_shape_and_names_the_first_node():
    """The check evaluates each distinct symbolic shape once (a transformer's thousands of
    nodes share a few hundred), yet names the first node, in graph order, whose shape is
    negative; shapes without the zero dim never raise it. `prepare()` builds its table ahead
    of the first run, and a graph changed and compiled again gets a new one."""
    g = lm.Graph()
    x = g.tensor(("n", 2), name="x")
    y = g.tensor(("m", 2), name="y")
    ((y * 2 + 1).sum(0) + (x[1:] * 2).sum(0) + (x[2:] * 3).sum(0)).retrieve()
    g.compile(lm.backend("reference")).prepare()
    assert g._symbolic_shapes_cache[0] == g._version
    shapes = [shape for _, _, shape in g._symbolic_shapes_cache[1][0]]
    assert len(shapes) == len({tuple(map(id, s)) for s in shapes})
    first = min(n.id for n in g.nodes.values() if any(
        d.evaluate({"n": 0, "m": 3}) < 0
        for s in [n.shape, *(e.view.shape for e in n.inputs)] for d in s))
    x.set(np.zeros((0, 2), np.float32))
    y.set(np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=rf"'n' is bound to 0.* the .* of \w+ \(node {first}\) "
                                         r"has shape \(.*\) = \(-1, 2\)"):
        g.execute()
    x.set(np.zeros((2, 2), np.float32))
    y.set(np.zeros((0, 2), np.float32))  # m = 0 is only a size: fine
    g.execute()


def test_prepare_needs_the_compiled_graph():
    """`prepare()` is the first run's one-time work done ahead: on a graph changed after
    compile() it refuses, as execute() does; on a compiled one the run gives the same values."""
    g = lm.Graph()
    x = g.tensor(("n", 2), name="x")
    y = (x * 2).retrieve()
    g.compile(lm.backend("reference"))
    (x + 1).retrieve()
    with pytest.raises(lm.GraphModifiedError, match="before prepare"):
        g.prepare()
    g.compile(lm.backend("reference")).prepare()
    x.set(np.ones((3, 2), np.float32))
    g.execute()
    np.testing.assert_array_equal(y.numpy(), np.full((3, 2), 2.0))


def test_products_over_an_empty_dim():
    """A row pick (one-hot product) of an empty cache, as beam search reorders a KV cache
    before its first entry: the product's operands have a zero-size axis."""
    g = lm.Graph()
    cache = g.tensor(("rows", "past", 2), name="cache")
    order = g.tensor((3,), name="order", dtype=lm.int32)
    new = g.tensor((3, 1, 2), name="new")
    out = lm.cat([cache.index_select(0, order), new], 1).retrieve()
    g.compile(lm.backend("reference"))
    cache.set(np.zeros((1, 0, 2), np.float32))
    order.set(np.zeros(3, np.int32))
    values = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    new.set(values)
    g.execute()
    np.testing.assert_array_equal(out.numpy(), values)


# ----- convolution conveniences ---------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize(
    ("xs", "ws", "kw"),
    [
        ((3, 9), (4, 3, 3), {"padding": "same"}),
        ((3, 9), (4, 3, 4), {"padding": "same", "dilation": 2}),
        ((3, 9), (4, 3, 4), {"padding": "valid", "stride": 2}),
        ((2, 6, 7), (4, 2, 2, 3), {"padding": "same"}),
        ((2, 6, 7), (4, 1, 3, 3), {"padding": "same", "groups": 2}),
        ((2, 6, 7), (4, 2, 3, 3), {"padding": (1, 2), "stride": (2, 1)}),
        ((1, 2, 6, 7), (4, 2, 4, 2), {"padding": "same", "dilation": (1, 3)}),
    ],
    ids=str,
)
def test_conv_unbatched_and_string_padding(xs, ws, kw):
    import torch

    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[:1]).astype(np.float32)
    conv, tconv = (F.conv1d, torch.nn.functional.conv1d) if len(ws) == 3 else (
        F.conv2d, torch.nn.functional.conv2d)
    want = torch_of(lambda a, c, d: tconv(a, c, d, **kw), x, w, b)
    assert_close(run(lambda a, c, d: conv(a, c, d, **kw), x, w, b), want, rtol=1e-4,
                 atol=1e-5)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"padding": "same", "stride": 2}, "not supported for strided"),
        ({"padding": "full"}, "'valid' or 'same'"),
    ],
)
def test_conv_bad_string_padding(kw, message):
    g = lm.Graph()
    x, w = g.tensor((1, 2, 8)), g.tensor((3, 2, 3))
    with pytest.raises(ValueError, match=message):
        F.conv1d(x, w, **kw)


# ----- messages -------------------------------------------------------------------------------
def test_reading_a_tensor_compilation_removed():
    g = lm.Graph()
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    dead = x * 2  # nothing uses it: dead-code elimination removes it
    (x + 1).retrieve()
    g.compile(lm.GenericCompiler())
    g.execute()
    with pytest.raises(lm.RemovedTensorError, match=r"removed by compilation: call \.retrieve"):
        dead.numpy()
    with pytest.raises(KeyError):  # still a KeyError, as before
        dead.numpy()


def test_where_shape_mismatch_names_where():
    g = lm.Graph()
    a, b = g.tensor((3, 4)), g.tensor((2, 4))
    with pytest.raises(ValueError, match=r"^where: shapes \(3, 4\) and \(2, 4\)"):
        lm.where(a > 0, a, b)


def test_integer_prod_is_exact_beyond_float_precision():
    """1009 * 1013 * 1019 > 2^24: float32 could not hold it; the int path multiplies."""
    x = np.array([[1009, 1013, 1019], [-7, 1, 3], [0, 5, 9]], np.int32)
    got = run(lambda t: (t.prod(1), t.prod(0, keepdim=True), t[:, :2].prod(), t.prod(1) > 0), x)
    want = [np.prod(x.astype(np.int64), 1), np.prod(x.astype(np.int64), 0, keepdims=True),
            np.prod(x[:, :2].astype(np.int64)), np.prod(x.astype(np.int64), 1) > 0]
    for g_out, w_out in zip(got, want):
        assert g_out.dtype == (np.bool_ if w_out.dtype == np.bool_ else np.int32)
        np.testing.assert_array_equal(g_out, w_out)


def test_sum_of_a_reshaped_product():
    """The reference backend folds Mul -> SumReduce into one einsum; a reshape between them
    (found by ONNX's NegativeLogLikelihoodLoss tests) must not be folded over."""
    a = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    g = lm.Graph()
    x = g.tensor((3, 1, 2)).set(a)
    y = (x * 2).reshape(3, 2).sum(1).retrieve()
    g.execute()
    np.testing.assert_array_equal(y.numpy(), (a * 2).reshape(3, 2).sum(1))


@needs_torch
def test_reflect_pad_leaves_unpadded_size_one_dims_alone():
    """Found by ONNX's test_reflect_pad: a (0, 0) reflect pair on a dim of size 1."""
    import torch

    a = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2)
    g = lm.Graph()
    y = g.tensor(a.shape).set(a).pad((1, 1, 1, 0, 0, 0, 0, 0), "reflect").retrieve()
    g.execute()
    want = torch.nn.functional.pad(torch.tensor(a), (1, 1, 1, 0), "reflect").numpy()
    np.testing.assert_array_equal(y.numpy(), want)
