"""Prefill's quantized GEMM through int8 digits of x (csrc/qgemm8.c): x @ W.T for more than 4
rows of x. Under the default setting (int16) each group of 32 values of x (16 for Q6_K) is
rounded to 16 bits, written as two byte digits, under int24 as three (float-like), under int8
as one (llama.cpp's numerics): `luminal.testing.quant.int8_digit_activations` and
`int8_activations`; W's quants meet them in integer dot products. Checked against float64 NumPy
on the `gguf` package's dequantization with x rounded the same way, against the exact product
within the rounding's bound, for ragged rows of x and of W (not multiples of the micro-tile)
and row lengths that leave a partial chunk of W, and for rows with no such rounding (NaN,
infinities, tiny values), which must take float dot products while the other rows keep their
digits."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_helpers import group
from luminal.quant import BLOCK_FORMATS
from luminal.testing.quant import int8_activations, int8_digit_activations
from test_cpu_qgemv import matvec, weight

gguf = pytest.importorskip("gguf")

SETTINGS = ("int16", "int24", "int8")
FORMATS = ("q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k")
rng = np.random.default_rng(8)


def reference(qtype: str, x: np.ndarray, setting: str) -> np.ndarray:
    """x as the kernel holds it under `setting`."""
    if setting == "int8":
        return int8_activations(x, group(qtype))
    return int8_digit_activations(x, group(qtype), digits=2 if setting == "int16" else 3)


def columns(qtype: str) -> list[int]:
    """Row lengths: one chunk of W (256 values), and lengths that leave a partial last chunk
    (608 = 19 groups of 32: an odd count; 768 = three K-quant blocks)."""
    return [256, 768] if BLOCK_FORMATS[qtype].block_size == 256 else [256, 608]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("qtype", FORMATS)
def test_prefill_gemm_matches_gguf(qtype, setting, monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", setting)
    for cols in columns(qtype):
        # rows of x: past the micro-tile's 6 (int16), 4 (int24) or 12 (int8); rows of W: past
        # its panels of 32
        for m, rows in [(5, 9), (37, 70)]:
            raw, w = weight(qtype, rows, cols)
            magnitude = 10.0 ** rng.integers(-3, 3, (m, 1))
            x = (rng.standard_normal((m, cols)) * magnitude).astype(np.float32)
            x[0, :32] = 0  # a group of zeros: dx = 0
            x[:, 7::61] *= 3e4  # outliers: large terms beside small ones in a group
            got = matvec(raw, qtype, (rows, cols), x)
            xq = reference(qtype, x, setting)
            want = xq @ w.T
            scale = np.abs(xq) @ np.abs(w.T)
            # float32 rounding of the per-group products and the sums only
            worst = np.max(np.abs(got - want) / (scale + 1e-30))
            assert np.all(np.abs(got - want) <= 5e-6 * scale + 1e-30), (qtype, cols, m, worst)


@pytest.mark.parametrize("setting", ["int16", "int24"])
@pytest.mark.parametrize("qtype", FORMATS)
def test_digits_keep_their_bound(qtype, setting, monkeypatch):
    """Against the exact product (float64 x): the largest error is within the setting's bound
    per value (int16: 1.54e-5 of each group's max|x|, int24: 1.8e-7; plus float32 rounding)
    and a small share of what rounding x to one int8 digit (the int8 setting) costs on the
    same data (int16 1%, int24, float-like, 0.2%)."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", setting)
    raw, w = weight(qtype, 64, 1024)
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    x[:, 5] = 40.0  # an outlier channel, as in real activations
    got = matvec(raw, qtype, (64, 1024), x)
    exact = x.astype(np.float64) @ w.T
    g = group(qtype)
    amax = np.repeat(np.abs(x.reshape(8, -1, g)).max(-1), g, axis=-1).astype(np.float64)
    per_value, share = (1.54e-5, 1e-2) if setting == "int16" else (1.8e-7, 2e-3)
    bound = (per_value * amax) @ np.abs(w.T) + 5e-6 * (np.abs(x).astype(np.float64) @ np.abs(w.T))
    assert np.all(np.abs(got - exact) <= bound + 1e-30)
    int8_error = np.max(np.abs(int8_activations(x, g) @ w.T - exact))
    assert np.max(np.abs(got - exact)) <= share * int8_error


