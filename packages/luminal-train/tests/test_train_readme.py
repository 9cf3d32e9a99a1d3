"""The Python blocks of the README run, in order, in one namespace (like a doctest).

Blocks that use luminal-nn are skipped where it is not installed (the train-only tox env).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_train_readme_python_blocks(tmp_path, monkeypatch, capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)  # the quick start writes a checkpoint
    namespace: dict = {}
    has_nn = importlib.util.find_spec("luminal_nn") is not None
    for block in blocks:
        if "luminal_nn" in block and not has_nn:
            continue
        exec(compile(block, str(README), "exec"), namespace)
    assert (tmp_path / "model.safetensors").exists()
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)",
                                       capsys.readouterr().out).groups())
    assert last < first / 2
    assert abs(namespace["w"].numpy() - [1.0, -2.0, 0.5]).max() < 1e-2
