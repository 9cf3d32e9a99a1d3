"""Decode's quantized matvec with integer digits of x (csrc/qgemv16.c, the default, named
`int16`): x @ W.T for up to 4 rows of x writes each row of x as three signed byte digits per
value, scaled per block of 32 (Q4_0 / Q4_1 / Q5_0, in `vpdpbusd`), or two int16 digits scaled
per block of 256 (the K-quants, in `vpdpwssd`), and takes integer dot products; Q8_0 in GGUF's
layout keeps the float kernel (in the packed one: test_cpu_q41_packed). Checked against
float64 NumPy on the `gguf` package's dequantization with x rounded the same way
(`luminal.testing.quant.decode_activations`), against the exact float
product within the rounding's bound, on random blocks (luminal-models' Gemma 3 test runs real
ones through the default), and for inputs with no such rounding (NaN, infinities, tiny
values), which must take the float kernels."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import BLOCK_FORMATS, dequantize
from luminal.testing.quant import decode_activations, int8_activations
from luminal_cpu import CpuBackend
from luminal_cpu.source import quant_activations
from test_cpu_qgemv import assert_float_fallback, matvec, weight

gguf = pytest.importorskip("gguf")

FORMATS = ("q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k")
INT16_FORMATS = ("q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k")  # q8_0 keeps float32 x
rng = np.random.default_rng(16)


@pytest.fixture(autouse=True)
def default_setting(monkeypatch):
    """These tests run with the default setting, which is int16."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)


def test_int16_is_the_default():
    assert quant_activations() == "int16"


def reference(qtype: str, x: np.ndarray) -> np.ndarray:
    """x as the kernel holds it: int16 blocks for the int16 formats, else float32 as is."""
    if qtype not in INT16_FORMATS:
        return x.astype(np.float64)
    return decode_activations(x, qtype)


def check(got: np.ndarray, x: np.ndarray, w: np.ndarray, qtype: str, rtol: float = 5e-6,
          held: np.ndarray | None = None):
    """`got` = x @ w.T with x as the kernel holds it (`held`, else `reference`)."""
    xq = reference(qtype, x) if held is None else held
    want = xq @ w.T
    scale = np.abs(xq) @ np.abs(w.T)
    # float32 rounding of the per-block products and the final sums only
    worst = np.max(np.abs(got - want) / (scale + 1e-30))
    assert np.all(np.abs(got - want) <= rtol * scale + 1e-30), (qtype, worst)
    # and the two int16 digits stay within their bound of x (4.7e-10 max|x| per value)
    bound = np.abs(x.astype(np.float64) - xq) @ np.abs(w.T)
    assert np.all(np.abs(got - x.astype(np.float64) @ w.T) <= bound + rtol * scale + 1e-30)


def columns(qtype: str) -> list[int]:
    """One block, a few, and (32-value formats) counts that leave a partial group of four blocks
    (160 = 5 blocks, 608 = 19: Q4_1 scales one run of 16 blocks at once, then three groups;
    1056 = 33: two runs, then one) or fill groups exactly (256)."""
    if BLOCK_FORMATS[qtype].block_size == 256:
        return [256, 1280, 2816]
    return [32, 160, 256, 608, 1056]


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_int16_matvec_matches_gguf(qtype, m):
    block = BLOCK_FORMATS[qtype].block_size
    for cols in columns(qtype):
        rows = 9
        raw, w = weight(qtype, rows, cols)
        magnitude = 10.0 ** rng.integers(-3, 3, (m, 1))
        x = (rng.standard_normal((m, cols)) * magnitude).astype(np.float32)
        x[0, :block] = 0  # a block of zeros: dx = 0
        if qtype in INT16_FORMATS:  # outliers: large terms beside small ones in a block
            x[:, 7::61] *= 3e4
        check(matvec(raw, qtype, (rows, cols), x), x, w, qtype)


@pytest.mark.parametrize("qtype", ["q4_k", "q5_k"])
@pytest.mark.parametrize("fill", [0xFF, 0x00, 0xA5])
def test_int16_k_quant_extreme_quants_and_scales(qtype, fill):
    """Q4_K / Q5_K widen a byte of nibbles and apply its sub-block scale in one `vpmaddubsw`
    (quant times the scale in the matching byte): every quant, 6-bit scale and min and fifth
    bit at its largest (0xFF), smallest (0x00) and a mixed pattern (0xA5), 1-4 rows of x."""
    rows, cols = 5, 768
    raw, _ = weight(qtype, rows, cols)
    blocks = raw.reshape(rows, cols // 256, -1)
    blocks[..., 4:] = fill  # scales, mins, (Q5_K) fifth bits, nibbles; d and dmin stay random
    fmt = BLOCK_FORMATS[qtype]
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float64)
    for m in (1, 4):
        x = rng.standard_normal((m, cols)).astype(np.float32)
        x[:, 3::97] *= 3e4
        check(matvec(raw, qtype, (rows, cols), x), x, w, qtype)


