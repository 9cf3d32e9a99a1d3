"""luminal-cpu schedule space: each setting of `CpuBackend.schedule_space` applied to every
kernel of search_bench's graphs, timed against the default plan in the same run.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/schedule_space_bench.py [--only NAME ...]

Search tries one setting per region and keeps it only where it measures faster; this shows
what each setting does on a whole graph (matmuls stay micro-kernels: settings tune the
generated loops). Ratios are default time / tuned time (above 1: the setting wins), the median
of the per-round ratios of interleaved rounds (each round runs every variant for about
`--round-s` seconds, starting from a different one each round); "default again" is the
default plan compiled twice, the noise floor of the run. The machine may be shared: only
ratios of one run are reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

import luminal as lm
import numpy as np
from luminal_codegen import Schedule
from search_bench import conv2d, layernorm_gelu, nothing, rand, rmsnorm, softmax, swiglu


def few_rows_sum():
    """Three long rows summed: fewer rows than threads give an uneven split."""
    g = lm.Graph()
    x = g.tensor((3, 400_000), name="x").set(rand(3, 400_000))
    return g, [x.sum(1).retrieve()], nothing


def few_long_rows():
    """Elementwise over three long rows read through a slice (no view merges the axes)."""
    g = lm.Graph()
    x = g.tensor((3, 400_001), name="x").set(rand(3, 400_001))
    return g, [(x[:, :400_000] * 2.0 + 1.0).retrieve()], nothing


def transpose():
    g = lm.Graph()
    x = g.tensor((1024, 1024), name="x").set(rand(1024, 1024))
    return g, [(x.transpose(0, 1) * 2.0).retrieve()], nothing


GRAPHS = {"swiglu_mlp": swiglu, "rmsnorm": rmsnorm, "softmax": softmax,
          "layernorm_gelu": layernorm_gelu, "conv2d": conv2d,
          # shapes where a setting is expected to matter
          "few_rows_sum": few_rows_sum, "few_long_rows": few_long_rows, "transpose": transpose}


def tuned(build, setting):
    built = build()
    g = built[0]
    lm.GenericCompiler().compile(g)
    cpu = lm.backend("cpu")
    if setting is not None:
        cpu = cpu.with_schedule(Schedule.uniform(g.nodes, (setting,)))
    g.compile(cpu)
    return built


def interleaved_ratios(graphs: list, rounds: int, round_s: float) -> list[float]:
    """Default time / each tuned graph's time: the median over `rounds` rounds, each running
    every graph in turn as many times as fill about `round_s` seconds of the default."""
    for g, _, prepare in graphs:
        prepare()
        g.execute()
    t0 = time.perf_counter()
    graphs[0][2]()
    graphs[0][0].execute()
    reps = max(1, int(round_s / max(time.perf_counter() - t0, 1e-6)))
    ratios: list[list[float]] = [[] for _ in graphs[1:]]
    for k in range(rounds):
        times = [0.0] * len(graphs)
        for i in [*range(k % len(graphs), len(graphs)), *range(k % len(graphs))]:  # rotated
            g, _, prepare = graphs[i]
            t0 = time.perf_counter()
            for _ in range(reps):
                prepare()
                g.execute()
            times[i] = time.perf_counter() - t0
        for r, t in zip(ratios, times[1:]):
            r.append(times[0] / t)
    return [statistics.median(r) for r in ratios]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="graph names to run")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per graph")
    parser.add_argument("--round-s", type=float, default=0.02,
                        help="seconds of the default graph's runs in one round")
    args = parser.parse_args()
    cpu = lm.backend("cpu")
    space = cpu.kernel_space  # settings of generated kernels (not the quantized matmul call)
    settings = [(name, v) for name, values in space.items() for v in values]
    # the default plan compiled a second time: how far apart identical programs measure
    print("| graph | default again | " + " | ".join(f"{n}={v}" for n, v in settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    for name, build in GRAPHS.items():
        if args.only and name not in args.only:
            continue
        graphs = [tuned(build, None), tuned(build, None), *(tuned(build, s) for s in settings)]
        ratios = interleaved_ratios(graphs, args.rounds, args.round_s)
        for (_, outs, _), setting in zip(graphs[2:], settings):
            for got, want in zip(outs, graphs[0][1]):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4,
                                           err_msg=f"{name} with {setting}")
        print(f"| {name} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |",
              flush=True)


if __name__ == "__main__":
    main()
