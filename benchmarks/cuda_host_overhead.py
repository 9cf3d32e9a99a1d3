"""A causal LM's decode step on luminal-cuda without a GPU: its launches by kind, and the
Python the host spends per step, on the recording CuPy stand-in of luminal-cuda's tests
(`FakeCupy`: kernel launches, copies and captures are recorded, not run).

    python benchmarks/cuda_host_overhead.py --model gemma3 --dtype bfloat16

The launch count is the decode binding's exactly as a GPU would run it; the host time is the
runtime's and the Generator's own Python (input checks, uploads, publishing the KV cache),
without CuPy's calls, the GPU wait and the logits' download that a real step adds.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import statistics
import time
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "packages/luminal-cuda/tests/conftest.py"
PARAGRAPH = "The history of the city is long and full of change. " * 40


def recording_cupy():
    spec = importlib.util.spec_from_file_location("luminal_cuda_test_fixtures", CONFTEST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cupy = module.FakeCupy()
    cupy.record = lambda op: None  # nothing kept: the host's own cost
    return cupy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="model name or .gguf path")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--steps", type=int, default=300, help="decode steps per timed round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (median printed)")
    args = parser.parse_args()

    from luminal_cuda import CudaBackend, backend
    from luminal_cuda.device import DeviceInfo
    from luminal_models.causal_lm import open_causal_lm
    from luminal_models.generate import Generator
    from luminal_models.hub import resolve_model

    cupy = recording_cupy()
    backend.import_cupy = lambda: cupy
    backend.open_device = lambda cp: DeviceInfo(0, "recording stand-in", "sm_90", 13000, 13000,
                                                130000, 0)
    model, tok = open_causal_lm(resolve_model(args.model), quantized=True, progress=False)
    gen = Generator(model, tok, CudaBackend(dtype=None if args.dtype == "float32" else args.dtype))
    gen.forward(tok.encode(PARAGRAPH)[:128])
    for _ in range(5):
        gen.forward([5])
    binding = next(reversed(gen.graph.runtime.bindings.values()))
    print(f"{args.model}, {args.dtype}: a decode step is {len(binding.labels)} launches")
    for label, count in collections.Counter(label.split()[0] for label in binding.labels
                                            ).most_common():
        print(f"  {count:4d} {label}")
    rounds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            gen.forward([5])
        rounds.append((time.perf_counter() - start) / args.steps * 1e6)
    print(f"host Python per decode step: {statistics.median(rounds):.0f} us (median of "
          f"{args.rounds} rounds of {args.steps}; best {min(rounds):.0f} us)")


if __name__ == "__main__":
    main()
