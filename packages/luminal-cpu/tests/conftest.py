"""Setup of the luminal-cpu tests: helper modules (cpu_*.py) sit beside this file."""

from __future__ import annotations

import sys
from pathlib import Path

# pytest runs with --import-mode=importlib, which does not put test directories on sys.path
sys.path.insert(0, str(Path(__file__).parent))
