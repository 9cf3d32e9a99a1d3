"""Without a C compiler, `lm.backend()` falls back to the reference backend and says so once,
naming the fallback and the fix (luminal-cpu's probe reason: install gcc or clang)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("luminal_cpu")

SCRIPT = """
import warnings
import luminal as lm
warnings.simplefilter("default")
names = [lm.backend().name for _ in range(3)]
print(names)
"""


def test_backend_without_a_compiler_warns_once(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "LUMINAL_PLUGINS")}
    env["PATH"] = str(tmp_path)  # no gcc, clang or cc on it
    env["LUMINAL_PLUGINS"] = "luminal-cpu"
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['reference', 'reference', 'reference']"
    warned = [line for line in out.stderr.splitlines() if "BackendFallbackWarning" in line]
    assert len(warned) == 1, out.stderr
    assert "falling back to the NumPy reference backend" in warned[0]
    assert "cpu: no C compiler found" in warned[0] and "install gcc or clang" in warned[0]


def test_backend_with_a_compiler_does_not_warn():
    env = {k: v for k, v in os.environ.items() if k != "LUMINAL_PLUGINS"}
    env["LUMINAL_PLUGINS"] = "luminal-cpu"
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['cpu', 'cpu', 'cpu']"
    assert "BackendFallbackWarning" not in out.stderr
