"""The luminal-core conformance kit, in full (every case in every variant, about 1,800 tests),
on the OpenCL device against the reference backend.

PoCL pays about 0.1-0.2 s per OpenCL program it builds plus about 0.1 s per kernel at its first
launch, and the kit's graphs are one or two kernels each: built one program per case, the kit
took about 11 minutes with `-n 2` on two cores. So before the first case runs, a session
fixture renders the kernels of every selected case (the same lowering and rendering the
backend does) and builds them 64 to an OpenCL program (`Device.build_all`); the cases then find
their kernels built and pay only the launch-time compile: about 4 minutes with `-n 2` from cold
caches on two loaded cores, under half a minute with PoCL's kernel cache warm. Skipping that
step changes no result, only the time: a case whose kernels were not prebuilt builds them.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from luminal import Backend, GenericCompiler, Graph
from luminal.dtypes import dtype_of
from luminal.testing import conformance_tests
from luminal.testing.adapters import LuminalF
from luminal.testing.kit import dim_values, plan_inputs
from luminal_codegen import lower
from luminal_rocm import OpenCLBackend
from luminal_rocm.device import open_device
from luminal_rocm.runtime import kernel_sources


class _KernelCollector(Backend):
    """A backend that records the kernels `OpenCLBackend` would build and runs nothing."""

    name = "rocm-kernel-collector"

    def __init__(self, device):
        self.device = device
        self.sources: list = []

    def compile(self, graph: Graph) -> None:
        self.sources += kernel_sources(lower(graph), self.device)


def _flatten(result) -> list:
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flatten(r)]
    return [result]


def _collect(case, variant: str, collector: _KernelCollector) -> None:
    """Build the case's graph as the kit's `run_luminal` does and compile it with the
    collector (input dtypes come from the kit's own data generators)."""
    plans = plan_inputs(case, variant)
    env = dim_values(case, variant)[0]
    rng = np.random.default_rng(0)
    data = [p.host_data(rng, env) for p in plans]
    g = Graph()
    F = LuminalF(g)
    inputs = [g.tensor(p.shape, name=f"in{k}", dtype=dtype_of(x.dtype))
              for k, (p, x) in enumerate(zip(plans, data))]
    seen = [p.transform(F, t) if p.transform else t for p, t in zip(plans, inputs)]
    for o in _flatten(case.fn(F, *seen)):
        o.contiguous().retrieve()
    g.compile((GenericCompiler(), collector))


@pytest.fixture(scope="session")
def conformance_kernels(request: pytest.FixtureRequest, opencl_backend: OpenCLBackend) -> dict:
    """The kernels of every conformance test selected in this session (under `-k`, only
    those), built in batches; returns counts and timings. The kit runs without this step too,
    only slower, so a case it cannot render is left to report itself."""
    pairs = [(item.callspec.params["case"], item.callspec.params["variant"])
             for item in request.session.items
             if item.path == Path(__file__) and item.originalname == "test_rocm_conformance"]
    device = open_device(opencl_backend.device_spec)
    collector = _KernelCollector(device)
    start = time.perf_counter()
    skipped = 0
    for case, variant in pairs:
        try:
            _collect(case, variant, collector)
        except Exception:  # the case itself reports whatever this is
            skipped += 1
    rendered = time.perf_counter()
    device.build_all(collector.sources)
    return {"cases": len(pairs), "kernels": len({s.source for s in collector.sources}),
            "skipped_cases": skipped, "render_s": rendered - start,
            "build_s": time.perf_counter() - rendered, "batch_failures": device.batch_failures}


test_rocm_conformance = pytest.mark.usefixtures("conformance_kernels")(
    conformance_tests(OpenCLBackend()))


def test_rocm_conformance_kernels_prebuilt(conformance_kernels):
    """Every selected case could be rendered ahead and the driver accepted every batch."""
    assert conformance_kernels["skipped_cases"] == 0
    assert conformance_kernels["batch_failures"] == 0
    if conformance_kernels["cases"]:
        assert conformance_kernels["kernels"] > 0
