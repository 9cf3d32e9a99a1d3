"""Inlining across kernels proposed by search (`inlining.py`), and backend settings flowing
from `Backend.schedule_space` into composed plans without code changes."""

from __future__ import annotations

from dataclasses import replace

import luminal as lm
import numpy as np
import pytest
from luminal.backend import Backend
from luminal_codegen import Schedule, lower
from luminal_search import Search, inlining, plan
from luminal_search.candidates import Candidate, RegionResult, WholeGraph
from luminal_search.regions import find_regions


def softmax_graph():
    g = lm.Graph()
    x = g.tensor((16, 96), name="x").set(
        np.random.default_rng(3).standard_normal((16, 96)).astype(np.float32) * 3)
    return g, x.softmax(-1).retrieve()


def torch_softmax():
    import torch

    g, _ = softmax_graph()
    (x,) = [g.data[n.id] for n in g.input_nodes()]
    return torch.softmax(torch.from_numpy(np.asarray(x)), -1).numpy()


@pytest.fixture(scope="module")
def cpu():
    return lm.backend("cpu")


def test_a_cheap_stored_producer_is_proposed_for_inlining():
    """softmax stores its exponentials (read by the sum and the division); the group of the
    division with its producers names them, and nothing else, as cheap."""
    g, _ = softmax_graph()
    lm.GenericCompiler().compile(g)
    regions = find_regions(g)
    (group,) = inlining.find_groups(g, regions)
    assert group.group >= 2 and group.root == regions[-1].root
    assert [g.nodes[group.nodes[p]].op.name for p in group.cheap] == ["Exp2"]
    stored = {r.root for r in regions}
    assert all(group.nodes[p] in stored for p in group.cheap)


def test_no_group_where_every_stored_node_is_a_matmul_operand_or_reduction():
    g = lm.Graph()
    x = g.tensor((8, 16), name="x").set(np.ones((8, 16), np.float32))
    w = g.tensor((16, 8), name="w").set(np.ones((16, 8), np.float32))
    ((x * 2.0).exp2() @ w).sum(1).retrieve()
    lm.GenericCompiler().compile(g)
    assert inlining.find_groups(g, find_regions(g)) == []


def test_an_inlined_producer_lowers_and_matches_the_reference(cpu):
    """The group's inline choice as a `Schedule`: one buffer fewer, same values as PyTorch."""
    g, out = softmax_graph()
    lm.GenericCompiler().compile(g)
    (group,) = inlining.find_groups(g, find_regions(g))
    exp = group.nodes[group.cheap[0]]
    schedule = Schedule(inline=frozenset({exp}))
    default_buffers = {b.node for b in lower(g).buffers}
    inlined_buffers = {b.node for b in lower(g, schedule).buffers}
    assert exp in default_buffers and exp not in inlined_buffers
    g.compile(cpu.with_schedule(schedule))
    g.execute()
    np.testing.assert_allclose(out.numpy(), torch_softmax(), rtol=1e-5, atol=1e-6)


def test_search_checks_and_times_the_inline_candidates(cpu):
    g, out = softmax_graph()
    search = Search(cpu, progress=False, use_cache=False, rulesets=("schedule",))
    g.compile((lm.GenericCompiler(), search))
    (group,) = [r for r in search.report.regions if r.label.startswith("group")]
    labels = [label for label, _ in group.timings]
    assert labels[0] == "default" and any(label.startswith("inline Exp2") for label in labels)
    assert not any("inline" in why for why in group.rejected)
    g.execute()
    np.testing.assert_allclose(out.numpy(), torch_softmax(), rtol=1e-5, atol=1e-6)


def test_an_inline_plan_round_trips_through_the_cache_format():
    g, _ = softmax_graph()
    lm.GenericCompiler().compile(g)
    (group,) = inlining.find_groups(g, find_regions(g))
    choice = Candidate("schedule", "inline Exp2", inline=tuple(group.cheap),
                       tuning=(("lanes", 16),))
    results = {group.signature: RegionResult("group", 1, choice)}
    order = [n.id for n in g.toposort()]
    stored = plan.to_json(results, [group], WholeGraph(1.0, 0.5, True), order)
    got, (region,), _ = plan.from_json(g, stored, order, {"lanes": (16,)})
    assert region.cheap == group.cheap and got[group.signature].choice.inline == choice.inline
    bad = replace(choice, inline=(0,))  # position 0 is the input: never inlined
    stored["regions"][group.signature]["choice"] = bad.as_json()
    with pytest.raises(ValueError, match="cheap nodes"):
        plan.from_json(g, stored, order, {"lanes": (16,)})


class KnobBackend(Backend):
    """A schedulable backend declaring one more setting than the cpu backend ("unroll", which
    its device ignores), built on the public Backend API only: it records every setting
    search asks of it and runs on the cpu backend."""

    name = "cpu-knobs"
    schedulable = True
    schedule_space = {**lm.backend("cpu").schedule_space, "unroll": (2, 4)}

    def __init__(self):
        self.cpu = lm.backend("cpu")
        self.asked: list[tuple[tuple[str, int], ...]] = []  # shared with with_schedule's copies

    def probe(self):
        return self.cpu.probe()

    def compile(self, graph):
        schedule = self.schedule or Schedule()
        self.asked += schedule.tuning.values()
        tuning = {node: kept for node, settings in schedule.tuning.items()
                  if (kept := tuple(s for s in settings if s[0] != "unroll"))}
        self.cpu.with_schedule(replace(schedule, tuning=tuning)).compile(graph)


def test_a_backend_setting_search_does_not_know_flows_into_composed_plans():
    backend = KnobBackend()
    g = lm.Graph()
    x = g.tensor((32, 48), name="x").set(np.linspace(-2, 2, 32 * 48, dtype=np.float32)
                                          .reshape(32, 48))
    out = ((x * 1.5).exp2() + x).retrieve()
    search = Search(backend, top=8, progress=False, use_cache=False, rulesets=("schedule",))
    g.compile((lm.GenericCompiler(), search))
    assert ("unroll", 2) in {s for settings in backend.asked for s in settings}
    assert any(len(settings) == 2 and {n for n, _ in settings} >= {"unroll"}
               for settings in backend.asked)  # composed with a cpu setting
    assert all(len({n for n, _ in s}) == len(s) for s in backend.asked)  # one value per name
    g.execute()
    xs = np.linspace(-2, 2, 32 * 48, dtype=np.float32).reshape(32, 48)
    np.testing.assert_allclose(out.numpy(), np.exp2(xs * 1.5) + xs, rtol=1e-5)
