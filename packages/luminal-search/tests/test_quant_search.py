"""Quantized matmuls in search: the backend call's `quant_activations` per matmul and generated
loops are choices of the schedule e-graph; every admitted variant agrees with the reference
(NaN included); search on a small quantized graph times them on random valid blocks, caches
the choice and explains it."""

from __future__ import annotations

import json

import luminal as lm
import numpy as np
import pytest
from luminal.quant import dequantize
from luminal.reference import ReferenceBackend
from luminal.testing.quant import int8_activations, random_blocks
from luminal_codegen import Matmul, QuantOperand, lower
from luminal_cpu import CpuBackend
from luminal_cpu.source import QUANT_ACTIVATIONS
from luminal_search import Search, measure, plan, schedule
from luminal_search.candidates import Candidate
from luminal_search.regions import find_regions, subgraph

CODES = {name: k for k, name in enumerate(QUANT_ACTIVATIONS)}
FLOAT, INT8 = ("quant_activations", CODES["float"]), ("quant_activations", CODES["int8"])
BLOCK = {"q4_k": 256, "q8_0": 32}


def quant_graph(qtype: str, rows: int, cols: int, m: int, seed: int = 0):
    """x (1, m, cols) @ W.T for a random `qtype` W (rows x cols); returns the graph (generic
    passes run), x, the packed bytes and the output."""
    rng = np.random.default_rng(seed)
    g = lm.Graph()
    x = g.tensor((1, m, cols), name="x").set(rng.standard_normal((1, m, cols)).astype(np.float32))
    raw = random_blocks(qtype, rows, cols, rng)
    w = dequantize(g.tensor(raw.shape, name="w", dtype=lm.uint8).set(raw), qtype, (rows, cols))
    y = (x @ w.T).retrieve()
    lm.GenericCompiler().compile(g)
    return g, x, raw, y


