"""The search compiler end to end on the cpu backend: registration, results equal to the
reference, the default plan always a candidate, the plan cache used and rebuilt, explain()."""

from __future__ import annotations

import json
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from luminal import plugins
from luminal_search import Search


def data(*shape, scale=1.0):
    return (np.random.default_rng(sum(shape)).standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def cpu():
    return lm.backend("cpu")


def mlp_graph():
    g = lm.Graph()
    x = g.tensor((8, 32), name="x").set(data(8, 32))
    w1 = g.tensor((32, 64), name="w1").set(data(32, 64, scale=0.1))
    w2 = g.tensor((32, 64), name="w2").set(data(32, 64, scale=0.2))
    h = (x @ w1).silu() * (x @ w2)
    out = (h.exp2() * (h * 0.5).exp2()).sum(1).retrieve()
    return g, out


def reference(build):
    g, out = build()
    g.execute()
    return out.numpy()


def test_registered_compiler_and_rulesets(cpu):
    search = plugins.compiler("search", backend=cpu)
    assert isinstance(search, Search) and search.backend is cpu
    names = {r.name: r.plugin for r in plugins.rulesets()}
    assert names["algebra"] == names["factoring"] == "luminal-search"


def test_unschedulable_backend_is_refused():
    with pytest.raises(TypeError, match="cannot be searched"):
        Search(lm.backend("reference"))


def test_unknown_ruleset_is_named(cpu):
    g, _ = mlp_graph()
    with pytest.raises(ValueError, match="unknown rule sets \\['nope'\\]"):
        g.compile((lm.GenericCompiler(), Search(cpu, rulesets=("nope",), progress=False)))


def test_search_matches_reference_and_explains(cpu):
    want = reference(mlp_graph)
    g, out = mlp_graph()
    search = Search(cpu, progress=False)
    g.compile((lm.GenericCompiler(), search))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3)
    report = search.report
    assert not report.cached and report.regions
    assert any(r.timed > 1 for r in report.regions)
    for r in report.regions:  # the default plan is timed wherever there is a choice
        assert r.timed == 0 or 0 < r.best_s <= r.default_s
    text = search.explain()
    assert "default" in text and "gain" in text and "distinct regions" in text


def test_cache_is_used_then_rebuilt_when_corrupt(cpu, private_cache):
    g, _ = mlp_graph()
    first = Search(cpu, progress=False)
    g.compile((lm.GenericCompiler(), first))
    path = first.report.cache_path
    assert path and json.loads(Path(path).read_text())["regions"]

    g2, out2 = mlp_graph()
    warm = Search(cpu, progress=False)
    g2.compile((lm.GenericCompiler(), warm))
    assert warm.report.cached  # its time: benchmarks/search_bench.py (warm column)
    assert [r.choice.label for r in warm.report.regions] == [
        r.choice.label for r in first.report.regions]
    g2.execute()
    np.testing.assert_allclose(out2.numpy(), reference(mlp_graph), rtol=1e-3, atol=1e-3)

    stored = json.loads(Path(path).read_text())
    for corrupt in ("{not json", json.dumps({"version": "old", "key": "x", "regions": {}}),
                    json.dumps(stored | {"regions": {"bogus": {}}})):
        with open(path, "w") as f:
            f.write(corrupt)
        g3, out3 = mlp_graph()
        again = Search(cpu, progress=False)
        g3.compile((lm.GenericCompiler(), again))
        assert not again.report.cached
        g3.execute()
        np.testing.assert_allclose(out3.numpy(), reference(mlp_graph), rtol=1e-3, atol=1e-3)
        assert json.loads(Path(path).read_text())["regions"]  # rewritten whole


def test_identical_layers_are_searched_once(cpu):
    def layers():
        g = lm.Graph()
        x = g.tensor((4, 16), name="x").set(data(4, 16))
        for k in range(3):
            w = g.tensor((16, 16), name=f"w{k}").set(data(16, 16 + k, scale=0.2)[:, :16])
            x = (x @ w).relu() + x
        return g, x.retrieve()

    g, out = layers()
    search = Search(cpu, progress=False)
    g.compile((lm.GenericCompiler(), search))
    assert any(r.instances == 3 for r in search.report.regions)
    g.execute()
    np.testing.assert_allclose(out.numpy(), reference(layers), rtol=1e-3, atol=1e-3)
