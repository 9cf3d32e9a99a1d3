"""The cpu backend's matmuls on Q5_0 (csrc/runtime.c) and K-quant weights (csrc/kquant.c)
against NumPy's product with the `gguf` package's dequantization, on random blocks: decode (few
rows, fused matvec), prefill (many rows) and x @ W."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from cpu_helpers import quant_matmul_activations
from luminal.quant import BLOCK_FORMATS, dequantize
from luminal.testing.quant import random_blocks
from luminal_codegen import Matmul, QuantOperand
from luminal_cpu import CpuBackend, threads

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

KQUANTS = ("q5_0", "q4_k", "q5_k", "q6_k")
rng = np.random.default_rng(3)


def run_product(raw: np.ndarray, qtype: str, shape: tuple[int, int], x: np.ndarray,
                transposed: bool) -> tuple[np.ndarray, lm.Graph]:
    g = lm.Graph()
    xt = g.tensor(x.shape).set(x)
    rt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    w = dequantize(rt, qtype, shape)
    y = (xt @ (w.T if transposed else w)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    return y.numpy(), g


@pytest.mark.parametrize("qtype", KQUANTS)
@pytest.mark.parametrize("m", [1, 3, 9])
@pytest.mark.parametrize("transposed", [True, False])
def test_kquant_matmul_matches_gguf(qtype, m, transposed):
    fmt = BLOCK_FORMATS[qtype]
    rows, cols = (37, 2 * fmt.block_size) if transposed else (2 * fmt.block_size, fmt.block_size)
    # small scales keep the sums of products well inside float32's range
    raw = random_blocks(qtype, rows, cols, rng)
    w = gguf_dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float64)
    k = cols if transposed else rows
    x = rng.standard_normal((2, m, k)).astype(np.float32)
    got, g = run_product(raw, qtype, (rows, cols), x, transposed)
    xr = quant_matmul_activations(x, qtype, transposed)
    want = xr @ (w.T if transposed else w)
    scale = np.abs(xr) @ np.abs(w.T if transposed else w)
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), qtype
    # one kernel, reading the raw bytes: the float decomposition is dead code
    (kernel,) = g.runtime.program.kernels
    assert isinstance(kernel, Matmul) and isinstance(kernel.b, QuantOperand)
    assert kernel.b.qtype == qtype


@pytest.mark.parametrize("qtype", ["q4_0", "q8_0", *KQUANTS])
@pytest.mark.parametrize("rows", [16, 50, 96])
def test_prefill_panels_of_any_width(qtype, rows, monkeypatch):
    """Prefill's x @ W.T packs W a panel of 32 rows at a time, transposed 16 x 16 in
    registers: full panels, a half one and ragged ones, over K panels of 256 and a shorter last
    one; two threads share the column tiles."""
    monkeypatch.setattr(threads.governor(), "threads", lambda: 2)
    fmt = BLOCK_FORMATS[qtype]
    cols = 512 + (64 if fmt.block_size == 32 else 0)
    raw = random_blocks(qtype, rows, cols, rng)
    w = gguf_dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float64)
    x = rng.standard_normal((1, 33, cols)).astype(np.float32)
    got, _ = run_product(raw, qtype, (rows, cols), x, transposed=True)
    xr = quant_matmul_activations(x, qtype, transposed=True)
    want = xr @ w.T
    scale = np.abs(xr) @ np.abs(w.T)
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-30), qtype
