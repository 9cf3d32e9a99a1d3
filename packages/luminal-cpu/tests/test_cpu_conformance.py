"""The luminal-core conformance kit on the cpu backend: every op vs the reference backend.

Every case runs in its base, symbolic-dim, float16 and broadcast variants; the permuted,
strided and padded views run for every third case (each variant is its own compiled library,
so all ~1800 take minutes). LUMINAL_FULL_CONFORMANCE=1 runs every variant of every case.
"""

import os

from luminal.testing import CASES, conformance_tests
from luminal_cpu import CpuBackend

VIEWS = ("permuted", "strided", "padded")

if os.environ.get("LUMINAL_FULL_CONFORMANCE"):
    test_conformance = conformance_tests(CpuBackend())
else:
    test_conformance = conformance_tests(
        CpuBackend(), variants=("base", "symbolic", "float16", "broadcast"))
    test_conformance_views = conformance_tests(CpuBackend(), cases=CASES[::3], variants=VIEWS)
