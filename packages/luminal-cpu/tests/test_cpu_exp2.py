"""exp2 in generated code (`lm_exp2`, dialect.py): arguments below -126, which glibc's vector
exp2f would hand to its scalar path, stay exact where it matters: zero exactly where the C
library's scalar exp2f is zero, subnormals within a unit in the last place, NaN and
infinities unchanged. (NumPy's float32 exp2 is not the reference here: it rounds subnormal
results differently, e.g. exp2(-149.5) is 0 in NumPy and 2^-149 in glibc, in generated code
before and after this change.)"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
from cpu_helpers import run_on
from luminal_cpu import CpuBackend

SPECIAL = [-1e9, -1000.0, -200.0, -151.0, -150.5, -150.0, -149.9, -149.5, -149.0, -140.0,
           -130.0, -127.0, -126.5, -126.0, -125.9, -64.0, -1.0, 0.0, 0.5, 10.0, 127.0, 127.9,
           128.0, 200.0, np.inf, -np.inf, np.nan]


def test_exp2_matches_numpy_below_minus_126_and_at_specials():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.array(SPECIAL, np.float32),
                        rng.uniform(-160, -120, 4000).astype(np.float32),
                        rng.uniform(-30, 30, 1000).astype(np.float32)])

    def build(g):
        t = g.tensor(x.shape, name="x")
        return [t], [t.exp2()]

    name = ctypes.util.find_library("m")
    if name is None:
        pytest.skip("no C math library to compare with")
    exp2f = ctypes.CDLL(name).exp2f
    exp2f.restype, exp2f.argtypes = ctypes.c_float, [ctypes.c_float]
    (got,), = run_on(CpuBackend(), build, [[x]])
    want = np.array([exp2f(float(v)) for v in x], np.float32)
    np.testing.assert_array_equal(got == 0, want == 0)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want) & (want != 0)
    ulps = np.abs(got[finite].view(np.int32) - want[finite].view(np.int32))
    assert ulps.max() <= 1
