"""Test support: the OpenCL device for tests that need it, skipped or failed without one.

A test needing the device calls `require_opencl()` (this package's `opencl_backend` fixture
does, and so may other distributions' tests that run on rocm). Without a usable device it
skips, with the probe's reason, unless the device is required:

- `rocm` (or `all`) in `LUMINAL_REQUIRE_HW`, luminal-core's required-hardware list (what the
  `rocm` marker of `luminal.testing.pytest_plugin` honours too);
- `CI=true`: CI installs PoCL (`scripts/setup.sh`), so a CI run without an OpenCL device
  would otherwise pass green with no OpenCL coverage at all.

There it fails, saying what to install. `check_marked(item)` applies the same rule to tests
carrying the `rocm` marker before the core plugin would skip them (see tests/conftest.py).
pytest is imported only when a check runs.
"""

from __future__ import annotations

import os
from typing import Any

from .backend import OpenCLBackend

INSTALL_HINT = ("install pocl-opencl-icd (`apt install pocl-opencl-icd`: PoCL on the CPU, what "
                "scripts/setup.sh installs when run as root), or ROCm's OpenCL runtime on AMD GPUs")


def required_by() -> str | None:
    """Why an OpenCL device must be present (a short phrase), or None where it may be missing."""
    from luminal.testing.hardware import required_hardware

    if "rocm" in required_hardware():
        return "LUMINAL_REQUIRE_HW"
    if os.environ.get("CI", "").strip().lower() == "true":
        return "CI=true"
    return None


def require_opencl(device: str | None = None) -> OpenCLBackend:
    """The backend on `device` (default: `LUMINAL_OPENCL_DEVICE`, then the first GPU, then any
    device); without a usable device, skip the calling test, or fail it where `required_by()`
    says the device must be present."""
    import pytest

    backend = OpenCLBackend(device)
    status = backend.probe()
    if status.available:
        return backend
    why = required_by()
    if why is not None:
        pytest.fail(f"{why} requires an OpenCL device and none is usable: {INSTALL_HINT}. "
                    f"Probe: {status.reason}", pytrace=False)
    pytest.skip(f"no OpenCL device: {status.reason}")


def check_marked(item: Any) -> None:
    """For a test marked `rocm`: fail it now where the device is required but missing (the
    core plugin would otherwise skip it first); otherwise leave it to the marker."""
    if item.get_closest_marker("rocm") is not None and required_by() is not None:
        require_opencl()
