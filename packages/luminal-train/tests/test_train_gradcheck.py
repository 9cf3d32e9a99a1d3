"""Gradients of every differentiable high-level op against torch.autograd.

Each case builds `loss = sum(op(inputs) * cotangent)` with a random cotangent, takes
`luminal_train.grad` of it w.r.t. every float input, runs the graph (float32, reference backend)
and compares with PyTorch in float64. Tolerance: |ours - torch| <= RTOL * |torch| + ATOL * s,
where s = max(1, max |torch|) for that gradient, with RTOL = ATOL = 2e-4 unless a case says
otherwise (erf-based GELU uses a polynomial erf, so its derivative is within 2e-3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import luminal as lm
import luminal_nn.functional as F
import luminal_train as lt
import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RTOL = ATOL = 2e-4


@dataclass
class Case:
    name: str
    ours: Callable  # (*graph tensors) -> graph tensor
    theirs: Callable  # (*torch tensors) -> torch tensor
    shapes: list[tuple[int, ...]]
    positive: bool = False  # draw inputs from [0.5, 2) instead of N(0, 1)
    tol: float = RTOL
    consts: dict = field(default_factory=dict)  # extra integer inputs: name -> array


IDX = np.array([[2, 0, 1, 2], [1, 1, 0, 2], [0, 2, 2, 1]], dtype=np.int64)
TOKENS = np.array([[3, 0, 5], [5, 1, 1]], dtype=np.int64)
ROWS = np.array([2, 0, 2, 1], dtype=np.int64)


def _conv_w(cases: list[Case]) -> None:
    cases += [
        Case("conv2d", lambda x, w, b: F.conv2d(x, w, b, padding=1),
             lambda x, w, b: TF.conv2d(x, w, b, padding=1), [(2, 3, 6, 5), (4, 3, 3, 3), (4,)]),
        Case("conv2d_stride_dilation", lambda x, w: F.conv2d(x, w, stride=2, dilation=2),
             lambda x, w: TF.conv2d(x, w, stride=2, dilation=2), [(2, 2, 9, 8), (3, 2, 3, 2)]),
        Case("conv2d_groups", lambda x, w: F.conv2d(x, w, stride=(1, 2), padding=(2, 1), groups=2),
             lambda x, w: TF.conv2d(x, w, stride=(1, 2), padding=(2, 1), groups=2),
             [(1, 4, 5, 7), (6, 2, 3, 3)]),
        Case("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
             lambda x, w, b: TF.conv1d(x, w, b, stride=2, padding=1),
             [(2, 3, 11), (5, 3, 4), (5,)]),
    ]


def _cases() -> list[Case]:
    c: list[Case] = []
    unary = {
        "exp": (lambda x: x.exp(), torch.exp, False),
        "exp2": (lambda x: x.exp2(), torch.exp2, False),
        "log": (lambda x: x.log(), torch.log, True),
        "log2": (lambda x: x.log2(), torch.log2, True),
        "log10": (lambda x: x.log10(), torch.log10, True),
        "log1p": (lambda x: x.log1p(), torch.log1p, True),
        "expm1": (lambda x: x.expm1(), torch.expm1, False),
        "sin": (lambda x: x.sin(), torch.sin, False),
        "cos": (lambda x: x.cos(), torch.cos, False),
        "tan": (lambda x: (x * 0.5).tan(), lambda x: (x * 0.5).tan(), False),
        "sqrt": (lambda x: x.sqrt(), torch.sqrt, True),
        "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt, True),
        "reciprocal": (lambda x: x.reciprocal(), torch.reciprocal, True),
        "square": (lambda x: x.square(), torch.square, False),
        "abs": (lambda x: x.abs(), torch.abs, False),
        "neg": (lambda x: -x, torch.neg, False),
        "pow3": (lambda x: x ** 3, lambda x: x ** 3, False),
        "pow_frac": (lambda x: x ** 2.5, lambda x: x ** 2.5, True),
        "pow_neg": (lambda x: x ** -1.5, lambda x: x ** -1.5, True),
        "rpow": (lambda x: 2.0 ** x, lambda x: 2.0 ** x, False),
        "tanh": (lambda x: x.tanh(), torch.tanh, False),
        "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid, False),
        "relu": (F.relu, TF.relu, False),
        "relu6": (lambda x: (x * 4).relu6(), lambda x: TF.relu6(x * 4), False),
        "gelu_tanh": (lambda x: F.gelu(x, "tanh"), lambda x: TF.gelu(x, approximate="tanh"),
                      False),
        "silu": (F.silu, TF.silu, False),
        "softplus": (F.softplus, TF.softplus, False),
        "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1), False),
        "elu": (F.elu, TF.elu, False),
        "mish": (F.mish, TF.mish, False),
        "hardswish": (F.hardswish, TF.hardswish, False),
        "hardsigmoid": (lambda x: x.hardsigmoid(), TF.hardsigmoid, False),
        "clamp": (lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7), False),
    }
    for name, (ours, theirs, pos) in unary.items():
        c.append(Case(name, ours, theirs, [(3, 5)], positive=pos))
    c.append(Case("gelu", F.gelu, TF.gelu, [(4, 6)], tol=2e-3))
    c.append(Case("erf", lambda x: x.erf(), torch.erf, [(4, 6)], tol=2e-3))
    # elementwise through views: a transposed, strided, flipped read
    c.append(Case("exp_of_view", lambda x: x.T[::2].flip(1).exp(),
                  lambda x: x.T[::2].flip(1).exp(), [(3, 5)]))
    binary = {
        "add": (lambda a, b: a + b, [(2, 3, 4), (4,)]),
        "sub": (lambda a, b: a - b, [(2, 3, 4), (3, 1)]),
        "mul": (lambda a, b: a * b, [(3, 1), (1, 4)]),
        "mul_self": (lambda a: a * a.T, [(4, 4)]),
        "div": (lambda a, b: a / b, [(2, 3), (2, 1)]),
        "rdiv": (lambda a: 1.5 / a, [(2, 3)]),
        "maximum": (lambda a, b: a.maximum(b), [(3, 4), (4,)]),
        "minimum": (lambda a, b: a.minimum(b), [(3, 4), (3, 1)]),
    }
    for name, (fn, shapes) in binary.items():
        pos = name in ("div", "rdiv")
        c.append(Case(name, fn, fn, shapes, positive=pos))
    c += [
        Case("pow_tensor", lambda a, b: a ** b, lambda a, b: a ** b, [(3, 4), (4,)], positive=True),
        Case("fmod", lambda a, b: (a * 3).fmod(b), lambda a, b: torch.fmod(a * 3, b),
             [(3, 4), (3, 4)], positive=True),
        Case("remainder", lambda a, b: (a * 3 - 4) % b, lambda a, b: torch.remainder(a * 3 - 4, b),
             [(3, 4), (4,)], positive=True),
        Case("where", lambda a, b, m: lm.where(m > 0, a, b),
             lambda a, b, m: torch.where(m > 0, a, b), [(3, 4), (4,), (3, 4)]),
        Case("masked_fill", lambda a, m: a.masked_fill(m > 0.5, 2.0),
             lambda a, m: a.masked_fill(m > 0.5, 2.0), [(3, 4), (3, 4)]),
        # reductions
        Case("sum_all", lambda x: x.sum(), lambda x: x.sum(), [(3, 4, 2)]),
        Case("sum_dims", lambda x: x.sum((0, 2), keepdim=True),
             lambda x: x.sum((0, 2), keepdim=True), [(3, 4, 2)]),
        Case("mean", lambda x: x.mean(-1), lambda x: x.mean(-1), [(3, 4, 5)]),
        Case("amax", lambda x: x.amax(1), lambda x: x.amax(1), [(3, 4, 5)]),
        Case("amin", lambda x: x.amin((0, 2)), lambda x: x.amin((0, 2)), [(3, 4, 5)]),
        Case("max_all", lambda x: x.max(), lambda x: x.max(), [(3, 4)]),
        Case("max_dim", lambda x: x.max(1).values, lambda x: x.max(1).values, [(3, 4)]),
        Case("var", lambda x: x.var(1), lambda x: x.var(1), [(3, 6)]),
        Case("std", lambda x: x.std(0, keepdim=True, correction=0),
             lambda x: x.std(0, keepdim=True, correction=0), [(5, 3)]),
        Case("prod", lambda x: x.prod(1), lambda x: x.prod(1), [(3, 4)], positive=True),
        Case("prod_signed", lambda x: x.prod(0), lambda x: x.prod(0), [(3, 4)]),
        Case("logsumexp", lambda x: x.logsumexp(-1), lambda x: x.logsumexp(-1), [(3, 7)]),
        Case("norm2", lambda x: x.norm(dim=1), lambda x: x.norm(dim=1), [(3, 5)]),
        Case("norm1", lambda x: x.norm(1, dim=1), lambda x: x.norm(1, dim=1), [(3, 5)]),
        Case("cumsum", lambda x: x.cumsum(1), lambda x: x.cumsum(1), [(3, 6)]),
        Case("cumprod", lambda x: x.cumprod(0), lambda x: x.cumprod(0), [(5, 3)], positive=True),
        Case("softmax", lambda x: x.softmax(1), lambda x: x.softmax(1), [(2, 5, 3)]),
        Case("log_softmax", lambda x: F.log_softmax(x, -1), lambda x: TF.log_softmax(x, -1),
             [(4, 6)]),
        # movement
        Case("reshape", lambda x: x.reshape(4, 6).exp(), lambda x: x.reshape(4, 6).exp(),
             [(2, 3, 4)]),
        Case("permute", lambda x: x.permute(2, 0, 1) * 2, lambda x: x.permute(2, 0, 1) * 2,
             [(2, 3, 4)]),
        Case("transpose_reshape", lambda x: x.transpose(0, 1).reshape(-1).sin(),
             lambda x: x.transpose(0, 1).reshape(-1).sin(), [(3, 4)]),
        Case("expand", lambda x: x.expand(3, 4, 5).sin(), lambda x: x.expand(3, 4, 5).sin(),
             [(4, 1)]),
        Case("slices", lambda x: x[1:, ::2, -3:].exp(), lambda x: x[1:, ::2, -3:].exp(),
             [(3, 5, 4)]),
        Case("negative_step", lambda x: x[::-2, 1:3].sin(), lambda x: x.flip(0)[::2, 1:3].sin(),
             [(5, 4)]),
        Case("select", lambda x: x[1, :, 2] * 3, lambda x: x[1, :, 2] * 3, [(3, 4, 5)]),
        Case("flip", lambda x: x.flip(0, 2).exp(), lambda x: x.flip(0, 2).exp(), [(2, 3, 4)]),
        Case("pad", lambda x: F.pad(x, [1, 2, 0, 1]).exp(), lambda x: TF.pad(x, [1, 2, 0, 1]).exp(),
             [(2, 3, 4)]),
        Case("pad_value", lambda x: F.pad(x, [2, 0], value=1.5).sin(),
             lambda x: TF.pad(x, [2, 0], value=1.5).sin(), [(3, 4)]),
        Case("pad_crop", lambda x: F.pad(x, [-1, 2]).exp(), lambda x: TF.pad(x, [-1, 2]).exp(),
             [(3, 4)]),
        Case("cat", lambda a, b: lm.cat([a, b.exp(), a], 1),
             lambda a, b: torch.cat([a, b.exp(), a], 1), [(2, 3), (2, 4)]),
        Case("stack", lambda a, b: lm.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1),
             [(2, 3), (2, 3)]),
        Case("repeat", lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), [(2, 3)]),
        Case("repeat_interleave", lambda x: x.repeat_interleave(3, 1),
             lambda x: x.repeat_interleave(3, 1), [(2, 3)]),
        Case("roll", lambda x: x.roll(2, 1), lambda x: x.roll(2, 1), [(2, 5)]),
        Case("unfold", lambda x: x.unfold(1, 3, 2).exp(), lambda x: x.unfold(1, 3, 2).exp(),
             [(2, 8)]),
        Case("unfold_overlap", lambda x: x.unfold(0, 4, 1).sin(),
             lambda x: x.unfold(0, 4, 1).sin(), [(7, 2)]),
        Case("squeeze_unsqueeze", lambda x: x.squeeze(1).unsqueeze(0).exp(),
             lambda x: x.squeeze(1).unsqueeze(0).exp(), [(3, 1, 4)]),
        Case("split_chunk", lambda x: x.split(2, 1)[1][:2] * x.chunk(2, 0)[0][:, :2],
             lambda x: x.split(2, 1)[1][:2] * x.chunk(2, 0)[0][:, :2], [(4, 5)]),
        Case("tril_triu", lambda x: x.tril(-1) + x.triu(1) * 2,
             lambda x: x.tril(-1) + x.triu(1) * 2, [(4, 5)]),
        Case("gather", lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i), [(3, 5)],
             consts={"i": IDX}),
        Case("index_select", lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i),
             [(3, 4)], consts={"i": ROWS}),
        Case("index_tensor", lambda x, i: x[:, i], lambda x, i: x[:, i], [(2, 3)],
             consts={"i": ROWS}),
        # products
        Case("matmul", lambda a, b: a @ b, lambda a, b: a @ b, [(3, 4), (4, 5)]),
        Case("matmul_batched", lambda a, b: a @ b, lambda a, b: a @ b, [(2, 3, 4), (4, 5)]),
        Case("matmul_broadcast", lambda a, b: a @ b, lambda a, b: a @ b,
             [(2, 1, 3, 4), (3, 4, 2)]),
        Case("matmul_vec", lambda a, b: a @ b, lambda a, b: a @ b, [(4,), (4, 5)]),
        Case("matvec", lambda a, b: a @ b, lambda a, b: a @ b, [(3, 4), (4,)]),
        Case("matmul_transposed", lambda a, b: a.T @ b.T, lambda a, b: a.T @ b.T,
             [(4, 3), (5, 4)]),
        Case("linear", lambda x, w, b: F.linear(x, w, b), lambda x, w, b: TF.linear(x, w, b),
             [(2, 5, 4), (3, 4), (3,)]),
        # nn functions
        Case("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b),
             lambda x, w, b: TF.layer_norm(x, (6,), w, b), [(2, 3, 6), (6,), (6,)]),
        Case("layer_norm_2d", lambda x: F.layer_norm(x, (3, 4)),
             lambda x: TF.layer_norm(x, (3, 4)), [(2, 3, 4)]),
        Case("rms_norm", lambda x, w: F.rms_norm(x, (5,), w, 1e-6),
             lambda x, w: TF.rms_norm(x, (5,), w, 1e-6), [(3, 5), (5,)]),
        Case("normalize", lambda x: F.normalize(x, dim=1), lambda x: TF.normalize(x, dim=1),
             [(3, 4)]),
        Case("embedding", lambda w, i: F.embedding(i, w), lambda w, i: TF.embedding(i, w), [(6, 4)],
             consts={"i": TOKENS}),
        Case("max_pool2d", lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2),
             [(2, 3, 6, 4)]),
        Case("max_pool2d_pad", lambda x: F.max_pool2d(x, 3, 2, 1),
             lambda x: TF.max_pool2d(x, 3, 2, 1), [(1, 2, 7, 6)]),
        Case("max_pool1d", lambda x: F.max_pool1d(x, 3, 1), lambda x: TF.max_pool1d(x, 3, 1),
             [(2, 2, 7)]),
        Case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2),
             [(2, 3, 6, 4)]),
        Case("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
             lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(1, 2, 7, 6)]),
        Case("avg_pool1d", lambda x: F.avg_pool1d(x, 2), lambda x: TF.avg_pool1d(x, 2),
             [(2, 3, 8)]),
        Case("interpolate", lambda x: F.interpolate(x, scale_factor=2),
             lambda x: TF.interpolate(x, scale_factor=2), [(1, 2, 3, 3)]),
        Case("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
             [(2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8)]),
        Case("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             lambda q, k, v: TF.scaled_dot_product_attention(q, k, v),
             [(1, 3, 8), (1, 5, 8), (1, 5, 2)]),
    ]
    _conv_w(c)
    return c


CASES = _cases()


def _draw(rng: np.random.Generator, shape, positive: bool) -> np.ndarray:
    if positive:
        return rng.uniform(0.5, 2.0, shape)
    return rng.standard_normal(shape)


def run_case(case: Case, seed: int = 0, backend: str = "reference") -> None:
    rng = np.random.default_rng(seed)
    values = [_draw(rng, s, case.positive) for s in case.shapes]
    g = lm.Graph()
    xs = [g.tensor(v.shape, name=f"x{k}").set(v.astype(np.float32)) for k, v in enumerate(values)]
    ints = [g.tensor(a.shape, name=n, dtype=lm.int32).set(a) for n, a in case.consts.items()]
    out = case.ours(*xs, *ints)
    cot = np.asarray(rng.standard_normal(tuple(int(d) for d in out.shape)))
    loss = (out * g.tensor(cot.shape, name="cot").set(cot.astype(np.float32))).sum()
    grads = [t.retrieve() for t in lt.grad(loss, xs)]
    out.retrieve()
    g.compile((lm.GenericCompiler(), lt.default_backend(backend)))
    g.execute()

    ts = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    t_out = case.theirs(*ts, *(torch.tensor(a) for a in case.consts.values()))
    (t_out * torch.tensor(cot)).sum().backward()
    _close(out.numpy(), t_out.detach().numpy(), case.tol, f"{case.name}: forward")
    for k, (ours, t) in enumerate(zip(grads, ts)):
        # torch leaves .grad unset for inputs that only feed comparisons; ours is zeros
        want = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
        _close(ours.numpy(), want, case.tol, f"{case.name}: d/dx{k}")


def _close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_train_grad_matches_torch(case: Case) -> None:
    run_case(case)


def _cpu_or_skip() -> str:
    """"cpu" when the luminal-cpu backend is installed and usable, else skip."""
    status = {b.name: b for b in lm.backends()}.get("cpu")
    if status is None or not status.available:
        pytest.skip(f"cpu backend unavailable: {status.reason if status else 'not installed'}")
    return "cpu"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_train_grad_matches_torch_on_cpu_backend(case: Case) -> None:
    """The same gradients compiled by the cpu backend: the backward graph autograd builds
    (matmuls, col2im, gathers, masks) is a graph like any other, for any backend."""
    run_case(case, backend=_cpu_or_skip())


@pytest.mark.parametrize("seed", [1, 2])
def test_train_grad_matches_torch_other_draws(seed: int) -> None:
    """A second and third random draw of the structurally hardest cases."""
    for case in CASES:
        if case.name.startswith(("conv", "max_pool", "avg_pool", "unfold", "sdpa", "layer_norm")):
            run_case(case, seed)


def test_train_grad_symbolic_batch() -> None:
    """One compiled backward graph serves every value of a symbolic batch dim."""
    g = lm.Graph()
    x = g.tensor(("batch", 4), name="x")
    w = g.tensor((3, 4), name="w")
    b = g.tensor((3,), name="b")
    y = g.tensor(("batch",), name="y", dtype=lm.int32)
    loss = lt.cross_entropy(F.linear(x, w, b).relu() * 2, y)
    gw, gb = (t.retrieve() for t in lt.grad(loss, [w, b]))
    g.compile(lm.GenericCompiler())
    rng = np.random.default_rng(0)
    wv, bv = rng.standard_normal((3, 4)), rng.standard_normal(3)
    w.set(wv.astype(np.float32))
    b.set(bv.astype(np.float32))
    for n in (5, 2, 7):
        xv, yv = rng.standard_normal((n, 4)), rng.integers(0, 3, n)
        x.set(xv.astype(np.float32))
        y.set(yv.astype(np.int32))
        g.execute()
        tw = torch.tensor(wv, requires_grad=True)
        tb = torch.tensor(bv, requires_grad=True)
        t_loss = TF.cross_entropy(TF.linear(torch.tensor(xv), tw, tb).relu() * 2,
                                  torch.tensor(yv))
        t_loss.backward()
        _close(gw.numpy(), tw.grad.numpy(), RTOL, f"batch={n}: d/dw")
        _close(gb.numpy(), tb.grad.numpy(), RTOL, f"batch={n}: d/db")


def test_train_grad_unused_param_and_view_loss() -> None:
    """A parameter the loss ignores gets zeros; the loss may itself be a view of a node."""
    g = lm.Graph()
    a = g.tensor((2, 3), name="a").set(np.arange(6, dtype=np.float32).reshape(2, 3))
    unused = g.tensor((4,), name="unused").set(np.ones(4, np.float32))
    loss = (a * a).sum(1)[1]  # an element of a vector: a view with an offset
    ga, gu = (t.retrieve() for t in lt.Autograd([a, unused], loss))
    g.execute()
    np.testing.assert_allclose(ga.numpy(), [[0, 0, 0], [6, 8, 10]])
    np.testing.assert_allclose(gu.numpy(), np.zeros(4))


def test_train_grad_rejects_bad_inputs() -> None:
    g = lm.Graph()
    a = g.tensor((2, 3), name="a")
    with pytest.raises(ValueError, match="one element"):
        lt.grad(a * 2, [a])
    with pytest.raises(TypeError, match="inputs"):
        lt.grad((a * 2).sum(), [a * 2])
    with pytest.raises(ValueError, match="without a view"):
        lt.grad((a * 2).sum(), [a.T])


def test_train_grad_max_ties_split_like_torch() -> None:
    """Tied maxima share the gradient evenly, as PyTorch's amax does."""
    values = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)
    g = lm.Graph()
    x = g.tensor(values.shape, name="x").set(values)
    (gx,) = (t.retrieve() for t in lt.grad((x.amax(1) * g.constant(2.0)).sum(), [x]))
    g.execute()
    t = torch.tensor(values, requires_grad=True)
    (t.amax(1) * 2.0).sum().backward()
    np.testing.assert_allclose(gx.numpy(), t.grad.numpy(), rtol=1e-6)


def test_train_grad_max_over_several_axes_splits_ties_jointly() -> None:
    """A max over several axes (amax over dims, a pool window) shares the gradient among all
    tied positions together, as PyTorch's amax does, in one backward step."""
    values = np.array([[[1.0, 3.0], [3.0, 0.0]], [[2.0, 2.0], [2.0, 2.0]],
                       [[0.0, 1.0], [5.0, 1.0]]], np.float32)
    g = lm.Graph()
    x = g.tensor(values.shape, name="x").set(values)
    (gx,) = (t.retrieve() for t in lt.grad((x.amax((1, 2)) * g.constant(2.0)).sum(), [x]))
    g.execute()
    t = torch.tensor(values, requires_grad=True)
    (t.amax((1, 2)) * 2.0).sum().backward()
    np.testing.assert_allclose(gx.numpy(), t.grad.numpy(), rtol=1e-6)
    assert gx.numpy()[1].tolist() == [[0.5, 0.5], [0.5, 0.5]]
