"""Fixtures of the luminal-metal tests: the clang++ checks of `msl_cpu.py`, which this file
loads as the module `luminal_metal_tests_msl_cpu` for the test modules (pytest imports test
files by path, so they cannot import a sibling module by name). Without clang++ those tests
skip with the reason; CI installs it through scripts/setup.sh."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _load_msl_cpu() -> ModuleType:
    name = "luminal_metal_tests_msl_cpu"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("msl_cpu.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


MSL = _load_msl_cpu()


@pytest.fixture(scope="session")
def msl() -> ModuleType:
    """The `msl_cpu` helpers (see that module); skips without clang++."""
    if MSL.CLANG is None:
        pytest.skip(MSL.NO_CLANG)
    return MSL
