"""An LLM's prefill and decode speed and peak memory, luminal vs peers (default: SmolLM2).

    python benchmarks/llm_bench.py                   # luminal cpu, transformers, llama.cpp
    python benchmarks/llm_bench.py --systems luminal,llama.cpp --busy 1
    python benchmarks/llm_bench.py --model gemma3    # Gemma 3 270M, Q4_K_M
    python benchmarks/llm_bench.py --systems luminal --backend reference --runs 1

Prefill = one forward over a fixed 128-token prompt with an empty cache. Decode = 128
single-token greedy steps right after it (context 128 -> 256, end-of-text ignored). Each
system runs in its own subprocess, so "peak RSS" is that system's alone (the process's
maximum resident set: weights, activations and runtime). The subprocesses load and warm up
once, then the timed runs are interleaved in rounds (one run of each system per round, the
order rotating), so a change in the machine's load hits every system alike; rates are
medians over the --runs rounds, "best" the fastest run. On a quiet machine each run waits (up
to 60 s) until other processes use less than 0.2 CPU; the table says how many runs could not.

`--busy N` keeps N cores busy meanwhile: N bounded busy-loop processes (they stop after at
most 30 minutes even if this script is killed) run through all timed rounds, so every system
is measured under the same contention. Luminal's row also gives its host overhead: the part
of a decode step spent outside the compiled program's native call (everything else the
generation loop does: Python, binding inputs and dims, reading the logits, greedy sampling),
the threads its governor gave each timed prefill (fewer than --threads when other processes
kept cores busy) and the prefill's CPU time (all threads together).

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
import signal
import statistics
import subprocess
import sys
import tempfile
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
    while _busy_cpus() >= threshold:
        if time.monotonic() >= deadline:
            return False
    return True


def _serve_runs(run_once: Callable[[], tuple[float, float]], notes: Callable[[], dict]) -> None:
    """Warm up, then answer the driver: each `run` line on stdin times one run (printed as
    JSON: prefill and decode seconds, and whatever `notes()` adds), `done` prints the peak
    RSS and exits."""
    run_once()  # warm-up: caches, lazy allocations, kernel loading
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        prefill, decode = run_once()
        print(json.dumps({"prefill_s": prefill, "decode_s": decode, **notes()}), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_rss_mb": rss, **notes()}), flush=True)


def bench_luminal(model_path: Path, backend_name: str) -> None:
    import luminal as lm
    from luminal_models.causal_lm import open_causal_lm
    from luminal_models.cli_options import exempt_from_gc
    from luminal_models.generate import Generator

    start = time.perf_counter()
    backend = _backend(lm, backend_name)
    model, tokenizer = open_causal_lm(model_path, quantized=backend.name != "reference",
                                      progress=False)
    generator = Generator(model, tokenizer, backend)
    exempt_from_gc()  # as `luminal generate` / `serve` do
    setup_s = time.perf_counter() - start
    ids = _prompt_ids(tokenizer)

    runtime = generator.graph.runtime
    host: list[float] = []  # per run: decode seconds outside the compiled program
    prefill_threads: list[int] = []  # per run: the threads luminal's governor gave the prefill
    prefill_cpu: list[float] = []  # per run: the prefill's CPU seconds, all threads together

    def run_once() -> tuple[float, float]:
        # the loop `luminal generate` runs (greedy sampling included): the first id comes
        # after the prefill, each of the others after one decode step
        tokens = generator.stream(ids, DECODE_TOKENS + 1, stop_ids=())
        cpu0, t0 = time.process_time(), time.perf_counter()
        next(tokens)
        t1 = time.perf_counter()
        prefill_cpu.append(time.process_time() - cpu0)
        prefill_threads.append(getattr(runtime, "last_threads", 0))
        native0 = getattr(runtime, "native_s", 0.0)
        for _ in tokens:
            pass
        t2 = time.perf_counter()
        if hasattr(runtime, "native_s"):
            host.append((t2 - t1) - (runtime.native_s - native0))
        return t1 - t0, t2 - t1

    def notes() -> dict:
        runtime_stats = getattr(runtime, "stats", None) or {}
        note = f"backend {backend_name}; load + compile {setup_s:.1f} s"
        if runtime_stats.get("cached"):
            note += " (kernels from the disk cache)"
        if any(prefill_threads):
            note += "; prefill threads per run " + ",".join(map(str, prefill_threads[1:]))
        if len(prefill_cpu) > 1:
            note += f"; prefill CPU {statistics.median(prefill_cpu[1:]) * 1e3:.0f} ms (median)"
        extra = {"host_s": host[-1] / DECODE_TOKENS} if host else {}
        return {"notes": note, **extra}

    _serve_runs(run_once, notes)


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


def bench_transformers(model_path: Path, threads: int) -> None:
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

    note = (f"transformers {transformers.__version__}, torch {torch.__version__}, eager fp32; "
            f"load {load_s:.1f} s")
    _serve_runs(run_once, lambda: {"notes": note})


def bench_llama_cpp(model_path: Path, threads: int) -> None:
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

    note = f"llama-cpp-python {llama_cpp.__version__}, weights as shipped; load {load_s:.1f} s"
    _serve_runs(run_once, lambda: {"notes": note})


def run_child(args: argparse.Namespace) -> None:
    """Benchmark one system in this process, driven through stdin/stdout (`_serve_runs`)."""
    from luminal_models.hub import resolve_model

    path = resolve_model(args.model)
    if args.child == "luminal":
        bench_luminal(path, args.backend)
    elif args.child == "transformers":
        bench_transformers(path, args.threads)
    else:
        bench_llama_cpp(path, args.threads)


# ----------------------------------------------------------------------------- driver
SYSTEMS = ("luminal", "transformers", "llama.cpp")
MODEL_TITLES = {"smollm2": "SmolLM2-135M-Instruct Q4_1", "gemma3": "Gemma 3 270M Q4_K_M"}


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def _child_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    sources = [str(p / "src") for p in sorted((ROOT / "packages").glob("luminal-*"))]
    env["PYTHONPATH"] = os.pathsep.join([*sources, env.get("PYTHONPATH", "")])
    return env


BUSY_LOOP = ("import time\nend = time.monotonic() + {seconds}\n"
             "while time.monotonic() < end:\n    pass\n")


class ChildFailed(RuntimeError):
    """A system's process died or answered nonsense; the message says why."""


