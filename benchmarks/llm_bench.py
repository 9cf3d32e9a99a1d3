"""An LLM's prefill and decode speed and peak memory, luminal vs peers (default: SmolLM2).

    python benchmarks/llm_bench.py                   # luminal cpu, transformers, llama.cpp
    python benchmarks/llm_bench.py --model gemma3    # Gemma 3 270M, Q4_K_M
    python benchmarks/llm_bench.py --systems luminal --backend reference --runs 1

Prefill = one forward over a fixed 128-token prompt with an empty cache. Decode = 128
single-token greedy steps right after it (context 128 -> 256, end-of-text ignored). Each
system runs in its own subprocess, so "peak RSS" is that system's alone (the process's
maximum resident set: weights, activations and runtime). Rates are medians over --runs timed
runs after one warm-up run; "best" is the fastest run. Each timed run waits (up to 60 s) until
other processes use less than 0.2 CPU; the table says how many runs could not.

Systems:
  luminal       this repository, on --backend (default cpu)
  transformers  Hugging Face transformers, eager, fp32 (it dequantizes the GGUF), DynamicCache
  llama.cpp     llama-cpp-python, the GGUF's weights as shipped; included only when importable
                (`bash scripts/setup-bench.sh` builds llama.cpp from source: ~15 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


# ----------------------------------------------------------------------------- one system
def _prompt_ids(tokenizer) -> list[int]:
    ids = tokenizer.encode(PARAGRAPH * 8)
    if len(ids) < PROMPT_TOKENS:
        raise RuntimeError("the benchmark paragraph is too short for a 128-token prompt")
    return ids[:PROMPT_TOKENS]


def _busy_cpus(interval: float = 0.5) -> float:
    """CPUs kept busy by every process on the machine over `interval` seconds (/proc/stat)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(interval)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(total1 - total0, 1) * (os.cpu_count() or 1)


def _wait_until_quiet(max_wait_s: float = 60.0, threshold: float = 0.2) -> bool:
    """Sleep until other processes use less than `threshold` CPUs (we are idle meanwhile);
    False if the machine stayed busy for `max_wait_s`. Shared machines make timings collapse
    when another process takes a core, so every timed run starts on a quiet machine."""
    if not os.path.exists("/proc/stat"):
        return True
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline:
        if _busy_cpus() < threshold:
            return True
    return False


def _time_runs(run_once: Callable[[], tuple[float, float]], runs: int) -> dict:
    run_once()  # warm-up: caches, lazy allocations, kernel loading
    timings, noisy = [], 0
    for _ in range(runs):
        noisy += not _wait_until_quiet()
        timings.append(run_once())
    prefill, decode = zip(*timings)
    return {
        "prefill_tok_s": PROMPT_TOKENS / statistics.median(prefill),
        "prefill_best": PROMPT_TOKENS / min(prefill),
        "decode_tok_s": DECODE_TOKENS / statistics.median(decode),
        "decode_best": DECODE_TOKENS / min(decode),
        "noisy_runs": noisy,
    }


def bench_luminal(model_path: Path, runs: int, backend_name: str) -> dict:
    import luminal as lm
    from luminal_models.causal_lm import load_causal_lm
    from luminal_models.generate import Generator
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.tokenizer import Tokenizer

    start = time.perf_counter()
    backend = _backend(lm, backend_name)
    with GGUFFile(model_path) as gguf:
        tokenizer = Tokenizer.from_gguf(gguf)
        model = load_causal_lm(gguf, quantized=backend.name != "reference", progress=False)
    generator = Generator(model, tokenizer, backend)
    setup_s = time.perf_counter() - start
    ids = _prompt_ids(tokenizer)

    def run_once() -> tuple[float, float]:
        generator.reset()
        t0 = time.perf_counter()
        token = int(generator.forward(ids).argmax())
        t1 = time.perf_counter()
        for _ in range(DECODE_TOKENS):
            token = int(generator.forward([token]).argmax())
        return t1 - t0, time.perf_counter() - t1

    stats = _time_runs(run_once, runs)
    runtime_stats = getattr(generator.graph.runtime, "stats", None) or {}
    note = f"backend {backend_name}; load + compile {setup_s:.1f} s"
    if "cached" in runtime_stats:
        note += " (kernels from the disk cache)" if runtime_stats["cached"] else ""
    return {**stats, "notes": note}


def _backend(lm, name: str):
    try:
        return lm.backend(name)
    except ValueError:
        if name != "cpu":
            raise
        # a source checkout without `pip install`: no entry point announces luminal-cpu
        import luminal_cpu.plugin
        from luminal import plugins

        plugins.get_plugin_manager().register(luminal_cpu.plugin, name="luminal-cpu")
        return lm.backend(name)


