"""Hostile names and values on the CPU backend: user strings never reach the generated C, and
the documented rules for out-of-range ids and int32 overflow hold."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
from luminal_cpu import CpuBackend

HOSTILE = 'n"; }\n#include "/etc/hostname"\n// \\\0'


def test_user_dim_and_tensor_names_never_reach_the_generated_source(fresh_cache):
    g = lm.Graph()
    x = g.tensor((HOSTILE, 3), name=HOSTILE)
    out = (x.exp2() * 2).sum(0).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    data = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
    x.set(data)
    g.execute()
    np.testing.assert_allclose(out.numpy(), (np.exp2(data) * 2).sum(0), rtol=1e-6)
    source = g.runtime.library.path.with_suffix(".c").read_text()
    assert "hostname" not in source and "#include \"/etc" not in source


def test_out_of_range_ids_read_zeros_on_cpu():
    # documented: the one-hot decomposition selects nothing for an id outside the table, so
    # backends other than the reference give a zero row (the reference raises IndexError)
    g = lm.Graph()
    w = g.tensor((4, 3), name="w").set(np.arange(12, dtype=np.float32).reshape(4, 3) + 1)
    ids = g.tensor((3,), name="ids", dtype=lm.int32).set(np.array([1, 7, -2], np.int32))
    rows = F.embedding(ids, w).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    np.testing.assert_array_equal(rows.numpy(), [[4, 5, 6], [0, 0, 0], [0, 0, 0]])


def test_int32_sum_overflow_wraps_as_on_the_reference():
    values = np.array([2**31 - 1, 2**31 - 1, 5, -7], np.int32)
    results = []
    for backend in (lm.backend("reference"), CpuBackend()):
        g = lm.Graph()
        x = g.tensor((4,), name="x", dtype=lm.int32).set(values)
        s = x.sum(0).retrieve()
        g.compile((lm.GenericCompiler(), backend))
        g.execute()
        results.append(s.numpy().item())
    assert results == [values.sum(dtype=np.int32)] * 2
