"""The luminal-core conformance kit on the cpu backend, in full: every case in every variant
(base, symbolic dims, float16, broadcast, and permuted, strided and padded views) against the
reference backend. Kernels are cached on disk, so a warm run takes well under a minute."""

from luminal.testing import conformance_tests
from luminal_cpu import CpuBackend

test_conformance = conformance_tests(CpuBackend())
