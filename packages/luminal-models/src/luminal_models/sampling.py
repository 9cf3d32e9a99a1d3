"""Choosing the next token from logits on the host: greedy, temperature, top-k, top-p.

Only the last position's logits (one vocabulary-sized vector) come back from the device per
step, so sampling in NumPy costs microseconds next to the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Sampler", "SamplingParams", "top_k_filter", "top_p_filter"]


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
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


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


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


class Sampler:
    """Draws tokens with fixed `SamplingParams`; with a seed, the same logits give the same
    tokens on every run."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray) -> int:
        """The next token id from a 1-D logits vector."""
        p = self.params
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        if p.temperature == 0:
            return int(np.argmax(logits))
        scaled = top_p_filter(top_k_filter(logits / p.temperature, p.top_k), p.top_p)
        return int(self.rng.choice(scaled.shape[0], p=_softmax(scaled)))
