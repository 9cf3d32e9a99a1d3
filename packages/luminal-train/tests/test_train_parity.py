"""Forward values and gradients of the PyTorch-parity ops against PyTorch, on the reference
and cpu backends: exact selection with inf/NaN around, PyTorch's subgradients at kinks, the
ops added for parity (sort, scatter, cummax, conv_transpose, interpolate...), losses with
class weights and probability targets, detach."""

from __future__ import annotations

import math

import luminal as lm
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional
BACKENDS = ["reference", "cpu"]


def check(backend, fn, *arrays, grad=True, tfn=None, rtol=1e-4, atol=1e-5):
    """fn on luminal and on torch (tfn, default fn) with the same arrays: values and the
    gradient of the sum w.r.t. every float input (`grad`: True, False, or the indices of
    the inputs to differentiate)."""
    wanted = set(range(len(arrays))) if grad is True else set(grad or ())
    g = lm.Graph()
    ins = [g.tensor(a.shape, dtype=str(a.dtype)).set(a) for a in arrays]
    out = fn(*ins)
    out.retrieve()
    floats = [t for k, t in enumerate(ins) if t.dtype.is_float and k in wanted]
    grads = [d.retrieve() for d in lt.grad(out.sum(), floats)] if floats else []
    g.compile((lm.GenericCompiler(), lm.backend(backend)))
    g.execute()
    tins = [torch.tensor(a, requires_grad=a.dtype.kind == "f" and k in wanted)
            for k, a in enumerate(arrays)]
    want = (tfn or fn)(*tins)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
    assert out.numpy().dtype == want.detach().numpy().dtype
    if grads:
        tw = torch.autograd.grad(want.sum(), [t for t in tins if t.requires_grad],
                                 allow_unused=True)
        for got, w in zip(grads, tw):
            w = np.zeros_like(got.numpy()) if w is None else w.numpy()
            assert got.numpy().shape == w.shape
            np.testing.assert_allclose(got.numpy(), w, rtol=rtol, atol=atol)


SPECIAL = np.array([[-2.0, -1.0, 0.0, 1.0, 2.0, 0.5], [math.inf, -math.inf, math.nan, -0.5,
                                                     3.0, -3.0]], np.float32)
