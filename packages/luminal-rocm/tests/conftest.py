"""Shared fixtures: the OpenCL device (tests skip, with the probe's reason, without one) and a
private binary cache per test session."""

from __future__ import annotations

import pytest
from luminal_rocm import OpenCLBackend


@pytest.fixture(scope="session")
def opencl_backend() -> OpenCLBackend:
    """The backend on the device `LUMINAL_OPENCL_DEVICE` (or the default) selects."""
    backend = OpenCLBackend()
    status = backend.probe()
    if not status.available:
        pytest.skip(f"no OpenCL device: {status.reason}")
    return backend
