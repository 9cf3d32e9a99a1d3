"""The candidate check `measure.agrees`: NaN where the reference has NaN, equal infinities,
close finite values (rtol 2e-3, atol 2e-3 scaled by the reference's mean magnitude)."""

import luminal as lm
import numpy as np
import pytest
from luminal_search.measure import agrees, random_inputs

WANT = np.array([1.0, -2.0, 300.0, 0.0])


@pytest.mark.parametrize(("got", "want", "ok"), [
    (WANT * (1 + 1e-4), WANT, True),
    (WANT + np.array([0, 0, 0, 0.1]), WANT, True),          # atol scales with mean |want| = 75.75
    (WANT + np.array([0, 0, 0, 0.2]), WANT, False),
    (WANT + np.array([0, 0, 1.0, 0]), WANT, False),         # beyond rtol at 300
    (np.array([1.0, np.nan, 300.0, 0.0]), WANT, False),
    (np.array([1.0, np.inf, 300.0, 0.0]), WANT, False),
    (WANT[:3], WANT, False),
    (np.zeros(0), np.zeros(0), True),
    (np.array([np.nan, np.inf, -np.inf, 1.0]), np.array([np.nan, np.inf, -np.inf, 1.0]), True),
    (np.array([np.nan, -np.inf, np.inf, 1.0]), np.array([np.nan, np.inf, -np.inf, 1.0]), False),
    (np.array([0.0, np.inf, -np.inf, 1.0]), np.array([np.nan, np.inf, -np.inf, 1.0]), False),
    (np.array([np.nan, np.inf, -np.inf, np.nan]), np.array([np.nan, np.inf, -np.inf, 1.0]),
     False),
    (np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), True),  # no finite values
])
def test_agrees(got, want, ok):
    assert agrees(np.asarray(got), np.asarray(want)) is ok


def test_random_inputs_skips_the_inputs_named():
    g = lm.Graph()
    x, w = g.tensor((2, 3), name="x"), g.tensor((3,), name="w")
    data = random_inputs(g, np.random.default_rng(0), skip={w.id})
    assert set(data) == {x.id} and data[x.id].shape == (2, 3)
