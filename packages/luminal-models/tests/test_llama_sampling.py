"""Host-side sampling: greedy, temperature, top-k and top-p masks, seeded reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from luminal_models.sampling import Sampler, SamplingParams, top_k_filter, top_p_filter

LOGITS = np.log(np.array([0.05, 0.5, 0.15, 0.3]))  # probabilities 0.05, 0.5, 0.15, 0.3


def test_llama_greedy_is_argmax():
    assert Sampler(SamplingParams())(LOGITS) == 1
    assert Sampler(SamplingParams(temperature=0.0, top_k=3, seed=1))(LOGITS) == 1


@pytest.mark.parametrize("logits", [
    [1.0, 3.0, 3.0, 2.0],  # ties: the first
    [1.0, np.nan, 3.0, np.nan],  # NaN: the first NaN, as NumPy
    [-np.inf, -np.inf],
    [[[0.5, 2.0, 2.0]]],  # the leading axes of size 1 a decode step's logits keep
], ids=["ties", "nan", "all -inf", "3-d"])
def test_llama_greedy_picks_numpy_s_argmax(logits):
    for dtype in (np.float32, np.float64):
        x = np.array(logits, dtype)
        assert Sampler(SamplingParams())(x) == np.argmax(x)
    assert Sampler(SamplingParams())(logits) == np.argmax(logits)  # a list too


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


def test_llama_repetition_penalty_and_min_p_match_transformers():
    """The penalty (CTRL's rule) and the min-p filter against transformers' own processors."""
    torch = pytest.importorskip("torch")
    generation = pytest.importorskip("transformers.generation.logits_process")
    from luminal_models.sampling import min_p_filter, repetition_penalty

    rng = np.random.default_rng(0)
    logits = rng.normal(size=50) * 3
    recent = np.array([3, 7, 7, 12, 40, 3])
    want = generation.RepetitionPenaltyLogitsProcessor(1.3)(
        torch.tensor(recent)[None], torch.tensor(logits)[None]).numpy()[0]
    np.testing.assert_allclose(repetition_penalty(logits, recent, 1.3), want, rtol=1e-12)
    for p in (0.05, 0.2, 0.9):
        want = generation.MinPLogitsWarper(p)(None, torch.tensor(logits)[None]).numpy()[0]
        np.testing.assert_array_equal(np.isfinite(min_p_filter(logits, p)), np.isfinite(want))


def test_llama_repetition_penalty_changes_greedy_choice():
    """Greedy picks the best token not recently seen once the penalty outweighs its lead."""
    logits = np.log(np.array([0.05, 0.5, 0.15, 0.3]))
    assert Sampler(SamplingParams(repeat_penalty=1.0))(logits, [1]) == 1
    # logits are negative here: multiplying by 2 pushes token 1 below token 3
    assert Sampler(SamplingParams(repeat_penalty=2.0))(logits, [1]) == 3
    assert Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=1))(logits, [1, 0]) == 1


@pytest.mark.parametrize("pieces,stops,shown,stopped", [
    (["Hello", " wor", "ld"], ["world"], "Hello ", True),
    (["ab", "c", "d"], ["cx"], "abcd", False),  # "c" held back, then released
    (["x<", "|end", "|>y"], ["<|end|>"], "x", True),
    (["abc"], [], "abc", False),
    (["one two", " three"], ["two", "three"], "one ", True),
])
def test_llama_stop_strings_cut_across_pieces(pieces, stops, shown, stopped):
    from luminal_models.stop_strings import StopStrings

    matcher = StopStrings(stops)
    out = "".join(matcher.push(p) for p in pieces)
    out += "" if matcher.stopped else matcher.flush()
    assert (out, matcher.stopped) == (shown, stopped)
    # what was shown before the end never contained a completed stop string
    assert not any(s in out for s in stops)
