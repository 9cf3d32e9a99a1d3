"""The micro-kernels of tiled attention (`csrc/flash.h`) against float64 NumPy, each on its
own: the scores product, the weighted values with the rows' rescale, and the rows'
online-softmax step (NaN and infinities as in the primitive decomposition). Every build is
checked: the host's (AVX-512 intrinsics where it has them), AVX2 (`-mno-avx512f`) and plain
C (`-mno-avx2`), so a machine without AVX-512 runs here the code it would use. End-to-end tiled
attention is tested in `tests/test_flash_attention.py` (derived by luminal-search) and
`test_cpu_attention.py` (the default compile's)."""

from __future__ import annotations

import ctypes
import re
import subprocess
from importlib.resources import files

import numpy as np
import pytest
from luminal_cpu import toolchain
from luminal_cpu.dialect import C

HEADER = files("luminal_cpu").joinpath("csrc", "flash.h").read_text()
FQ, FK, FR = (int(re.search(rf"#define LM_{name} (\d+)", HEADER).group(1))
              for name in ("FQ", "FK", "FR"))  # queries, keys of a tile; queries of a panel

WRAPPERS = """
void t_scores(long kc, const float *q, const float *kt, float *s, long h0, long h1) {
  lm_fa_scores(kc, q, kt, s, h0, h1);
}
void t_values(long dp, const float *w, const float *v, const float *scale, float *acc,
              long j0, long j1) {
  lm_fa_values(dp, w, v, scale, acc, j0, j1);
}
int t_softmax(long nq, const float *x, float *w, float *m, float *l, float *c, int *nan) {
  return lm_fa_softmax(nq, x, w, m, l, c, nan);
}
"""

F32 = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
I32 = np.ctypeslib.ndpointer(np.int32, flags="C_CONTIGUOUS")


