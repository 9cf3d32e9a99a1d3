"""The GGUF format table and its primitive-op decompositions against the `gguf` package's
`gguf.quants.dequantize`, on random blocks (real blocks of the Gemma 3 file: the cross-package
test tests/test_gemma3_quant_blocks.py)."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import BLOCK_FORMATS, FORMATS, dequantize, quant_format, row_bytes
from luminal.testing.quant import random_blocks

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

rng = np.random.default_rng(14)


def run_dequantize(raw: np.ndarray, qtype: str, cols: int) -> np.ndarray:
    g = lm.Graph()
    rt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    out = dequantize(rt, qtype, (raw.shape[0], cols)).retrieve()
    g.compile(lm.backend("reference"))
    g.execute()
    return out.numpy()


def test_table_matches_gguf_sizes():
    for fmt in FORMATS.values():
        ggml = gguf.GGMLQuantizationType(fmt.ggml_type)
        assert ggml.name == fmt.name
        assert gguf.GGML_QUANT_SIZES[ggml] == (fmt.block_size, fmt.type_size)
    assert quant_format("q6_k") is quant_format(14) is FORMATS["q6_k"]
    assert row_bytes("Q4_K", 512) == 288


@pytest.mark.parametrize("qtype", sorted(BLOCK_FORMATS))
def test_decomposition_matches_gguf_on_random_blocks(qtype):
    fmt = BLOCK_FORMATS[qtype]
    cols = 2 * fmt.block_size
    raw = random_blocks(qtype, 3, cols, rng)
    want = gguf_dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float32)
    got = run_dequantize(raw, qtype, cols)
    np.testing.assert_allclose(got, want.reshape(3, cols), rtol=1e-6, atol=0)


def test_unknown_format_is_named():
    g = lm.Graph()
    with pytest.raises(ValueError, match="unknown quantized format 'q3_k'"):
        dequantize(g.tensor((1, 110), dtype=lm.uint8), "q3_k", (1, 256))
    with pytest.raises(KeyError, match="IQ2_XS"):
        quant_format("IQ2_XS")
