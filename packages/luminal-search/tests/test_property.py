"""Random graphs through search agree with the reference backend (hypothesis)."""

from __future__ import annotations

import luminal as lm
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from luminal_search import Search

UNARY = ["exp2", "abs", "relu", "sigmoid", "neg", "square"]
BINARY = ["add", "mul", "sub", "max"]


@st.composite
def programs(draw):
    steps = []
    for _ in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "sum"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(UNARY)), draw(st.integers(0, 9))))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(BINARY)), draw(st.integers(0, 9)),
                          draw(st.integers(0, 9))))
        else:
            steps.append(("sum", draw(st.integers(0, 9))))
    return steps


def build(steps, seed):
    rng = np.random.default_rng(seed)
    g = lm.Graph()
    values = [g.tensor((6, 10), name=n).set(rng.standard_normal((6, 10)).astype(np.float32))
              for n in "abc"]
    for step in steps:
        pick = [v for v in values if v.shape == values[-1].shape]
        if step[0] == "unary":
            x = pick[step[2] % len(pick)]
            values.append({"exp2": lambda t: (t * 0.25).exp2(), "abs": lambda t: t.abs(),
                           "relu": lambda t: t.relu(), "sigmoid": lambda t: t.sigmoid(),
                           "neg": lambda t: -t, "square": lambda t: t * t}[step[1]](x))
        elif step[0] == "binary":
            x, y = pick[step[2] % len(pick)], pick[step[3] % len(pick)]
            values.append({"add": x + y, "mul": x * y, "sub": x - y,
                           "max": x.maximum(y)}[step[1]])
        elif len(values[-1].shape) == 2:
            values.append(values[-1].sum(1, keepdim=True).expand(values[-1].shape)
                          * values[-1])
    return g, values[-1].retrieve()


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs(), st.integers(0, 1000))
def test_random_graphs_agree_with_reference(steps, seed):
    g, out = build(steps, seed)
    g.execute()
    want = out.numpy()
    h, got = build(steps, seed)
    h.compile((lm.GenericCompiler(), Search(lm.backend("cpu"), progress=False, top=3)))
    h.execute()
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-3, atol=2e-3 * max(
        1.0, float(np.nanmean(np.abs(want)))))
