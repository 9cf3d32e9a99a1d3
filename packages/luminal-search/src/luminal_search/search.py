"""`Search(backend)`: the search compiler.

For each region of the graph (a kernel of the default plan; identical regions once), and for
groups of regions where a cheap stored producer may be inlined (`inlining.py`) and fusions
(`fusion.py`), it extracts candidate plans from the region's schedule e-graph (`schedule.py`):
the default plan, the choices the backend honours (store a recomputed node, inline a cheap
stored one, matmul as generated loops, tunable settings) alone and composed, and algebraic
rewrites extracted from the region's term e-graph (`egraph.py`). It checks every candidate
against the reference backend on random inputs (and its NaN/inf behaviour against the default
plan's), times the survivors on the device and keeps the fastest; the default plan is always
timed, so a region never gets slower than its default in the region-alone timing. The whole
graph is then timed with and without the choices. The chosen plan is cached on disk; the
backend then compiles the rewritten graph with the chosen `luminal_codegen.Schedule`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import numpy as np
from luminal import plugins
from luminal.backend import Backend
from luminal.graph import Graph
from luminal.passes import DeadCodeElimination
from luminal.reference import ReferenceBackend
from luminal_codegen import Schedule

from . import cache, fusion, inlining, measure, plan, schedule, terms
from .candidates import DEFAULT, Candidate, RegionResult, WholeGraph
from .egraph import Limits, Rewrite, saturate
from .regions import (
    Region,
    find_regions,
    leaves,
    packed_inputs,
    subgraph,
    views_and_extents,
)

DEFAULT_DIM = 64  # value given to a symbolic dim the graph has not bound, for timing
MAX_STORE_VARIANTS = 2
# a quantized matmul is proposed as generated loops (decoding every weight element in scalar
# code: 40-550x slower than the call at 576x1536, README) only up to this many weight
# elements: beyond, timing it costs search seconds per region for a candidate that cannot win
MAX_QUANT_LOOPS = 1 << 20
# A candidate replaces the default plan only when it is at least this much faster: timings on a
# busy machine jitter by a few percent, and a tie is not worth a different plan.
MARGIN = 0.97
# composed plans extending a region's winning choice that are timed (each compiles the region)
MAX_EXTENSIONS = 2
# regions whose choice is tried alone in the whole graph when the choices together lose
WHOLE_ALONE = 3


@dataclass
class SearchReport:
    """`Search.report` after `compile`: per-region choices and timings."""

    regions: list[RegionResult]
    whole: WholeGraph
    seconds: float  # finding (or loading) and applying the plan; the backend's compile excluded
    cached: bool
    cache_path: str = ""

    def explain(self) -> str:
        """A table of each distinct region: what search chose and the measured gain."""
        lines = [f"search: {len(self.regions)} distinct regions, "
                 f"{'plan from cache' if self.cached else 'searched'} in {self.seconds:.2f} s"]
        w = self.whole
        if w.default_s:
            verdict = "kept" if w.kept else "not faster: the default plan is used"
            lines.append(f"whole graph: default {w.default_s * 1e3:.3f} ms, with the choices "
                         f"below {w.searched_s * 1e3:.3f} ms ({verdict})")
        else:
            lines.append("whole graph: every region keeps the default plan")
        lines.append(f"{'region':<48} {'n':>3} {'timed':>5} {'default':>10} {'best':>10} "
                     f"{'gain':>6}  choice")
        for r in self.regions:
            timing = (f"{r.default_s * 1e6:>8.1f}us {r.best_s * 1e6:>8.1f}us {r.gain:>5.2f}x"
                      if r.timed else f"{'-':>10} {'-':>10} {'-':>6}")
            choice = r.choice.label
            if r.choice.kind != "default" and not w.kept:
                choice = f"default (its own best, {choice}, lost in the whole graph)"
            lines.append(f"{r.label[:48]:<48} {r.instances:>3} {r.timed:>5} {timing}  {choice}")
            lines += [f"    rejected: {why}" for why in r.rejected]
            lines += _same_lines(r.same)
            if r.label.startswith(("fusion", "quantized")):
                lines += [f"    timed: {label} {t * 1e6:.1f}us" for label, t in r.timings]
        return "\n".join(lines)


class Search:
    """The search compiler for `backend` (any backend with `schedulable = True`).

    `g.compile((lm.GenericCompiler(), Search(lm.backend("cpu"))))`. Options: `top`
    candidates timed per region besides the default (the first that pass the check, in cost
    order), e-graph `limits`, `rulesets` (names of registered rule sets; None = all), `seed`
    for the random check inputs, `progress` bar, `use_cache`.
    """

    def __init__(self, backend: Backend | None = None, *, top: int = 4,
                 limits: Limits | None = None, rulesets: tuple[str, ...] | None = None,
                 seed: int = 0, progress: bool = True, use_cache: bool = True):
        self.backend = backend if backend is not None else plugins.backend()
        if not self.backend.schedulable:
            raise TypeError(f"backend {self.backend.name!r} cannot be searched: it does not "
                            f"lower through luminal_codegen.lower (Backend.schedulable)")
        self.top, self.limits, self.seed = top, limits or Limits(), seed
        self.rulesets = rulesets
        self.progress, self.use_cache = progress, use_cache
        self.report: SearchReport | None = None

    def __repr__(self) -> str:
        return f"Search({self.backend!r})"

    def explain(self) -> str:
        if self.report is None:
            return "search has not compiled a graph yet"
        return self.report.explain()

    # ----- compile ------------------------------------------------------------------------
    def compile(self, graph: Graph) -> None:
        t0 = time.perf_counter()
        rulesets = self._rulesets()
        device = self.backend.probe().device
        # the space is part of the key: luminal-cpu's depends on LUMINAL_CPU_QUANT_ACTIVATIONS
        options = (f"top={self.top} {self.limits} {rulesets!r} "
                   f"{sorted(self.backend.schedule_space.items())}")
        key = cache.plan_key(graph, self.backend.name, device, options)
        order = [n.id for n in graph.toposort()]
        loaded = self._load(graph, key, order)
        path = ""
        if loaded is not None:
            results, regions, whole = loaded
            path = str(cache.cache_dir() / f"{key}.json")
        else:
            regions = find_regions(graph, getattr(self.backend, "quant_kernels", ()))
            merged: dict[str, RegionResult] = {}
            regions = self._absorb(graph, regions, fusion.find_fusions(graph, regions), (),
                                   merged)
            regions = self._absorb(graph, regions, inlining.find_groups(graph, regions),
                                   rulesets, merged)
            results = self._search(graph, regions, rulesets, merged)
            whole = self._check_whole(graph, regions, results)
            if not whole.kept:
                regions = []
            if self.use_cache:
                path = str(cache.store(key, plan.to_json(results, regions, whole, order)))
        choices = {sig: r.choice for sig, r in results.items()}
        schedule = self._apply(graph, regions, choices)
        planned = time.perf_counter()
        self.backend.with_schedule(schedule).compile(graph)
        self.report = SearchReport(list(results.values()), whole, planned - t0,
                                   loaded is not None, path)

    def _rulesets(self) -> list[tuple[str, str]]:
        found = [(r.name, r.program) for r in plugins.rulesets()]
        if self.rulesets is None:
            return found
        known = {n for n, _ in found}
        missing = [n for n in self.rulesets if n not in known]
        if missing:
            raise ValueError(f"unknown rule sets {missing}; registered: {sorted(known)}")
        return [(n, p) for n, p in found if n in self.rulesets]

    def _load(self, graph: Graph, key: str, order: list[int]):
        """The cached plan for this graph, or None (absent, corrupt, stale, not fitting)."""
        stored = cache.load(key) if self.use_cache else None
        if stored is None:
            return None
        try:
            results, regions, whole = plan.from_json(graph, stored, order,
                                                     self.backend.schedule_space,
                                                     self._calls())
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None
        for region in regions:  # fused kernels are derived again (deterministic)
            choice = results[region.signature].choice
            if choice.kind == "fuse" and choice.derived is None:
                choice.derived = fusion.derive(graph, region, self._dims(graph), self.limits)
                if choice.derived is None:
                    return None
        return results, regions, whole

    def _calls(self) -> frozenset[str]:
        """The settings of the backend's `schedule_space` that its quantized matmul call takes
        (`Matmul.tuning`; luminal-cpu: `quant_activations`), declared as the backend's
        `matmul_settings`; generated kernels take the others."""
        return frozenset(getattr(self.backend, "matmul_settings", ()))

    # ----- fusing -------------------------------------------------------------------------
    @staticmethod
    def _dims(graph: Graph) -> dict[str, int]:
        return {d: graph.dims.get(d, DEFAULT_DIM) for d in graph.free_dims()}

    def _absorb(self, graph: Graph, regions: list[Region], merged: list[Region], rulesets,
                results: dict[str, RegionResult]) -> list[Region]:
        """`regions` with each of the `merged` regions (fusions, groups: largest first, they
        may overlap) whose search beat the default plan in place of the regions it absorbs;
        their results go to `results`."""
        covered: set[int] = set()
        for region in merged:
            inside = set(region.nodes) - set(region.inputs)
            if inside & covered:
                continue
            result = results.get(region.signature)
            if result is None:
                result = results[region.signature] = self._search_region(
                    graph, region, rulesets, region.label(graph), 1)
            else:
                result.instances += 1
            if result.choice.kind != "default":
                covered |= inside
                regions = [r for r in regions if r.root not in inside] + [region]
        order = {n.id: k for k, n in enumerate(graph.toposort())}
        return sorted(regions, key=lambda r: order[r.root])

    # ----- searching ----------------------------------------------------------------------
    def _search(self, graph: Graph, regions: list[Region], rulesets,
                done: dict[str, RegionResult]) -> dict[str, RegionResult]:
        """Each distinct region's result (regions already in `done` are not searched again)."""
        from tqdm import tqdm

        results = dict(done)
        groups: dict[str, list[Region]] = {}
        for region in regions:
            if region.signature in results:
                continue
            groups.setdefault(region.signature, []).append(region)
        bar = tqdm(groups.items(), desc="search", unit="region", disable=not self.progress,
                   leave=False)
        for sig, members in bar:
            region = members[0]
            label = region.label(graph)
            bar.set_postfix_str(label[:40])
            results[sig] = self._search_region(graph, region, rulesets, label, len(members))
            best = results[sig]
            bar.set_postfix_str(f"{label[:30]} timed={best.timed} best={best.gain:.2f}x")
        return results

    def _candidates(self, graph: Graph, region: Region, rulesets) -> tuple[list[Candidate], float]:
        if region.fused:
            derived = fusion.derive(graph, region, self._dims(graph), self.limits)
            if derived is None:
                return [DEFAULT], 0.0
            label = (f"one kernel from the e-graph (cost {derived.inlined_cost} -> "
                     f"{derived.cost}, est. work {derived.work / derived.default_work:.2f}x)")
            return [DEFAULT, Candidate("fuse", label, derived=derived)], derived.seconds
        # a quantized matmul's nodes are the dequantization the call never runs: no rewrites
        # or stores of them, only the call's settings and generated loops
        term_sets = [r for r in rulesets if not schedule.is_schedule_rules(r[1])
                     and not region.quantized]
        schedule_sets = [r for r in rulesets if schedule.is_schedule_rules(r[1])]
        sat = saturate(graph, region, term_sets, self.limits)
        recomputed = [] if region.quantized else [
            region.nodes.index(n) for n in region.recomputed[:MAX_STORE_VARIANTS]]
        facts = schedule.Facts(region.matmul, recomputed, len(sat.rewrites),
                               self.backend.schedule_space, region.cheap,
                               library=region.quantized, calls=self._calls(),
                               loops=not region.quantized or _weight_elements(
                                   graph, region, self._dims(graph)) <= MAX_QUANT_LOOPS)
        out = [_candidate(graph, region, plan, sat.rewrites)
               for plan in schedule.choices(facts, schedule_sets, self.limits)]
        return out, sat.seconds

    def _search_region(self, graph: Graph, region: Region, rulesets, label: str,
                       instances: int) -> RegionResult:
        if not _checkable(graph, region):
            return RegionResult(label, instances, DEFAULT)
        candidates, egraph_s = self._candidates(graph, region, rulesets)
        result = RegionResult(label, instances, candidates[0], egraph_s=egraph_s)
        if len(candidates) == 1:
            return result
        rng = np.random.default_rng(self.seed)
        dims = self._dims(graph)
        reference, _ = self._instance(graph, region, candidates[0], dims, ReferenceBackend())
        data = measure.random_inputs(reference, rng)
        special = measure.random_inputs(reference, rng, specials=True)
        want = measure.run(reference, data, _root(reference))
        default_special: list[np.ndarray] = []
        programs: dict[object, str] = {}  # program identity -> the candidate that built it

        def check(cands: list[Candidate], limit: int) -> list[tuple[Candidate, Graph]]:
            """The first `limit` of `cands` that build and agree with the reference (and with
            the default plan's NaN/inf pattern), at most twice that many tried: each try
            compiles the region."""
            passed: list[tuple[Candidate, Graph]] = []
            for cand in cands[: 2 * limit]:
                if len(passed) >= limit:
                    break
                try:
                    sub, root = self._instance(graph, region, cand, dims, None)
                    identity = measure.program_identity(sub)
                    if identity is not None and identity in programs:
                        # the same generated code as a candidate already in: its time holds
                        result.same.append((cand.label, programs[identity]))
                        continue
                    got = measure.run(sub, data, root)
                    odd = measure.run(sub, special, root)
                except Exception as e:  # a candidate that fails to build is dropped, with why
                    result.rejected.append(f"{cand.label}: {type(e).__name__}: {e}"[:200])
                    continue
                if cand.kind == "default":
                    default_special.append(odd)
                elif not measure.agrees(got, want) or (
                        default_special and not measure.agrees(odd, default_special[0])):
                    result.rejected.append(f"{cand.label}: disagrees with the reference")
                    continue
                passed.append((cand, sub))
                if identity is not None:
                    programs[identity] = cand.label
            return passed

        # the default plan and the cheapest candidates (single choices first) until `top` pass
        survivors = check(candidates[:1], 1) + check(candidates[1:], self.top)
        if len(survivors) < 2 or survivors[0][0].kind != "default":
            # the default plan failed (nothing to compare against) or is all that is left
            return result
        timing_data = _with_weights(graph, region, data)
        result.timed = len(survivors)
        self._time(graph, survivors, timing_data, rng, result)
        # then the plans that compose more choices on top of the winner, in cost order, timed
        # against it and the default plan again
        winner = next((s for s in survivors if s[0] is result.choice), None)
        tried = {id(c) for c, _ in survivors}
        more = [c for c in candidates if id(c) not in tried and winner is not None
                and c.extends(winner[0])]
        extended = check(more, min(self.top, MAX_EXTENSIONS)) if more else []
        if extended:
            result.timed += len(extended)
            self._time(graph, [survivors[0], winner, *extended], timing_data, rng, result)
        return result

    @staticmethod
    def _time(graph: Graph, survivors: list[tuple[Candidate, Graph]], data: dict,
              rng: np.random.Generator, result: RegionResult) -> None:
        """Time the survivors (the default first) and record the fastest in `result`. A dim
        the graph leaves unbound is timed at 64 and at 1 (prefill and decode of a model): a
        candidate must not be slower than the default at either, and wins on the geometric
        mean of its two ratios."""
        subs = [sub for _, sub in survivors]
        times = [measure.time_interleaved(subs, data)]
        unbound = graph.free_dims() - graph.dims.keys()
        if unbound:
            for sub in subs:
                for d in unbound:
                    sub.set_dim(d, 1)
            times.append(measure.time_interleaved(subs, measure.random_inputs(subs[0], rng)))
            for sub in subs:  # back to the dims `data` was drawn for
                for d in unbound:
                    sub.set_dim(d, DEFAULT_DIM)
        result.default_s = result.best_s = times[0][0]
        result.choice = survivors[0][0]  # a later timing of the same candidates decides anew
        result.timings += [(cand.label, t) for (cand, _), t in zip(survivors, times[0])]
        best = MARGIN
        for k, (cand, _) in enumerate(survivors[1:], start=1):
            ratios = [t[k] / t[0] for t in times]
            score = math.prod(ratios) ** (1 / len(ratios))
            if max(ratios) <= 1.0 and score < best:
                best, result.choice, result.best_s = score, cand, times[0][k]

    def _instance(self, graph: Graph, region: Region, cand: Candidate, dims: dict,
                  backend: Backend | None) -> tuple[Graph, int]:
        """The region alone as a graph, with `cand` applied, compiled for `backend` (the
        searched backend when None); returns it and its output node."""
        sub, ids = subgraph(graph, region)
        for d, v in dims.items():
            sub.set_dim(d, v)
        local = Region(ids[region.root], [ids[n] for n in region.nodes],
                       [ids[n] for n in region.inputs], region.matmul)
        schedule = self._apply(sub, [local], {"": cand}, by_signature=False)
        sub.compile(backend or self.backend.with_schedule(schedule))
        return sub, _root(sub)

    def _check_whole(self, graph: Graph, regions: list[Region],
                     results: dict[str, RegionResult]) -> WholeGraph:
        """Time the whole graph with the default plan and with every region's choice; the
        choices are kept only if they agree with the default plan and are faster together.
        When they lose together, the choices of the (at most `WHOLE_ALONE`) regions that gained
        most alone are tried one at a time, and the fastest that wins is kept alone (the
        others go back to the default plan)."""
        chosen = [sig for sig, r in results.items() if r.choice.kind != "default"]
        if not chosen:
            return WholeGraph()
        whole = self._compare_whole(graph, regions, {s: results[s].choice for s in chosen})
        if whole.kept or len(chosen) == 1:
            return whole
        best: tuple[WholeGraph, str] | None = None
        for sig in sorted(chosen, key=lambda s: -results[s].gain)[:WHOLE_ALONE]:
            alone = self._compare_whole(graph, regions, {sig: results[sig].choice})
            if alone.kept and (best is None or alone.gain > best[0].gain):
                best = alone, sig
        if best is None:
            return whole
        for sig in chosen:
            if sig != best[1]:
                r = results[sig]
                r.rejected.append(f"{r.choice.label}: its own best, slower in the whole graph")
                r.choice = DEFAULT
        return best[0]

    def _compare_whole(self, graph: Graph, regions: list[Region],
                       choices: dict[str, Candidate]) -> WholeGraph:
        default, searched = _clone(graph), _clone(graph)
        for g in (default, searched):
            for d in graph.free_dims() - graph.dims.keys():
                g.set_dim(d, DEFAULT_DIM)
        default.compile(self.backend)
        searched.compile(self.backend.with_schedule(self._apply(searched, regions, choices)))
        rng = np.random.default_rng(self.seed)
        # the weights keep their values: random data only for what the caller binds per run
        weights = graph.data.keys() - graph.assignments.keys()
        data = measure.random_inputs(default, rng, skip=weights)
        outputs = sorted(graph.retrieved)
        want = [measure.run(default, data, default.resolve(n)) for n in outputs]
        got = [measure.run(searched, data, searched.resolve(n)) for n in outputs]
        agree = all(measure.agrees(a, b) for a, b in zip(got, want))
        # the verdict on the whole plan: more rounds and longer samples than a region gets, and
        # a win must hold in a second timing too (a busy machine makes single verdicts flip)
        for _ in range(2):
            times = measure.time_interleaved([default, searched], data, budget_s=2.0,
                                             rounds=15, sample_s=0.01)
            if not agree or times[1] >= times[0] * MARGIN:
                break
        return WholeGraph(times[0], times[1], agree and times[1] < times[0] * MARGIN)

    # ----- applying -----------------------------------------------------------------------
    @staticmethod
    def _apply(graph: Graph, regions: list[Region], choices: dict[str, Candidate],
               by_signature: bool = True) -> Schedule:
        """Rewrite the regions whose choice is a rewrite; the schedule for the others."""
        store, inline, loops, tuning, kernels = set(), set(), set(), {}, {}
        rewritten = False
        for region in regions:
            cand = choices.get(region.signature if by_signature else "", DEFAULT)
            if cand.kind == "schedule":
                store.update(region.nodes[p] for p in cand.store)
                inline.update(region.nodes[p] for p in cand.inline)
                if cand.loops:
                    loops.add(region.root)
                if cand.tuning:
                    tuning[region.root] = cand.tuning
            elif cand.kind == "fuse":
                params = tuple(graph.resolve(region.nodes[p]) for p in cand.derived.params)
                kernels[params[0]] = (cand.derived.kernel, params)
            elif cand.kind == "rewrite":
                leaf_ids = leaves(graph, region)
                views, _ = views_and_extents(graph, region, leaf_ids)
                new = terms.rebuild(graph, cand.steps, [graph.resolve(n) for n in leaf_ids], views)
                graph.replace(graph.resolve(region.root), new)
                rewritten = True
        if rewritten:
            DeadCodeElimination().compile(graph)
        return Schedule(store=frozenset(store), inline=frozenset(inline),
                        loop_matmuls=frozenset(loops), tuning=tuning, kernels=kernels)


