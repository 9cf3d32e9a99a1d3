"""The plugin's registrations and the `luminal onnx` / `luminal detect` commands."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from luminal import plugins
from onnx_helpers import single_node_model


def _luminal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "luminal", *args], capture_output=True,
                          text=True, timeout=300)


def test_plugin_registers_model_and_commands():
    assert "yolov8" in [m.name for m in plugins.models()]
    assert {"detect", "onnx"} <= {c.name for c in plugins.commands()}
    listed = json.loads(_luminal("plugins", "--json").stdout)
    entry = next(p for p in listed if p["name"] == "luminal-onnx")
    assert not entry.get("error")


def test_onnx_info(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(single_node_model("Relu", {"x": np.zeros((2, 3), np.float32)}, ["y"]), path)
    result = _luminal("onnx", "info", str(path))
    assert result.returncode == 0, result.stderr
    assert "operators: Relu x1" in result.stdout and "luminal imports it" in result.stdout
    path = tmp_path / "nonzero.onnx"
    onnx.save(single_node_model("NonZero", {"x": np.zeros((2, 3), np.float32)}, ["y"]), path)
    result = _luminal("onnx", "info", str(path))
    assert result.returncode == 1 and "(NonZero, opset 17): operator not supported" in (
        result.stdout)


def test_onnx_conformance_command():
    from luminal_onnx.conformance import DEFAULT_ROOT

    if not DEFAULT_ROOT.is_dir():
        pytest.skip("libonnx-testdata is not installed (scripts/setup.sh installs it)")
    result = _luminal("onnx", "conformance", "-k", "^test_(relu|nonzero_example)$", "--failures")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("reference: 1 passed, 0 failed, 1 unsupported, 0 excluded")
    assert "unsupported test_nonzero_example: node" in result.stdout


def test_detect_errors_are_clear(tmp_path):
    result = _luminal("detect", str(tmp_path / "missing.png"), "--model", "x.onnx")
    assert result.returncode == 2 and "missing.png" in result.stderr
    not_image = tmp_path / "notes.png"
    not_image.write_text("not an image")
    result = _luminal("detect", str(not_image), "--model", "x.onnx")
    assert result.returncode == 2 and "error:" in result.stderr
    assert "--json" in _luminal("detect", "--help").stdout
