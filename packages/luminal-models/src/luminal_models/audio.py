"""Audio input for Whisper: reading files, resampling to 16 kHz, and the log-mel front end.

Files are read with `soundfile` (libsndfile: WAV, FLAC, OGG...) and resampled with `soxr`
(the SoX resampler); multi-channel audio is averaged to mono. The log-mel spectrogram is
computed on the host with NumPy, exactly as OpenAI's Whisper defines it: a 400-point periodic
Hann STFT with hop 160 over reflect-padded audio, power spectrum, 80 Slaney-normalised mel
filters (librosa's `mel(sr=16000, n_fft=400, n_mels=80)`), log10 clamped at 1e-10, values more
than 8 below the maximum raised to it, then `(x + 4) / 4`. It is a fixed preprocessing step
that runs once per file (a few milliseconds per 30 s window), so it stays out of the graph.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = [
    "HOP_LENGTH",
    "N_FFT",
    "N_MELS",
    "SAMPLE_RATE",
    "WINDOW_FRAMES",
    "WINDOW_SAMPLES",
    "AudioError",
    "load_audio",
    "log_mel_spectrogram",
    "mel_filters",
]

SAMPLE_RATE = 16_000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80
WINDOW_SAMPLES = 30 * SAMPLE_RATE  # Whisper reads 30 s windows
WINDOW_FRAMES = WINDOW_SAMPLES // HOP_LENGTH  # 3000 mel frames per window


class AudioError(ValueError):
    """An audio file is missing, unreadable, empty or in a format libsndfile cannot decode."""


def load_audio(path: str | os.PathLike[str], sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read an audio file as mono float32 samples in [-1, 1] at `sample_rate`.

    Raises:
        AudioError: the file is missing, empty or not decodable (the message names it).
    """
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise AudioError(f"{path}: no such file")
    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"{path}: cannot decode audio: {e}") from e
    if data.shape[0] == 0:
        raise AudioError(f"{path}: the file holds no audio samples")
    mono = data.mean(axis=1, dtype=np.float32)
    if rate != sample_rate:
        import soxr

        mono = soxr.resample(mono, rate, sample_rate, quality="HQ").astype(np.float32)
    return mono


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    linear = f / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, linear)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    linear = m * (200.0 / 3)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0))
    return np.where(m >= 15.0, log_part, linear)


def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT,
                sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Triangular Slaney-normalised mel filters, (n_mels, n_fft // 2 + 1) float32."""
    fft_freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]  # equal area per filter
    return weights.astype(np.float32)


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = N_MELS,
                        padding: int = WINDOW_SAMPLES) -> np.ndarray:
    """Whisper's log-mel features of 16 kHz mono `audio`: (n_mels, frames) float32, with
    `frames = (len(audio) + padding) // 160`.

    `padding` zeros are appended first (Whisper appends 30 s, so the last window is full);
    the clamp at 8 below the maximum is over the whole result, as OpenAI's implementation.
    """
    audio = np.asarray(audio, np.float32)
    if audio.ndim != 1:
        raise AudioError(f"log_mel_spectrogram: expected mono samples (1-D), got shape "
                         f"{audio.shape}")
    audio = np.concatenate([audio, np.zeros(padding, np.float32)])
    if audio.size <= N_FFT // 2:
        raise AudioError(f"log_mel_spectrogram: {audio.size} samples are too few for a "
                         f"{N_FFT}-point STFT")
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    n_frames = 1 + (padded.size - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    spectrum = np.fft.rfft(frames * window, axis=-1)
    power = (spectrum.real ** 2 + spectrum.imag ** 2).astype(np.float32)[:-1]  # drop the last
    mel = mel_filters(n_mels) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
