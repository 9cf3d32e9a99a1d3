"""Test setup for luminal-onnx: makes `onnx_helpers` importable."""

import sys
from pathlib import Path

# pytest runs with --import-mode=importlib, which does not put test directories on sys.path
sys.path.insert(0, str(Path(__file__).parent))
