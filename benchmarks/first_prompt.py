"""The first prompt's latency against a later one's, in CPU time (what shared machines disturb
least), luminal cpu backend.

    python benchmarks/first_prompt.py --model gemma3 --ids 6
    python benchmarks/first_prompt.py --trees /work/main /work/wt-x --rounds 2

One process per measurement: it loads the model (`load_generator(model, "cpu")`: compile,
and everything `Graph.prepare` does before the first prompt), then times the first
`next(gen.stream(ids, 1))` and three more (the prompt: the first --ids ids of llm_bench's
128-token prompt), and prints the load's CPU time, the first call's and the median of the
others (CPU and wall). With --trees, each measurement runs once per source tree (its
packages' src directories on PYTHONPATH), the trees alternating, for --rounds rounds, one
thread (LUMINAL_CPU_THREADS=1) unless --threads says otherwise; the load average is printed
before each round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(model: str, n: int) -> str:
    """One line of figures for `model` and a prompt of `n` ids, in this process."""
    sys.path.insert(0, str(Path(__file__).parent))
    import llm_bench
    from luminal_models.cli_options import load_generator

    start = time.process_time()
    gen, _ = load_generator(model, "cpu", progress=False)
    load = time.process_time() - start
    ids = llm_bench._prompt_ids(gen.tokenizer)[:n]
    cpu, wall = [], []
    for _ in range(4):
        c0, w0 = time.process_time(), time.perf_counter()
        next(gen.stream(ids, 1, stop_ids=()))
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return (f"{model} ids={n} load_cpu={load:.2f}s first_cpu={cpu[0] * 1e3:.1f}ms "
            f"later_cpu={statistics.median(cpu[1:]) * 1e3:.1f}ms "
            f"first_wall={wall[0] * 1e3:.1f}ms "
            f"later_wall={statistics.median(wall[1:]) * 1e3:.1f}ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", default=["gemma3", "smollm2"])
    parser.add_argument("--ids", type=int, nargs="+", default=[6, 128])
    parser.add_argument("--trees", nargs="+", help="source trees to alternate (repository roots)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", default="1")
    args = parser.parse_args()
    if not args.trees:
        for model in args.model:
            for n in args.ids:
                print(measure(model, n), flush=True)
        return
    env = {**os.environ, "LUMINAL_CPU_THREADS": args.threads}
    for r in range(args.rounds):
        print(f"round {r + 1}, load average {os.getloadavg()}", flush=True)
        for model in args.model:
            for n in args.ids:
                for tree in args.trees:
                    path = ":".join(str(p) for p in sorted(Path(tree, "packages").glob("*/src")))
                    out = subprocess.run(
                        [sys.executable, __file__, "--model", model, "--ids", str(n)],
                        env={**env, "PYTHONPATH": path}, capture_output=True, text=True,
                        check=True)
                    print(f"{tree}: {out.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