def host_has_avx512() -> bool:
    cc = toolchain.compiler()
    out = subprocess.run([*cc.argv, "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                         capture_output=True, text=True, check=True).stdout
    return "__AVX512F__" in out


BUILDS = {"host": (), "avx2": ("-mno-avx512f",), "plain": ("-mno-avx512f", "-mno-avx2")}


@pytest.fixture(scope="module", params=list(BUILDS))
def flash(request, tmp_path_factory):
    """flash.h built as the backend builds it (host), or with fewer instruction sets."""
    cc = toolchain.compiler()
    if cc is None or cc.error:
        pytest.skip("no working C compiler")
    if request.param == "host" and not host_has_avx512():
        pytest.skip("the host build is one of the others here (no AVX-512)")
    extra = BUILDS[request.param]
    source = (C.prelude() + (toolchain.VECTOR_MATH if cc.vector_math else "")
              + HEADER + WRAPPERS)
    so = tmp_path_factory.mktemp(request.param) / "flash.so"
    subprocess.run([*cc.argv, *cc.flags, *extra, "-x", "c", "-", "-o", str(so), *cc.libs],
                   input=source, text=True, check=True)
    lib = ctypes.CDLL(str(so))
    lib.t_scores.argtypes = [ctypes.c_long, F32, F32, F32, ctypes.c_long, ctypes.c_long]
    lib.t_values.argtypes = [ctypes.c_long, F32, F32, F32, F32, ctypes.c_long, ctypes.c_long]
    lib.t_softmax.argtypes = [ctypes.c_long, F32, F32, F32, F32, F32, I32]
    lib.t_softmax.restype = ctypes.c_int
    return lib


def aligned(a: np.ndarray) -> np.ndarray:
    """A 64-byte aligned float32 copy (the AVX-512 kernels use aligned loads)."""
    raw = np.empty(a.size + 16, np.float32)
    start = (-raw.ctypes.data % 64) // 4
    out = raw[start:start + a.size].reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("keys", [(0, FK), (32, FK - 32)])
@pytest.mark.parametrize("head", [32, 64, 80, 128])
def test_scores_are_the_queries_times_the_keys(flash, head, keys):
    rng = np.random.default_rng(head)
    q = rng.standard_normal((head, FR)).astype(np.float32)  # c-major: a panel of FR queries
    kt = rng.standard_normal((head, FK)).astype(np.float32)  # c-major: keys side by side
    s = aligned(np.full((FR, FK), np.nan, np.float32))
    h0, h1 = keys  # only these keys' scores are computed, the others left as they were
    flash.t_scores(head, aligned(q), aligned(kt), s, h0, h1)
    want = q.T.astype(np.float64) @ kt.astype(np.float64)
    bound = np.abs(q.T).astype(np.float64) @ np.abs(kt).astype(np.float64)
    assert (np.abs(s - want) <= 1e-6 * bound)[:, h0:h1].all()
    assert np.isnan(s[:, :h0]).all() and np.isnan(s[:, h1:]).all()


def test_scores_carry_nan_and_infinities(flash):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((64, FR)).astype(np.float32)
    kt = rng.standard_normal((64, FK)).astype(np.float32)
    q[3, 2] = np.nan  # query 2
    kt[5, 40] = np.inf  # key 40
    s = aligned(np.zeros((FR, FK), np.float32))
    flash.t_scores(64, aligned(q), aligned(kt), s, 0, FK)
    with np.errstate(invalid="ignore"):
        want = q.T.astype(np.float64) @ kt.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(s), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(s), np.isinf(want))
    assert np.isnan(s[2]).all()


@pytest.mark.parametrize("keys", [(0, FK), (32, FK - 32)])
@pytest.mark.parametrize("dp", [32, 64, 96, 128])
def test_values_rescale_the_rows_and_add_the_weighted_values(flash, dp, keys):
    rng = np.random.default_rng(dp)
    w = rng.uniform(0, 1, (FR, FK)).astype(np.float32)
    w[:, FK - 14:] = 0.0  # the tail of a ragged block
    v = rng.standard_normal((FK, dp)).astype(np.float32)
    scale = rng.uniform(0, 1, FR).astype(np.float32)
    scale[1] = 1.0
    acc = rng.standard_normal((FR, dp)).astype(np.float32)
    j0, j1 = keys  # the weights of only these keys are added
    want = acc.astype(np.float64) * scale[:, None] + w[:, j0:j1].astype(np.float64) @ v[j0:j1]
    got = aligned(acc)
    flash.t_values(dp, aligned(w), aligned(v), aligned(scale), got, j0, j1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_values_weigh_every_value_so_zero_times_inf_is_nan(flash):
    rng = np.random.default_rng(2)
    w = rng.uniform(0, 1, (FR, FK)).astype(np.float32)
    w[0, 7] = 0.0
    w[4, :] = 0.0
    v = rng.standard_normal((FK, 64)).astype(np.float32)
    v[7, 3] = np.inf
    v[9, 5] = np.nan
    got = aligned(np.zeros((FR, 64), np.float32))
    flash.t_values(64, aligned(w), aligned(v), aligned(np.ones(FR, np.float32)), got, 0, FK)
    with np.errstate(invalid="ignore"):
        want = w.astype(np.float64) @ v
    assert np.isnan(got[0, 3]) and np.isnan(got[4, 3]) and np.isnan(got[:, 5]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def softmax_step(x, m, total):
    """float64 reference of one online-softmax block step (core's `OnlineSoftmax`)."""
    with np.errstate(invalid="ignore", over="ignore"):
        mx = np.maximum(m, np.nanmax(np.where(np.isnan(x), -np.inf, x), axis=1))
        low = mx == -np.inf
        w = np.where(low[:, None], 0.0, np.exp2(x - np.where(low, 0.0, mx)[:, None]))
        c = np.where(low, 1.0, np.exp2(m - np.where(low, 0.0, mx)))
    return w, mx, total * c + w.sum(1), c, np.isnan(x).any(1)


@pytest.mark.parametrize("nq", [1, 5, 13, 16, 17, 32])
def test_softmax_step_follows_the_decomposition(flash, nq):
    """Rows not a multiple of 16; logits with NaN, +inf, -inf, -1e9, -20 (a weight that is
    small but not 0), -140 (a subnormal weight, exact) and a ragged tail of -inf; rows whose
    running max was -inf, and one whose logits are all -inf."""
    rng = np.random.default_rng(nq)
    x = (rng.standard_normal((nq, FK)) * 4).astype(np.float32)
    m = (rng.standard_normal(nq) * 4).astype(np.float32)
    m[::3] = -np.inf
    x[:, FK - 14:] = -np.inf  # the tail of a ragged block
    x[0, 1], x[0, 2] = -1e9, -20.0
    specials = {1: (4, np.nan), 2: (6, np.inf), 3: (8, -1e9), 4: (None, -np.inf),
                6: (FK - 15, np.nan)}  # a NaN in the last 16 lanes of a row
    for row, (col, value) in specials.items():
        if row < nq:
            x[row, slice(None) if col is None else col] = value
    if nq > 5:
        x[5, :] = -np.inf
        x[5, 0], x[5, 1] = 0.0, -140.0
        m[5] = -np.inf
    lo = rng.uniform(0, 5, nq).astype(np.float32)
    w = aligned(np.full((FQ, FK), 7.0, np.float32))
    got_m, got_l = aligned(m), aligned(lo)
    got_c = aligned(np.zeros(FQ, np.float32))
    nan = np.zeros(FQ, np.int32)
    any_weight = flash.t_softmax(nq, aligned(x), w, got_m, got_l, got_c, nan)
    want_w, want_m, want_l, want_c, want_nan = softmax_step(
        x.astype(np.float64), m.astype(np.float64), lo.astype(np.float64))
    w = w[:nq]
    np.testing.assert_array_equal(np.isnan(w), np.isnan(want_w))
    np.testing.assert_array_equal(w == 0, want_w.astype(np.float32) == 0)
    np.testing.assert_allclose(w[~np.isnan(w)], want_w[~np.isnan(want_w)], rtol=2e-6, atol=0)
    np.testing.assert_array_equal(got_m, want_m.astype(np.float32))
    np.testing.assert_allclose(got_c[:nq], want_c, rtol=2e-6)
    np.testing.assert_allclose(got_l, want_l, rtol=1e-5, equal_nan=True)
    np.testing.assert_array_equal(nan[:nq] != 0, want_nan)
    assert bool(any_weight) == bool((want_w != 0).any())
    if nq > 5:
        assert w[5, 1] == np.float32(2.0 ** -140)  # a subnormal weight
    if nq > 4:
        assert (w[4] == 0).all() and got_c[4] == 1.0  # a row of -inf: nothing, scale 1


def test_softmax_step_of_rows_with_no_weight(flash):
    """Every logit -inf: no weight anywhere (a block the kernel may skip)."""
    x = np.full((FQ, FK), -np.inf, np.float32)
    m = aligned(np.full(FQ, 3.0, np.float32))
    w = aligned(np.ones((FQ, FK), np.float32))
    c = aligned(np.zeros(FQ, np.float32))
    nan = np.zeros(FQ, np.int32)
    assert flash.t_softmax(FQ, aligned(x), w, m, aligned(np.ones(FQ, np.float32)), c, nan) == 0
    assert (w == 0).all() and (c == 1).all() and (m == 3).all() and not nan.any()