KINKS = np.array([[-1.0, 0.0, 1.0, -2.5, 1.5, 0.25]], np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["relu", "clamp", "abs", "hardtanh", "relu6", "leaky_relu"])
def test_subgradients_at_kinks_match_torch(backend, name):
    fns = {
        "relu": lambda x: x.relu(),
        "clamp": lambda x: x.clamp(-1.0, 1.0),
        "abs": lambda x: x.abs(),
        "hardtanh": lambda x: F.hardtanh(x, -1.0, 1.5),
        "relu6": lambda x: F.relu6(x * 6) if isinstance(x, lm.GraphTensor) else TF.relu6(x * 6),
        "leaky_relu": lambda x: F.leaky_relu(x) if isinstance(x, lm.GraphTensor) else
        TF.leaky_relu(x),
    }
    tf = {"hardtanh": lambda x: TF.hardtanh(x, -1.0, 1.5)}.get(name)
    check(backend, fns[name], KINKS, tfn=tf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_and_indexing_keep_inf_and_nan_out(backend):
    idx = np.array([0, 1, 2, 5, 3], np.int32)
    check(backend, lambda x: lm.where(x > 0, x.log(), 0.0) if isinstance(x, lm.GraphTensor)
          else torch.where(x > 0, x.log(), 0.0), SPECIAL[1:], grad=False)
    check(backend, lambda x, i: x[1][i], SPECIAL, idx, grad=False,
          tfn=lambda x, i: x[1][i.long()])
    check(backend, lambda x: x.masked_fill(x.abs() > 2, -math.inf).softmax(-1), SPECIAL[:1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_edges_match_torch(backend):
    x = np.array([0.0, 1.0, 2.5, 0.3], np.float32)
    for e in (0.3, -0.3, 2.0, 8.0, 5.5, -1.0, 0.0):
        check(backend, lambda t, e=e: t ** e, x)
    neg = np.array([-1.5, -2.0], np.float32)
    check(backend, lambda t: t ** 0.5, neg, rtol=0, atol=0)  # NaN value and gradient


POW_BASES = [-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.inf, math.nan]
POW_EXPONENTS = [-3.0, -2.0, -1.0, -0.5, 0.0, 0.3, 0.5, 1.0, 2.0, 2.5, 3.0, 70.0, math.inf,
                 math.nan]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_value_and_gradients_on_the_edge_grid_match_torch(backend):
    """Every base (+-inf, 0, 1, negative, NaN) against every exponent (0, fractional, whole,
    large, inf, NaN): the value and both gradients are PyTorch's, NaN and inf included."""
    grid = np.array([(b, e) for b in POW_BASES for e in POW_EXPONENTS], np.float32)
    check(backend, lambda b, e: b ** e, grid[:, 0].copy(), grid[:, 1].copy(), rtol=1e-4, atol=0)
    bases = np.array(POW_BASES, np.float32)
    for e in POW_EXPONENTS[:-2]:  # a Python exponent (torch.pow(Tensor, Scalar))
        check(backend, lambda t, e=e: t ** e, bases, rtol=1e-4, atol=0)
    for c in (-2.0, -0.5, 0.0, 0.5, 1.0, 2.0):  # a Python base (torch.pow(Scalar, Tensor))
        check(backend, lambda t, c=c: c ** t, np.array(POW_EXPONENTS, np.float32),
              rtol=1e-4, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_activations_have_zero_gradients(backend):
    x = np.array([300.0, -300.0, 50.0, -50.0], np.float32)
    check(backend, lambda t: t.sigmoid(), x)
    check(backend, lambda t: t.tanh(), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_ops_gradients(backend):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    idx = rng.integers(0, 6, (3, 4)).astype(np.int32)
    src = rng.standard_normal((3, 4)).astype(np.float32)
    check(backend, lambda t: t.sort(1).values * t.cummax(1).values, x)
    check(backend, lambda t: t.logcumsumexp(1), x)
    check(backend, lambda t, i, s: t.scatter(1, i[:, :1], s[:, :1]), x, idx, src,
          tfn=lambda t, i, s: t.scatter(1, i[:, :1].long(), s[:, :1]))
    check(backend, lambda t, i, s: t.scatter_reduce(1, i, s, "sum"), x, idx, src,
          tfn=lambda t, i, s: t.scatter_reduce(1, i.long(), s, "sum"))
    check(backend, lambda t: t.diagonal(1).sum() + t[:, :3].diag().sum() * 0 + t.topk(2).values,
          x, tfn=lambda t: t.diagonal(1).sum() + t[:, :3].diag().sum() * 0 + t.topk(2).values)
    check(backend, lambda a, b: lm.einsum("ij,kj->ik", a, b) if isinstance(a, lm.GraphTensor)
          else torch.einsum("ij,kj->ik", a, b), x, x[:2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_nn_parity_gradients(backend):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    check(backend, lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1, output_padding=1),
          x, w, tfn=lambda a, b: TF.conv_transpose2d(a, b, stride=2, padding=1,
                                                      output_padding=1))
    check(backend, lambda a: F.interpolate(a, size=(7, 3), mode="bilinear", align_corners=False),
          x, tfn=lambda a: TF.interpolate(a, size=(7, 3), mode="bilinear", align_corners=False))
    check(backend, lambda a: F.pad(a, (2, 1, 1, 2), mode="reflect"), x,
          tfn=lambda a: TF.pad(a, (2, 1, 1, 2), mode="reflect"))
    out = lambda a: F.max_pool2d(a, 2, return_indices=True)[1]  # noqa: E731
    check(backend, out, x, grad=False,
          tfn=lambda a: TF.max_pool2d(a, 2, return_indices=True)[1].int())


@pytest.mark.parametrize("backend", BACKENDS)
def test_losses_with_weights_ignore_index_and_probabilities(backend):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((4, 5)).astype(np.float32)
    logits[1, 2] = -math.inf  # in the row of an ignored target: must not reach the loss
    target = np.array([1, -100, 4, 0], np.int32)
    weight = rng.random(5).astype(np.float32)
    probs = rng.random((4, 5)).astype(np.float32)
    probs /= probs.sum(-1, keepdims=True)
    check(backend, lambda a, t, w: lt.cross_entropy(a, t, weight=w, label_smoothing=0.2),
          logits, target, weight, grad=(0,),
          tfn=lambda a, t, w: TF.cross_entropy(a, t.long(), weight=w, label_smoothing=0.2))
    check(backend, lambda a, t, w: lt.nll_loss(a, t, weight=w), logits, target, weight,
          grad=(0,), tfn=lambda a, t, w: TF.nll_loss(a, t.long(), weight=w))
    finite = np.nan_to_num(logits, neginf=-3.0)
    check(backend, lambda a, p: lt.cross_entropy(a, p, label_smoothing=0.1), finite, probs,
          tfn=lambda a, p: TF.cross_entropy(a, p, label_smoothing=0.1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_detach_stops_the_gradient(backend):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    check(backend, lambda t: t * t.detach() + t.clone(), x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["pow0", "times0", "x_minus_x", "floor", "pow0_index",
                                  "other_param"])
def test_gradient_of_a_constant_function_is_zero_as_torch(backend, name):
    """Losses that depend on x but are constant in it: PyTorch gives zeros (and, for a
    parameter the loss does not read, zeros with materialize_grads), so does luminal."""
    fns = {"pow0": lambda x, y: (x ** 0).sum(), "times0": lambda x, y: (x * 0).sum(),
           "x_minus_x": lambda x, y: (x - x).sum(), "floor": lambda x, y: x.floor().sum(),
           "pow0_index": lambda x, y: (x ** 0)[0], "other_param": lambda x, y: (y * 2).sum()}
    a = np.array([1.5, 0.0, -2.0], np.float32)
    g = lm.Graph()
    x, y = g.tensor((3,)).set(a), g.tensor((3,)).set(a)
    gx = lt.grad(fns[name](x, y), [x])[0].retrieve()
    g.compile((lm.GenericCompiler(), lm.backend(backend)))
    g.execute()
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(fns[name](tx, ty), [tx], allow_unused=True,
                                  materialize_grads=True)
    np.testing.assert_array_equal(gx.numpy(), want.numpy())


@pytest.mark.parametrize("name", ["constant", "ones_sum", "detached", "compared", "argmax"])
def test_gradient_of_a_constant_loss_raises_as_torch(name):
    """A loss that reads no float input through float ops has no grad_fn in PyTorch, whose
    autograd raises; luminal raises a ValueError saying the loss is a constant."""
    fns = {"constant": lambda g, x: g.constant(2.0) if g else torch.tensor(2.0),
           "ones_sum": lambda g, x: (g.ones((3,)) if g else torch.ones(3)).sum(),
           "detached": lambda g, x: x.detach().sum(),
           "compared": lambda g, x: (x > 0).sum().float(),
           "argmax": lambda g, x: x.argmax().float()}
    a = np.array([1.5, 0.0, -2.0], np.float32)
    tx = torch.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad(fns[name](None, tx), [tx])
    g = lm.Graph()
    x = g.tensor((3,)).set(a)
    with pytest.raises(ValueError, match="the loss is a constant"):
        lt.grad(fns[name](g, x), [x])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_gradients_with_duplicates_match_torch(backend):
    """PyTorch's scatter backward: self's gradient is zero where written, and every src
    value the index reads gets the gradient of its target, overwritten duplicates too."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 3, (3, 4, 5)).astype(np.int32)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    src = rng.standard_normal((3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5, 6)).astype(np.float32)
    for dim in (0, 1, -1):
        check(backend, lambda a, s, i, m, dim=dim: a.scatter(dim, i, s) * m, x, src, idx, w,
              grad=(0, 1), tfn=lambda a, s, i, m, dim=dim: a.scatter(dim, i.long(), s) * m)
        check(backend, lambda a, s, i, dim=dim: a.scatter_reduce(dim, i, s, "amax"), x, src, idx,
              grad=(0, 1), tfn=lambda a, s, i, dim=dim: a.scatter_reduce(dim, i.long(), s, "amax"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sign_and_copysign_gradients_match_torch(backend):
    """sign is differentiable with gradient 0 (not a constant loss); copysign's gradient is 0
    at a zero magnitude (+0 and -0), as PyTorch's."""
    v = np.array([-1.0, -0.0, 0.0, 1.0, 2.5, math.nan], np.float32)
    check(backend, lambda x: x.sign(), v)
    a, b = np.meshgrid(v[:5], v, indexing="ij")
    check(backend, lambda x, y: x.copysign(y), a.ravel().copy(), b.ravel().copy(), grad=[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [0, -1, 3, -math.inf])
def test_normalize_with_any_p_matches_torch(backend, p):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    if p >= 0:  # (a zero under a negative p: NaN gradient, see docs/pytorch-parity.md)
        x[0, :2] = 0.0
    check(backend, lambda t: F.normalize(t, p=p, dim=1), x,
          tfn=lambda t: TF.normalize(t, p=p, dim=1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eq,shapes", [("...id,...jd->...ij", [(3, 4, 5), (3, 2, 5)]),
                                       ("...id,...jd", [(3, 4, 5), (1, 2, 5)]),
                                       ("i...j,ji...->...", [(2, 3, 4, 5), (5, 2, 4)]),
                                       ("...ii->...i", [(3, 4, 4)]), ("ii->", [(4, 4)])])
def test_einsum_with_ellipsis_matches_torch(backend, eq, shapes):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check(backend, lambda *t: lm.einsum(eq, *t), *arrays, tfn=lambda *t: torch.einsum(eq, *t))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_gradients_use_torchs_formula(backend, name):
    """PyTorch's formulas (s * (g - sum(g * s)) and g - exp(out) * sum(g)), with -inf logits
    in some rows and a row of -inf only (NaN in both); the gradient of `softmax(x).sum()` is
    0 up to PyTorch's own rounding (tinygrad's test_softmax checks it at atol 1e-7)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(np.float32) * 3
    x[1, 2] = x[3, [0, 4]] = x[4, :] = -math.inf
    w = rng.standard_normal((5, 7)).astype(np.float32)
    for dim in (1, 0, -1):
        check(backend, lambda a, b, d=dim: getattr(a, name)(d) * b, x, w, grad=[0], atol=3e-7)
    wide = rng.uniform(-2, 2, (45, 65)).astype(np.float32)
    check(backend, lambda a: getattr(a, name)(1), wide, atol=1e-7 if name == "softmax" else 1e-6,
          rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_exponent_gradient_with_a_broadcast_base(backend):
    """The kernel of this gradient made GCC 12's SLP vectorizer crash (an internal compiler
    error); the cpu backend compiles such a kernel again without that pass."""
    rng = np.random.default_rng(0)
    base = rng.uniform(-2, 2, (4, 1)).astype(np.float32)
    exponent = rng.uniform(-2, 2, (4, 5)).astype(np.float32)
    check(backend, lambda a, b: a ** b, base, exponent, grad=[1])
