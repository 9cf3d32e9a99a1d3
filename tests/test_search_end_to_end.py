"""The search compiler where users meet it: `luminal generate --search` gives the same tokens
as without it, and the training examples accept `--search`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("luminal_search")
ROOT = Path(__file__).resolve().parents[1]


def run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    env["LUMINAL_CACHE"] = str(cache)
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_generate_with_search_gives_the_same_tokens(fresh_cache):
    pytest.importorskip("luminal_models")
    from luminal_models.errors import DownloadError
    from luminal_models.hub import smollm2_path

    try:
        smollm2_path(progress=False)
    except DownloadError as e:
        pytest.skip(f"SmolLM2 weights unavailable: {e}")
    args = ("-m", "luminal", "generate", "-n", "6", "--json", "--backend", "cpu",
            "The capital of France is")
    plain = run(fresh_cache, *args)
    searched = run(fresh_cache, *args, "--search")
    assert plain.returncode == 0 and searched.returncode == 0, searched.stderr[-2000:]
    assert json.loads(searched.stdout)["token_ids"] == json.loads(plain.stdout)["token_ids"]
    assert list((fresh_cache / "search").glob("*.json"))  # the plan was cached


def test_training_example_accepts_search(fresh_cache):
    pytest.importorskip("luminal_train")
    done = run(fresh_cache, str(ROOT / "packages/luminal-train/examples/linear_regression.py"),
               "--backend", "cpu", "--search")
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("max_weight_error=") and float(last.split("=")[1]) < 0.05
