"""Compile time of SmolLM2-135M: the whole `g.compile(...)` pipeline, without and with search.

    .venv/bin/python benchmarks/compile_bench.py [--rounds N] [--baseline CHECKOUT]

Each round runs one fresh interpreter with an empty `$LUMINAL_CACHE`, which compiles the
graph `luminal generate` compiles (Llama, one token after a 64-token cache) four times, each
time a freshly built copy:

1. `(GenericCompiler(), cpu)` cold: nothing cached, so the C compiler builds the library;
2. the same, warm: the library comes from the cache (what every later `luminal generate` pays);
3. `(GenericCompiler(), Search(cpu))` cold: no plan cached (the default plan's library is);
4. the same, warm: the plan comes from the cache.

Per compile it reports the total (wall and CPU seconds, the C compiler's included) and its
wall-time phases: GenericCompiler, search's own share (finding or
loading the plan and applying it), and the backend's lowering, C rendering and C build (from
`runtime.stats`). With `--baseline CHECKOUT` (another checkout of this repository, e.g. the
commit before a change), every round runs it too, interleaved with this one, by putting its
packages' `src` folders first on `PYTHONPATH`; only figures from the same run are compared, as
the machine may be shared. Medians over the rounds are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("total_s", "cpu_s", "generic_s", "search_s", "lower_s", "render_s", "build_s")
COMPILES = ("plain cold", "plain warm", "search cold", "search warm")


def cpu_seconds() -> float:
    """CPU time of this process and of the C compilers it ran: on a shared machine it moves
    far less than wall time."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Timed:
    """A compiler that records how long the compiler it wraps took."""

    def __init__(self, compiler):
        self.compiler, self.seconds = compiler, 0.0

    def compile(self, graph) -> None:
        t0 = time.perf_counter()
        self.compiler.compile(graph)
        self.seconds = time.perf_counter() - t0


def measure_once() -> dict[str, dict[str, float]]:
    """The four compiles of one round, in this interpreter (the cache must start empty)."""
    import luminal as lm
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.hub import resolve_model
    from luminal_models.llama import Llama
    from luminal_search import Search

    with GGUFFile(resolve_model("smollm2")) as f:
        model = Llama.from_gguf(f, quantized=True, progress=False)
    cpu = lm.backend("cpu")
    out = {}
    for name in COMPILES:
        g = lm.Graph()
        cache = model.new_cache(g)
        tokens = g.tensor((1, "seq"), name="tokens", dtype=lm.int32)
        model(tokens, cache, last_only=True).retrieve()
        g.set_dim("seq", 1)
        g.set_dim(cache.length_dim, 64)
        search = Search(cpu, progress=False) if name.startswith("search") else None
        generic, backend = Timed(lm.GenericCompiler()), Timed(search or cpu)
        t0, c0 = time.perf_counter(), cpu_seconds()
        g.compile((generic, backend))
        total, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        stats = g.runtime.stats
        out[name] = {"total_s": total, "cpu_s": cpu, "generic_s": generic.seconds,
                     "search_s": search.report.seconds if search else 0.0,
                     **{k: stats[k] for k in ("lower_s", "render_s", "build_s")}}
        if search and name.endswith("warm") and not search.report.cached:
            raise RuntimeError("the warm search compile did not use the plan cache")
    return out


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def run_round(checkout: Path | None) -> dict:
    """One round in a fresh interpreter with an empty cache (`checkout`'s packages first)."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    if checkout is not None:
        src = [str(p) for p in sorted((checkout / "packages").glob("*/src"))]
        env["PYTHONPATH"] = os.pathsep.join([*src, env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as cache:
        env["LUMINAL_CACHE"] = cache
        proc = subprocess.run([sys.executable, __file__, "--one"], env=env, check=False,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"a round ({checkout or 'this checkout'}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="fresh interpreters per checkout")
    parser.add_argument("--baseline", type=Path, help="another checkout, timed interleaved")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_once()))
        return
    trees = {"this": None} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rounds: dict[str, list[dict]] = {t: [] for t in trees}
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for tree, checkout in trees.items():
            rounds[tree].append(run_round(checkout))
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1} {tree}: load average {loads[-1]:.1f}", file=sys.stderr,
                  flush=True)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; load average {min(loads):.1f}-"
          f"{max(loads):.1f} during the run; {args.rounds} round(s), medians\n")
    print("| checkout | compile | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for tree, runs in rounds.items():
        for name in COMPILES:
            cells = [statistics.median(run[name][p] for run in runs) for p in PHASES]
            print(f"| {tree} | {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    main()
