"""The README's Python blocks run in order as one script, in one process and on two MPI ranks
(the collectives block's values are checked against what each rank must see)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from luminal_dist.launch import launch_command

README = Path(__file__).resolve().parents[1] / "README.md"
CHECK = """
n = comm.size
expected = 2.0 * sum(range(1, n + 1))
assert np.all(total.numpy() == expected), total.numpy()
assert rows.numpy().shape == (4 * n, 6) and np.all(rows.numpy()[:4] == 1.0)
assert np.all(part.numpy() == sum(range(1, n + 1))) and part.numpy().shape == (4 // n, 6)
assert np.all(same.numpy() == 1.0)
assert losses[-1] < losses[0] / 2
print(f"rank {comm.rank} ok")
"""


@pytest.mark.parametrize("ranks", [1, 2])
def test_dist_readme_python_blocks(tmp_path, ranks) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 2
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks) + CHECK)
    argv = [sys.executable, str(script)]
    if ranks > 1:
        argv = launch_command(ranks, argv)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "LUMINAL_CPU_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(re.findall(r"rank \d ok", done.stdout)) == [f"rank {r} ok"
                                                               for r in range(ranks)]
    assert (tmp_path / "ckpt.safetensors").exists()
