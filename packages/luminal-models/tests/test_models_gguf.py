"""GGUF reader: the real SmolLM2 file (facts from baselines.md §5) and every error path."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf import quants as ref
from luminal_models import quants
from luminal_models.gguf_file import GGUFError, GGUFFile

# --- the real file -------------------------------------------------------------------------


def test_smollm2_metadata(smollm2_gguf: GGUFFile) -> None:
    m = smollm2_gguf.metadata
    assert smollm2_gguf.architecture == "llama"
    assert m["general.name"] == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    assert m["general.languages"] == ["en"]
    assert m["llama.block_count"] == 30
    assert m["llama.embedding_length"] == 576
    assert m["llama.attention.head_count"] == 9
    assert m["llama.attention.head_count_kv"] == 3
    assert m["llama.rope.dimension_count"] == 64
    assert m["llama.feed_forward_length"] == 1536
    assert m["llama.vocab_size"] == 49152
    assert m["llama.context_length"] == 8192
    assert m["llama.rope.freq_base"] == 100000.0
    assert m["llama.attention.layer_norm_rms_epsilon"] == float(np.float32(1e-5))
    assert m["tokenizer.ggml.model"] == "gpt2" and m["tokenizer.ggml.pre"] == "smollm"
    assert len(m["tokenizer.ggml.tokens"]) == 49152
    assert len(m["tokenizer.ggml.merges"]) == 48900
    assert m["tokenizer.ggml.token_type"].count(3) == 17
    assert m["tokenizer.ggml.bos_token_id"] == 1 and m["tokenizer.ggml.eos_token_id"] == 2
    assert m["tokenizer.ggml.add_bos_token"] is False
    assert len(m) == 33  # kv_count: the reader's own GGUF.* counters are not metadata
    assert all(isinstance(v, str | int | float | bool | list) for v in m.values())


def test_smollm2_tensor_table(smollm2_gguf: GGUFFile) -> None:
    tensors = smollm2_gguf.tensors
    assert len(tensors) == 272
    assert Counter(t.qtype.name for t in tensors.values()) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert "output.weight" not in tensors  # LM head tied to token_embd
    assert sum(t.n_elements for t in tensors.values()) == 134_515_008
    assert sum(t.nbytes for t in tensors.values()) == 96_576_768
    emb = tensors["token_embd.weight"]
    assert emb.shape == (49152, 576) and emb.qtype.name == "Q8_0"
    assert tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
    assert tensors["blk.0.ffn_up.weight"].shape == (1536, 576)
    assert tensors["blk.0.attn_k.weight"].shape == (192, 576)
    assert tensors["blk.29.attn_norm.weight"].shape == (576,)


def test_smollm2_dequantize_matches_gguf(smollm2_gguf: GGUFFile) -> None:
    reader_tensors = {t.name: t for t in GGUFReader(smollm2_gguf.path).tensors}
    for name in ("blk.0.attn_q.weight", "blk.7.ffn_down.weight", "output_norm.weight"):
        ours = smollm2_gguf.tensor(name)
        t = reader_tensors[name]
        expected = ref.dequantize(t.data, t.tensor_type).reshape(ours.shape)
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, expected)
    # token_embd is big: compare a slice of rows decoded from the raw view.
    raw = smollm2_gguf.tensor("token_embd.weight", dequantize=False)
    assert raw.shape == (49152, 576 // 32 * 34) and raw.dtype == np.uint8
    rows = quants.dequantize(np.ascontiguousarray(raw[1000:1064]), "Q8_0", (64, 576))
    expected = ref.dequantize(
        reader_tensors["token_embd.weight"].data[1000:1064], GGMLQuantizationType.Q8_0
    )
    np.testing.assert_array_equal(rows, expected)


def test_raw_bytes_are_a_read_only_copy_of_the_file(smollm2_gguf: GGUFFile) -> None:
    info = smollm2_gguf.tensors["blk.0.attn_q.weight"]
    raw = smollm2_gguf.tensor(info.name, dequantize=False)
    assert raw.shape == (576, 576 // 32 * 20) and raw.size == info.nbytes
    assert not raw.flags.writeable and not isinstance(raw, np.memmap)
    with open(smollm2_gguf.path, "rb") as f:
        f.seek(info.offset)
        assert f.read(64) == raw.reshape(-1)[:64].tobytes()
    parts = quants.split_blocks(raw.reshape(-1), info.qtype)
    assert parts["qs"].shape == (576 * 18, 16)


def test_every_tensor_starts_on_a_cache_line(smollm2_gguf: GGUFFile) -> None:
    """A tensor's bytes land on a 64-byte boundary: vector loads of them, and of the cpu
    backend's layouts repacked in place, never straddle two cache lines."""
    for name in smollm2_gguf.tensors:
        assert smollm2_gguf.tensor(name, dequantize=False).ctypes.data % 64 == 0, name


