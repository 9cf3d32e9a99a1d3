"""Decode's quantized matvec with int8 activations (csrc/qgemv.c): x @ W.T for up to 4 rows of
x rounds each row of x to int8 blocks (32 values for the 32-value formats, 256 for the
K-quants) and takes integer dot products. Checked against float64 NumPy on the `gguf` package's
dequantization with x rounded the same way (`luminal.testing.quant.int8_activations`), against
the exact float product within the rounding's bound, and for inputs with no int8 rounding (NaN,
infinities, tiny values), which must take the float kernels."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import BLOCK_FORMATS, dequantize
from luminal.testing.quant import int8_activations, random_blocks
from luminal_cpu import CpuBackend

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

FORMATS = ("q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k")
rng = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def int8_path(monkeypatch):
    """The int8 path is opt-in (LUMINAL_CPU_QUANT_ACTIVATIONS=int8): on for these tests."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")


def weight(qtype: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Random GGUF bytes of `qtype` and the float64 matrix gguf decodes them to."""
    raw = random_blocks(qtype, rows, cols, rng)
    fmt = BLOCK_FORMATS[qtype]
    return raw, gguf_dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float64)


def matvec(raw: np.ndarray, qtype: str, shape: tuple[int, int], x: np.ndarray) -> np.ndarray:
    g = lm.Graph()
    xt = g.tensor(x.shape, dtype=lm.float16 if x.dtype == np.float16 else lm.float32).set(x)
    rt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    y = (xt @ dequantize(rt, qtype, shape).T).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    return y.numpy()


def columns(qtype: str) -> list[int]:
    """Row lengths: one block, a few, and counts past a multiple of the four accumulator chains
    (608 = 19 blocks of 32: not a multiple of 256, which the 32-value formats allow)."""
    return [256, 1280] if BLOCK_FORMATS[qtype].block_size == 256 else [32, 160, 608]


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_int8_matvec_matches_gguf(qtype, m):
    block = BLOCK_FORMATS[qtype].block_size
    for cols in columns(qtype):
        rows = 9
        raw, w = weight(qtype, rows, cols)
        # m rows of x (a batch axis would be folded into them: up to 4 in all take this path)
        magnitude = 10.0 ** rng.integers(-3, 3, (m, 1))
        x = (rng.standard_normal((m, cols)) * magnitude).astype(np.float32)
        x[0, :block] = 0  # a block of zeros: dx = 0
        got = matvec(raw, qtype, (rows, cols), x)
        xq = int8_activations(x, 256 if block == 256 else 32)
        # the dequantized weights times x rounded to int8 blocks: float32 rounding only
        want = xq @ w.T
        scale = np.abs(xq) @ np.abs(w.T)
        assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), (qtype, cols)
        # and within the rounding's own bound of the exact product
        bound = np.abs(x.astype(np.float64) - xq) @ np.abs(w.T)
        assert np.all(np.abs(got - x @ w.T) <= bound + 1e-5 * scale + 1e-30), (qtype, cols)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_k"])
def test_int8_matvec_float16_activations(qtype):
    cols = 512
    raw, w = weight(qtype, 5, cols)
    x = rng.standard_normal((1, cols)).astype(np.float16)
    xq = int8_activations(x.astype(np.float32), 256 if qtype == "q4_k" else 32)
    got = matvec(raw, qtype, (5, cols), x).astype(np.float64)
    want = xq @ w.T
    scale = np.abs(xq) @ np.abs(w.T)
    assert np.all(np.abs(got - want) <= 2e-3 * scale + 1e-30)  # the output is float16


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan, 1e-35])
def test_rows_without_int8_rounding_take_the_float_kernels(qtype, bad):
    """A non-finite row of x propagates like the float product (every output non-finite; NaN
    for NaN), and the whole call runs the float kernels: the finite row beside it matches the
    exact product to float32 rounding (1e-5), not the int8 rounding (1e-3). Values so small
    that 127 / max|x| overflows (1e-35) also go to the float kernels."""
    assert_float_fallback(qtype, bad, rng)


@pytest.mark.parametrize("qtype", ["q4_1", "q6_k"])
def test_float_activations_on_request(qtype, monkeypatch):
    """LUMINAL_CPU_QUANT_ACTIVATIONS=float keeps x in float32: the exact
    product up to float32 rounding (1e-5) where int8 activations are about 1e-3 away."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "float")
    raw, w = weight(qtype, 6, 512)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    got = matvec(raw, qtype, (6, 512), x)
    scale = np.abs(x).astype(np.float64) @ np.abs(w.T)
    assert np.all(np.abs(got - x @ w.T) <= 1e-5 * scale + 1e-30)


def test_unknown_activation_setting_is_refused(monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int4")
    raw, _ = weight("q8_0", 4, 64)
    with pytest.raises(ValueError, match="LUMINAL_CPU_QUANT_ACTIVATIONS must be one of "
                                         "'float', 'int8', 'int16', 'int24', not 'int4'"):
        matvec(raw, "q8_0", (4, 64), np.ones((1, 64), np.float32))


def assert_float_fallback(qtype: str, bad: float, rng: np.random.Generator) -> None:
    """Row 0 of x holds `bad` (or is scaled by it when tiny): it propagates like the float
    product and the finite row 1 matches the exact product to float32 rounding."""
    cols = 512
    raw, w = weight(qtype, 7, cols)
    x = rng.standard_normal((2, cols)).astype(np.float32)
    if bad == 1e-35:
        x[0] *= np.float32(1e-35)
    else:
        x[0, 37] = bad
    got = matvec(raw, qtype, (7, cols), x)
    check_bad_row(got, x, w, bad)
    if np.isnan(bad):
        assert np.isnan(got[0]).all()


def check_bad_row(got: np.ndarray, x: np.ndarray, w: np.ndarray, bad: float,
                  held: np.ndarray | None = None) -> None:
    """`got` = x @ w.T where row 0 of x holds `bad` (or was scaled by it when tiny): a tiny
    row matches the exact product to float32 rounding; a non-finite value leaves row 0 with
    no finite output. The other rows are exact to float32 rounding with x as the kernel holds
    them (`held`, default x)."""
    with np.errstate(invalid="ignore"):  # inf * 0 in row 0
        exact = x.astype(np.float64) @ w.T
        scale = np.abs(x).astype(np.float64) @ np.abs(w.T)
    if bad == 1e-35:
        assert np.all(np.abs(got[0] - exact[0]) <= 1e-5 * scale[0] + 1e-45)
    else:
        assert not np.isfinite(got[0]).any()
    rest = (x if held is None else held)[1:].astype(np.float64) @ w.T
    assert np.all(np.abs(got[1:] - rest) <= 1e-5 * scale[1:] + 1e-30)
