"""Shared fixtures: the OpenCL device. Without one, tests skip with the probe's reason, or fail
where the device is required (`rocm` in `LUMINAL_REQUIRE_HW`, or `CI=true`): see
`luminal_rocm.testing`."""

from __future__ import annotations

import pytest
from luminal_rocm import OpenCLBackend
from luminal_rocm.testing import check_marked, require_opencl


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before luminal.testing.pytest_plugin's hook, which skips `rocm` tests without a device
    check_marked(item)


@pytest.fixture(scope="session")
def opencl_backend() -> OpenCLBackend:
    """The backend on the device `LUMINAL_OPENCL_DEVICE` (or the default) selects."""
    return require_opencl()
