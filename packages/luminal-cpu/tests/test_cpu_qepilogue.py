"""Elementwise kernels folded into the quantized matmul before them (`epilogue.fuse_quant`):
prefill's GEMM (csrc/qgemm8.c) applies the kernel to each finished tile and never stores the
product; decode's matvec and the float GEMM store it into the output, and the kernel then
runs over it in place. Checked against the same program unfused (bit for bit but for
exp2's vector and scalar ulp: `_same`), and against NumPy
on the `gguf` package's dequantization with x rounded as the GEMM holds it: GeGLU-like
two-product consumers, a plain activation, broadcast row and column operands, a copy, for
every format the GEMM handles, row counts past its micro-tile and weights past its panels
of 32 rows, and rows that take float dot products (tiny values, an infinity)."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import dequantize
from luminal_cpu import CpuBackend, epilogue
from luminal_cpu.epilogue import EpilogueMatmul
from test_cpu_qgemm8 import FORMATS, reference
from test_cpu_qgemv import weight

gguf = pytest.importorskip("gguf")
rng = np.random.default_rng(14)


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))


def _silu(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-v) = inf: v / inf = 0, SiLU's limit
        return v / (1.0 + np.exp(-v))


# consumer name -> (graph of (gate, up, row, col), NumPy of the same)
CONSUMERS = {
    "geglu": (lambda g, u, r, c: g.gelu("tanh") * u, lambda g, u, r, c: _gelu_tanh(g) * u),
    "swiglu": (lambda g, u, r, c: g.silu() * u, lambda g, u, r, c: _silu(g) * u),
    "silu": (lambda g, u, r, c: u.silu(), lambda g, u, r, c: _silu(u)),
    "broadcast": (lambda g, u, r, c: (u + c) * r + g, lambda g, u, r, c: (u + c) * r + g),
}


def _run(qtype: str, x: np.ndarray, raws, n: int, consumer: str, fused: bool, monkeypatch):
    """The consumer's output and the number of fused matmuls in the compiled program."""
    if not fused:
        monkeypatch.setattr(epilogue, "fuse_quant", lambda program, fixed=frozenset(): program)
    m, k = x.shape
    g = lm.Graph()
    xt = g.tensor(x.shape).set(x)
    gate, up = (xt @ dequantize(g.tensor(raw.shape, dtype=lm.uint8).set(raw), qtype, (n, k)).T
                for raw in raws)
    row = g.tensor((m, 1)).set(np.linspace(0.5, 2.0, m, dtype=np.float32).reshape(m, 1))
    col = g.tensor((n,)).set(np.linspace(-1.0, 1.0, n, dtype=np.float32))
    y = CONSUMERS[consumer][0](gate, up, row, col).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    monkeypatch.undo()
    return y.numpy(), sum(isinstance(kk, EpilogueMatmul) for kk in g.runtime.program.kernels)


def _inputs(qtype: str, m: int, n: int, k: int):
    (raw_g, w_g), (raw_u, w_u) = weight(qtype, n, k), weight(qtype, n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[:, 5] *= 30.0  # an outlier channel, as in real activations
    return x, (raw_g, raw_u), (w_g, w_u)


def _same(got: np.ndarray, want: np.ndarray, consumer: str, what: str) -> None:
    """Bit for bit, except that with an exp2 (`lm_exp2`: libmvec's vector exp2f in the
    vectorised loops, glibc's scalar exp2f in their remainders, up to an ulp apart) an element
    that one program computes in a remainder (a tile's last n % 16 columns; a thread's share
    of the unfused kernel's flat loop) may differ by a few ulps."""
    if consumer == "broadcast":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    np.testing.assert_array_max_ulp(got[finite], want[finite], maxulp=4)


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_fused_consumer_is_the_unfused_programs(qtype, consumer, monkeypatch):
    """Prefill's shapes (5 rows: under the micro-tile; 37: past several) and decode's (3:
    the matvec, then the kernel in place), 70 rows of W (two panels and a partial one)."""
    k = 256
    for m in (5, 37, 3):
        x, raws, _ = _inputs(qtype, m, 70, k)
        if m == 37:
            x[4] *= 1e-33  # no rounding (max|x| below the GEMM's floor): float dot products
            x[9, 17] = np.inf
        got, fused = _run(qtype, x, raws, 70, consumer, True, monkeypatch)
        want, unfused = _run(qtype, x, raws, 70, consumer, False, monkeypatch)
        assert fused == 1 and unfused == 0
        _same(got, want, consumer, f"{qtype} {consumer} m={m}")


@pytest.mark.parametrize("qtype", FORMATS)
@pytest.mark.parametrize("setting", ["int16", "int24", "int8"])
def test_fused_geglu_matches_numpy(qtype, setting, monkeypatch):
    """gelu(gate) * up with x rounded as prefill's GEMM holds it under `setting`, against
    float64 NumPy: within float32 rounding of the sums (relative to sum |x w|) times the
    consumer's slope."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", setting)
    x, raws, (w_g, w_u) = _inputs(qtype, 37, 70, 512)
    got, fused = _run(qtype, x, raws, 70, "geglu", True, monkeypatch)
    assert fused == 1
    xq = reference(qtype, x, setting)
    gate, up = xq @ w_g.T, xq @ w_u.T
    want = _gelu_tanh(gate) * up
    err = 5e-6 * ((np.abs(xq) @ np.abs(w_g.T)) * np.abs(up) * 1.2
                  + (np.abs(xq) @ np.abs(w_u.T)) * np.abs(_gelu_tanh(gate))) + 1e-6 * np.abs(want)
    assert np.all(np.abs(got - want) <= err + 1e-30)


def test_a_product_read_by_several_kernels_stays_stored():
    """Only a product its consumer alone reads is folded: here three kernels read it."""
    x, raws, (w_g, _) = _inputs("q8_0", 9, 64, 256)
    g = lm.Graph()
    xt = g.tensor(x.shape).set(x)
    p = xt @ dequantize(g.tensor(raws[0].shape, dtype=lm.uint8).set(raws[0]), "q8_0",
                        (64, 256)).T
    y = (p * 2.0).retrieve()
    s = (p.sum(1) + p.silu().sum(1)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    assert not any(isinstance(k, EpilogueMatmul) for k in g.runtime.program.kernels)
    xq = reference("q8_0", x, "int16")
    want = xq @ w_g.T
    np.testing.assert_allclose(y.numpy(), 2 * want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s.numpy(), want.sum(1) + _silu(want).sum(1), rtol=1e-3, atol=1e-3)
