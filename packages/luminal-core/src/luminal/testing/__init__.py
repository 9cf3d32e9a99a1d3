"""The backend conformance kit: every high-level op, run on a backend and compared with the
reference backend (or PyTorch), including non-contiguous inputs and symbolic dims.

In a backend's test suite, one line gives one pytest test per case and variant:

    from luminal.testing import conformance_tests
    test_conformance = conformance_tests("mybackend")   # a name, or a Backend instance

Hardware markers (`cuda`, `rocm`, `metal`) and `LUMINAL_REQUIRE_HW` come from the pytest plugin
`luminal.testing.pytest_plugin` (`pytest_plugins = ["luminal.testing.pytest_plugin"]` in the
root conftest.py). Outside pytest, `run_case(case, backend, variant)` runs a single case.
"""

from .cases import CASES, VARIANTS, Case, get_case, select
from .kit import case_variants, run_case

__all__ = [
    "CASES",
    "VARIANTS",
    "Case",
    "case_variants",
    "conformance_tests",
    "get_case",
    "run_case",
    "select",
]


def __getattr__(name: str):
    # conformance_tests needs pytest: import it only when asked for
    if name == "conformance_tests":
        from .pytest_plugin import conformance_tests

        return conformance_tests
    raise AttributeError(f"module 'luminal.testing' has no attribute {name!r}")
