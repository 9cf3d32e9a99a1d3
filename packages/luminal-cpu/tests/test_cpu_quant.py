"""Quantized weights (GGUF Q8_0 / Q4_0 / Q4_1 / Q5_0) stay quantized: the matmul decodes blocks in
registers, and matches NumPy's dequantize-then-matmul."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from cpu_helpers import quant_matmul_activations
from luminal.quant import dequantize
from luminal_codegen import Matmul, QuantOperand
from luminal_codegen.ir import Bind, walk
from luminal_cpu import CpuBackend

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

QTYPES = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0,
          "q4_1": GGMLQuantizationType.Q4_1, "q5_0": GGMLQuantizationType.Q5_0}
rng = np.random.default_rng(2)


def quantized(qtype: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """GGUF bytes of a random matrix, and the float32 matrix they decode to."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    raw = gguf_quants.quantize(w, QTYPES[qtype])
    return raw, gguf_quants.dequantize(raw, QTYPES[qtype]).astype(np.float32)


@pytest.mark.parametrize("qtype", sorted(QTYPES))
@pytest.mark.parametrize(("m", "n", "k"), [(1, 96, 160), (3, 96, 160), (17, 96, 160),
                                           (40, 320, 544)])
@pytest.mark.parametrize("transposed", [True, False])
def test_quantized_matmul_matches_numpy(qtype, m, n, k, transposed):
    rows, cols = (n, k) if transposed else (k, n)
    raw, w = quantized(qtype, rows, cols)
    x = rng.standard_normal((2, m, k)).astype(np.float32)
    g = lm.Graph()
    xt = g.tensor((2, m, k))
    rt = g.tensor(raw.shape, dtype=lm.uint8)
    wt = dequantize(rt, qtype, (rows, cols))
    y = (xt @ (wt.T if transposed else wt)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xt.set(x)
    rt.set(raw)
    g.execute()
    xr = quant_matmul_activations(x, qtype, transposed)
    np.testing.assert_allclose(y.numpy(), xr @ (w.T if transposed else w), atol=1e-4, rtol=1e-4)
    # one kernel, reading the raw bytes: the float decomposition is dead code
    (kernel,) = g.runtime.program.kernels
    assert isinstance(kernel, Matmul) and isinstance(kernel.b, QuantOperand)
    assert kernel.b.k_contiguous == transposed


@pytest.mark.parametrize("qtype", sorted(QTYPES))
@pytest.mark.parametrize("n", [1, 2, 3, 5, 98])
def test_quantized_matvec_any_row_count(qtype, n):
    """Decode's x @ W.T walks W four rows at a time: counts that are not a multiple of four."""
    raw, w = quantized(qtype, n, 64)
    x = rng.standard_normal((3, 1, 64)).astype(np.float32)
    g = lm.Graph()
    xt, rt = g.tensor((3, 1, 64)).set(x), g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    y = (xt @ dequantize(rt, qtype, (n, 64)).T).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    # a single row of W is decoded by generated code and multiplied in float
    xr = quant_matmul_activations(x, qtype, True) if n > 1 else x
    np.testing.assert_allclose(y.numpy(), xr @ w.T, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("qtype", sorted(QTYPES))
@pytest.mark.parametrize("blocks", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("path", ["int8", "float"])
def test_quantized_matvec_block_counts(qtype, blocks, m, path, monkeypatch):
    """Both decode matvecs accumulate four blocks side by side: block counts below, at and
    past a multiple of four, every row count they handle, against float64 NumPy on gguf's
    dequantization (1e-5: rounding only). The int8 one (csrc/qgemv.c) multiplies x rounded to
    int8 blocks; the float one (applying each block's scale once: d * sum x q + m * sum x)
    runs when some block of x is too small for that rounding (1e-35 here, with the int8 path
    requested). The int16 one (the default) has its own tests (test_cpu_qgemv16.py). Scales
    include zero and the largest half."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")
    k = 32 * blocks
    raw, w = quantized(qtype, 7, k)
    bb = raw.shape[1] // blocks
    raw[0, :2] = 0  # a zero scale
    raw[1, -bb:-bb + 2] = np.frombuffer(np.float16(65504).tobytes(), np.uint8)
    w = gguf_quants.dequantize(raw, QTYPES[qtype]).astype(np.float64)
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    if path == "float":
        x[0, 0, :32] *= np.float32(1e-35)
    g = lm.Graph()
    xt, rt = g.tensor((1, m, k)).set(x), g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    y = (xt @ dequantize(rt, qtype, (7, k)).T).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    xr = quant_matmul_activations(x, qtype, True) if path == "int8" else x.astype(np.float64)
    expected = xr @ w.T
    scale = np.abs(xr) @ np.abs(w).T  # no cancellation: rounding's scale
    np.testing.assert_array_less(np.abs(y.numpy() - expected), 1e-5 * scale + 1e-30)


@pytest.mark.parametrize("qtype", sorted(QTYPES))
def test_decomposition_matches_gguf_exactly(qtype):
    raw, w = quantized(qtype, 4, 64)
    g = lm.Graph()
    rt = g.tensor(raw.shape, dtype=lm.uint8)
    out = (dequantize(rt, qtype, (4, 64)) * 1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    rt.set(raw)
    g.execute()
    np.testing.assert_array_equal(out.numpy(), w)


def test_dequantize_rejects_wrong_shapes():
    g = lm.Graph()
    with pytest.raises(ValueError, match="uint8 of shape"):
        dequantize(g.tensor((4, 30), dtype=lm.uint8), "q4_0", (4, 64))
    with pytest.raises(ValueError, match="multiple of the block size"):
        dequantize(g.tensor((4, 36), dtype=lm.uint8), "q4_0", (4, 60))
    with pytest.raises(ValueError, match="unknown quantized format 'q2_k'"):
        dequantize(g.tensor((4, 84), dtype=lm.uint8), "q2_k", (4, 256))


def test_lookup_in_a_quantized_table_gathers_raw_rows():
    raw, w = quantized("q8_0", 300, 64)
    g = lm.Graph()
    idx = g.tensor(("s",), dtype=lm.int32)
    rt = g.tensor(raw.shape, dtype=lm.uint8)
    rows = rt.index_select(0, idx)
    out = dequantize(rows, "q8_0", (rows.shape[0], 64)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    rt.set(raw)
    for ids in ([5, 299, 0], [7]):
        idx.set(np.array(ids, np.int32))
        g.execute()
        np.testing.assert_array_equal(out.numpy(), w[ids])
    gathers = [k for k in g.runtime.program.kernels
               if not isinstance(k, Matmul) and any(isinstance(v, Bind) for v in walk(k.out.value))]
    assert len(gathers) == 1  # the bytes of the picked rows only, never a one-hot over 300
