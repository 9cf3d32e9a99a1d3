"""luminal-search benchmark: graphs compiled for the cpu backend with and without search.

    .venv/bin/python benchmarks/search_bench.py [--quick] [--only NAME ...]

For every graph, one run builds it twice, compiles one copy with `(GenericCompiler(), cpu)` and
the other with `(GenericCompiler(), Search(cpu))`, checks they agree, then times both in
interleaved rounds (median of the rounds; the order alternates between rounds, and graphs with
no per-run state run in batches of calls of about 50 ms, so sub-millisecond graphs are not timed
one call at a time). The "same program" column says whether search installed the default plan,
in which case both columns run the identical compiled program and their ratio is noise.
Compile times are whole `g.compile(...)` calls (GenericCompiler included): without search, with
search cold (empty plan cache) and warm (a freshly built copy with the cache filled). Each graph
gets its own temporary cache. The machine may be shared: only ratios measured in the same run
are reported.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "2")

import luminal as lm
import luminal_nn.functional as F
import numpy as np
from luminal_search import Search, measure

# a graph, its outputs, and what to re-bind before each run (state the graph assigns)
Built = tuple[lm.Graph, list, Callable[[], None]]


def nothing() -> None:
    return None


def rand(*shape, scale=1.0):
    return (np.random.default_rng(len(shape) + sum(shape)).standard_normal(shape)
            * scale).astype(np.float32)


def swiglu() -> Built:
    g = lm.Graph()
    x = g.tensor((64, 576), name="x").set(rand(64, 576))
    wg = g.tensor((576, 1536), name="wg").set(rand(576, 1536, scale=0.04))
    wu = g.tensor((576, 1536), name="wu").set(rand(576, 1537, scale=0.04)[:, :1536])
    wd = g.tensor((1536, 576), name="wd").set(rand(1536, 576, scale=0.03))
    return g, [(((x @ wg).silu() * (x @ wu)) @ wd).retrieve()], nothing


def rmsnorm() -> Built:
    g = lm.Graph()
    x = g.tensor((512, 576), name="x").set(rand(512, 576))
    w = g.tensor((576,), name="w").set(rand(576))
    return g, [F.rms_norm(x, (576,), w, eps=1e-5).retrieve()], nothing


def softmax() -> Built:
    g = lm.Graph()
    x = g.tensor((256, 1024), name="x").set(rand(256, 1024))
    return g, [x.softmax(-1).retrieve()], nothing


def layernorm_gelu() -> Built:
    g = lm.Graph()
    x = g.tensor((512, 768), name="x").set(rand(512, 768))
    w, b = (g.tensor((768,), name=n).set(rand(768 + k)[:768]) for k, n in enumerate("wb"))
    return g, [F.gelu(F.layer_norm(x, (768,), w, b)).retrieve()], nothing


def conv2d() -> Built:
    g = lm.Graph()
    x = g.tensor((1, 16, 32, 32), name="x").set(rand(1, 16, 32, 32))
    w = g.tensor((32, 16, 3, 3), name="w").set(rand(32, 16, 3, 3, scale=0.1))
    return g, [F.conv2d(x, w, padding=1).relu().retrieve()], nothing


def attention(seq: int, queries: int | None = None) -> Callable[[], Built]:
    """Causal attention over `seq` keys for the last `queries` (all by default) positions."""
    queries = queries or seq

    def build() -> Built:
        g = lm.Graph()
        q, k, v = (g.tensor((1, 4, queries if n == "q" else seq, 64), name=n).set(
            rand(1, 4, queries if n == "q" else seq, 64 + j)[..., :64])
            for j, n in enumerate("qkv"))
        mask = np.triu(np.full((queries, seq), -1e9, np.float32), seq - queries + 1)
        m = g.tensor((queries, seq), name="mask").set(mask)
        scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(64)) + m
        return g, [(scores.softmax(-1) @ v).retrieve()], nothing
    return build


def quant_matmul(rows: int) -> Callable[[], Built]:
    """x (`rows` tokens, 1536) @ W.T for a SmolLM2-shaped Q4_K W (576 x 1536, its MLP down
    projection) of random valid blocks: decode's matvec (1 row) or a prefill GEMM."""
    def build() -> Built:
        from luminal.quant import dequantize
        from luminal.testing.quant import random_blocks

        g = lm.Graph()
        x = g.tensor((1, rows, 1536), name="x").set(rand(1, rows, 1536))
        raw = random_blocks("q4_k", 576, 1536, np.random.default_rng(3))
        w = dequantize(g.tensor(raw.shape, name="w", dtype=lm.uint8).set(raw), "q4_k",
                       (576, 1536))
        return g, [(x @ w.T).retrieve()], nothing
    return build