def dequantized(qtype: str, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The float64 matrix the reference backend decodes `raw` to."""
    g = lm.Graph()
    w = dequantize(g.tensor(raw.shape, dtype=lm.uint8).set(raw), qtype, (rows, cols)).retrieve()
    g.compile(ReferenceBackend())
    g.execute()
    return np.asarray(w.numpy(), np.float64)


def test_space_holds_float_and_the_users_choice(monkeypatch):
    """Sound by default: "float" (exact up to summation order) and the default "int16" (two
    int16 digits per value: float-like); int8, which rounds x coarsely, is searched once the
    user opted into it, with "float" beside it."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)
    cpu = CpuBackend()
    assert cpu.schedule_space["quant_activations"] == (CODES["float"], CODES["int16"])
    assert cpu.matmul_settings == {"quant_activations"}
    assert cpu.schedule_space.keys() - cpu.kernel_space.keys() == {"quant_activations"}
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")
    assert cpu.schedule_space["quant_activations"] == (CODES["float"], CODES["int8"])


def test_quantized_matmul_is_one_region_with_its_dequantization():
    cpu = CpuBackend()
    g, x, _, _ = quant_graph("q4_k", 40, 512, 1)
    (region,) = find_regions(g, cpu.quant_kernels)
    assert region.quantized and region.matmul and region.label(g).startswith("quantized")
    raw = next(n.dequantized.raw for n in g.nodes.values() if n.dequantized is not None)
    assert set(region.inputs) == {g.resolve(x.id), raw}
    # alone, the region keeps its packed input and lowers to the same quantized call
    sub, ids = subgraph(g, region)
    (kernel,) = lower(sub, None, cpu.quant_kernels).kernels
    assert isinstance(kernel, Matmul) and isinstance(kernel.b, QuantOperand)
    (tag,) = measure.packed_weights(sub).values()
    assert (tag.raw, tag.qtype, tag.rows, tag.cols) == (ids[raw], "q4_k", 40, 512)
    # a backend without quantized kernels runs the dequantization as kernels of their own
    assert not any(r.quantized for r in find_regions(g))


def plans(space, **facts) -> list[schedule.Plan]:
    return schedule.choices(schedule.Facts(True, space=space, **facts),
                            [("schedule", _schedule_rules())])


def _schedule_rules() -> str:
    from importlib.resources import files
    return files("luminal_search").joinpath("rules/schedule.egg").read_text()


def test_quantized_matmul_gets_the_call_settings_and_loops(monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")
    cpu = CpuBackend()
    found = plans(cpu.schedule_space, library=True, calls=cpu.matmul_settings)
    tune = schedule.Choice
    assert (tune("tune", setting=FLOAT),) in found and (tune("tune", setting=INT8),) in found
    assert (tune("loops"),) in found
    for p in found:
        kinds = {c.kind for c in p}
        calls = [c for c in p if c.kind == "tune" and c.setting[0] == "quant_activations"]
        others = [c for c in p if c.kind == "tune" and c.setting[0] != "quant_activations"]
        # the call's setting only on the call, the kernels' settings only on generated loops
        assert not (calls and "loops" in kinds) and (not others or "loops" in kinds)
        assert len(calls) <= 1
    # a float matmul's micro-kernel takes no call setting; a large quantized one no loops
    plain = plans(cpu.schedule_space, calls=cpu.matmul_settings)
    assert not any(c.setting[0] == "quant_activations" for p in plain for c in p)
    big = plans(cpu.schedule_space, library=True, calls=cpu.matmul_settings, loops=False)
    assert big == [(), (tune("tune", setting=FLOAT),), (tune("tune", setting=INT8),)]


def expected(qtype, x, w, setting) -> tuple[np.ndarray, np.ndarray]:
    """What a variant computes (under int8, x rounded to int8 blocks: by decode's matvec for up
    to 4 rows, by prefill's GEMM in groups of 32 values, 16 for Q6_K, for more) and the scale
    of its float32 rounding (sum |x w|)."""
    xr = x.astype(np.float64)
    if setting == INT8:
        group = 16 if qtype == "q6_k" else 32
        xr = int8_activations(x, BLOCK[qtype] if x.shape[-2] <= 4 else group)
    return xr @ w.T, np.abs(xr) @ np.abs(w).T


@pytest.mark.parametrize(("qtype", "m"), [("q4_k", 1), ("q8_0", 8)])
def test_every_admitted_variant_matches_the_reference(qtype, m, monkeypatch):
    """Every plan search may time for the region (int8 admitted: the user opted in), built as
    search builds it, on random blocks and x: the float ones equal the reference up to float32
    rounding, the int8 one equals the reference's product with x rounded to int8 blocks; a NaN
    in x gives NaN in its row as in the reference, and an infinity the default plan's
    pattern."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")
    rows, cols = 24, 512
    g, _, _, _ = quant_graph(qtype, rows, cols, m)
    search = Search(CpuBackend(), progress=False)
    (region,) = find_regions(g, search.backend.quant_kernels)
    candidates, _ = search._candidates(g, region, search._rulesets())
    assert {c.label for c in candidates} >= {"default", "quant_activations=0",
                                             "quant_activations=1", "matmul as generated loops"}
    rng = np.random.default_rng(5)
    data = None
    nan_rows = inf_rows = None
    for cand in candidates:
        if len(cand.tuning) + cand.loops > 2:
            continue  # compositions of the same settings: the pairs cover each setting
        sub, root = search._instance(g, region, cand, {}, None)
        if data is None:
            data = measure.random_inputs(sub, rng)
            (xid,) = [n for n in data if data[n].dtype == np.float32]
            odd = {**data, xid: data[xid].copy()}
            odd[xid][0, 0, 7] = np.nan
            if m > 1:
                odd[xid][0, 1, 9] = np.inf
        got = measure.run(sub, data, root)
        setting = dict(cand.tuning).get("quant_activations", CODES["int8"])
        want, scale = expected(qtype, data[xid], dequantized(qtype, data[next(
            n for n in data if n != xid)], rows, cols), ("quant_activations", setting)
            if not cand.loops else FLOAT)
        np.testing.assert_array_less(np.abs(got - want), 1e-5 * scale + 1e-30,
                                     err_msg=cand.label)
        special = measure.run(sub, odd, root)
        assert np.isnan(special[0, 0]).all(), cand.label
        if nan_rows is None:
            nan_rows, inf_rows = np.isnan(special), np.isinf(special)
        assert np.array_equal(np.isnan(special), nan_rows), cand.label
        assert np.array_equal(np.isinf(special), inf_rows), cand.label
        assert np.isfinite(special[0, 2:]).all(), cand.label


def model(seed: int = 1):
    """A tiny quantized layer pair on one token (decode): a Q4_K and a Q8_0 projection of x."""
    rng = np.random.default_rng(seed)
    g = lm.Graph()
    x = g.tensor((1, 1, 256), name="x").set(rng.standard_normal((1, 1, 256)).astype(np.float32))
    outs, mats = [], []
    for qtype, rows in (("q4_k", 48), ("q8_0", 40)):
        raw = random_blocks(qtype, rows, 256, rng)
        w = dequantize(g.tensor(raw.shape, dtype=lm.uint8).set(raw), qtype, (rows, 256))
        outs.append((x @ w.T).retrieve())
        mats.append((qtype, dequantized(qtype, raw, rows, 256)))
    return g, x, outs, mats


def test_search_on_a_small_quantized_model(monkeypatch, private_cache):
    """Search times the int8 default against float per matmul on random blocks (a candidate
    that builds the default's program is not timed again), records the choice in the cache and
    explains it; the installed program computes what its choices say, and a warm compile takes
    the plan from the cache."""
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int8")
    g, x, outs, mats = model()
    search = Search(CpuBackend(), progress=False)
    g.compile((lm.GenericCompiler(), search))
    report = search.report
    quantized = [r for r in report.regions if r.label.startswith("quantized matmul")]
    assert len(quantized) == 2
    for r in quantized:
        assert {"default", "quant_activations=0"} <= {label for label, _ in r.timings}
        assert r.choice.kind in ("default", "schedule")
        # int8 is the default's setting: the same source, so its time is the default's
        assert ("quant_activations=1", "default") in r.same
        assert "quant_activations=1" not in {label for label, _ in r.timings}
    text = search.explain()
    assert text.count("quantized matmul") == 2 and "timed: quant_activations=0" in text
    assert "built the program of default: quant_activations=1" in text
    stored = json.loads(next(private_cache.glob("search/*.json")).read_text())
    assert ({r["label"]: r["choice"]["label"] for r in stored["regions"].values()}
            == {r.label: r.choice.label for r in report.regions})
    g.execute()
    # each output is the product its installed call computes (int8 x: the default), within
    # float32 rounding: the choices differ from the default by int8's rounding of x at most
    installed = {k.b.qtype: dict(k.tuning).get("quant_activations", CODES["int8"])
                 for k in g.runtime.program.kernels if isinstance(k, Matmul)}
    assert installed.keys() == {"q4_k", "q8_0"}
    xs = np.asarray(x.numpy())
    for out, (qtype, w) in zip(outs, mats):
        want, scale = expected(qtype, xs, w, ("quant_activations", installed[qtype]))
        np.testing.assert_array_less(np.abs(out.numpy() - want), 1e-5 * scale + 1e-30)
    # warm: a fresh copy of the graph takes the plan from the cache
    again = Search(CpuBackend(), progress=False)
    model()[0].compile((lm.GenericCompiler(), again))
    assert again.report.cached
    assert ([r.choice.label for r in again.report.regions]
            == [r.choice.label for r in report.regions])


def test_cache_refuses_the_call_setting_on_another_region(monkeypatch):
    """A cached plan fits only the regions and the space it was found for: int8 from a plan
    searched with the user's opt-in is refused once the user has not opted in."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)
    g, _, _, _ = quant_graph("q8_0", 16, 256, 1)
    (region,) = find_regions(g, CpuBackend.quant_kernels)
    cand = Candidate("schedule", "quant_activations=0", tuning=(FLOAT,))
    space, calls = CpuBackend().schedule_space, CpuBackend.matmul_settings
    plan.check_candidate(g, region, cand, space, calls)
    with pytest.raises(ValueError, match="outside the backend's schedule space"):
        plan.check_candidate(g, region, Candidate("schedule", "int8", tuning=(INT8,)), space,
                             calls)
    region.quantized = False
    with pytest.raises(ValueError, match="quantized matmul call"):
        plan.check_candidate(g, region, cand, space, calls)
