"""PyTorch parity edge cases on the reference and cpu backends: 0-d and zero-size tensors,
int32 extremes, result dtypes, creation ops, the errors PyTorch raises, and the ops whose
output shape depends on data (not supported: a clear error)."""

from __future__ import annotations

import math

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest

torch = pytest.importorskip("torch")
BACKENDS = ["reference", "cpu"]
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def run(backend, fn, *arrays):
    g = lm.Graph()
    ins = [g.tensor(a.shape, dtype=str(a.dtype)).set(a) for a in arrays]
    outs = fn(g, *ins)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for o in outs:
        o.retrieve()
    g.compile((lm.GenericCompiler(), lm.backend(backend)))
    g.execute()
    return [o.numpy() for o in outs]


def same(got, want):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype == np.int64:
        want = want.astype(np.int32)  # luminal indexes with int32
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_d_and_zero_size(backend):
    s = np.array(1.5, np.float32)
    e = np.zeros((2, 0), np.float32)
    got = run(backend, lambda g, a, b: (a.cummax(0).values, a.sum(0), a.squeeze(-1),
                                        a.logcumsumexp(0), b.cumsum(1), b.cummin(1).values,
                                        b.sort(1).values, b.tril(), g.eye(0), b.std(1)), s, e)
    ts, te = torch.tensor(s), torch.tensor(e)
    want = (ts.cummax(0).values, ts.sum(0), ts.squeeze(-1), ts.logcumsumexp(0), te.cumsum(1),
            te.cummin(1).values, te.sort(1).values, te.tril(), torch.eye(0), te.std(1))
    for a, b in zip(got, want):
        same(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_int32_extremes_stay_exact(backend):
    a = np.array([INT_MIN, INT_MAX, -1, 0, 7, -8], np.int32)
    b = np.array([3, INT_MIN, 5, -1, INT_MAX, 2], np.int32)
    got = run(backend, lambda g, x, y: (x.amin(), lm.minimum(x, y), x.min(0).values, x & y,
                                        x | y, x ^ y, ~x, x >> 4, x << 2,
                                        (x % 1000) ** 3), a, b)
    ta, tb = torch.tensor(a), torch.tensor(b)
    want = (ta.amin(), torch.minimum(ta, tb), ta.min(0).values, ta & tb, ta | tb, ta ^ tb, ~ta,
            ta >> 4, ta << 2, (ta % 1000) ** 3)
    for x, w in zip(got, want):
        same(x, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_creation_and_signatures(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = run(backend, lambda g, t: (lm.linspace(g, -1.0, 2.0, 7), lm.full_like(t, 3),
                                     lm.zeros_like(t, "int32"), t.roll(1), t.roll((1, 2), (0, 1)),
                                     t.repeat_interleave(2), *lm.meshgrid(t[0], t[1, :2]),
                                     t[[1, 0]], t[(0, 1), (2, 0)]), x)
    tx = torch.tensor(x)
    want = (torch.linspace(-1.0, 2.0, 7), torch.full_like(tx, 3),
            torch.zeros_like(tx, dtype=torch.int32), tx.roll(1), tx.roll((1, 2), (0, 1)),
            tx.repeat_interleave(2), *torch.meshgrid(tx[0], tx[1, :2], indexing="ij"),
            tx[[1, 0]], tx[(0, 1), (2, 0)])
    for a, w in zip(got, want):
        same(a, w)
    g = lm.Graph()
    r = lm.randn(g, 2, 3)
    assert r.shape == (2, 3) and r.dtype == lm.float32


def test_errors_match_torch_types():
    g = lm.Graph()
    x = g.tensor((3, 4), name="x")
    with pytest.raises(RuntimeError, match="permute"):
        x.permute(0, 0)
    with pytest.raises(ValueError, match="matmul"):  # OpError is both
        x @ x
    with pytest.raises(RuntimeError, match="at least one of min and max"):
        x.clamp()
    with pytest.raises(IndexError, match="out of range"):
        x.sum(2)
    assert issubclass(lm.OpError, ValueError) and issubclass(lm.OpError, RuntimeError)


def test_data_dependent_shapes_raise_a_clear_error():
    g = lm.Graph()
    x = g.tensor((3,), name="x")
    with pytest.raises(NotImplementedError, match="output shape depends on the values"):
        x.nonzero()
    with pytest.raises(NotImplementedError, match="output shape depends on the values"):
        x.masked_select(x > 0)
    with pytest.raises(IndexError, match="boolean mask indexing"):
        x[x > 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_inf_in_the_branch_not_taken(backend):
    x = np.array([math.inf, -math.inf, math.nan, 2.0, -1.0], np.float32)
    idx = np.array([2, 0, 1, 4], np.int32)
    got = run(backend, lambda g, t, i: (t[i], t.index_select(0, i), lm.where(t < 0, 1.0, t),
                                        F.embedding(i, t.reshape(5, 1)), t.scatter(0, i[:2],
                                                                                  t[3:5])), x, idx)
    tx, ti = torch.tensor(x), torch.tensor(idx).long()
    want = (tx[ti], tx.index_select(0, ti), torch.where(tx < 0, 1.0, tx),
            torch.nn.functional.embedding(ti, tx.reshape(5, 1)), tx.scatter(0, ti[:2], tx[3:5]))
    for a, w in zip(got, want):
        same(a, w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rounding_keeps_infinities(backend):
    x = np.array([math.inf, -math.inf, math.nan, 2.5, -2.5, 0.5, -0.0, 1e30], np.float32)
    got = run(backend, lambda g, t: (t.trunc(), t.floor(), t.ceil(), t.round(), t.frac()), x)
    tx = torch.tensor(x)
    for a, b in zip(got, (tx.trunc(), tx.floor(), tx.ceil(), tx.round(), tx.frac())):
        same(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_scatter_with_duplicate_indices_matches_torch(backend, dtype):
    """Plain scatter: the last write along dim wins (PyTorch's CPU kernel; its docs leave
    the pick unspecified); scatter_add/scatter_reduce combine every duplicate exactly, inf
    and NaN included."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((4, 5, 6)) * 4).astype(dtype)
    src = (rng.standard_normal((3, 4, 5)) * 4).astype(dtype)
    if dtype == "float32":
        src[0, 0, :3] = [math.inf, math.nan, -math.inf]
    idx = rng.integers(0, 3, (3, 4, 5)).astype(np.int32)
    reduces = [(r, inc) for r in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)]
    for dim in (0, 1, -1):
        got = run(backend, lambda g, a, s, i, dim=dim: (
            a.scatter(dim, i, s), a.scatter_add(dim, i, s),
            *[a.scatter_reduce(dim, i, s, r, include_self=inc) for r, inc in reduces]),
            x, src, idx)
        tx, ts, ti = torch.tensor(x), torch.tensor(src), torch.tensor(idx).long()
        want = [tx.scatter(dim, ti, ts), tx.scatter_add(dim, ti, ts),
                *[tx.scatter_reduce(dim, ti, ts, r, include_self=inc) for r, inc in reduces]]
        for a, b in zip(got, want):
            same(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsigned_and_bool_min_and_integer_trunc_division(backend):
    """uint8 negation wraps (no -1 constant in uint8), bool minimum is `and`, and integer
    division with rounding_mode='trunc' is exact (110 / 55 is 2, not 1.99 truncated)."""
    u = np.array([0, 128, 255, 64, 32, 16], np.uint8)
    b = np.array([True, False, False])
    n = np.array([110, 111, -110, -111, 7, -7], np.int32)
    d = np.array([55, -55, 55, -55, 2, 2], np.int32)
    got = run(backend, lambda g, x, y, p, q: (x.amin(), ~x, -x, lm.minimum(y, True),
                                              lm.minimum(y, 1.5), p.div(q, rounding_mode="trunc"),
                                              p.div(q.float(), rounding_mode="trunc")), u, b, n, d)
    tu, tb, tn, td = map(torch.tensor, (u, b, n, d))
    want = (tu.amin(), ~tu, -tu, torch.minimum(tb, torch.tensor(True)),
            torch.minimum(tb, torch.tensor(1.5)), tn.div(td, rounding_mode="trunc"),
            tn.div(td.float(), rounding_mode="trunc"))
    for a, w in zip(got, want):
        same(a, w)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_modes_with_negative_pads_read_the_uncropped_input(backend, mode):
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    pads = [(3, -3, 0, -3), (3, -5, 1, -5), (0, 0, 0, -5), (-1, 2, 2, -1), (4, 4, 0, 4)]
    got = run(backend, lambda g, t: tuple(F.pad(t, p, mode=mode) for p in pads), x)
    for a, p in zip(got, pads):
        same(a, torch.nn.functional.pad(torch.tensor(x), p, mode=mode))


def test_more_errors_where_torch_raises():
    g = lm.Graph()
    q = g.tensor((1, 2, 4, 8))
    with pytest.raises(RuntimeError, match="attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=g.tensor((4, 4)), is_causal=True)
    with pytest.raises(TypeError, match="bitcast"):
        q.view(lm.int32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shift_by_a_tensor_and_signed_infinities(backend):
    x = np.array([[-1, -3, 1, 7], [0, INT_MIN, INT_MAX, -1]], np.int32)
    s = np.array([0, 2, 8, 31], np.int32)
    f = np.array([-math.inf, 0.0, math.inf, math.nan], np.float32)
    got = run(backend, lambda g, a, n, v: (a << n, a >> n, v.isposinf(), v.isneginf()), x, s, f)
    tx, ts, tf = map(torch.tensor, (x, s, f))
    for a, w in zip(got, (tx << ts, tx >> ts, tf.isposinf(), tf.isneginf())):
        same(a, w)


UNPOOL_CASES = [(1, (2, 3, 10), {"kernel_size": 3, "stride": 2}, None),
                (2, (2, 3, 9, 8), {"kernel_size": 3, "stride": (3, 2), "padding": 1}, (9, 8)),
                (2, (2, 3, 9, 8), {"kernel_size": 2}, None),
                (3, (2, 3, 2, 9, 4), {"kernel_size": 2}, (2, 9, 4))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nd,shape,kw,size", UNPOOL_CASES)
def test_max_unpool_inverts_max_pool_as_torch(backend, nd, shape, kw, size):
    """Values with inf and NaN: the index of a window holding NaN is its last NaN's."""
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[[0, 1, 2, 5, 11]] = [math.inf, -math.inf, math.nan, math.nan, math.inf]
    pool, unpool = getattr(F, f"max_pool{nd}d"), getattr(F, f"max_unpool{nd}d")
    got = run(backend, lambda g, t: (*pool(t, return_indices=True, **kw),
                                     unpool(*pool(t, return_indices=True, **kw), output_size=size,
                                            **kw)), x)
    tpool = getattr(torch.nn.functional, f"max_pool{nd}d")
    tunpool = getattr(torch.nn.functional, f"max_unpool{nd}d")
    want = tpool(torch.tensor(x), return_indices=True, **kw)
    for a, w in zip(got, (*want, tunpool(*want, output_size=size, **kw))):
        same(a, w)


def _uint8_resize_cases(count: int, seed: int):
    """Random uint8 (N, C, H, W) inputs with random output sizes or scale factors (up and
    down), align_corners on and off, at most 4 channels (the PyTorch CPU kernel for more
    channels repeats the first row when a width is 1: a PyTorch bug not to follow)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        h, w = (int(v) for v in rng.integers(1, 30, 2))
        x = rng.integers(0, 256, (2, int(rng.integers(1, 5)), h, w)).astype(np.uint8)
        align = bool(rng.integers(0, 2))
        if rng.random() < 0.3:
            factors = tuple(float(v) for v in rng.uniform(0.3, 3.0, 2))
            if min(math.floor(h * factors[0]), math.floor(w * factors[1])) < 1:
                continue
            kw = {"scale_factor": factors}
        else:
            kw = {"size": tuple(int(v) for v in rng.integers(1, 40, 2))}
        cases.append((x, dict(kw, mode="bilinear", align_corners=align)))
    return cases


@pytest.mark.parametrize("backend,count", [("reference", 120), ("cpu", 12)])
def test_uint8_bilinear_matches_torch_bit_for_bit(backend, count):
    cases = _uint8_resize_cases(count, seed=len(backend))
    got = run(backend, lambda g, *xs: tuple(F.interpolate(x, **kw) for x, (_, kw) in
                                            zip(xs, cases)), *(x for x, _ in cases))
    for out, (x, kw) in zip(got, cases):
        want = torch.nn.functional.interpolate(torch.from_numpy(x), **kw).numpy()
        assert out.dtype == np.uint8 and out.shape == want.shape, (kw, out.shape, want.shape)
        np.testing.assert_array_equal(out, want, err_msg=f"{x.shape} {kw}")


def test_integer_linear_modes_raise_as_torch_does():
    g = lm.Graph()
    cases = [((1, 2, 5), "uint8", "linear"), ((1, 1, 2, 3, 4), "uint8", "trilinear"),
             ((1, 2, 3, 4), "int32", "bilinear")]
    for shape, dtype, mode in cases:
        with pytest.raises(NotImplementedError, match=f"{mode}.*{dtype}"):
            F.interpolate(g.tensor(shape, dtype=dtype), scale_factor=2, mode=mode)
        with pytest.raises(NotImplementedError):  # PyTorch raises the same
            torch.nn.functional.interpolate(torch.zeros(shape, dtype=getattr(torch, dtype)),
                                            scale_factor=2, mode=mode)
    with pytest.raises(lm.OpError, match="sizes must be > 0"):
        F.interpolate(g.tensor((1, 1, 4, 4), dtype="uint8"), size=(0, 3), mode="bilinear")


@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_over_a_zero_size_axis(backend):
    """Code generators index no element of an empty tensor (they built `i % 0`)."""
    x = np.ones((3, 0, 4), np.float32)
    v = np.ones((0,), np.float32)
    m = np.ones((0, 8), np.float32)
    got = run(backend, lambda g, a, b, c: (a.sum(1), a.bool().any(1), a.bool().all(1),
                                           a.std(1), a.var(1), a.mean(1), b @ c, b @ b), x, v, m)
    ta, tb, tc = torch.tensor(x), torch.tensor(v), torch.tensor(m)
    want = (ta.sum(1), ta.bool().any(1), ta.bool().all(1), ta.std(1), ta.var(1), ta.mean(1),
            tb @ tc, tb @ tb)
    for a, b in zip(got, want):
        same(a, b)
