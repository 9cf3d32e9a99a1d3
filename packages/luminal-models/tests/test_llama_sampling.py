"""Host-side sampling: greedy, temperature, top-k and top-p masks, seeded reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from luminal_models.sampling import Sampler, SamplingParams, top_k_filter, top_p_filter

LOGITS = np.log(np.array([0.05, 0.5, 0.15, 0.3]))  # probabilities 0.05, 0.5, 0.15, 0.3


def test_llama_greedy_is_argmax():
    assert Sampler(SamplingParams())(LOGITS) == 1
    assert Sampler(SamplingParams(temperature=0.0, top_k=3, seed=1))(LOGITS) == 1


def test_llama_top_k_mask():
    out = top_k_filter(LOGITS, 2)
    assert np.isneginf(out).tolist() == [True, False, True, False]
    assert np.array_equal(top_k_filter(LOGITS, 0), LOGITS)
    assert np.array_equal(top_k_filter(LOGITS, 10), LOGITS)


@pytest.mark.parametrize("p,kept", [
    (0.5, [1]), (0.7, [1, 3]), (0.79, [1, 3]), (0.81, [1, 2, 3]), (1.0, [0, 1, 2, 3]),
])
def test_llama_top_p_mask(p, kept):
    """The nucleus: most likely tokens until their mass reaches p (inclusive)."""
    out = top_p_filter(LOGITS, p)
    assert np.flatnonzero(np.isfinite(out)).tolist() == kept


def test_llama_seeded_sampling_is_reproducible():
    params = SamplingParams(temperature=1.0, seed=1234)
    draws = [Sampler(params) for _ in range(2)]
    seq_a = [draws[0](LOGITS) for _ in range(50)]
    seq_b = [draws[1](LOGITS) for _ in range(50)]
    assert seq_a == seq_b
    other = Sampler(SamplingParams(temperature=1.0, seed=4321))
    assert [other(LOGITS) for _ in range(50)] != seq_a


def test_llama_sampling_follows_the_distribution():
    sample = Sampler(SamplingParams(temperature=1.0, seed=0))
    counts = np.bincount([sample(LOGITS) for _ in range(20000)], minlength=4) / 20000
    np.testing.assert_allclose(counts, [0.05, 0.5, 0.15, 0.3], atol=0.015)


def test_llama_sampling_respects_masks():
    sample = Sampler(SamplingParams(temperature=5.0, top_k=2, seed=0))
    assert {sample(LOGITS) for _ in range(300)} == {1, 3}
    sample = Sampler(SamplingParams(temperature=1.0, top_p=0.5, seed=0))
    assert {sample(LOGITS) for _ in range(100)} == {1}


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -1}, "temperature"), ({"top_k": -1}, "top_k"), ({"top_p": 0}, "top_p"),
])
def test_llama_sampling_params_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)
