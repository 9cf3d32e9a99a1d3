"""The on-disk library cache: hits load without compiling; corrupt entries are rebuilt."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from luminal_cpu import CpuBackend, toolchain


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    return tmp_path / "cpu"


def compile_and_run():
    g = lm.Graph()
    a = g.tensor((4, 5))
    out = ((a * 3).exp2().sum(-1)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    x = np.arange(20, dtype=np.float32).reshape(4, 5) / 10
    a.set(x)
    g.execute()
    np.testing.assert_allclose(out.numpy(), np.exp2(x * 3).sum(-1), rtol=1e-6)
    return g.runtime


def test_second_compile_loads_from_cache(cache):
    first = compile_and_run()
    second = compile_and_run()
    assert not first.stats["cached"] and second.stats["cached"]
    assert first.library.path == second.library.path
    assert sorted(p.suffix for p in cache.iterdir() if p.name.startswith(first.library.path.stem)) \
        == [".c", ".sha256", ".so"]


def _replace(path: Path, data: bytes) -> None:
    # a new file, as another process or a disk error would leave it: truncating a library
    # this process has mapped would crash it, which is not the scenario under test
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


FRESH_PROCESS = """
import sys
sys.path.insert(0, {here!r})
from test_cpu_cache import compile_and_run
print(compile_and_run().stats["cached"])
"""


@pytest.mark.parametrize("damage", ["truncated", "garbage with a valid checksum"])
def test_corrupt_entry_is_rebuilt(cache, damage):
    path = compile_and_run().library.path
    if damage == "truncated":
        _replace(path, path.read_bytes()[:1000])
    else:
        garbage = b"\x7fELF but not a library"
        _replace(path, garbage)
        _replace(path.with_suffix(".sha256"), hashlib.sha256(garbage).hexdigest().encode())
    # a fresh process: this one keeps the library it loaded (dlopen matches by name)
    script = FRESH_PROCESS.format(here=str(Path(__file__).parent))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env=os.environ) for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [["False"], ["True"]]


def test_cache_key_depends_on_source_and_compiler():
    cc = toolchain.compiler()
    other = toolchain.Compiler(cc.argv, cc.version + " (patched)", cc.openmp)
    assert toolchain.cache_key("int x;", cc) != toolchain.cache_key("int y;", cc)
    assert toolchain.cache_key("int x;", cc) != toolchain.cache_key("int x;", other)
