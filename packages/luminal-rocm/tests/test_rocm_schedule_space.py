"""Every value of the rocm backend's schedule space, on the OpenCL device: lowered with it,
random graphs (elementwise with NaN/inf, sums and maxima over each axis, a matmul as
generated loops, softmax) give the reference backend's results, and the setting changes the
rendered source or its launch."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.reference import ReferenceBackend
from luminal_codegen import Kernel, Schedule, lower
from luminal_rocm import OpenCLBackend
from luminal_rocm.dialect import DeviceDialect
from luminal_rocm.kernels import render_program

SETTINGS = [(name, v) for name, values in OpenCLBackend.schedule_space.items() for v in values]
IDS = [f"{n}={v}" for n, v in SETTINGS]


def _graph(g: lm.Graph) -> list[lm.GraphTensor]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 6, 70)).astype(np.float32)
    x.reshape(-1)[[3, 100, 2000]] = [np.nan, np.inf, -np.inf]
    t = g.tensor((5, 6, 70), name="x").set(x)
    a = g.tensor((9, 40), name="a").set(rng.standard_normal((9, 40)))
    b = g.tensor((40, 11), name="b").set(rng.standard_normal((40, 11)))
    return [(t.permute((1, 0, 2))[:, :, :50] * 2.0 + 1.0).exp2(),  # three unmerged axes
            *(t.sum(k) for k in range(3)), *(t.max(k).values for k in range(3)),
            (a @ b).relu(), a.softmax(1)]


def _run(backend, settings):
    g = lm.Graph()
    outs = [o.retrieve() for o in _graph(g)]
    lm.GenericCompiler().compile(g)
    if settings is not None:
        backend = backend.with_schedule(Schedule.uniform(g.nodes, settings, loop_matmuls=True))
    g.compile(backend)
    g.execute()
    return [np.array(o.numpy()) for o in outs]


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_setting_gives_reference_results(opencl_backend, setting):
    got = _run(opencl_backend, (setting,))
    want = _run(ReferenceBackend(), None)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _rendered(settings):
    g = lm.Graph()
    [o.retrieve() for o in _graph(g)]
    lm.GenericCompiler().compile(g)
    program = lower(g, Schedule.uniform(g.nodes, settings, loop_matmuls=True))
    sources = render_program(program, DeviceDialect(fp16=False), cpu=True, max_group=4096)
    return [(s.body, s.launches) for s, k in zip(sources, program.kernels)
            if isinstance(k, Kernel)]


@pytest.mark.parametrize("setting", SETTINGS, ids=IDS)
def test_setting_changes_the_kernels(setting):
    tuned, plain = _rendered((setting,)), _rendered(())
    assert len(tuned) == len(plain)
    assert any(t != p for t, p in zip(tuned, plain)), f"{setting} changed no kernel"


def test_group_size_is_capped_at_the_device_limit():
    g = lm.Graph()
    (g.tensor((3000,), name="x").set(np.ones(3000, np.float32)) + 1.0).retrieve()
    lm.GenericCompiler().compile(g)
    program = lower(g, Schedule.uniform(g.nodes, (("group_size", 1024),)))
    (source,) = render_program(program, DeviceDialect(fp16=False), cpu=True, max_group=128)
    assert source.launches[0].local_size == (128,)


@pytest.mark.parametrize("setting,match", [
    (("group_size", 0), r"group_size=0 is outside its range \[1, 65536\]"),
    (("points", 65), r"points=65 is outside its range \[1, 64\]"),
    (("split_k", 4), r"dialect 'opencl' has no tunable setting \['split_k'\]"),
])
def test_bad_settings_are_refused(setting, match):
    g = lm.Graph()
    (g.tensor((8,), name="x").set(np.ones(8, np.float32)) * 2.0).retrieve()
    lm.GenericCompiler().compile(g)
    program = lower(g, Schedule.uniform(g.nodes, (setting,)))
    with pytest.raises(ValueError, match=match):
        render_program(program, DeviceDialect(fp16=False), cpu=True, max_group=256)
