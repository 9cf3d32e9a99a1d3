"""The conformance kit on MSL kernels run as C++ on the CPU (`msl_cpu.CpuMetalBackend`)
against the reference backend, twice:

- in full (every case and variant), every kernel rendered one thread per point (matmuls one
  thread per output) and called for every thread id in turn;
- base and symbolic variants with every reduction and matmul in its cooperative form
  (threadgroup reductions with SIMD-group combines, SIMD GEMVs, simdgroup-matrix GEMMs), run a
  threadgroup at a time on real threads with the shim's barriers and lane exchanges.

This checks the generated arithmetic, index expressions, dtype conversions, symbolic dims and
the cooperative algorithms numerically. It is not Metal verification (see the shim).

Before the first case runs, a session fixture renders the kernels of every selected case and
compiles them a few hundred to a shared library (cached on disk by source hash); a case whose
kernels were not prebuilt builds its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from luminal.testing import conformance_tests
from luminal_metal_tests_msl_cpu import CpuMetalBackend, kit_kernels

BACKENDS = {"test_metal_cpu_conformance": CpuMetalBackend("thread"),
            "test_metal_cooperative_conformance": CpuMetalBackend("cooperative")}


@pytest.fixture(scope="session")
def prebuilt(msl, request: pytest.FixtureRequest) -> dict[str, int]:
    """Compile the kernels of every conformance test selected in this session, per backend;
    returns how many distinct kernels each has."""
    counts = {}
    for name, backend in BACKENDS.items():
        pairs = [(item.callspec.params["case"], item.callspec.params["variant"])
                 for item in request.session.items
                 if item.path == Path(__file__) and item.originalname == name]
        kernels = msl.unique(k for case, variant in pairs for k in kit_kernels(case, variant))
        backend.library.build(kernels, backend.mode)
        counts[name] = len(kernels)
    return counts


test_metal_cpu_conformance = pytest.mark.usefixtures("prebuilt")(
    conformance_tests(BACKENDS["test_metal_cpu_conformance"]))
test_metal_cooperative_conformance = pytest.mark.usefixtures("prebuilt")(
    conformance_tests(BACKENDS["test_metal_cooperative_conformance"],
                      variants=("base", "symbolic")))
