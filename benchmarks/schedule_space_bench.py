"""luminal-cpu schedule space: each setting of `CpuBackend.schedule_space` applied to every
kernel of search_bench's graphs, timed against the default plan in the same run.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/schedule_space_bench.py [--only NAME ...]

Search tries one setting per region and keeps it only where it measures faster; this shows
what each setting does on a whole graph (matmuls stay micro-kernels: settings tune the
generated loops). Ratios are default time / tuned time (above 1: the setting wins), the median
of interleaved rounds; the machine may be shared, so only ratios of one run are reported.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import luminal as lm
import numpy as np
from luminal_codegen import Schedule
from search_bench import conv2d, layernorm_gelu, rmsnorm, softmax, swiglu, time_interleaved

GRAPHS = {"swiglu_mlp": swiglu, "rmsnorm": rmsnorm, "softmax": softmax,
          "layernorm_gelu": layernorm_gelu, "conv2d": conv2d}


def tuned(build, setting):
    built = build()
    g = built[0]
    lm.GenericCompiler().compile(g)
    cpu = lm.backend("cpu")
    if setting is not None:
        cpu = cpu.with_schedule(Schedule(tuning={n: (setting,) for n in g.nodes}))
    g.compile(cpu)
    return built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="graph names to run")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per graph")
    args = parser.parse_args()
    space = lm.backend("cpu").schedule_space
    settings = [(name, v) for name, values in space.items() for v in values]
    print("| graph | " + " | ".join(f"{n}={v}" for n, v in settings) + " |")
    print("|---|" + "---|" * len(settings))
    for name, build in GRAPHS.items():
        if args.only and name not in args.only:
            continue
        graphs = [tuned(build, None), *(tuned(build, s) for s in settings)]
        times = time_interleaved(graphs, args.rounds)
        for (_, outs, _), setting in zip(graphs[1:], settings):
            for got, want in zip(outs, graphs[0][1]):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4,
                                           err_msg=f"{name} with {setting}")
        print(f"| {name} | " + " | ".join(f"{times[0] / t:.2f}" for t in times[1:]) + " |",
              flush=True)


if __name__ == "__main__":
    main()