class Child:
    """One system's benchmark process: loads and warms up, then times one run per `run()`."""

    def __init__(self, system: str, args: argparse.Namespace) -> None:
        self.system = system
        cmd = [sys.executable, __file__, "--child", system, "--threads", str(args.threads),
               "--backend", args.backend, "--model", args.model]
        # stderr to a file, not a pipe: a chatty child can never block on it (closed by kill)
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True,
                                     env=_child_env(args.threads))
        self._read()  # {"ready": true} once loaded and warmed up

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise ChildFailed(self._cause())

    def _cause(self) -> str:
        """Why the process ended: its exit status or signal, and its last stderr lines."""
        code = self.proc.wait()
        if code < 0:
            try:
                status = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                status = f"killed by signal {-code}"
        else:
            status = f"exit status {code}"
        self._stderr.seek(0)
        tail = [x.strip() for x in self._stderr.read().splitlines() if x.strip()][-3:]
        return status + (": " + " / ".join(tail) if tail else " (no output on stderr)")

    def _send(self, command: str) -> None:
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise ChildFailed(self._cause()) from None

    def run(self) -> dict:
        self._send("run")
        return self._read()

    def finish(self) -> dict:
        self._send("done")
        result = self._read()
        self.proc.wait()
        return result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


def _start_busy(n: int, seconds: float) -> list[subprocess.Popen]:
    """`n` processes that keep a core busy for at most `seconds` each."""
    code = BUSY_LOOP.format(seconds=seconds)
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def _summary(runs: list[dict], final: dict, noisy: int) -> dict:
    prefill = [r["prefill_s"] for r in runs]
    decode = [r["decode_s"] for r in runs]
    result = {
        "prefill_tok_s": PROMPT_TOKENS / statistics.median(prefill),
        "prefill_best": PROMPT_TOKENS / min(prefill),
        "decode_tok_s": DECODE_TOKENS / statistics.median(decode),
        "decode_best": DECODE_TOKENS / min(decode),
        "noisy_runs": noisy, "peak_rss_mb": final["peak_rss_mb"], "notes": final["notes"],
    }
    host = [r["host_s"] for r in runs if "host_s" in r]
    if host:
        step = statistics.median(decode) / DECODE_TOKENS
        result["host_us"] = statistics.median(host) * 1e6
        result["host_share"] = statistics.median(host) / step
    return result