def test_float16_rows_of_x_are_converted(monkeypatch):
    """x stored as float16 is widened before its digits are taken."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)
    raw, w = weight("q5_0", 40, 640)
    x = rng.standard_normal((9, 640)).astype(np.float16)
    got = matvec(raw, "q5_0", (40, 640), x)
    xq = int8_digit_activations(x.astype(np.float32), 32, digits=2)
    assert np.all(np.abs(got - xq @ w.T) <= 5e-6 * (np.abs(xq) @ np.abs(w.T)) + 1e-30)


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("qtype", ["q5_0", "q6_k"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 1e-35])
def test_rows_without_a_digit_rounding_take_float_dot_products(qtype, bad, setting, monkeypatch):
    """A row of x holding a non-finite value propagates it like the float product (its outputs
    non-finite; NaN for NaN); a row so small that 127 / max|x| loses precision (1e-35) is
    computed in float (the exact product to float32 rounding). The other rows keep their
    digits."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", setting)
    raw, w = weight(qtype, 40, 512)
    x = rng.standard_normal((6, 512)).astype(np.float32)
    if bad == 1e-35:
        x[2] *= np.float32(1e-35)
    else:
        x[2, 37] = bad
    got = matvec(raw, qtype, (40, 512), x)
    with np.errstate(invalid="ignore"):  # inf * 0 in row 2
        exact = x.astype(np.float64) @ w.T
        scale = np.abs(x).astype(np.float64) @ np.abs(w.T)
    if bad == 1e-35:
        assert np.all(np.abs(got[2] - exact[2]) <= 1e-5 * scale[2] + 1e-45)
    else:
        assert not np.isfinite(got[2]).any()
        if np.isnan(bad):
            assert np.isnan(got[2]).all()
    rest = [0, 1, 3, 4, 5]
    xq = reference(qtype, x[rest], setting)
    assert np.all(np.abs(got[rest] - xq @ w.T) <= 5e-6 * (np.abs(xq) @ np.abs(w.T)) + 1e-30)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("qtype", ["q4_1", "q6_k"])
def test_sums_go_straight_into_c_at_its_edges(qtype, threads, monkeypatch):
    """The last group's sums are stored into C's rows with the panel's columns masked: a last
    panel of W of 9 rows, of 25 (its second vector partial) and of 16 (its second vector
    empty, the packed layout), batch axes (C's rows at each batch's offset), a single chunk of
    W (its first group is also its last) and several, float16 x, and a row without a rounding
    written over what the digits stored."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)
    monkeypatch.setenv("LUMINAL_CPU_THREADS", threads)
    for rows, cols, shape, dtype in [(41, 256, (7, 256), np.float32),
                                     (57, 768, (3, 7, 768), np.float32),
                                     (48, 768, (2, 9, 768), np.float32),
                                     (57, 256, (3, 6, 256), np.float16)]:
        raw, w = weight(qtype, rows, cols)
        x = rng.standard_normal(shape).astype(dtype)
        x[..., 7::61] *= 300
        x.reshape(-1, cols)[4, 3] = np.inf
        got = matvec(raw, qtype, (rows, cols), x).reshape(-1, rows)
        flat = x.reshape(-1, cols).astype(np.float32)
        assert not np.isfinite(got[4]).any()
        rest = np.arange(len(flat)) != 4
        xq = int8_digit_activations(flat[rest], group(qtype), digits=2)
        want, scale = xq @ w.T, np.abs(xq) @ np.abs(w.T)
        assert np.all(np.abs(got[rest] - want) <= 5e-6 * scale + 1e-30), (rows, cols, shape)
