"""`Schedule`: the lowering honours each per-node override, and results do not change."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal_codegen import Dialect, Kernel, Matmul, Schedule, lower, render_kernel


def graph():
    rng = np.random.default_rng(0)
    g = lm.Graph()
    x = g.tensor((8, 4, 32), name="x").set(rng.standard_normal((8, 4, 32)).astype(np.float32))
    w = g.tensor((32, 16), name="w").set(rng.standard_normal((32, 16)).astype(np.float32))
    h = (x @ w).exp2()
    shared = h * 2.0 + 1.0
    out = (shared.sum(1) + shared.max(1).values).retrieve()
    lm.GenericCompiler().compile(g)
    return g, out


def matmul_calls(program) -> int:
    return sum(isinstance(program.kernels[c.kernel], Matmul) for c in program.calls)


def test_default_schedule_is_the_heuristic():
    g, _ = graph()
    assert lower(g, Schedule()) == lower(g)


def test_loop_matmuls_and_store():
    g, _ = graph()
    default = lower(g)
    mm = next(n.id for n in g.nodes.values() if n.op.name == "SumReduce"
              and g.nodes[n.inputs[0].src].op.name == "Mul")
    assert matmul_calls(lower(g, Schedule(loop_matmuls=frozenset({mm})))) == \
        matmul_calls(default) - 1
    stored = {b.node for b in default.buffers}
    inner = next(n.id for n in g.nodes.values() if n.op.name == "MaxReduce")
    assert inner not in stored
    assert len(lower(g, Schedule(store=frozenset({inner}))).calls) == len(default.calls) + 1


def test_tuning_reaches_the_rendered_kernel():
    g, out = graph()
    root = g.resolve(out.id)
    plain = lower(g)
    tuned = lower(g, Schedule(tuning={root: (("parallel_rows", 1),)}))
    kernel = next(k for k in tuned.kernels if isinstance(k, Kernel) and k.tuning)
    assert kernel.tuning == (("parallel_rows", 1),)
    assert len(tuned.kernels) == len(plain.kernels)
    with pytest.raises(ValueError, match="no tunable setting \\['threads'\\]"):
        render_kernel(Kernel(kernel.params, kernel.domain, kernel.out,
                             tuning=(("threads", 2),)), "k", Dialect())


def test_overlapping_overrides_are_refused():
    with pytest.raises(ValueError, match="both stored and inlined"):
        Schedule(store=frozenset({1}), inline=frozenset({1}))


def available(name: str) -> bool:
    return any(b.name == name and b.available for b in lm.backends())


@pytest.mark.parametrize("backend,choice", [
    ("cpu", "store"), ("cpu", "inline"), ("cpu", "loops"), ("cpu", "tuning"),
    ("rocm", "store"), ("rocm", "inline"), ("rocm", "loops")])
def test_every_override_keeps_results(backend, choice):
    if not available(backend):
        pytest.skip(f"backend {backend!r} is not available here")
    want_g, want = graph()
    want_g.execute()
    g, out = graph()
    program = lower(g)
    stored = [b.node for b in program.buffers if b.role == "temp"]
    inlined = [n for n in g.nodes if n not in {b.node for b in program.buffers}
               and g.nodes[n].op.name in ("Add", "Mul")]
    mm = [n.id for n in g.nodes.values() if n.op.name == "SumReduce"]
    schedule = {"store": Schedule(store=frozenset(inlined)),
                "inline": Schedule(inline=frozenset(stored)),
                "loops": Schedule(loop_matmuls=frozenset(mm)),
                "tuning": Schedule(tuning={g.resolve(out.id): (("lanes", 16),
                                                                 ("parallel_rows", 4096))})}[choice]
    g.compile(lm.backend(backend).with_schedule(schedule))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_backend_without_schedule_support_refuses_one():
    with pytest.raises(TypeError, match="does not accept a schedule"):
        lm.backend("reference").with_schedule(Schedule())
