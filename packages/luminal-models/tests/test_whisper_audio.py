"""Whisper's audio front end: file reading and resampling (soundfile + soxr), the log-mel
features against transformers' WhisperFeatureExtractor and the filterbank against librosa's
definition, and `luminal transcribe` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from luminal.cli import main as luminal_main
from luminal_models.audio import (
    SAMPLE_RATE,
    AudioError,
    load_audio,
    log_mel_spectrogram,
    mel_filters,
)

sf = pytest.importorskip("soundfile")
SPEECH = Path("/usr/share/pocketsphinx/test/data/librivox/"
              "sense_and_sensibility_01_austen_64kb-0930.wav")


def _speech() -> np.ndarray:
    if not SPEECH.is_file():
        pytest.skip("pocketsphinx-testdata is not installed (scripts/setup.sh installs it)")
    return load_audio(SPEECH)


def test_log_mel_matches_transformers():
    transformers = pytest.importorskip("transformers")
    audio = _speech()
    want = transformers.WhisperFeatureExtractor(feature_size=80)(
        audio, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features[0]
    got = log_mel_spectrogram(audio)
    assert got.shape == (80, (audio.size + 30 * SAMPLE_RATE) // 160)
    # transformers pads to 30 s rather than by 30 s: the same frames, the same global maximum
    np.testing.assert_allclose(got[:, :3000], want, atol=1e-4)


def test_mel_filters_are_slaney_normalised_triangles():
    filters = mel_filters()
    assert filters.shape == (80, 201)
    # Slaney normalisation: each triangle's peak is 2 / (its width in Hz), so its area in Hz
    # is 1 (up to the 40 Hz sampling of the FFT bins)
    hz_per_bin = SAMPLE_RATE / 400
    np.testing.assert_allclose(filters.sum(1) * hz_per_bin, 1.0, rtol=0.08)
    peaks = filters.argmax(1)
    assert (np.diff(peaks) >= 0).all() and peaks[0] == 1


def test_load_audio_resamples_and_mixes_down(tmp_path):
    t = np.arange(22050) / 22050
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    path = tmp_path / "stereo.flac"
    sf.write(path, np.stack([tone, tone], axis=1), 22050)
    audio = load_audio(path)
    assert audio.dtype == np.float32 and audio.shape == (SAMPLE_RATE,)
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(spectrum.argmax() - 440) <= 1  # 1 Hz bins over one second
    np.testing.assert_allclose(np.abs(audio[1000:-1000]).max(), 0.5, atol=0.01)


def test_load_audio_errors(tmp_path):
    with pytest.raises(AudioError, match=r"missing\.wav: no such file"):
        load_audio(tmp_path / "missing.wav")
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF not really a wave file")
    with pytest.raises(AudioError, match=r"garbage\.wav: cannot decode audio"):
        load_audio(garbage)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"empty\.wav: the file holds no audio samples"):
        load_audio(empty)
    with pytest.raises(AudioError, match="expected mono samples"):
        log_mel_spectrogram(np.zeros((2, 100), np.float32))


def test_cli_transcribe_json_and_timestamps(capsys):
    _speech()
    assert luminal_main(["transcribe", "--json", "--timestamps", str(SPEECH)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"text", "token_ids", "segments"}
    assert out["text"] == "He might even have been made amiable himself."
    assert out["token_ids"][0] == 50363  # <|0.00|>
    (segment,) = out["segments"]
    assert set(segment) == {"start", "end", "text"}
    assert segment["start"] == 0.0 and 2.0 < segment["end"] <= 30.0
    assert segment["text"].strip() == out["text"]


def test_cli_transcribe_text_and_errors(capsys, tmp_path):
    _speech()
    assert luminal_main(["transcribe", str(SPEECH)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "He might even have been made amiable himself.\n"
    assert "real-time factor" in captured.err and "transcribing" in captured.err
    assert luminal_main(["transcribe", str(tmp_path / "nothing.wav")]) == 1
    assert "luminal transcribe: error:" in capsys.readouterr().err
    assert luminal_main(["transcribe", "--beam", "0", str(SPEECH)]) == 1
    assert "--beam must be at least 1" in capsys.readouterr().err


def test_speech_commands_are_registered_by_the_plugin(capsys):
    assert luminal_main(["plugins", "--json"]) == 0
    plugins = json.loads(capsys.readouterr().out)
    models = next(p for p in plugins if p["name"] == "luminal-models")
    assert {"embed", "transcribe"} <= set(models["registered"]["luminal_register_commands"])
