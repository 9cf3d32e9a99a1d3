"""`luminal_rocm.testing`: without an OpenCL device, rocm tests skip, except where the device is
required (`LUMINAL_REQUIRE_HW`, or `CI=true`), where they fail saying to install PoCL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from luminal_rocm import OpenCLBackend
from luminal_rocm.testing import check_marked, require_opencl, required_by

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("LUMINAL_REQUIRE_HW", raising=False)
    return monkeypatch


@pytest.fixture
def no_device(clean_env):
    clean_env.setitem(sys.modules, "pyopencl", None)  # probe: "pyopencl is not importable"
    return clean_env


@pytest.mark.parametrize(("env", "want"), [
    ({}, None),
    ({"CI": "true"}, "CI=true"),
    ({"CI": "TRUE"}, "CI=true"),
    ({"CI": "false"}, None),
    ({"CI": "1"}, None),
    ({"LUMINAL_REQUIRE_HW": "rocm"}, "LUMINAL_REQUIRE_HW"),
    ({"LUMINAL_REQUIRE_HW": "cuda, rocm"}, "LUMINAL_REQUIRE_HW"),
    ({"LUMINAL_REQUIRE_HW": "all"}, "LUMINAL_REQUIRE_HW"),
    ({"LUMINAL_REQUIRE_HW": "cuda"}, None),
])
def test_rocm_testing_required_by(clean_env, env, want):
    for k, v in env.items():
        clean_env.setenv(k, v)
    assert required_by() == want


def test_rocm_testing_missing_device_skips_by_default(no_device):
    with pytest.raises(pytest.skip.Exception, match="no OpenCL device: pyopencl"):
        require_opencl()


@pytest.mark.parametrize(("var", "value"), [("CI", "true"), ("LUMINAL_REQUIRE_HW", "rocm")])
def test_rocm_testing_missing_device_fails_where_required(no_device, var, value):
    no_device.setenv(var, value)
    with pytest.raises(pytest.fail.Exception, match="pocl-opencl-icd") as info:
        require_opencl()
    assert "pyopencl is not importable" in str(info.value)


class _Item:
    def __init__(self, marked: bool):
        self.marked = marked

    def get_closest_marker(self, name):
        return object() if self.marked and name == "rocm" else None


def test_rocm_testing_check_marked(no_device):
    check_marked(_Item(True))  # not required: left to the marker (which skips)
    no_device.setenv("CI", "true")
    check_marked(_Item(False))  # unmarked tests are not its business
    with pytest.raises(pytest.fail.Exception, match="CI=true requires an OpenCL device"):
        check_marked(_Item(True))


def test_rocm_testing_returns_backend_with_device(opencl_backend, clean_env):
    clean_env.setenv("CI", "true")
    assert isinstance(require_opencl(), OpenCLBackend)


def _pytest_without_icd(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """This package's real conftest on a machine with no OpenCL platform: the ICD loader is
    pointed at an empty vendor directory. Runs a fixture-based test and a conformance test (the
    `rocm` marker, which the core plugin skips without a device)."""
    (tmp_path / "vendors").mkdir()
    full = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path / "vendors"), **env)
    for var in ("CI", "LUMINAL_REQUIRE_HW"):
        if var not in env:
            full.pop(var, None)
    tests = Path(__file__).parent
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"{tests / 'test_rocm_plugin.py'}::test_rocm_probe_reports_real_device",
         f"{tests / 'test_rocm_conformance.py'}::test_rocm_conformance[add-base]"],
        cwd=REPO, env=full, capture_output=True, text=True, timeout=300)


def test_rocm_testing_no_icd_skips_outside_ci(tmp_path):
    out = _pytest_without_icd(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 skipped" in out.stdout


def test_rocm_testing_no_icd_fails_under_ci(tmp_path):
    out = _pytest_without_icd(tmp_path, CI="true")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 errors" in out.stdout or "2 failed" in out.stdout, out.stdout
    assert out.stdout.count("install pocl-opencl-icd") >= 2
