"""Search-derived fusions: the kernel-level rules of `rules/online.egg`, each on its own, the
online-softmax kernel (`ir.SoftmaxSum`) against its primitive decomposition on NaN and
infinities, and attention derived from its primitives into one streaming kernel."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from luminal_codegen import Schedule, lower
from luminal_codegen.ir import SoftmaxSum, walk
from luminal_search import Search, egraph, fusion, kterms, plan
from luminal_search.candidates import Candidate, RegionResult, WholeGraph
from luminal_search.regions import find_regions

RULE = re.compile(r"^\((?:rewrite|rule) .*$", re.M)


def egglog_equal(left: str, right: str, uses: dict[int, int], rules: bool = True) -> bool:
    """Whether the online rules make egglog prove the terms `left` and `right` equal; leaf k
    reads the reduction variables in the bit mask `uses[k]`."""
    program = [kterms.LANGUAGE, f"(let $left {left})", f"(let $right {right})"]
    program += [f"(set (Uses (VLeaf {k})) {mask})" for k, mask in uses.items()]
    if rules:
        program += ["(ruleset online)", fusion.rules(),
                    "(run-schedule (repeat 6 (seq (saturate (run uses)) (run online))))"]
    program.append("(check (= $left $right))")
    return egraph.holds("\n".join(program))


def logits(c: str | None) -> str:
    """exp2((x - max_v x) * c) over variable 0 (no scale when `c` is None), x = leaf 0."""
    diff = "(VAdd (VLeaf 0) (VMul (VMax 0 0 (VLeaf 0)) (VNum -1.0)))"
    return f"(VExp2 {diff})" if c is None else f"(VExp2 (VMul {diff} (VNum {c})))"


def softmax_weighted(c: str | None) -> str:
    return (f"(VMul (VSum 0 0 (VMul {logits(c)} (VLeaf 1))) "
            f"(VRecip (VSum 0 0 {logits(c)})))")


# rule (its first line in online.egg) -> (left, right, uses of the leaves)
CASES = {
    "(rewrite (VMul a b) (VMul b a)": ("(VMul (VLeaf 0) (VLeaf 1))", "(VMul (VLeaf 1) (VLeaf 0))",
                                       {0: 0, 1: 0}),
    "(rewrite (VMul a (VMul b c)) (VMul (VMul a b) c)": (
        "(VMul (VLeaf 0) (VMul (VLeaf 1) (VLeaf 2)))",
        "(VMul (VMul (VLeaf 0) (VLeaf 1)) (VLeaf 2))", {0: 0, 1: 0, 2: 0}),
    "(rewrite (VAdd a b) (VAdd b a)": ("(VAdd (VLeaf 0) (VLeaf 1))", "(VAdd (VLeaf 1) (VLeaf 0))",
                                       {0: 0, 1: 0}),
    "(rule ((= s (VSum v n (VMul a b)))": ("(VSum 0 0 (VMul (VLeaf 0) (VLeaf 1)))",
                                          "(VMul (VLeaf 0) (VSum 0 0 (VLeaf 1)))", {0: 0, 1: 1}),
    "(rule ((= s (VMul (VSum v n (VMul (VExp2": (
        softmax_weighted("0.5"), "(VSoftmaxSum 0 0 (VMul (VLeaf 0) (VNum 0.5)) (VLeaf 1))",
        {0: 1, 1: 1}),
    "(rule ((= s (VMul (VSum v n (VMul (VExp2 (VAdd": (
        softmax_weighted(None), "(VSoftmaxSum 0 0 (VLeaf 0) (VLeaf 1))", {0: 1, 1: 1}),
}


def online_rules() -> list[str]:
    return RULE.findall(fusion.rules())


def test_every_online_rule_has_a_case():
    heads = [max((h for h in CASES if r.startswith(h)), key=len) for r in online_rules()]
    assert sorted(heads) == sorted(CASES)


@pytest.mark.parametrize("rule", list(CASES))
def test_each_online_rule_proves_its_case(rule):
    left, right, uses = CASES[rule]
    assert not egglog_equal(left, right, uses, rules=False)
    assert egglog_equal(left, right, uses)


def test_a_factor_that_reads_the_summed_variable_stays_inside():
    left, right, _ = CASES["(rule ((= s (VSum v n (VMul a b)))"]
    assert not egglog_equal(left, right, {0: 1, 1: 1})


def test_online_softmax_needs_a_positive_scale():
    right = "(VSoftmaxSum 0 0 (VMul (VLeaf 0) (VNum -0.5)) (VLeaf 1))"
    assert not egglog_equal(softmax_weighted("-0.5"), right, {0: 1, 1: 1})


def test_uses_tracks_reduction_variables():
    # a max over variable 0 of a leaf reading variables 0 and 1 reads only variable 1
    from egglog.bindings import EGraph

    program = [kterms.LANGUAGE, "(let $t (VMax 0 0 (VMul (VLeaf 0) (VNum 2.0))))",
               "(set (Uses (VLeaf 0)) 3)", "(run-schedule (saturate (run uses)))",
               "(check (= (Uses $t) 2))"]
    egraph = EGraph()
    egraph.run_program(*egraph.parse_program("\n".join(program)))


# ----- the online-softmax kernel against the primitive decomposition --------------------------
def softmax_weighted_graph(rows: np.ndarray, values: np.ndarray, scale: float):
    """sum_n softmax_n(x * scale) * b[n, :], written with the primitives' decomposition."""
    g = lm.Graph()
    x = g.tensor(rows.shape, name="x").set(rows)
    b = g.tensor(values.shape, name="b").set(values)
    z = x * scale
    w = (z - z.amax(-1, keepdim=True)).exp2()
    out = ((w @ b) * w.sum(-1, keepdim=True).reciprocal()).retrieve()
    return g, out


