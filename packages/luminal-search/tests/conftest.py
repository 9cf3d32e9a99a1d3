"""Every test gets its own plan cache (LUMINAL_CACHE) so runs never share plans."""

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
