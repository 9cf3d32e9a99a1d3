"""Fixtures of the luminal-metal tests: the clang++ checks of `msl_cpu.py` and the emulated
Metal module of `fake_metal.py`, which this file loads as `luminal_metal_tests_msl_cpu` and
`luminal_metal_tests_fake_metal` for the test modules (pytest imports test files by path, so
they cannot import a sibling module by name). Without clang++ those tests skip with the
reason; CI installs it through scripts/setup.sh."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load(file: str) -> ModuleType:
    name = f"luminal_metal_tests_{Path(file).stem}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


MSL = _load("msl_cpu.py")
FAKE_METAL = _load("fake_metal.py")


@pytest.fixture(scope="session")
def msl() -> ModuleType:
    """The `msl_cpu` helpers (see that module); skips without clang++."""
    if MSL.CLANG is None:
        pytest.skip(MSL.NO_CLANG)
    return MSL


@pytest.fixture
def emulated_metal(msl: ModuleType, monkeypatch: pytest.MonkeyPatch):
    """`MetalBackend` available and running on `fake_metal`'s emulated device, for one test."""
    from luminal_metal import backend, device

    monkeypatch.setitem(sys.modules, "Metal", FAKE_METAL.module(msl))
    monkeypatch.setattr(device, "check_platform", lambda: None)
    monkeypatch.setattr(backend, "check_platform", lambda: None)
    monkeypatch.setattr(device, "_open", None)
    return sys.modules["Metal"]