def _same_lines(same: list[tuple[str, str]]) -> list[str]:
    """`RegionResult.same` for `explain`: per candidate timed, those that built its program."""
    by_program: dict[str, list[str]] = {}
    for label, timed in same:
        by_program.setdefault(timed, []).append(label)
    return [f"    not timed, {len(labels)} built the program of {timed}: "
            f"{'; '.join(labels)}"[:160] for timed, labels in by_program.items()]


def _candidate(graph: Graph, region: Region, plan: schedule.Plan,
               rewrites: list[Rewrite]) -> Candidate:
    """The candidate an extracted schedule plan stands for."""
    if not plan:
        return DEFAULT
    if plan[0].kind == "rewrite":  # the rules compose nothing on top of a rewrite
        r = rewrites[plan[0].position]
        return Candidate("rewrite", f"rewrite ({r.profile}, cost {r.cost})", steps=r.steps)

    def node(c: schedule.Choice) -> str:
        return f"{graph.nodes[region.nodes[c.position]].op.name} (node {c.position})"

    labels = {"loops": lambda c: "matmul as generated loops",
              "store": lambda c: f"store {node(c)}", "inline": lambda c: f"inline {node(c)}",
              "tune": lambda c: f"{c.setting[0]}={c.setting[1]}"}
    return Candidate("schedule", " + ".join(labels[c.kind](c) for c in plan),
                     store=tuple(c.position for c in plan if c.kind == "store"),
                     tuning=tuple(c.setting for c in plan if c.kind == "tune"),
                     inline=tuple(c.position for c in plan if c.kind == "inline"),
                     loops=any(c.kind == "loops" for c in plan))


