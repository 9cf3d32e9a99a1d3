"""The examples run as scripts, exactly as a user would run them, and reach their targets."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _run(script: str, *args: str) -> str:
    pytest.importorskip("sklearn")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _value(line: str, key: str) -> float:
    match = re.fullmatch(rf"{key}=([0-9.]+)", line)
    assert match, f"last line {line!r} is not {key}=<value>"
    return float(match.group(1))


def test_train_example_linear_regression() -> None:
    assert _value(_run("linear_regression.py"), "max_weight_error") < 0.05


def test_train_example_digits_mlp() -> None:
    assert _value(_run("digits_mlp.py", "--no-progress"), "test_accuracy") >= 0.95


def test_train_example_digits_cnn() -> None:
    assert _value(_run("digits_cnn.py", "--no-progress"), "test_accuracy") >= 0.97