def test_expect_shape_and_missing_names(smollm2_gguf: GGUFFile) -> None:
    info = smollm2_gguf.expect_shape("blk.0.attn_v.weight", (192, 576))
    assert info.qtype.name == "Q4_1"
    assert smollm2_gguf.expect_shape("blk.0.attn_v.weight", (None, 576)) is info
    with pytest.raises(
        GGUFError, match=r"'blk\.0\.attn_v\.weight' has shape \(192, 576\), expected \(576, 576\)"
    ):
        smollm2_gguf.expect_shape("blk.0.attn_v.weight", (576, 576))
    with pytest.raises(GGUFError, match=r"no tensor named 'blk\.0\.attn_v\.weights'.*did you mean"):
        smollm2_gguf.tensor("blk.0.attn_v.weights")
    assert str(smollm2_gguf.path) in repr(smollm2_gguf)


# --- error paths -----------------------------------------------------------------------------


def test_file_cut_inside_the_magic(tmp_path: Path) -> None:
    path = tmp_path / "gg.gguf"
    path.write_bytes(b"GG")
    with pytest.raises(GGUFError, match=r"gg\.gguf: truncated file \(2 bytes\)"):
        GGUFFile(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match=r"nope\.gguf: no such file"):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="is a directory"):
        GGUFFile(tmp_path)


@pytest.mark.parametrize("content", [b"", b"GF", b"PK\x03\x04" + bytes(100), bytes(range(256)) * 4])
def test_not_a_gguf(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFError, match=r"garbage\.gguf: not a GGUF file"):
        GGUFFile(path)


def _truncated_copy(src: Path, dst: Path, size: int) -> Path:
    with open(src, "rb") as f:
        dst.write_bytes(f.read(size))
    return dst


def test_truncated_in_header(smollm2_file: Path, tmp_path: Path) -> None:
    # 1 MB cuts through the 49k-entry vocabulary array.
    path = _truncated_copy(smollm2_file, tmp_path / "cut.gguf", 1_000_000)
    with pytest.raises(GGUFError, match=r"cut\.gguf: metadata key 'tokenizer\.ggml\.merges' at "
                       r"byte \d+: 48900 string elements need at least \d+ bytes but only \d+"):
        GGUFFile(path)


def test_truncated_in_tensor_data(smollm2_file: Path, tmp_path: Path) -> None:
    size = 60_000_000
    path = _truncated_copy(smollm2_file, tmp_path / "cut.gguf", size)
    with pytest.raises(GGUFError) as e:
        GGUFFile(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: tensor 'blk.")
    assert "truncated file: its data spans bytes" in msg and f"only {size} bytes" in msg


def _write_gguf(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, GGMLQuantizationType | None]],
    raw_shapes: dict[str, tuple[int, ...]] | None = None,
) -> Path:
    w = GGUFWriter(path, arch="llama")
    w.add_block_count(1)
    w.add_string("test.note", "héllo")
    w.add_array("test.ints", [1, 2, 3])
    for name, (data, qtype) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qtype, raw_shape=(raw_shapes or {}).get(name))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _blocks(x: np.ndarray, q: quants.QuantType) -> np.ndarray:
    raw = quants.quantize(x, q)
    return raw.reshape(*x.shape[:-1], -1)