def fused_schedule(g: lm.Graph) -> tuple[Schedule, fusion.Derived]:
    """The schedule that computes the graph's one fused region with its derived kernel."""
    regions = find_regions(g)
    (fused, *_) = fusion.find_fusions(g, regions)
    derived = fusion.derive(g, fused, {})
    assert derived is not None
    params = tuple(g.resolve(fused.nodes[p]) for p in derived.params)
    return Schedule(kernels={params[0]: (derived.kernel, params)}), derived


def special_rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((8, n)).astype(np.float32) * 4
    rows[1, 3] = np.nan
    rows[2, 5] = np.inf
    rows[3, :] = -np.inf
    rows[4, ::2] = -np.inf
    rows[5, 7] = 1e30  # one weight 1, the others underflow to 0
    rows[6, :] = 60.0  # equal logits: uniform weights
    return rows


@pytest.mark.parametrize("width", [6, 300], ids=["row-wise", "per-point"])
def test_softmax_sum_kernel_equals_the_decomposition(width):
    rows = special_rows(40)
    values = np.random.default_rng(1).standard_normal((40, width)).astype(np.float32)
    values[9, 1] = np.inf  # weighted by 0 in rows 3 and 4: NaN in the decomposition
    values[10, 2] = np.nan
    want_g, want = softmax_weighted_graph(rows, values, 0.7)
    want_g.compile((lm.GenericCompiler(), lm.backend("cpu")))
    want_g.execute()

    g, out = softmax_weighted_graph(rows, values, 0.7)
    lm.GenericCompiler().compile(g)
    schedule, derived = fused_schedule(g)
    assert any(isinstance(v, SoftmaxSum) for v in walk(derived.kernel.out.value))
    g.compile(lm.backend("cpu").with_schedule(schedule))
    g.execute()
    got, expected = out.numpy(), want.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


# ----- attention ---------------------------------------------------------------------------
def attention(seq: int, queries: int | None = None, heads: int = 2):
    """Causal attention written with luminal's primitives (softmax over the last axis), and
    PyTorch's `scaled_dot_product_attention` of the same data."""
    import torch

    rng = np.random.default_rng(seq)
    queries = queries or seq
    arrays = {n: rng.standard_normal((1, heads, queries if n == "q" else seq, 16)).astype(
        np.float32) for n in "qkv"}
    arrays["mask"] = np.triu(np.full((queries, seq), -np.inf, np.float32), seq - queries + 1)
    g = lm.Graph()
    q, k, v, m = (g.tensor(a.shape, name=n).set(a) for n, a in arrays.items())
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(16)) + m
    out = (scores.softmax(-1) @ v).retrieve()
    t = {n: torch.from_numpy(a) for n, a in arrays.items()}
    want = torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"],
                                                            attn_mask=t["mask"]).numpy()
    return g, out, want


