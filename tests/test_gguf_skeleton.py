"""scripts/gguf_skeleton.py: a GGUF's skeleton keeps its header, and the file filled from it has
the same header with random weights that decode (by the `gguf` package) to finite values of the
intended size, in every tensor type a model file holds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("luminal_models")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gguf_skeleton.py"
TYPES = ["F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
# the largest |value| each filled type can decode to (f16 rounding aside): the f16 scales are
# the script's SCALES, which the K-quants' 6- and 8-bit sub-scales multiply
LARGEST = {"f16": 0.2, "q4_0": 0.002 * 8, "q4_1": 0.002 * 15, "q5_0": 0.002 * 16,
           "q8_0": 0.002 * 128, "q4_k": 0.002 * 63 * 15 + 0.015 * 63,
           "q5_k": 0.002 * 63 * 31 + 0.015 * 63, "q6_k": 0.002 * 128 * 32}


def _script():
    spec = importlib.util.spec_from_file_location("gguf_skeleton", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    """A small GGUF with one (8, 512) tensor of each type, real values quantized where the
    `gguf` package can, random bytes otherwise (the skeleton discards the data anyway)."""
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    rng = np.random.default_rng(0)
    for name in TYPES:
        qtype = gguf.GGMLQuantizationType[name]
        values = rng.standard_normal((8, 512)).astype(np.float32)
        if name in ("F32", "F16"):
            writer.add_tensor(name.lower(), values.astype(name.lower().replace("f", "float")))
            continue
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (8, 512 // block * size), dtype=np.uint8)
        writer.add_tensor(name.lower(), raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_strip_then_fill_keeps_the_header_and_fills_valid_weights(model_file: Path,
                                                                 tmp_path: Path, capsys):
    skeleton = _script()
    stripped, filled = tmp_path / "skeleton.gguf.gz", tmp_path / "filled.gguf"
    skeleton.strip(model_file, stripped)
    skeleton.fill(stripped, filled)
    assert "9 random tensors" in capsys.readouterr().out
    data_start = skeleton._header(model_file).data_start
    assert filled.stat().st_size == model_file.stat().st_size
    assert filled.read_bytes()[:data_start] == model_file.read_bytes()[:data_start]
    reader = gguf.GGUFReader(str(filled))
    assert [t.name for t in reader.tensors] == [n.lower() for n in TYPES]
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(-1)
        assert values.size == 8 * 512, tensor.name
        assert np.isfinite(values).all(), tensor.name
        if tensor.name == "f32":  # norm weights near 1
            assert abs(float(values.mean()) - 1) < 0.01
        else:  # small weights, not all equal (see LARGEST)
            assert 0 < float(np.abs(values).max()) <= 1.001 * LARGEST[tensor.name], tensor.name
            assert float(values.std()) > 0, tensor.name


def test_fill_names_a_tensor_type_it_cannot_fill(model_file: Path, tmp_path: Path,
                                                 monkeypatch):
    skeleton = _script()
    stripped = tmp_path / "skeleton.gguf.gz"
    skeleton.strip(model_file, stripped)
    monkeypatch.setattr(skeleton, "HALF_OFFSETS", {})
    with pytest.raises(SystemExit, match="tensor q4_0 has ggml type Q4_0, which this script "
                                         "cannot fill"):
        skeleton.fill(stripped, tmp_path / "filled.gguf")
