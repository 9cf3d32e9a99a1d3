"""Where a causal LM's (SmolLM2-135M, Gemma 3 270M) prefill and decode step spend their time on
luminal-cuda.

    python benchmarks/cuda_profile.py                 # SmolLM2, float32 and float16
    python benchmarks/cuda_profile.py --model gemma3 --dtype float32,bfloat16
    python benchmarks/cuda_profile.py --dtype float16 --top 15

Runs a 128-token prefill and a few decode steps, then launches the last binding's steps one
by one between CUDA events (`CudaRuntime.profile`) and prints the time per kind of launch
(generated kernels, block reductions, cuBLAS GEMMs, quantized matvecs, fused attention,
copies), the slowest launches, the weight bytes a decode step streams against the time of
its matvecs, and whether each dim binding was captured into a CUDA graph (and why not).
Launches do not overlap while profiled, so the sum is an upper bound of a graph replay.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

PARAGRAPH = "The history of the city is long and full of change. " * 40


def summarize(title: str, profile: list[tuple[str, float]], top: int) -> float:
    total = sum(ms for _, ms in profile)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for label, ms in profile:
        by_kind[label.split()[0]].append(ms)
    print(f"\n{title}: {len(profile)} launches, {total:.3f} ms launched one by one")
    print("| kind | launches | total ms | share | mean us |")
    print("| --- | --- | --- | --- | --- |")
    for kind, times in sorted(by_kind.items(), key=lambda kv: -sum(kv[1])):
        print(f"| {kind} | {len(times)} | {sum(times):.3f} | {sum(times) / total:.0%} | "
              f"{1000 * sum(times) / len(times):.1f} |")
    print(f"slowest {top}:")
    for label, ms in sorted(profile, key=lambda p: -p[1])[:top]:
        print(f"  {1000 * ms:8.1f} us  {label}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="float32,float16",
                        help="comma-separated compute dtypes (float32, float16, bfloat16)")
    parser.add_argument("--model", default="smollm2", help="model name or .gguf path")
    parser.add_argument("--top", type=int, default=8, help="slowest launches to list")
    parser.add_argument("--trace", type=int, default=0, metavar="N",
                        help="also list the first N launches of a decode step in order")
    args = parser.parse_args()

    from luminal_cuda import CudaBackend
    from luminal_models.causal_lm import open_causal_lm
    from luminal_models.generate import Generator
    from luminal_models.hub import resolve_model

    model, tok = open_causal_lm(resolve_model(args.model), quantized=True, progress=False)
    ids = tok.encode(PARAGRAPH)[:128]
    weight_bytes = sum(int(np.asarray(p.data).nbytes) for _, p in model.named_parameters())
    for dtype in args.dtype.split(","):
        gen = Generator(model, tok, CudaBackend(dtype=None if dtype == "float32" else dtype))
        runtime = gen.graph.runtime
        token = int(gen.forward(ids).argmax())
        prefill = summarize(f"{dtype} prefill (128 tokens)", runtime.profile(), args.top)
        for _ in range(4):  # eager, capture, replays
            token = int(gen.forward([token]).argmax())
        start = time.perf_counter()
        for _ in range(32):
            token = int(gen.forward([token]).argmax())
        step_ms = (time.perf_counter() - start) / 32 * 1000
        profile = runtime.profile()
        launched = summarize(f"{dtype} decode step", profile, args.top)
        for label, ms in profile[:args.trace]:
            print(f"  {1000 * ms:8.1f} us  {label}")
        replay = runtime.replay_ms()
        matvec = sum(ms for label, ms in profile if label.startswith(("qmatvec", "gemm")))
        print(f"\n{dtype}: decode step {step_ms:.3f} ms end to end (graph replay + upload + "
              f"logits download), {launched:.3f} ms launched one by one, prefill "
              f"{prefill:.2f} ms; weights {weight_bytes / 1e6:.0f} MB: "
              f"{weight_bytes / matvec / 1e6:.0f} GB/s in the matmuls, "
              f"{weight_bytes / step_ms / 1e6:.0f} GB/s over the whole step")
        if replay is not None:
            print(f"{dtype}: the decode step's CUDA graph replays in {replay:.3f} ms on the GPU "
                  f"alone, so host work is {step_ms - replay:.3f} ms of the step")
        for key, binding in runtime.bindings.items():
            state = "captured" if binding.graph is not None else (
                f"not captured: {binding.capture_error}" if binding.capture_error else "eager")
            print(f"  binding {key}: {binding.runs} runs, {state}")
        print(f"  stats: {runtime.stats}")


if __name__ == "__main__":
    main()