def smollm2(phase: str) -> Callable[[], Built]:
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.hub import resolve_model
    from luminal_models.llama import Llama

    with GGUFFile(resolve_model("smollm2")) as f:
        model = Llama.from_gguf(f, quantized=True, progress=False)

    def build() -> Built:
        g = lm.Graph()
        cache = model.new_cache(g)
        tokens = g.tensor((1, "seq"), name="tokens", dtype=lm.int32)
        logits = model(tokens, cache, last_only=True).retrieve()
        n, past = (64, 0) if phase == "prefill" else (1, 64)  # decode: after 64 tokens
        ids = np.arange(n, dtype=np.int32).reshape(1, n) + 100
        states = [rand(1, layer.k.shape[1], past, layer.k.shape[3]) for layer in cache.layers]

        def prepare() -> None:  # every run starts from the same cache
            tokens.set(ids)
            for layer, state in zip(cache.layers, states):
                layer.k.set(state)
                layer.v.set(state)
            g.set_dim(cache.length_dim, past)

        prepare()
        return g, [logits], prepare
    return build


def time_interleaved(graphs: list[Built], rounds: int, batch_s: float = 0.05) -> list[float]:
    """Median seconds per `execute()` of each graph over `rounds` interleaved rounds, the order
    alternating between rounds. A graph with no state to re-bind runs in batches of calls
    lasting about `batch_s` (the same count for every graph, from the slowest one), so that
    sub-millisecond graphs are not timed one call at a time; a graph that re-binds state runs
    one call per round with the re-binding untimed."""
    stateless = all(prepare is nothing for _, _, prepare in graphs)
    single = []
    for g, _, prepare in graphs:
        for _ in range(3):  # warm up: thread pools, caches
            prepare()
            t0 = time.perf_counter()
            g.execute()
        single.append(time.perf_counter() - t0)  # the last warm-up run
    calls = max(1, math.ceil(batch_s / max(single))) if stateless else 1
    times: list[list[float]] = [[] for _ in graphs]
    for r in range(rounds):
        order = list(range(len(graphs)))[:: 1 if r % 2 == 0 else -1]
        for k in order:
            g, _, prepare = graphs[k]
            prepare()
            t0 = time.perf_counter()
            for _ in range(calls):
                g.execute()
            times[k].append((time.perf_counter() - t0) / calls)
    return [statistics.median(ts) for ts in times]


def same_program(a: lm.Graph, b: lm.Graph) -> bool:
    """Whether both graphs run the identical compiled program (the cpu backend's library is
    keyed by its source)."""
    ids = [measure.program_identity(g) for g in (a, b)]
    return ids[0] is not None and ids[0] == ids[1]


def bench(name: str, build: Callable[[], Built], rounds: int, explain: bool = False) -> dict:
    cpu = lm.backend("cpu")
    with tempfile.TemporaryDirectory() as cache_dir:
        os.environ["LUMINAL_CACHE"] = cache_dir
        plain = build()
        t0 = time.perf_counter()
        plain[0].compile((lm.GenericCompiler(), cpu))
        plain_s = time.perf_counter() - t0
        searched = build()
        search = Search(cpu, progress=False)
        t0 = time.perf_counter()
        searched[0].compile((lm.GenericCompiler(), search))
        cold = time.perf_counter() - t0
        warm_graph, _, _ = build()
        warm_search = Search(cpu, progress=False)
        t0 = time.perf_counter()
        warm_graph.compile((lm.GenericCompiler(), warm_search))
        warm = time.perf_counter() - t0
        assert warm_search.report.cached, f"{name}: the warm compile did not use the cache"
        base, fast = time_interleaved([plain, searched], rounds)
        for g, _, prepare in (plain, searched):
            prepare()
            g.execute()
        for a, b in zip(plain[1], searched[1]):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=2e-3, atol=2e-3)
        kept = search.report.whole.kept
        if explain:
            print(search.explain(), flush=True)
        return {"graph": name, "default_ms": base * 1e3, "search_ms": fast * 1e3,
                "speedup": base / fast, "compile_s": plain_s, "cold_s": cold, "warm_s": warm,
                "warm_search_s": warm_search.report.seconds,
                "kept": kept, "identical": same_program(plain[0], searched[0]),
                "choices": sorted({r.choice.label for r in search.report.regions
                                                 if kept and r.choice.kind != "default"})}


