"""Tiled attention on the cpu backend: the kernel luminal-search derives for attention (forced
in, rendered by `luminal_cpu.flash`) against the default plan and PyTorch's
`scaled_dot_product_attention`, dense and causal.

    .venv/bin/python benchmarks/flash_bench.py [--seq 512 2048] [--rounds 11] [--threads 2]

Shapes as in `search_bench.py`: batch 1, 4 heads, head size 64, queries = keys = seq. The
causal mask is an additive -1e9 above the diagonal (luminal), `is_causal=True` (PyTorch).
Every round times each contender once, in turn (interleaved); the table has medians and
ratios. The machine may be shared: only ratios measured in the same run mean anything, and
on a loaded machine `--threads 1 --cpu-time` (CPU time of the process, so time spent waiting
for a core is not counted) is the steadier measure.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

HEADS, HEAD = 4, 64


def inputs(seq: int, causal: bool):
    import numpy as np

    rng = np.random.default_rng(seq)
    arrays = {n: rng.standard_normal((1, HEADS, seq, HEAD)).astype(np.float32) for n in "qkv"}
    if causal:
        arrays["mask"] = np.triu(np.full((seq, seq), -1e9, np.float32), 1)
    return arrays


def luminal_attention(arrays: dict, derived: bool) -> tuple[Callable[[], None], Callable]:
    """A compiled attention graph: its run function and a reader of its output."""
    import luminal as lm
    from luminal_codegen import Schedule
    from search_bench import derived_schedule

    g = lm.Graph()
    t = {n: g.tensor(a.shape, name=n).set(a) for n, a in arrays.items()}
    scores = (t["q"] @ t["k"].transpose(-1, -2)) * (1 / math.sqrt(HEAD))
    if "mask" in t:
        scores = scores + t["mask"]
    out = (scores.softmax(-1) @ t["v"]).retrieve()
    lm.GenericCompiler().compile(g)
    schedule = derived_schedule(g) if derived else Schedule()
    g.compile(lm.backend("cpu").with_schedule(schedule))
    if derived:
        from luminal_cpu import flash

        assert any(flash.match(k) for k in g.runtime.program.kernels), "not rendered in tiles"
    return g.execute, out.numpy


def torch_attention(arrays: dict) -> tuple[Callable[[], None], Callable]:
    import torch

    q, k, v = (torch.from_numpy(arrays[n]) for n in "qkv")
    got = {}

    def run() -> None:
        with torch.no_grad():
            got["out"] = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal="mask" in arrays)

    return run, lambda: got["out"].numpy()


def bench(seq: int, causal: bool, rounds: int, clock: Callable[[], float]) -> dict[str, float]:
    import numpy as np

    arrays = inputs(seq, causal)
    contenders = {"default": luminal_attention(arrays, False),
                  "tiled": luminal_attention(arrays, True), "torch": torch_attention(arrays)}
    for run, _ in contenders.values():
        run()
    want = contenders["torch"][1]()
    for name, (_, read) in contenders.items():
        np.testing.assert_allclose(read(), want, rtol=1e-3, atol=1e-3, err_msg=name)
    times: dict[str, list[float]] = {n: [] for n in contenders}
    for _ in range(rounds):
        for name, (run, _) in contenders.items():
            t0 = clock()
            run()
            times[name].append(clock() - t0)
    return {n: statistics.median(ts) * 1e3 for n, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", nargs="*", type=int, default=[512, 2048],
                        help="sequence lengths (queries = keys)")
    parser.add_argument("--rounds", type=int, default=11, help="interleaved rounds (median)")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads for luminal (OMP_NUM_THREADS) and PyTorch")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by the process's CPU time (all threads) instead of wall time")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    print(f"{'CPU' if args.cpu_time else 'wall'} time, {args.threads} thread(s)")
    print("| attention | seq | default ms | tiled ms | torch sdpa ms | tiled vs default "
          "| tiled vs torch |\n|---|---|---|---|---|---|---|")
    for seq in args.seq:
        for causal in (False, True):
            r = bench(seq, causal, args.rounds,
                      time.process_time if args.cpu_time else time.perf_counter)
            print(f"| {'causal' if causal else 'dense'} | {seq} | {r['default']:.2f} | "
                  f"{r['tiled']:.2f} | {r['torch']:.2f} | {r['default'] / r['tiled']:.2f}x | "
                  f"{r['torch'] / r['tiled']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
