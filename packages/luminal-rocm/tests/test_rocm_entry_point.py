"""The distribution really installs as a plugin: pip-installed into a target directory, a fresh
interpreter finds it through the `luminal.plugins` entry point, lists it in `luminal backends`
and runs a graph on it by its alias."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
CORE_SRC = PACKAGE.parent / "luminal-core" / "src"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("rocm-install")
    src = work / "src"
    # setuptools writes build/ and egg-info next to the sources: build from a copy
    shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info",
                                                                "__pycache__"))
    target = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(src)], check=True)
    return target


def _python(site: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(CORE_SRC)]))
    env.pop("LUMINAL_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_rocm_listed_by_luminal_backends(site):
    listing = json.loads(_python(site, "from luminal.cli import main; "
                                       "main(['backends', '--json'])"))
    (info,) = [b for b in listing if b["name"] == "rocm"]
    assert info["plugin"] == "luminal-rocm" and info["aliases"] == ["opencl"]
    assert info["priority"] == 50
    assert info["device"] if info["available"] else info["reason"]


def test_rocm_plugin_listing_stays_light(site):
    code = ("import sys; from luminal.cli import main; main(['plugins', '--json']); "
            "print('pyopencl' in sys.modules, file=sys.stderr)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(CORE_SRC)]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert plugins["luminal-rocm"]["error"] is None
    assert out.stderr.strip().endswith("False")


def test_rocm_runs_by_alias(site, opencl_backend):
    result = _python(site, (
        "import numpy as np, luminal as lm\n"
        "g = lm.Graph()\n"
        "a = g.tensor((3, 1), name='a').set(np.array([[1.0], [2.0], [3.0]], np.float32))\n"
        "b = g.tensor((1, 4), name='b').set([[1.0, 2.0, 3.0, 4.0]])\n"
        "c = (a @ b).relu().retrieve()\n"
        "g.compile((lm.GenericCompiler(), lm.backend('opencl')))\n"
        "g.execute()\n"
        "print(c.numpy().tolist())\n"
    ))
    assert json.loads(result) == [[1, 2, 3, 4], [2, 4, 6, 8], [3, 6, 9, 12]]
