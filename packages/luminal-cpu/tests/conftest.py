"""Shared fixtures of the luminal-cpu tests; helper modules (cpu_*.py) sit beside it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib, which does not put test directories on sys.path
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session", autouse=True)
def _build_cache(tmp_path_factory: pytest.TempPathFactory):
    """Build into a private cache unless the caller chose one ($LUMINAL_CACHE): tests never
    touch the user's cache, and a chosen cache makes repeated runs fast."""
    if os.environ.get("LUMINAL_CACHE"):
        yield
        return
    os.environ["LUMINAL_CACHE"] = str(tmp_path_factory.mktemp("luminal-cache"))
    try:
        yield
    finally:
        del os.environ["LUMINAL_CACHE"]
