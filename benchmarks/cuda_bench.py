"""A causal LM on one NVIDIA GPU: luminal-cuda vs PyTorch, prefill and decode.

    python benchmarks/cuda_bench.py                       # SmolLM2-135M-Instruct, every system
    python benchmarks/cuda_bench.py --systems luminal-fp16,torch-compile-fp16 --runs 3
    python benchmarks/cuda_bench.py --model gemma3 --systems luminal-bf16,transformers-bf16

Prefill = one forward over a fixed 128-token prompt with an empty cache. Decode = 128
single-token greedy steps right after it (context 128 -> 256). Each system runs in its own
subprocess on the same GPU; rates are medians over --runs timed runs after two warm-up runs
(luminal compiles, then captures its CUDA graphs; torch.compile compiles and records),
"best" is the fastest run, "GPU mem" the peak the system's allocator reports.

Systems:
  luminal-fp32        luminal-cuda, float32 compute on the GGUF's quantized weights
  luminal-fp16        luminal-cuda with HalfPrecision("float16"): half storage, f32 accumulation
  luminal-bf16        the same in bfloat16 (Gemma's activations outgrow float16's range)
  transformers-fp32   Hugging Face transformers, eager, DynamicCache
  transformers-fp16   the same in float16 (transformers-bf16: bfloat16)
  torch-compile-fp16  transformers with a StaticCache and torch.compile(mode="reduce-overhead")
                      (CUDA graphs), float16 (torch-compile-bf16: bfloat16)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROMPT_TOKENS = 128
DECODE_TOKENS = 128
PARAGRAPH = (
    "The history of the city is long and full of change. Merchants came from distant lands "
    "to trade spices, cloth and stories, and each of them left something behind: a word, a "
    "recipe, a new way of building houses along the river. Over the centuries the markets "
    "grew into a busy port, and the port into a city that never quite slept. "
)
ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("luminal-fp32", "luminal-fp16", "luminal-bf16", "transformers-fp32",
           "transformers-fp16", "transformers-bf16", "torch-compile-fp16", "torch-compile-bf16")
DEFAULT_SYSTEMS = ("luminal-fp32", "luminal-fp16", "transformers-fp32", "transformers-fp16",
                   "torch-compile-fp16")
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _prompt_ids(model_path: Path) -> list[int]:
    from luminal_models.tokenizer import Tokenizer

    ids = Tokenizer.from_gguf(model_path).encode(PARAGRAPH * 8)
    if len(ids) < PROMPT_TOKENS:
        raise RuntimeError("the benchmark paragraph is too short for a 128-token prompt")
    return ids[:PROMPT_TOKENS]


def _time_runs(run_once: Callable[[], tuple[float, float]], runs: int) -> dict:
    for _ in range(2):  # warm-up: compilation, then CUDA-graph capture (luminal captures a
        run_once()      # binding on its second run, torch.compile records on its first ones)
    prefill, decode = zip(*(run_once() for _ in range(runs)))
    return {
        "prefill_tok_s": PROMPT_TOKENS / statistics.median(prefill),
        "prefill_best": PROMPT_TOKENS / min(prefill),
        "decode_tok_s": DECODE_TOKENS / statistics.median(decode),
        "decode_best": DECODE_TOKENS / min(decode),
        "prefill_ms": [round(1000 * t, 3) for t in prefill],
        "decode_ms": [round(1000 * t, 2) for t in decode],
    }


# ----------------------------------------------------------------------------- luminal
def bench_luminal(model_path: Path, runs: int, dtype: str) -> dict:
    import cupy
    from luminal_cuda import CudaBackend
    from luminal_models.causal_lm import load_causal_lm
    from luminal_models.generate import Generator
    from luminal_models.gguf_file import GGUFFile

    start = time.perf_counter()
    with GGUFFile(model_path) as gguf:
        model = load_causal_lm(gguf, progress=False)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    backend = CudaBackend(dtype=None if dtype == "float32" else dtype)
    generator = Generator(model, None, backend)
    compile_s = time.perf_counter() - start
    ids = _prompt_ids(model_path)

    def run_once() -> tuple[float, float]:
        generator.reset()
        t0 = time.perf_counter()
        token = int(generator.forward(ids).argmax())  # reading the logits synchronises
        t1 = time.perf_counter()
        for _ in range(DECODE_TOKENS):
            token = int(generator.forward([token]).argmax())
        return t1 - t0, time.perf_counter() - t1

    stats = _time_runs(run_once, runs)
    graphs = generator.graph.runtime.stats
    return {
        **stats,
        "gpu_mem_mb": cupy.get_default_memory_pool().total_bytes() / 2**20,
        "notes": f"load {load_s:.1f} s, compile {compile_s:.1f} s; CUDA graphs: "
                 f"{graphs['captured']} captured, {graphs['replayed']} replays, "
                 f"{graphs['eager']} eager runs",
    }


# ----------------------------------------------------------------------------- PyTorch
def _hf_model(model_path: Path, dtype_name: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, dtype_name)
    model = AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=dtype)
    return model.to("cuda").eval()


def bench_transformers(model_path: Path, runs: int, dtype_name: str) -> dict:
    import torch
    import transformers
    from transformers import DynamicCache

    start = time.perf_counter()
    model = _hf_model(model_path, dtype_name)
    load_s = time.perf_counter() - start
    ids = torch.tensor([_prompt_ids(model_path)], device="cuda")

    def run_once() -> tuple[float, float]:
        with torch.no_grad():
            cache = DynamicCache()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(ids, past_key_values=cache, use_cache=True)
            token = out.logits[0, -1].argmax().view(1, 1)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for _ in range(DECODE_TOKENS):
                out = model(token, past_key_values=cache, use_cache=True)
                token = out.logits[0, -1].argmax().view(1, 1)
            torch.cuda.synchronize()
            return t1 - t0, time.perf_counter() - t1

    torch.cuda.reset_peak_memory_stats()
    stats = _time_runs(run_once, runs)
    return {**stats, "gpu_mem_mb": torch.cuda.max_memory_allocated() / 2**20,
            "notes": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                     f"eager {dtype_name}; load {load_s:.1f} s"}


def bench_torch_compile(model_path: Path, runs: int, dtype_name: str) -> dict:
    import torch
    from transformers import StaticCache

    model = _hf_model(model_path, dtype_name)
    forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = torch.tensor([_prompt_ids(model_path)], device="cuda")
    length = PROMPT_TOKENS + DECODE_TOKENS + 8
    try:  # transformers >= 4.56
        cache = StaticCache(config=model.config, max_cache_len=length)
    except TypeError:
        cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=length,
                            device="cuda", dtype=getattr(torch, dtype_name))

    def run_once() -> tuple[float, float]:
        with torch.no_grad():
            cache.reset()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            pos = torch.arange(PROMPT_TOKENS, device="cuda")
            out = model(ids, past_key_values=cache, cache_position=pos, use_cache=True)
            token = out.logits[0, -1].argmax().view(1, 1)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            for step in range(DECODE_TOKENS):
                pos = torch.tensor([PROMPT_TOKENS + step], device="cuda")
                out = forward(token, past_key_values=cache, cache_position=pos, use_cache=True)
                token = out.logits[0, -1].argmax().view(1, 1).clone()
            torch.cuda.synchronize()
            return t1 - t0, time.perf_counter() - t1

    torch.cuda.reset_peak_memory_stats()
    stats = _time_runs(run_once, runs)
    return {**stats, "gpu_mem_mb": torch.cuda.max_memory_allocated() / 2**20,
            "notes": "prefill eager (one shape), decode torch.compile reduce-overhead, "
                     f"StaticCache, {dtype_name}, torch {torch.__version__}"}


# ----------------------------------------------------------------------------- driver
def run_child(args: argparse.Namespace) -> None:
    """Benchmark one system in this process and print its result as JSON."""
    from luminal_models.hub import resolve_model

    path = resolve_model(args.model)
    system = args.child
    dtype = DTYPES[system.rsplit("-", 1)[1]]
    if system.startswith("luminal"):
        result = bench_luminal(path, args.runs, dtype)
    elif system.startswith("transformers"):
        result = bench_transformers(path, args.runs, dtype)
    else:
        result = bench_torch_compile(path, args.runs, dtype)
    print(json.dumps(result))


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    sources = [str(p / "src") for p in sorted((ROOT / "packages").glob("luminal-*"))]
    env["PYTHONPATH"] = os.pathsep.join([*sources, env.get("PYTHONPATH", "")])
    return env


def _gpu_name() -> str:
    from luminal_cuda import probe

    status = probe()
    return status.device if status.available else f"no GPU ({status.reason})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                        help="comma-separated subset of: " + ", ".join(SYSTEMS))
    parser.add_argument("--runs", type=int, default=5, help="timed runs per system")
    parser.add_argument("--model", default="smollm2", help="model name or .gguf path")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return

    results: dict[str, dict] = {}
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}")
        print(f"benchmarking {system} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, "--child", system, "--runs", str(args.runs),
               "--model", args.model]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_child_env())
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1:] or ["no output on stderr"]
            results[system] = {"failed": [f"exit status {proc.returncode}: {last[0]}"]}
            continue
        results[system] = json.loads(proc.stdout.strip().splitlines()[-1])

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.model}, {PROMPT_TOKENS}-token prefill, {DECODE_TOKENS} greedy decode "
          f"steps, {_gpu_name()}, median of {args.runs} runs (best)\n")
    print("| system | prefill tok/s | decode tok/s | GPU mem | notes |")
    print("| --- | --- | --- | --- | --- |")
    for system, r in results.items():
        if "prefill_tok_s" not in r:
            print(f"| {system} | - | - | - | failed: {r['failed'][0]} |")
            continue
        print(f"| {system} | {r['prefill_tok_s']:.0f} ({r['prefill_best']:.0f}) | "
              f"{r['decode_tok_s']:.1f} ({r['decode_best']:.1f}) | {r['gpu_mem_mb']:.0f} MB | "
              f"{r['notes']} |")


if __name__ == "__main__":
    main()