def _clone(graph: Graph) -> Graph:
    """A copy of the graph's structure and state sharing its input arrays (weights), with no
    runtime: what the whole-graph comparison compiles twice."""
    memo = {id(x): x for x in graph.data.values()}
    memo[id(graph.runtime)] = None
    return copy.deepcopy(graph, memo)


def _root(graph: Graph) -> int:
    (root,) = graph.retrieved
    return root


def _checkable(graph: Graph, region: Region) -> bool:
    """Random inputs exercise the region: every input is a float, int32 or bool tensor, or a
    quantized matrix's packed blocks (random valid blocks of its format)."""
    packed = packed_inputs(graph, region)
    return all(n in packed or graph.nodes[n].dtype.is_float
               or graph.nodes[n].dtype.name in ("int32", "bool") for n in region.inputs)


def _weight_elements(graph: Graph, region: Region, dims: dict[str, int]) -> int:
    """Elements of the quantized matrices the region multiplies by, at `dims`."""
    tags = [t for t in (graph.nodes[n].dequantized for n in region.nodes) if t is not None]
    return sum(measure.extent(t.rows, dims) * measure.extent(t.cols, dims) for t in tags)


def _with_weights(graph: Graph, region: Region, data: dict) -> dict:
    """`data` (random inputs of the region alone) with the region's inputs that the graph
    holds as weights (bound, not assigned per run) at their values, as the whole-graph check
    runs them: speed may depend on data (a causal mask's far-below-max logits let a tiled
    attention kernel skip blocks), so candidates are timed on what the model will run on. A
    quantized matrix's packed blocks stay random valid blocks of its format and shape: the
    user's weights are not copied into the region's graphs."""
    _, ids = subgraph(graph, region)
    weights = graph.data.keys() - graph.assignments.keys() - packed_inputs(graph, region)
    out = dict(data)
    for n in region.inputs:
        x = graph.data.get(n) if n in weights else None
        if x is not None and ids[n] in out and np.shape(x) == np.shape(out[ids[n]]):
            out[ids[n]] = np.asarray(x)
    return out
