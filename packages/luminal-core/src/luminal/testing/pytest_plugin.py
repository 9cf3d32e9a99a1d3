"""pytest support: hardware markers and the one-line backend conformance suite.

Activate the markers in a root conftest.py (they are not registered for every pytest user):

    pytest_plugins = ["luminal.testing.pytest_plugin"]

Then `@pytest.mark.cuda` (or `rocm`, `metal`) skips a test, with the reason, where the device is
missing, and fails it instead when the name is in `LUMINAL_REQUIRE_HW`.

A backend's test suite gets one test per conformance case and variant with:

    from luminal.testing import conformance_tests
    test_conformance = conformance_tests("mybackend")
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import NoReturn

import pytest

from ..backend import Backend
from .cases import Case, select
from .hardware import PROBES, required_hardware
from .kit import case_variants, resolve_backend, run_case


# ----- hardware markers ---------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    for hw in PROBES:
        config.addinivalue_line("markers", f"{hw}: needs a {hw} device (skipped without one)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    required = required_hardware()
    for hw, probe in PROBES.items():
        if item.get_closest_marker(hw) is not None and not probe():
            _skip_or_fail(f"no {hw} device", hw in required)


def pytest_report_header(config: pytest.Config) -> str:
    found = ", ".join(f"{hw}={'yes' if probe() else 'no'}" for hw, probe in PROBES.items())
    return f"luminal hardware: {found}"


def _skip_or_fail(reason: str, required: bool) -> NoReturn:
    if required:
        pytest.fail(f"{reason} (required by LUMINAL_REQUIRE_HW)", pytrace=False)
    pytest.skip(reason)


# ----- conformance suite --------------------------------------------------------------------
def conformance_tests(backend: Backend | str, *, compare_to: str = "reference",
                      cases: Sequence[Case | str] | None = None,
                      variants: Iterable[str] | None = None,
                      xfail: Mapping[str, str] | None = None):
    """A pytest test function with one parametrized test per (case, variant).

    `backend` is a registered backend name or a `Backend` instance; it is looked up when the
    tests run, and an unavailable one skips them (fails them when its name is in
    `LUMINAL_REQUIRE_HW`). Each test compares the backend with `compare_to` ("reference" or
    "torch"). `cases` and `variants` narrow the suite; `xfail` maps test-id patterns
    (fnmatch, e.g. `"conv2d*"` or `"*-float16"`) to the reason a backend is expected to fail
    them (strict: an unexpected pass fails). Assign the result to a `test_*` name.
    """
    name = backend if isinstance(backend, str) else backend.name
    half_known = _declared_backend(backend)
    wanted = set(variants) if variants is not None else None
    params = []
    for case in select(cases):
        for variant in case_variants(case, half_known) if half_known else case.variants():
            if wanted is not None and variant not in wanted:
                continue
            test_id = f"{case.name}-{variant}"
            marks = [pytest.mark.xfail(reason=r, strict=True)
                     for pattern, r in (xfail or {}).items() if fnmatch.fnmatch(test_id, pattern)]
            params.append(pytest.param(case, variant, id=test_id, marks=marks))

    @pytest.mark.parametrize(("case", "variant"), params)
    def test_conformance(case: Case, variant: str) -> None:
        runnable = _available(backend, name)
        if variant not in case_variants(case, runnable):
            pytest.skip(f"backend {name!r} does not declare the dtypes of variant {variant!r}")
        run_case(case, runnable, variant, compare_to)

    if name in PROBES:
        test_conformance = getattr(pytest.mark, name)(test_conformance)
    return test_conformance


def _declared_backend(backend: Backend | str) -> Backend | None:
    """The backend when it can be had at collection time (to see its declared dtypes)."""
    try:
        return resolve_backend(backend)
    except Exception:  # unknown or unavailable: the tests themselves report it
        return None


def _available(backend: Backend | str, name: str) -> Backend:
    """The backend, or skip (fail under LUMINAL_REQUIRE_HW) when it cannot run here."""
    required = name in required_hardware()
    try:
        runnable = resolve_backend(backend)  # a lookup by name probes already
    except RuntimeError as exc:  # registered but not available here
        _skip_or_fail(str(exc), required)
    if isinstance(backend, Backend):
        status = backend.probe()
        if not status.available:
            _skip_or_fail(f"backend {name!r} is not available: {status.reason}", required)
    return runnable
