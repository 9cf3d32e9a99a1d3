"""The conformance kit, in full, on MSL kernels run as C++ on the CPU (`msl_cpu.CpuMetalBackend`)
against the reference backend.

Every kernel is rendered one thread per point (matmuls one thread per output) with the Metal
dialect, compiled by clang++ against `shim/metal_stdlib`, and called for every thread id in
turn: this checks the generated arithmetic, index expressions, dtype conversions and symbolic
dims numerically. It is not Metal verification (see the shim), and the cooperative kernels
(threadgroup reductions, simdgroup-matrix GEMMs, SIMD GEMVs) do not run here.

Before the first case runs, a session fixture renders the kernels of every selected case and
compiles them a few hundred to a shared library (cached on disk by source hash); a case whose
kernels were not prebuilt builds its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from luminal.testing import conformance_tests
from luminal_metal_tests_msl_cpu import CpuMetalBackend, kit_kernels

BACKEND = CpuMetalBackend()


@pytest.fixture(scope="session")
def prebuilt(msl, request: pytest.FixtureRequest) -> int:
    """Compile the kernels of every conformance test selected in this session; returns how
    many distinct kernels that was."""
    pairs = [(item.callspec.params["case"], item.callspec.params["variant"])
             for item in request.session.items
             if item.path == Path(__file__) and item.originalname == "test_metal_cpu_conformance"]
    kernels = msl.unique(k for case, variant in pairs for k in kit_kernels(case, variant))
    BACKEND.library.build(kernels)
    return len(kernels)


test_metal_cpu_conformance = pytest.mark.usefixtures("prebuilt")(conformance_tests(BACKEND))
