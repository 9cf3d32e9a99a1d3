"""Choosing the next token from logits on the host: repetition penalty, greedy, temperature,
top-k, top-p, min-p.

Only the last position's logits (one vocabulary-sized vector) come back from the device per
step, so sampling in NumPy costs microseconds next to the forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Sampler", "SamplingParams", "min_p_filter", "repetition_penalty", "top_k_filter",
           "top_p_filter"]


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens.

    Attributes:
        temperature: 0 picks the most likely token (greedy, deterministic); higher values
            flatten the distribution before sampling.
        top_k: sample among the k most likely tokens only (0 disables).
        top_p: sample among the smallest set of most likely tokens whose probabilities add up
            to at least p (nucleus sampling; 1 disables).
        seed: seed of the random generator; None draws a fresh one.
        min_p: drop tokens less likely than min_p times the most likely one (0 disables).
        repeat_penalty: divide the positive logits (multiply the negative ones) of tokens seen
            among the last `repeat_last_n` ids by this (1 disables; applies to greedy too),
            as llama.cpp and transformers' `repetition_penalty`.
        repeat_last_n: how many recent ids the penalty looks at (the prompt included).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        if self.repeat_last_n < 0:
            raise ValueError(f"repeat_last_n must be >= 0, got {self.repeat_last_n}")


def top_k_filter(logits: np.ndarray, k: int) -> np.ndarray:
    """`logits` with everything below the k-th largest set to -inf (ties at the k-th value
    are kept)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = np.partition(logits, -k)[-k]
    return np.where(logits >= kth, logits, -np.inf)


def top_p_filter(logits: np.ndarray, p: float) -> np.ndarray:
    """`logits` restricted to the nucleus: the most likely tokens whose softmax probabilities
    first reach a total of `p` (the most likely token is always kept)."""
    if p >= 1:
        return logits
    order = np.argsort(-logits, kind="stable")
    probs = _softmax(logits[order])
    # keep token i if the mass of the tokens ranked above it is still below p
    before = np.cumsum(probs) - probs
    keep = np.zeros(logits.shape, dtype=bool)
    keep[order[before < p]] = True
    return np.where(keep, logits, -np.inf)


def min_p_filter(logits: np.ndarray, min_p: float) -> np.ndarray:
    """`logits` without the tokens whose probability is below `min_p` times the largest one
    (in logits: more than -log(min_p) below the maximum)."""
    if min_p <= 0:
        return logits
    return np.where(logits >= logits.max() + np.log(min_p), logits, -np.inf)


def repetition_penalty(logits: np.ndarray, recent: np.ndarray, penalty: float) -> np.ndarray:
    """`logits` with each token of `recent` made less likely: a positive logit divided by
    `penalty`, a negative one multiplied by it (CTRL's rule, used by llama.cpp and
    transformers)."""
    if penalty == 1 or recent.size == 0:
        return logits
    seen = np.unique(recent)
    out = logits.copy()
    out[seen] = np.where(out[seen] > 0, out[seen] / penalty, out[seen] * penalty)
    return out


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


class Sampler:
    """Draws tokens with fixed `SamplingParams`; with a seed, the same logits give the same
    tokens on every run."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self._penalized = params.repeat_penalty != 1 and params.repeat_last_n > 0
        self._greedy = params.temperature == 0 and not self._penalized

    def __call__(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token id from a 1-D logits vector; `history` holds the ids so far (the
        repetition penalty looks at its last `repeat_last_n`). Greedy picks NumPy's argmax:
        the first of equal maxima, the first NaN if there is one."""
        if self._greedy:
            # the same index as in float64 (the conversion is exact), without the copy; the
            # method rather than np.argmax: a decode step runs this with caches the weights
            # just streamed through, where np.argmax's Python wrappers cost more than the pass
            return int(np.asarray(logits).argmax())
        p = self.params
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        if self._penalized:
            recent = np.asarray(history[-p.repeat_last_n:], dtype=np.int64)
            logits = repetition_penalty(logits, recent, p.repeat_penalty)
        if p.temperature == 0:
            return int(np.argmax(logits))
        scaled = top_p_filter(top_k_filter(logits / p.temperature, p.top_k), p.top_p)
        scaled = min_p_filter(scaled, p.min_p)
        return int(self.rng.choice(scaled.shape[0], p=_softmax(scaled)))
