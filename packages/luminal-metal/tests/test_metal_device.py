"""The conformance kit on a real Metal device (macOS on Apple silicon), and the runtime's disk
cache. Marked `metal`: skipped, with the reason, on every other machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from luminal.testing import conformance_tests
from luminal_metal import MetalBackend

# every case and variant of the kit, float16 included (marked `metal` by conformance_tests)
test_metal_conformance = conformance_tests(MetalBackend())


@pytest.mark.metal
def test_metal_library_cache_is_reused_by_a_new_process(tmp_path):
    """The first process writes binary archives; a second one loads them (and a corrupt
    archive is rebuilt, not trusted)."""
    code = ("import numpy as np, luminal as lm\n"
            "g = lm.Graph(); x = g.tensor((4, 300), name='x')\n"
            "y = x.softmax(-1).retrieve()\n"
            "g.compile((lm.GenericCompiler(), lm.backend('metal')))\n"
            "x.set(np.ones((4, 300), np.float32)); g.execute()\n"
            "assert np.allclose(y.numpy(), 1 / 300)\n")
    env = {**os.environ, "LUMINAL_METAL_CACHE": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    archives = list(tmp_path.glob("*.binarchive"))
    assert archives
    archives[0].write_bytes(b"corrupt")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert archives[0].read_bytes() != b"corrupt"
