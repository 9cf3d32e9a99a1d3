"""The CTranslate2 model.bin reader and the Whisper loader: the real tiny.en file, and small
written files that are corrupt in one way each (every error names the file and the variable)."""

from __future__ import annotations

import numpy as np
import pytest
from ct2_helpers import TIED, tiny_whisper_variables, write_ct2
from luminal_models.ct2_file import CT2File
from luminal_models.errors import CT2Error, ModelFileError
from luminal_models.whisper import Whisper, WhisperConfig, whisper_tiny_en_path


@pytest.fixture(scope="module")
def tiny_en():
    try:
        return whisper_tiny_en_path() / "model.bin"
    except ModelFileError as e:
        pytest.skip(str(e))


def test_reads_the_real_tiny_en(tiny_en):
    with CT2File(tiny_en) as f:
        assert (f.version, f.spec, f.revision, len(f.variables)) == (6, "WhisperSpec", 3, 148)
        assert f.aliases == TIED
        assert f.scalar("encoder/num_heads") == 6
        emb = f.tensor("decoder/projection/weight")  # through the alias
        assert emb.shape == (51864, 384) and emb.dtype == np.float16
        config = WhisperConfig.from_ct2(f)
    assert config == WhisperConfig(80, 384, 6, 6, 4, 4, 51864, 1500, 448)


def test_fused_matrices_are_split(tmp_path):
    variables = tiny_whisper_variables()
    model = Whisper.from_ct2(write_ct2(tmp_path / "model.bin", variables, TIED), progress=False)
    qkv = variables["encoder/layer_0/self_attention/linear_0/weight"].astype(np.float32)
    attn = model.encoder.layers[0].attn
    np.testing.assert_array_equal(attn.q_proj.weight.data, qkv[:8])
    np.testing.assert_array_equal(attn.v_proj.weight.data, qkv[16:])
    kv = variables["decoder/layer_0/attention/linear_1/weight"].astype(np.float32)
    cross = model.decoder.layers[0].cross
    np.testing.assert_array_equal(cross.k_proj.weight.data, kv[:8])
    np.testing.assert_array_equal(cross.v_proj.weight.data, kv[8:])
    assert cross.k_proj.bias is None
    assert model.config == WhisperConfig(4, 8, 2, 2, 1, 1, 16, 1500, 16)


def _bad(tmp_path, **changes):
    variables = tiny_whisper_variables()
    for name, value in changes.items():
        name = name.replace("__", "/")
        if value is None:
            del variables[name]
        else:
            variables[name] = value
    return write_ct2(tmp_path / "model.bin", variables, TIED)


def test_loader_errors_name_file_and_variable(tmp_path):
    path = _bad(tmp_path, decoder__layer_0__ffn__linear_1__weight=None)
    with pytest.raises(ModelFileError, match=r"model\.bin: 1 weights are missing: "
                                       r"decoder\.layers\.0\.ffn\.fc2\.weight"):
        Whisper.from_ct2(path, progress=False)
    path = _bad(tmp_path, decoder__layer_0__ffn__linear_1__weight=np.zeros((8, 31), np.float16))
    with pytest.raises(ModelFileError, match=r"model\.bin: tensor 'decoder/layer_0/ffn/linear_1/"
                                             r"weight' \(decoder\.layers\.0\.ffn\.fc2\.weight\) "
                                             r"has shape \(8, 31\), the config expects \(8, 32\)"):
        Whisper.from_ct2(path, progress=False)
    path = _bad(tmp_path, decoder__layer_1__ffn__linear_1__weight=np.zeros((8, 32), np.float16))
    with pytest.raises(CT2Error, match=r"unexpected variable 'decoder/layer_1/ffn/linear_1/"):
        Whisper.from_ct2(path, progress=False)
    path = _bad(tmp_path, encoder__layer_0__self_attention__linear_0__weight=np.zeros(
        (25, 8), np.float16))
    with pytest.raises(CT2Error, match=r"fused variable 'encoder/layer_0/self_attention/"
                                       r"linear_0/weight' has 25 rows, not a multiple of 3"):
        Whisper.from_ct2(path, progress=False)
    path = write_ct2(tmp_path / "model.bin", tiny_whisper_variables(), spec="TransformerSpec")
    with pytest.raises(CT2Error, match="spec 'TransformerSpec' is not a Whisper model"):
        Whisper.from_ct2(path, progress=False)


def test_reader_rejects_corrupt_files(tmp_path):
    good = write_ct2(tmp_path / "good.bin", {"a/b": np.ones((2, 3), np.float16),
                                             "n": np.array(6, np.int16)}, {"c": "a/b"})
    data = good.read_bytes()
    cases = {
        "missing.bin": (None, "no such file"),
        "empty.bin": (b"", "empty file"),
        "version.bin": ((5).to_bytes(4, "little") + data[4:], "CTranslate2 format version 5 "
                                                              "is not supported"),
        "truncated.bin": (data[:50], r"truncated file: the data of variable 'a/b' \(header at "
                                     r"byte \d+\) needs bytes \d+\.\.\d+ but the file has only "
                                     "50 bytes"),
        "header.bin": (data[:10], r"truncated file: the spec name needs bytes"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(CT2Error, match=rf"{name}: {message}"):
            CT2File(path)
    with pytest.raises(CT2Error, match="is a directory"):
        CT2File(tmp_path)

    def patched(offset_of: bytes, skip: int, new: bytes) -> bytes:
        at = data.index(offset_of) + len(offset_of) + skip
        return data[:at] + new + data[at + len(new):]

    bad = tmp_path / "bad.bin"
    # after "a/b\0": rank (1 byte), 2 dims (8 bytes), then the dtype code and the byte count
    bad.write_bytes(patched(b"a/b\0", 9, b"\x09"))
    with pytest.raises(CT2Error, match=r"variable 'a/b' .*unknown dtype code 9"):
        CT2File(bad)
    bad.write_bytes(patched(b"a/b\0", 10, (13).to_bytes(4, "little")))
    with pytest.raises(CT2Error, match=r"'a/b'.*shape \(2, 3\) of float16 needs 12 bytes but "
                                       "the file says 13"):
        CT2File(bad)
    bad.write_bytes(patched(b"a/b\0", 0, b"\x09"))
    with pytest.raises(CT2Error, match=r"'a/b'.*has rank 9; corrupt file"):
        CT2File(bad)
    bad.write_bytes(data.replace(b"a/b\0\x02", b"a/x\0\x02", 1))  # the variable, not the alias
    with pytest.raises(CT2Error, match=r"alias 'c' names 'a/b', which is not a variable"):
        CT2File(bad)
    with CT2File(good) as f:
        with pytest.raises(CT2Error, match=r"good\.bin: no variable named 'zz'"):
            f.tensor("zz")
        with pytest.raises(CT2Error, match=r"'a/b' has shape \(2, 3\), expected a scalar"):
            f.scalar("a/b")
        np.testing.assert_array_equal(f.tensor("c"), np.ones((2, 3)))
