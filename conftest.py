"""Repository-wide pytest setup: the hardware markers (`cuda`, `rocm`, `metal`) skip, with the
reason, where the device is missing (see luminal.testing.pytest_plugin), and the caches tests
build into (`session_cache`, `fresh_cache`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["luminal.testing.pytest_plugin"]


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache ($LUMINAL_CACHE) this test session builds into: the caller's when one is set
    (repeated runs are then fast), else a private one, so tests never touch the user's."""
    chosen = os.environ.get("LUMINAL_CACHE")
    return Path(chosen) if chosen else tmp_path_factory.mktemp("luminal-cache")


@pytest.fixture(scope="session", autouse=True)
def _build_into_session_cache(session_cache: Path):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUMINAL_CACHE", str(session_cache))
        yield


@pytest.fixture(scope="session")
def cpu_runtime_entry(session_cache: Path) -> list[Path]:
    """The cache files (.so, .sha256, .c) of luminal-cpu's runtime library, built once into
    session_cache; empty without luminal-cpu or a C compiler. Every graph links that library,
    and compiling it takes 20 s to a minute on 2 cores, which no test but the toolchain's own
    needs to pay again."""
    try:
        from luminal_cpu import toolchain
        from luminal_cpu.source import build_runtime
    except ImportError:
        return []
    cc = toolchain.compiler()
    if cc is None:
        return []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUMINAL_CACHE", str(session_cache))
        so = build_runtime(cc).path
    return [so.with_suffix(suffix) for suffix in (".so", ".sha256", ".c")]


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                cpu_runtime_entry: list[Path]) -> Path:
    """An empty $LUMINAL_CACHE for one test (no plans, no graph libraries) but for links to the
    CPU runtime library's entry (cpu_runtime_entry)."""
    root = tmp_path / "cache"
    (root / "cpu").mkdir(parents=True)
    for path in cpu_runtime_entry:
        (root / "cpu" / path.name).symlink_to(path)
    monkeypatch.setenv("LUMINAL_CACHE", str(root))
    return root
