"""The GGUF format table and its primitive-op decompositions against the `gguf` package's
`gguf.quants.dequantize`, on random blocks and on real blocks of the Gemma 3 file."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import BLOCK_FORMATS, FORMATS, dequantize, quant_format, row_bytes

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402

rng = np.random.default_rng(14)
# where each format keeps its f16 scales (random bytes there could be inf or NaN)
HALF_OFFSETS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q4_k": (0, 2),
                "q5_k": (0, 2), "q6_k": (208,)}


def random_blocks(qtype: str, rows: int, blocks_per_row: int) -> np.ndarray:
    """Random bytes in every field, finite random f16 scales (subnormals and signs included)."""
    fmt = BLOCK_FORMATS[qtype]
    raw = rng.integers(0, 256, (rows, blocks_per_row, fmt.type_size), dtype=np.uint8)
    for at in HALF_OFFSETS[qtype]:
        scales = (rng.standard_normal((rows, blocks_per_row)) * 10.0 ** rng.integers(
            -7, 2, (rows, blocks_per_row))).astype("<f2")
        raw[..., at:at + 2] = scales[..., None].view(np.uint8).reshape(rows, blocks_per_row, 2)
    return raw.reshape(rows, -1)


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
    raw = random_blocks(qtype, 3, 2)
    cols = 2 * fmt.block_size
    want = gguf_dequantize(raw, gguf.GGMLQuantizationType(fmt.ggml_type)).astype(np.float32)
    got = run_dequantize(raw, qtype, cols)
    np.testing.assert_allclose(got, want.reshape(3, cols), rtol=1e-6, atol=0)


def test_decomposition_matches_gguf_on_gemma_blocks():
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.hub import gemma3_path

    with GGUFFile(gemma3_path(progress=False)) as f:
        seen = set()
        for info in f.tensors.values():
            key = info.qtype.name.lower()
            if key not in BLOCK_FORMATS or key in seen or len(info.shape) != 2:
                continue
            seen.add(key)
            raw = f.tensor(info.name, dequantize=False)[:4]
            want = gguf_dequantize(raw, gguf.GGMLQuantizationType(info.qtype.ggml_type))
            got = run_dequantize(np.ascontiguousarray(raw), key, info.shape[1])
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=info.name)
    assert seen == {"q8_0", "q5_0", "q4_k", "q6_k"}


def test_unknown_format_is_named():
    g = lm.Graph()
    with pytest.raises(ValueError, match="unknown quantized format 'q3_k'"):
        dequantize(g.tensor((1, 110), dtype=lm.uint8), "q3_k", (1, 256))
    with pytest.raises(KeyError, match="IQ2_XS"):
        quant_format("IQ2_XS")
