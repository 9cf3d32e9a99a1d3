"""OpenAI-compatible server throughput: `luminal serve` beside llama.cpp's server
(llama-cpp-python's `llama_cpp.server`), same model (SmolLM2-135M-Instruct Q4_1 GGUF), in
one run.

    python benchmarks/serve_bench.py                       # 1 and 4 clients, 3 rounds
    python benchmarks/serve_bench.py --clients 8 --rounds 1 --requests 8

Both servers start once, on 127.0.0.1, on the same GGUF file with the same context (2048)
and the same threads (`--threads`, 2 by default), and stay up. Rounds alternate between
them, the first server changing from round to round, so that load from other processes on a
shared machine hits both alike; each timed round first waits (up to `--max-wait` seconds)
for the machine to be quiet, and the table's header says how many could not. In a round, N
client threads send `--requests` chat completions in all with the `openai` client: the same
prompts to both servers, greedy (temperature 0, repeat_penalty 1: llama.cpp's server
defaults to 1.1), `--max-tokens` each. The round's wall time gives requests/s and generated
tokens/s (`usage.completion_tokens`); each request's own wall time gives the latency.
Reported: medians over rounds (latency: median and maximum over all requests), tokens per
request (the two may stop at different places), and luminal / llama.cpp, under a line naming
the CPU and the range of the 1-minute load average during the run (each round's is printed
as it ends: figures taken on a busy machine say little). Both servers run one request at a
time (llama.cpp's server holds a lock around its model), so more clients show queueing and
HTTP overhead, not batching.

llama.cpp needs `bash scripts/setup-bench.sh` (builds llama-cpp-python[server] from source).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from compile_bench import cpu_model
from llm_bench import _wait_until_quiet

ROOT = Path(__file__).resolve().parents[1]
# requests that ask for long answers, so that both servers usually generate --max-tokens
QUESTIONS = [
    "Write a short story about a robot who learns to paint.",
    "Explain in detail how a car engine works.", "Describe the water cycle step by step.",
    "Write a poem about the ocean at night.", "Explain the rules of chess to a beginner.",
    "Tell me the history of the Roman Empire.", "Explain how photosynthesis works.",
    "Write a letter to a friend about your summer holiday.",
]


CONTEXT = 2048
# both servers sample the same way: greedy, no repetition penalty (llama.cpp's default is 1.1)
SAMPLING = {"temperature": 0, "extra_body": {"repeat_penalty": 1.0}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_luminal(model: Path, threads: int) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "luminal", "serve", "--port", "0", "--quiet", "--model",
           str(model), "--model-id", "smollm2", "--ctx", str(CONTEXT), "--threads", str(threads)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in proc.stderr:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        if found:
            return proc, found.group(1)
    raise RuntimeError(f"luminal serve exited with status {proc.wait()}")


def _start_llama_cpp(model: Path, threads: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
           "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT), "--model_alias",
           "smollm2", "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    import urllib.request

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with status {proc.returncode}")
        try:
            urllib.request.urlopen(url + "/models", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("llama_cpp.server did not start in 60 s")


@dataclass
class Round:
    wall_s: float
    tokens: list[int]  # generated tokens per request
    latencies: list[float]  # each request's seconds, from sending to the full answer


def _round(url: str, clients: int, requests: int, max_tokens: int) -> Round:
    """`requests` chat completions from `clients` concurrent threads."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)

    def ask(i: int) -> tuple[int, float]:
        start = time.perf_counter()
        out = client.chat.completions.create(
            model="smollm2", max_tokens=max_tokens,
            messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}], **SAMPLING)
        return out.usage.completion_tokens, time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = list(pool.map(ask, range(requests)))
    wall = time.perf_counter() - start
    return Round(wall, [tokens for tokens, _ in answers], [seconds for _, seconds in answers])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4],
                        help="concurrent clients, one table row pair per value "
                             "(default: 1 4)")
    parser.add_argument("--requests", type=int, default=8, help="requests per round")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2,
                        help="CPU threads of each server (default: %(default)s)")
    parser.add_argument("--max-wait", type=float, default=20.0, metavar="SECONDS",
                        help="before each timed round, wait up to this long for other "
                             "processes to use less than 0.2 CPU (default: %(default)s)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "packages" / "luminal-models" / "src"))
    from luminal_models.hub import smollm2_path

    model = smollm2_path()
    servers = {"luminal": _start_luminal(model, args.threads)}
    try:
        import llama_cpp  # noqa: F401
        servers["llama.cpp"] = _start_llama_cpp(model, args.threads)
    except ImportError:
        print("llama-cpp-python is not installed (bash scripts/setup-bench.sh): luminal only",
              file=sys.stderr)
    loads = [os.getloadavg()[0]]
    try:
        results: dict[tuple[str, int], list[Round]] = {}
        for _, url in servers.values():  # warm-up: first-request costs
            _round(url, 1, 2, args.max_tokens)
        names, busy_starts = list(servers), 0
        for r in range(args.rounds):
            for clients in args.clients:
                for name in names[r % 2:] + names[:r % 2]:
                    busy_starts += not _wait_until_quiet(args.max_wait)
                    results.setdefault((name, clients), []).append(
                        _round(servers[name][1], clients, args.requests, args.max_tokens))
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}/{args.rounds} done: load average {loads[-1]:.1f}",
                  file=sys.stderr, flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # still finishing a request: not worth waiting
                proc.kill()
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, {args.threads} threads per server; load "
          f"average {min(loads):.1f}-{max(loads):.1f} during the run; {args.rounds} round(s) "
          f"of {args.requests} requests, max_tokens {args.max_tokens}; medians; {busy_starts} of "
          f"{len(names) * len(args.clients) * args.rounds} timed rounds started on a busy "
          f"machine (other processes over 0.2 CPU after {args.max_wait:.0f} s)\n")
    ratio = "luminal / llama.cpp tokens/s" if len(servers) > 1 else ""
    print(f"| clients | server | requests/s | tokens/s | latency median / max (s) | "
          f"tokens/request | {ratio} |")
    print("|---|---|---|---|---|---|---|")
    for clients in args.clients:
        rates = {}
        for name in servers:
            runs = results[(name, clients)]
            rps = statistics.median(args.requests / run.wall_s for run in runs)
            tps = statistics.median(sum(run.tokens) / run.wall_s for run in runs)
            latencies = [s for run in runs for s in run.latencies]
            per_request = statistics.mean(t for run in runs for t in run.tokens)
            rates[name] = tps
            print(f"| {clients} | {name} | {rps:.2f} | {tps:.1f} | "
                  f"{statistics.median(latencies):.2f} / {max(latencies):.2f} | "
                  f"{per_request:.1f} | |")
        if len(rates) > 1:
            print(f"| {clients} | ratio | | | | | {rates['luminal'] / rates['llama.cpp']:.2f} |")


if __name__ == "__main__":
    main()
