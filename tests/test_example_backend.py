"""The documented example backend (tests/fixtures/luminal-example-backend) really works:
pip-installed into a target directory, discovered by a fresh interpreter, and correct."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "luminal-example-backend"
CORE_SRC = ROOT / "packages" / "luminal-core" / "src"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("example")
    src = work / "src"
    shutil.copytree(FIXTURE, src)  # setuptools writes build/ and egg-info into the source
    site = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(src)],
        check=True,
    )
    return site


def _run(site: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(CORE_SRC)]))
    env.pop("LUMINAL_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_fresh_interpreter_discovers_and_runs_it(installed):
    listing = json.loads(
        _run(installed, "from luminal.cli import main; main(['backends', '--json'])")
    )
    names = {b["name"]: b for b in listing}
    assert names["pylist"]["available"] is True
    result = _run(
        installed,
        "import numpy as np, luminal as lm\n"
        "g = lm.Graph()\n"
        "a = g.tensor((2, 3), name='a').set(np.arange(6.0).reshape(2, 3))\n"
        "c = (a.T @ a).softmax(-1)[1:, ::2].retrieve()\n"
        "g.compile((lm.GenericCompiler(), lm.backend('pylist')))\n"
        "g.execute()\n"
        "print(c.numpy().tolist())\n",
    )
    a = np.arange(6.0).reshape(2, 3)
    m = a.T @ a
    e = np.exp(m - m.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True))[1:, ::2]
    np.testing.assert_allclose(np.array(json.loads(result)), want, rtol=1e-5)


def test_never_preferred_over_builtin_backends(installed):
    best = _run(installed, "import luminal as lm; print(lm.backend().name)").strip()
    assert best != "pylist"


def _pylist_backend():
    sys.path.insert(0, str(FIXTURE / "src"))
    try:
        from luminal_example_backend.plugin import PyListBackend
    finally:
        sys.path.remove(str(FIXTURE / "src"))
    return PyListBackend()


def _conformance():
    from luminal.testing import conformance_tests

    return conformance_tests(_pylist_backend(), variants=["base", "permuted", "symbolic"])


# the documented one-liner, run on the documented example backend
test_example_backend_conformance = _conformance()