def measure(systems: list[str], args: argparse.Namespace) -> dict[str, dict]:
    """Start every system, time them in interleaved rounds, return each one's summary (or
    why it was skipped or failed)."""
    results: dict[str, dict] = {}
    children: list[Child] = []
    busy: list[subprocess.Popen] = []
    try:
        for system in systems:
            print(f"loading {system} ...", file=sys.stderr, flush=True)
            try:
                children.append(Child(system, args))
            except ChildFailed as e:
                results[system] = {"failed": str(e)}
        busy = _start_busy(args.busy, seconds=1800)
        runs: dict[str, list[dict]] = {c.system: [] for c in children}
        noisy = dict.fromkeys(runs, 0)
        for round_ in range(args.runs):
            print(f"round {round_ + 1}/{args.runs} ...", file=sys.stderr, flush=True)
            shift = round_ % max(len(children), 1)
            for child in children[shift:] + children[:shift]:
                if child.system in results:
                    continue  # failed in an earlier round
                noisy[child.system] += not _wait_until_quiet(args.max_wait, args.busy + 0.2)
                try:
                    runs[child.system].append(child.run())
                except ChildFailed as e:
                    results[child.system] = {"failed": str(e)}
        for child in children:
            if child.system in results:
                continue
            try:
                results[child.system] = _summary(runs[child.system], child.finish(),
                                                 noisy[child.system])
            except ChildFailed as e:
                results[child.system] = {"failed": str(e)}
    finally:
        for p in busy:
            p.kill()
            p.wait()
        for child in children:
            child.kill()
    return {s: results[s] for s in systems}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated subset of: " + ", ".join(SYSTEMS))
    parser.add_argument("--backend", default="cpu", help="luminal backend (default: cpu)")
    parser.add_argument("--runs", type=int, default=5, help="timed rounds (runs per system)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for every system")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N cores busy with busy loops while timing (default 0)")
    parser.add_argument("--max-wait", type=float, default=60.0, metavar="SECONDS",
                        help="before each run, wait up to this long for a quiet machine "
                             "(default 60; 0: never wait)")
    parser.add_argument("--model", default="smollm2", help="model name or .gguf path")
    parser.add_argument("--activations", choices=("int16", "int24", "int8", "float"),
                        default=None,
                        help="how luminal's cpu quantized matmuls hold activations (default: "
                             "its default, int16: prompts to 16 bits per 32 values; int24: "
                             "float-like; int8: llama.cpp's numerics)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return
    if args.runs < 1 or args.busy < 0:
        parser.error("--runs must be at least 1 and --busy at least 0")
    if args.activations is not None:  # the children inherit it; only luminal reads it
        os.environ["LUMINAL_CPU_QUANT_ACTIVATIONS"] = args.activations

    systems, skipped = [], {}
    for system in args.systems.split(","):
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}")
        if system == "llama.cpp" and not _importable("llama_cpp"):
            skipped[system] = {"skipped": "llama-cpp-python is not installed (optional: "
                                          "`bash scripts/setup-bench.sh` builds llama.cpp, "
                                          "about 15 minutes)"}
        elif system == "transformers" and not _importable("transformers"):
            skipped[system] = {"skipped": "transformers is not installed"}
        else:
            systems.append(system)
    results = {**measure(systems, args), **skipped}

    if args.json:
        print(json.dumps(results, indent=2))
        return
    load = f", {args.busy} core(s) kept busy by busy loops" if args.busy else ""
    if args.activations is not None:
        load += f", luminal's activations {args.activations}"
    print(f"{MODEL_TITLES.get(args.model.lower(), args.model)}, {PROMPT_TOKENS}-token prefill, "
          f"{DECODE_TOKENS} greedy decode steps, {args.threads} threads{load}, median of "
          f"{args.runs} interleaved rounds (best)\n")
    print("| system | prefill tok/s | decode tok/s | peak RSS | notes |")
    print("| --- | --- | --- | --- | --- |")
    for system, r in results.items():
        if "prefill_tok_s" not in r:
            print(f"| {system} | - | - | - | {r.get('skipped') or 'failed: ' + r['failed']} |")
            continue
        noisy = f"; {r['noisy_runs']} run(s) started on a busy machine" if r["noisy_runs"] else ""
        host = (f"; host overhead {r['host_us']:.0f} us a decode step ({r['host_share']:.1%})"
                if "host_us" in r else "")
        print(f"| {system} | {r['prefill_tok_s']:.0f} ({r['prefill_best']:.0f}) | "
              f"{r['decode_tok_s']:.1f} ({r['decode_best']:.1f}) | {r['peak_rss_mb']:.0f} MB | "
              f"{r['notes']}{host}{noisy} |")


if __name__ == "__main__":
    main()