def test_writer_round_trip_of_every_supported_type(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 64)).astype(np.float32)
    tensors = {
        "f32": (x, None),
        "f16": (x.astype(np.float16), None),
        "bf16": (_blocks(x, quants.BF16), GGMLQuantizationType.BF16),
        "q8_0": (_blocks(x, quants.Q8_0), GGMLQuantizationType.Q8_0),
        "q4_0": (_blocks(x, quants.Q4_0), GGMLQuantizationType.Q4_0),
        "q4_1": (_blocks(x, quants.Q4_1), GGMLQuantizationType.Q4_1),
    }
    g = GGUFFile(_write_gguf(tmp_path / "all.gguf", tensors))
    assert g.metadata["test.note"] == "héllo" and g.metadata["test.ints"] == [1, 2, 3]
    for name in tensors:
        info = g.tensors[name]
        assert info.shape == (3, 64), name
        assert info.qtype.name == name.upper()
        expected = quants.dequantize(quants.quantize(x, info.qtype), info.qtype, x.shape)
        np.testing.assert_array_equal(g.tensor(name), expected)


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path: Path) -> None:
    q2k = np.zeros((2, 84), np.uint8)  # two Q2_K blocks: valid GGUF, but we cannot decode it
    g = GGUFFile(
        _write_gguf(tmp_path / "k.gguf", {"blk.0.ffn_up.weight": (q2k, GGMLQuantizationType.Q2_K)})
    )
    assert g.tensors["blk.0.ffn_up.weight"].shape == (2, 256)
    with pytest.raises(
        GGUFError,
        match=r"k\.gguf: tensor 'blk\.0\.ffn_up\.weight' has type Q2_K, .*cannot dequantize",
    ):
        g.tensor("blk.0.ffn_up.weight")
    assert g.tensor("blk.0.ffn_up.weight", dequantize=False).shape == (2, 84)


def _tensor_info_offset(path: Path, name: str) -> int:
    """Byte offset of the n_dims field that follows ``name`` in the tensor infos."""
    data = path.read_bytes()
    encoded = struct.pack("<Q", len(name)) + name.encode()
    return data.index(encoded) + len(encoded)


def test_unknown_tensor_type_number(tmp_path: Path) -> None:
    path = _write_gguf(tmp_path / "bad.gguf", {"w": (np.ones((2, 32), np.float32), None)})
    pos = _tensor_info_offset(path, "w")
    n_dims = struct.unpack_from("<I", path.read_bytes(), pos)[0]
    with open(path, "r+b") as f:
        f.seek(pos + 4 + 8 * n_dims)
        f.write(struct.pack("<I", 99))
    with pytest.raises(
        GGUFError,
        match=r"bad\.gguf: tensor 'w' \(tensor info at byte \d+\): unknown tensor type 99",
    ):
        GGUFFile(path)


def test_row_length_not_a_multiple_of_the_block(tmp_path: Path) -> None:
    path = _write_gguf(
        tmp_path / "bad.gguf",
        {"q": (_blocks(np.ones((1, 32), np.float32), quants.Q8_0), GGMLQuantizationType.Q8_0)},
    )
    pos = _tensor_info_offset(path, "q")
    with open(path, "r+b") as f:
        f.seek(pos + 4)
        f.write(struct.pack("<Q", 33))  # ne[0]
    with pytest.raises(
        GGUFError, match=r"tensor 'q'.*Q8_0 needs the row length to be a multiple of 32"
    ):
        GGUFFile(path)


def test_declared_shape_larger_than_the_data(tmp_path: Path) -> None:
    # The writer takes raw_shape on trust: the info claims 64x64 floats but 4 bytes are stored.
    path = _write_gguf(
        tmp_path / "short.gguf",
        {"big": (np.ones(1, np.float32), None)},
        raw_shapes={"big": (64, 64)},
    )
    with pytest.raises(
        GGUFError,
        match=r"short\.gguf: tensor 'big' .*truncated file: its data spans bytes \d+\.\.\d+",
    ):
        GGUFFile(path)


def test_expect_shape_mismatch_on_written_file(tmp_path: Path) -> None:
    g = GGUFFile(
        _write_gguf(tmp_path / "m.gguf", {"attn_q.weight": (np.ones((8, 32), np.float32), None)})
    )
    g.expect_shape("attn_q.weight", (8, 32))
    with pytest.raises(
        GGUFError, match=r"m\.gguf: tensor 'attn_q\.weight' has shape \(8, 32\), expected \(32, 8\)"
    ):
        g.expect_shape("attn_q.weight", (32, 8))
    with g:
        pass
    assert g.tensors == {}
