"""`lower(..., max_args=)`: a fused kernel that would take more buffers and dims than a backend
binds is split by storing intermediates; kernels within the bound are left exactly as they
were, and the split graph computes the same numbers."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal_codegen import kernel_arguments, lower

INPUTS = 20


def summed(n: int = INPUTS):
    """`n` inputs of shape (rows, 3) added in a chain: one fused kernel of n + 1 buffers and a
    dim when nothing bounds it."""
    g = lm.Graph()
    xs = [g.tensor(("rows", 3), name=f"x{i}") for i in range(n)]
    total = xs[0]
    for k, x in enumerate(xs[1:]):
        total = total + x * float(k + 2)
    out = total.exp2().retrieve()
    lm.GenericCompiler().compile(g)
    return g, xs, out


def test_unbounded_lowering_is_one_kernel():
    g, _, _ = summed()
    (kernel,) = lower(g).kernels
    assert kernel_arguments(kernel) == INPUTS + 2  # the inputs, the output and `rows`


@pytest.mark.parametrize("limit", [4, 6, 9, 21])
def test_every_kernel_fits_the_bound(limit):
    g, _, _ = summed()
    program = lower(g, max_args=limit)
    assert len(program.kernels) > 1
    assert max(kernel_arguments(k) for k in program.kernels) <= limit


def test_a_bound_that_every_kernel_fits_changes_nothing():
    g, _, _ = summed()
    assert lower(g, max_args=INPUTS + 2) == lower(g)


def test_a_bound_below_one_primitive_op_is_refused():
    g, _, _ = summed()
    with pytest.raises(ValueError, match="max_args must be at least 4"):
        lower(g, max_args=3)


def test_split_graph_matches_the_reference_on_cpu(monkeypatch):
    """The cpu backend lowers with its dialect's `max_kernel_args`; forcing a small one
    splits the sum into several kernels, with the reference backend's result."""
    dialect = pytest.importorskip("luminal_cpu.dialect")
    data = np.random.default_rng(0).standard_normal((INPUTS, 5, 3)).astype(np.float32) * 0.2
    results = {}
    for name in ("reference", "cpu"):
        if name == "cpu":
            monkeypatch.setattr(dialect.CDialect, "max_kernel_args", 5)
        g, xs, out = summed()
        g.compile(lm.backend(name))
        for x, d in zip(xs, data):
            x.set(d)
        g.execute()
        results[name] = out.numpy()
    assert g.runtime.stats["kernels"] > 1
    weights = np.array([1.0, *range(2, INPUTS + 1)], np.float32)
    np.testing.assert_allclose(results["cpu"], results["reference"], rtol=1e-5)
    np.testing.assert_allclose(results["cpu"], np.exp2(np.tensordot(weights, data, 1)),
                               rtol=1e-4)