def test_attention_comes_out_of_the_egraph_as_one_streaming_kernel():
    seq = 48
    g, out, want = attention(seq)
    lm.GenericCompiler().compile(g)
    schedule, derived = fused_schedule(g)
    assert derived.cost < derived.inlined_cost
    program = lower(g, schedule)
    assert len(program.kernels) == 1
    written = [b.numel.evaluate(g.dims) for b in program.buffers if b.role != "input"]
    assert written == [2 * seq * 16]  # the output alone: no (queries x keys) matrix
    g.compile(lm.backend("cpu").with_schedule(schedule))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_search_checks_and_times_the_fused_kernel_for_decode_attention(private_cache):
    """One query against 256 keys: the fused region's derived kernel passes the reference check
    and is timed against the default plan (which wins depends on the machine and the kernels:
    on an idle Zen 4 the fused kernel won by 1.6x until luminal-cpu's AVX-512 decode GEMV made
    the default plan faster at this shape, 20.6 against 28.4 us)."""
    g, out, want = attention(256, queries=1, heads=4)
    search = Search(lm.backend("cpu"), progress=False)
    g.compile((lm.GenericCompiler(), search))
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    # the largest fusion comes first; when the default plan beats it (luminal-cpu's decode
    # GEMV does on Zen 4 since 2026-11-28), an overlapping smaller one is listed after it
    fused = next(r for r in search.report.regions if r.label.startswith("fusion of"))
    assert fused.timed == 2 and not fused.rejected
    assert "one kernel from the e-graph" in search.explain()


def test_a_cached_fused_choice_is_derived_again_on_load(private_cache):
    """A plan naming the fused kernel (written here whatever the timings chose) is loaded by
    deriving the kernel again: the warm compile uses it and agrees with PyTorch."""
    cpu = lm.backend("cpu")
    g, _, want = attention(256, queries=1, heads=4)
    first = Search(cpu, progress=False)
    g.compile((lm.GenericCompiler(), first))
    path = Path(first.report.cache_path)

    g, _, _ = attention(256, queries=1, heads=4)
    lm.GenericCompiler().compile(g)
    region = fusion.find_fusions(g, find_regions(g))[0]
    choice = Candidate("fuse", "one kernel from the e-graph")
    chosen = plan.to_json({region.signature: RegionResult(region.label(g), 1, choice)},
                          [region], WholeGraph(kept=True), [n.id for n in g.toposort()])
    path.write_text(json.dumps(json.loads(path.read_text()) | chosen))

    g, out, _ = attention(256, queries=1, heads=4)
    warm = Search(cpu, progress=False)
    g.compile((lm.GenericCompiler(), warm))
    assert warm.report.cached
    assert [r.choice.kind for r in warm.report.regions] == ["fuse"]
    g.execute()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


# ----- the tiled form (luminal-cpu renders prefill-shaped attention in flash tiles) ---------------
def test_prefill_attention_kernel_is_rendered_in_tiles_and_decode_is_not():
    from luminal_cpu import flash

    for queries, tiled in ((48, True), (1, False)):
        g, _, _ = attention(48, queries=queries)
        lm.GenericCompiler().compile(g)
        _, derived = fused_schedule(g)
        assert (flash.match(derived.kernel) is not None) == tiled


@pytest.mark.parametrize("masked", [-np.inf, -1e9, -20.0])
def test_tiled_attention_keeps_nan_and_infinities_of_the_decomposition(masked):
    """Ragged tiles (70 queries: 32 + 32 + 6; 70 keys: 64 + 6), a head of 16 values padded to
    32, and special values: a NaN query, an infinite key, infinite values, one inside the
    block of keys that the causal mask hides from the whole first tile of queries (skipped
    work must still give 0 * inf = NaN), a row of -inf logits. Masked logits at -inf or -1e9
    let whole blocks be skipped (their bound is far below each row's max); at -20 they must
    not be. The default plan's output is the reference."""
    from luminal_cpu import flash

    seq = 70
    g_ref, want_out, _ = attention(seq)
    g, out, _ = attention(seq)
    for graph in (g_ref, g):
        q, k, v, m = (graph.data[n.id].copy() for n in graph.input_nodes())
        q[0, 0, 5, 3] = np.nan
        k[0, 1, 50, 2] = np.inf
        v[0, 0, 40, 1] = np.inf
        v[0, 0, 66, 1] = np.inf  # in the last block, which the first query tile cannot see
        m[m != 0] = masked
        m[60, :] = -np.inf
        for n, x in zip(graph.input_nodes(), (q, k, v, m)):
            graph.set_data(n.id, x)
    g_ref.compile((lm.GenericCompiler(), lm.backend("cpu")))
    lm.GenericCompiler().compile(g)
    schedule, _ = fused_schedule(g)
    g.compile(lm.backend("cpu").with_schedule(schedule))
    (kernel,) = g.runtime.program.kernels
    assert flash.match(kernel) is not None
    with np.errstate(all="ignore"):
        g_ref.execute()
        g.execute()
    got, want = out.numpy(), want_out.numpy()
    if masked < -1e8:  # weights of exactly 0 where masked: 0 * inf = NaN
        assert np.isnan(want[0, 0, :66, 1]).all()
    assert np.isnan(want[0, :, 60]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)