def derived_schedule(g):
    """The schedule that forces in the kernel search derives for the graph's first fusible
    region (an online softmax for attention), whether or not search would keep it."""
    from luminal_codegen import Schedule
    from luminal_search import fusion
    from luminal_search.regions import find_regions

    region = fusion.find_fusions(g, find_regions(g))[0]
    derived = fusion.derive(g, region, {})
    params = tuple(g.resolve(region.nodes[p]) for p in derived.params)
    return Schedule(kernels={params[0]: (derived.kernel, params)})


def derived_attention(seq: int, rounds: int) -> dict:
    """The kernel search derives for attention, forced in (whether or not search would keep
    it), against the default plan: time and the bytes of the buffers each program writes."""
    from luminal_codegen import Schedule, lower

    cpu = lm.backend("cpu")
    built = []
    for fused in (False, True):
        g, outs, prepare = attention(seq)()
        lm.GenericCompiler().compile(g)
        schedule = derived_schedule(g) if fused else Schedule()
        written = sum(b.numel.evaluate(g.dims) * b.dtype.itemsize
                      for b in lower(g, schedule).buffers if b.role != "input")
        g.compile(cpu.with_schedule(schedule))
        built.append(((g, outs, prepare), written))
    base, fast = time_interleaved([b for b, _ in built], rounds)
    np.testing.assert_allclose(built[1][0][1][0].numpy(), built[0][0][1][0].numpy(),
                               rtol=2e-3, atol=2e-3)
    return {"seq": seq, "default_ms": base * 1e3, "derived_ms": fast * 1e3,
            "default_mb": built[0][1] / 1e6, "derived_mb": built[1][1] / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no sequence 2048")
    parser.add_argument("--only", nargs="*", help="graph names to run")
    parser.add_argument("--explain", action="store_true",
                        help="print what search chose and timed for each graph (explain())")
    parser.add_argument("--derived", nargs="*", type=int, metavar="SEQ", default=[],
                        help="also time search's derived attention kernel, forced in, against "
                             "the default plan at these sequence lengths (e.g. 512 2048)")
    args = parser.parse_args()
    graphs: dict[str, Callable[[], Callable[[], Built]]] = {
        "swiglu_mlp": lambda: swiglu, "rmsnorm": lambda: rmsnorm, "softmax": lambda: softmax,
        "layernorm_gelu": lambda: layernorm_gelu, "conv2d": lambda: conv2d,
        "attention_512": lambda: attention(512), "attention_2048": lambda: attention(2048),
        "attention_decode_2048": lambda: attention(2048, queries=1),
        "q4k_matvec_576x1536": lambda: quant_matmul(1),
        "q4k_matmul_64x576x1536": lambda: quant_matmul(64),
        "smollm2_prefill64": lambda: smollm2("prefill"),
        "smollm2_decode": lambda: smollm2("decode"),
    }
    if args.quick:
        graphs.pop("attention_2048")
    print("| graph | default ms | search ms | speedup | compile s (no search) | search compile "
          "s, cold | warm (search's share) | plan | same program | choices |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, make in graphs.items():
        if args.only and name not in args.only:
            continue
        row = bench(name, make(), 7 if args.quick else 21, args.explain)
        rows.append(row)
        print(f"| {row['graph']} | {row['default_ms']:.3f} | {row['search_ms']:.3f} | "
              f"{row['speedup']:.2f} | {row['compile_s']:.2f} | {row['cold_s']:.1f} | "
              f"{row['warm_s']:.2f} ({row['warm_search_s']:.2f}) | "
              f"{'kept' if row['kept'] else 'default'} | "
              f"{'yes' if row['identical'] else 'no'} | "
              f"{', '.join(row['choices'])} |", flush=True)
    if rows:
        gm = math.exp(statistics.fmean(math.log(r["speedup"]) for r in rows))
        print(f"geometric-mean speedup x{gm:.3f}; slowest x{min(r['speedup'] for r in rows):.3f}")
        same = [r["speedup"] for r in rows if r["identical"]]
        if same:  # both columns ran one program: their spread is the measurement's noise
            print(f"{len(same)} rows ran the identical program in both columns (the default "
                  f"plan, or choices that leave the generated code unchanged): their ratios "
                  f"span x{min(same):.3f}-x{max(same):.3f}")
    if args.derived:
        print("\n| attention seq | default ms | derived kernel ms | speedup | default writes MB "
              "| derived writes MB |\n|---|---|---|---|---|---|")
        for seq in args.derived:
            r = derived_attention(seq, 5 if args.quick else 15)
            print(f"| {seq} | {r['default_ms']:.2f} | {r['derived_ms']:.2f} | "
                  f"{r['default_ms'] / r['derived_ms']:.2f} | {r['default_mb']:.2f} | "
                  f"{r['derived_mb']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
