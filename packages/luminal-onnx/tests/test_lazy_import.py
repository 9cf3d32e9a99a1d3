"""Loading luminal's plugins must not import onnx: every luminal process loads them."""

from __future__ import annotations

import subprocess
import sys


def test_plugin_entry_point_does_not_import_onnx():
    code = ("import sys, luminal_onnx.plugin, luminal_onnx\n"
            "assert 'onnx' not in sys.modules, 'the plugin imported onnx'\n"
            "luminal_onnx.load\n"
            "assert 'onnx' in sys.modules\n"
            "from luminal_onnx import OnnxImportError, supported_operators\n"
            "assert supported_operators()\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