def bench_transformers(model_path: Path, runs: int, threads: int) -> dict:
    import torch
    import transformers
    from luminal_models.tokenizer import Tokenizer
    from transformers import AutoModelForCausalLM, DynamicCache

    torch.set_num_threads(threads)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=torch.float32).eval()
    load_s = time.perf_counter() - start
    ids = torch.tensor([_prompt_ids(Tokenizer.from_gguf(model_path))])

    def run_once() -> tuple[float, float]:
        with torch.no_grad():
            cache = DynamicCache()
            t0 = time.perf_counter()
            out = model(ids, past_key_values=cache, use_cache=True)
            token = out.logits[0, -1].argmax().view(1, 1)
            t1 = time.perf_counter()
            for _ in range(DECODE_TOKENS):
                out = model(token, past_key_values=cache, use_cache=True)
                token = out.logits[0, -1].argmax().view(1, 1)
            return t1 - t0, time.perf_counter() - t1

    stats = _time_runs(run_once, runs)
    return {**stats, "notes": f"transformers {transformers.__version__}, torch "
                              f"{torch.__version__}, eager fp32; load {load_s:.1f} s"}


def bench_llama_cpp(model_path: Path, runs: int, threads: int) -> dict:
    import llama_cpp
    import numpy as np

    start = time.perf_counter()
    llm = llama_cpp.Llama(str(model_path), n_ctx=512, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - start
    ids = llm.tokenize(PARAGRAPH.encode() * 8, add_bos=False, special=True)[:PROMPT_TOKENS]
    vocab = llm.n_vocab()

    def last_logits() -> np.ndarray:
        # llm.scores is only filled with logits_all=True; read the last row directly
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(vocab,))

    def run_once() -> tuple[float, float]:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        token = int(last_logits().argmax())
        t1 = time.perf_counter()
        for _ in range(DECODE_TOKENS):
            llm.eval([token])
            token = int(last_logits().argmax())
        return t1 - t0, time.perf_counter() - t1

    stats = _time_runs(run_once, runs)
    return {**stats, "notes": f"llama-cpp-python {llama_cpp.__version__}, weights as shipped; "
                              f"load {load_s:.1f} s"}


def run_child(args: argparse.Namespace) -> None:
    """Benchmark one system in this process and print its result as JSON."""
    from luminal_models.hub import resolve_model

    path = resolve_model(args.model)
    if args.child == "luminal":
        result = bench_luminal(path, args.runs, args.backend)
    elif args.child == "transformers":
        result = bench_transformers(path, args.runs, args.threads)
    else:
        result = bench_llama_cpp(path, args.runs, args.threads)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


# ----------------------------------------------------------------------------- driver
SYSTEMS = ("luminal", "transformers", "llama.cpp")
MODEL_TITLES = {"smollm2": "SmolLM2-135M-Instruct Q4_1", "gemma3": "Gemma 3 270M Q4_K_M"}


def _failure(proc: subprocess.CompletedProcess) -> str:
    """Why a system's subprocess failed: the signal that killed it, or its exit status, and
    the end of its stderr (the exception, or the crash's last words)."""
    if proc.returncode < 0:
        import signal

        cause = f"killed by {signal.Signals(-proc.returncode).name}"
    else:
        cause = f"exit status {proc.returncode}"
    tail = [line for line in proc.stderr.strip().splitlines() if line.strip()][-3:]
    return cause + (": " + " / ".join(tail) if tail else " (nothing on stderr)")


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    sources = [str(p / "src") for p in sorted((ROOT / "packages").glob("luminal-*"))]
    env["PYTHONPATH"] = os.pathsep.join([*sources, env.get("PYTHONPATH", "")])
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of: " + ", ".join(SYSTEMS))
    parser.add_argument("--backend", default="cpu", help="luminal backend (default: cpu)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per system")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
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
        if system == "llama.cpp" and not _importable("llama_cpp"):
            results[system] = {"skipped": "llama-cpp-python is not installed (optional: "
                                          "`bash scripts/setup-bench.sh` builds llama.cpp, "
                                          "about 15 minutes)"}
            continue
        if system == "transformers" and not _importable("transformers"):
            results[system] = {"skipped": "transformers is not installed"}
            continue
        print(f"benchmarking {system} ...", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, "--child", system, "--runs", str(args.runs),
               "--threads", str(args.threads), "--backend", args.backend, "--model", args.model]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(args.threads))
        if proc.returncode != 0:
            results[system] = {"failed": [_failure(proc)]}
            continue
        results[system] = json.loads(proc.stdout.strip().splitlines()[-1])

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{MODEL_TITLES.get(args.model.lower(), args.model)}, {PROMPT_TOKENS}-token prefill, "
          f"{DECODE_TOKENS} greedy decode steps, {args.threads} threads, median of {args.runs} "
          "runs (best)\n")
    print("| system | prefill tok/s | decode tok/s | peak RSS | notes |")
    print("| --- | --- | --- | --- | --- |")
    for system, r in results.items():
        if "prefill_tok_s" not in r:
            print(f"| {system} | - | - | - | {r.get('skipped') or 'failed: ' + r['failed'][0]} |")
            continue
        noisy = f"; {r['noisy_runs']} run(s) started on a busy machine" if r["noisy_runs"] else ""
        print(f"| {system} | {r['prefill_tok_s']:.0f} ({r['prefill_best']:.0f}) | "
              f"{r['decode_tok_s']:.1f} ({r['decode_best']:.1f}) | {r['peak_rss_mb']:.0f} MB | "
              f"{r['notes']}{noisy} |")


if __name__ == "__main__":
    main()
