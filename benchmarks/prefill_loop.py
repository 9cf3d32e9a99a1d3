"""Steady-state prefills of llm_bench's 128-token prompt on luminal-cpu, for profiling.

    python benchmarks/prefill_loop.py --model gemma3 --rounds 30
    python benchmarks/prefill_loop.py --rounds 400 --ready /tmp/ready &
    perf record -F 4000 -p "$(cat /tmp/ready)" -- sleep 15; perf annotate lm_q8_gemm

Loads the model, runs 3 prefills of warm-up, then (with --ready) writes its pid to that file
and runs `--rounds` prefills, printing the median wall and CPU time of one. Only the
prefills run after the warm-up, so a profiler attached then sees no loading or compiling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import llm_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("gemma3", "smollm2"), default="gemma3")
    parser.add_argument("--rounds", type=int, default=30, help="timed prefills (default 30)")
    parser.add_argument("--ready", type=Path,
                        help="a file to write this process's pid to once warmed up")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    import luminal as lm
    from luminal_models.causal_lm import open_causal_lm
    from luminal_models.cli_options import exempt_from_gc
    from luminal_models.generate import Generator
    from luminal_models.hub import gemma3_path, smollm2_path

    path = gemma3_path(progress=False) if args.model == "gemma3" else smollm2_path(progress=False)
    model, tokenizer = open_causal_lm(path, quantized=True, progress=False)
    generator = Generator(model, tokenizer, lm.backend("cpu"))
    exempt_from_gc()
    ids = llm_bench._prompt_ids(tokenizer)

    def prefill() -> None:
        next(generator.stream(ids, 1, stop_ids=()))

    for _ in range(3):
        prefill()
    if args.ready:
        args.ready.write_text(str(os.getpid()))
    walls, cpus = [], []
    for _ in range(args.rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        prefill()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    print(f"{args.model} prefill of {len(ids)} tokens: wall median "
          f"{statistics.median(walls) * 1e3:.1f} ms (best {min(walls) * 1e3:.1f}), CPU median "
          f"{statistics.median(cpus) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