@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q5_0"])
@pytest.mark.parametrize("fill", [0xFF, 0x00])
def test_byte_digits_hold_the_largest_sums(qtype, fill):
    """The 32-value formats' chain of `vpdpbusd` keeps sum(q T) exactly in int32 lanes: every
    quant (and Q5_0's fifth bit) at its largest or smallest, x at +-max|x| in whole rows (|T| =
    127 * 65536 everywhere: the lanes' largest sums) and mixed, 1 and 4 rows of x, over two runs
    of 16 blocks and a partial group."""
    rows, cols = 5, 1056
    raw, _ = weight(qtype, rows, cols)
    blocks = raw.reshape(rows, cols // 32, -1)
    blocks[..., 4 if qtype == "q4_1" else 2:] = fill  # quants (and qh); d and m stay random
    fmt = BLOCK_FORMATS[qtype]
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float64)
    for m in (1, 4):
        x = np.full((m, cols), 2.5, np.float32)
        x[1::2] = -2.5
        if m == 4:
            x[3, ::3] = -2.5
        check(matvec(raw, qtype, (rows, cols), x), x, w, qtype)


@pytest.mark.parametrize("qtype", INT16_FORMATS)
def test_int16_error_is_a_fraction_of_int8s(qtype):
    """Against the exact product (float64 x): the int16 kernel's largest error is under 0.1% of
    what rounding x to int8 blocks (llama.cpp's numerics, the opt-in int8 setting) costs on
    the same data."""
    block = BLOCK_FORMATS[qtype].block_size
    raw, w = weight(qtype, 64, 1024)
    x = rng.standard_normal((1, 1024)).astype(np.float32)
    x[0, 5] = 40.0  # an outlier, as in real activations
    got = matvec(raw, qtype, (64, 1024), x)
    exact = x.astype(np.float64) @ w.T
    int8_error = np.max(np.abs(int8_activations(x, block) @ w.T - exact))
    assert np.max(np.abs(got - exact)) <= 1e-3 * int8_error


@pytest.mark.parametrize("qtype", INT16_FORMATS)
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 1e-35])
def test_rows_without_int16_rounding_take_the_float_kernels(qtype, bad):
    """A non-finite row of x propagates like the float product (every output non-finite; NaN
    for NaN), and the whole call runs the float kernels: the finite row beside it matches the
    exact product to float32 rounding. Values so small that 32767 / max|x| overflows (1e-35)
    also go to the float kernels."""
    assert_float_fallback(qtype, bad, rng)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_1", "q5_0", "q4_k"])
def test_batches_split_between_threads(qtype, monkeypatch):
    """x in 3 batches of 2 rows that do not fold into one matrix (every third row of x is
    skipped) times 7 rows of W: the matvec walks 21 (batch, row) pairs, and with two threads
    a chunk ends inside a batch. One thread and two give the same bits, and every batch the
    product's values (Q8_0: the float kernel; the others the integer digits)."""
    from luminal_cpu import threads

    cols = 256 if BLOCK_FORMATS[qtype].block_size == 256 else 576
    raw, w = weight(qtype, 7, cols)
    x = rng.standard_normal((3, 3, cols)).astype(np.float32)
    results = []
    for count in ("1", "2"):
        monkeypatch.setenv("LUMINAL_CPU_THREADS", count)
        threads.governor.cache_clear()
        g = lm.Graph()
        xt = g.tensor(x.shape).set(x)
        rt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
        y = (xt[:, :2, :] @ dequantize(rt, qtype, (7, cols)).T).retrieve()
        g.compile((lm.GenericCompiler(), CpuBackend()))
        (kernel,) = g.runtime.program.kernels
        assert len(kernel.batch) == 1  # one call over 3 batches, not 6 folded rows
        g.execute()
        results.append(y.numpy())
    threads.governor.cache_clear()
    np.testing.assert_array_equal(results[0], results[1])
    for b in range(3):
        check(results[1][b], x[b, :2], w, qtype)
