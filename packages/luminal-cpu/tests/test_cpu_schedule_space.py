"""Every value of the cpu backend's schedule space: lowered with it, random graphs
(elementwise with NaN/inf, sums and maxima over each axis, matmul-shaped reductions as
generated loops, softmax, a pooling window and a concatenation) give the reference
backend's results, and the setting changes the rendered code where it applies."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.reference import ReferenceBackend
from luminal_codegen import Kernel, Schedule, lower, render_kernel
from luminal_cpu import CpuBackend
from luminal_cpu.dialect import C
from luminal_cpu.source import kernel_source

# the generated kernels' settings; `quant_activations` (the quantized matmul call's) is tested
# in luminal-search's tests/test_quant_search.py
SPACE = CpuBackend.kernel_space
SETTINGS = [(name, v) for name, values in SPACE.items() for v in values]


def _specials(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`a` with a few NaN and infinite entries."""
    flat = a.reshape(-1).copy()
    at = rng.choice(flat.size, size=3, replace=False)
    flat[at] = [np.nan, np.inf, -np.inf]
    return flat.reshape(a.shape)


def _elementwise(g, rng):
    x = g.tensor((6, 5, 40), name="x").set(_specials(rng.standard_normal((6, 5, 40)), rng))
    y = g.tensor((5, 40), name="y").set(rng.standard_normal((5, 40)))
    w = g.tensor((4, 300, 12), name="w").set(rng.standard_normal((4, 300, 12)))
    return [(x * y.expand((6, 5, 40)) + 1.0).exp2(), x.permute((2, 0, 1)).contiguous() * 2.0,
            x.permute((1, 0, 2))[:, :, :30] * 3.0,  # three axes no view merges
            w.permute((1, 0, 2))[:, :, :10] + 1.0]  # and a long first one


def _reductions(g, rng):
    x = g.tensor((7, 9, 300), name="x").set(rng.standard_normal((7, 9, 300)))
    z = g.tensor((3, 1000), name="z").set(_specials(rng.standard_normal((3, 1000)), rng))
    return [*(x.sum(a) for a in range(3)), *(x.max(a).values for a in range(3)),
            (x * x).sum(2).sqrt(), z.sum(1), z.max(1).values, z.sum(0)]


def _matmul(g, rng):
    a = g.tensor((5, 300), name="a").set(rng.standard_normal((5, 300)))
    b = g.tensor((300, 7), name="b").set(rng.standard_normal((300, 7)))
    c = g.tensor((2, 4, 64), name="c").set(rng.standard_normal((2, 4, 64)))
    d = g.tensor((2, 64, 3), name="d").set(rng.standard_normal((2, 64, 3)))
    return [a @ b, (c @ d).relu()]


def _softmax(g, rng):
    x = g.tensor((4, 2, 200), name="x").set(rng.standard_normal((4, 2, 200)) * 4)
    return [x.softmax(2), x.softmax(0)]


def _windows(g, rng):
    """Kernels `rows.py` renders a row at a time: a pooling window, a concatenation."""
    x = g.tensor((2, 3, 12, 20), name="x").set(_specials(rng.standard_normal((2, 3, 12, 20)),
                                                          rng))
    pooled = F.max_pool2d(x, 3, stride=1, padding=1)
    return [pooled, lm.cat([x, pooled * 2.0], 1)]


GRAPHS = {"windows": _windows, "elementwise": _elementwise, "reductions": _reductions,
          "matmul": _matmul, "softmax": _softmax}


def _run(build, backend, settings):
    """The graph from `build`, every kernel tuned with `settings` (matmuls as generated
    loops, so that they are tuned too), run on `backend`."""
    g = lm.Graph()
    outs = [o.retrieve() for o in build(g, np.random.default_rng(7))]
    lm.GenericCompiler().compile(g)
    if settings is not None:
        backend = backend.with_schedule(Schedule.uniform(g.nodes, settings, loop_matmuls=True))
    g.compile(backend)
    g.execute()
    return [np.array(o.numpy()) for o in outs], g


@pytest.mark.parametrize("setting", SETTINGS, ids=[f"{n}={v}" for n, v in SETTINGS])
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_setting_gives_reference_results(graph, setting):
    got, _ = _run(GRAPHS[graph], CpuBackend(), (setting,))
    want, _ = _run(GRAPHS[graph], ReferenceBackend(), None)
    for a, b in zip(got, want):
        # a split reduction adds its chunks in another order than the reference's pairwise
        # sum: float32 rounding, a few ulps of the largest partial sum (|x| <= ~4, 1000 terms)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def _sources(graph, settings):
    g = lm.Graph()
    [o.retrieve() for o in GRAPHS[graph](g, np.random.default_rng(7))]
    lm.GenericCompiler().compile(g)
    program = lower(g, Schedule.uniform(g.nodes, settings, loop_matmuls=True))
    return [kernel_source(k, "k") for k in program.kernels if isinstance(k, Kernel)]


@pytest.mark.parametrize("setting", SETTINGS, ids=[f"{n}={v}" for n, v in SETTINGS])
def test_setting_changes_some_kernel(setting):
    changed = [graph for graph in GRAPHS
               if _sources(graph, (setting,)) != _sources(graph, ())]
    assert changed, f"{setting} rendered every kernel as the default"


def test_split_reduction_is_shared_then_combined():
    (source,) = [s for s in _sources("reductions", (("split_k", 4),)) if "lm_part" in s][:1]
    assert "#pragma omp single copyprivate(lm_part)" in source
    assert source.count("lm_for_begin(") == 2  # the partials, then the combination


@pytest.mark.parametrize("setting,match", [
    (("split_k", 0), r"split_k=0 is outside its range \[1, 64\]"),
    (("loop_order", -1), r"loop_order=-1 is outside its range"),
    (("lanes", 2.5), r"lanes=2.5 is outside its range"),
    (("split_axis", True), r"split_axis=True is outside its range"),
    (("threads", 2), r"has no tunable setting \['threads'\]"),
])
def test_bad_settings_are_refused(setting, match):
    program = lower(_one_kernel_graph())
    kernel = next(k for k in program.kernels if isinstance(k, Kernel))
    with pytest.raises(ValueError, match=match):
        render_kernel(Kernel(kernel.params, kernel.domain, kernel.out, tuning=(setting,)),
                      "k", C)


def test_space_values_are_in_range():
    for name, values in SPACE.items():
        C.tuned(tuple((name, v) for v in values))  # raises on a value out of range


def _one_kernel_graph():
    g = lm.Graph()
    g.tensor((4, 8), name="x").set(np.ones((4, 8), np.float32)).sum(1).retrieve()
    lm.GenericCompiler().compile(g)
    return g

