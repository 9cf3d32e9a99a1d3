"""OpenAI-compatible server throughput: `luminal serve` beside llama.cpp's server
(llama-cpp-python's `llama_cpp.server`), same model (SmolLM2-135M-Instruct Q4_1 GGUF), in
one run.

    python benchmarks/serve_bench.py                       # 1, 4 and 8 clients, 3 rounds
    python benchmarks/serve_bench.py --clients 8 --rounds 1 --requests 8

Both servers start once, on 127.0.0.1, and stay up; rounds alternate between them so that
load from other processes on a shared machine hits both alike. In a round, N client threads
send `--requests` chat completions in all (greedy, `--max-tokens` each, prompts differ) with
the `openai` client, and the round's wall time gives requests/s and generated tokens/s
(`usage.completion_tokens`). Reported: the median over rounds, and luminal / llama.cpp,
under a line naming the CPU and the range of the 1-minute load average during the run (each
round's is printed as it ends: figures taken on a busy machine say little).
Both servers run one request at a time (llama.cpp's server holds a lock around its model),
so more clients show queueing and HTTP overhead, not batching.

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
from pathlib import Path

from compile_bench import cpu_model

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "What is the capital of France?", "Name three colours of the rainbow.",
    "Why is the sky blue?", "Give me a tip for learning Python.",
    "What is a prime number?", "Describe a cat in one sentence.",
    "How many legs does a spider have?", "What does a compiler do?",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_luminal(threads: int | None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "luminal", "serve", "--port", "0", "--quiet"]
    cmd += ["--threads", str(threads)] if threads else []
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    for line in proc.stderr:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        if found:
            return proc, found.group(1)
    raise RuntimeError(f"luminal serve exited with status {proc.wait()}")


def _start_llama_cpp(model: Path, threads: int | None) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
           "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2",
           "--n_threads", str(threads or os.cpu_count())]
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


def _round(url: str, clients: int, requests: int, max_tokens: int) -> tuple[float, int]:
    """Wall seconds and generated tokens for `requests` chat completions from `clients`."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)

    def ask(i: int) -> int:
        out = client.chat.completions.create(
            model="smollm2", max_tokens=max_tokens, temperature=0,
            messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])
        return out.usage.completion_tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        tokens = sum(pool.map(ask, range(requests)))
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--requests", type=int, default=16, help="requests per round")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for both servers (default: all cores)")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "packages" / "luminal-models" / "src"))
    from luminal_models.hub import smollm2_path

    servers = {"luminal": _start_luminal(args.threads)}
    try:
        import llama_cpp  # noqa: F401
        servers["llama.cpp"] = _start_llama_cpp(smollm2_path(), args.threads)
    except ImportError:
        print("llama-cpp-python is not installed (bash scripts/setup-bench.sh): luminal only",
              file=sys.stderr)
    loads = [os.getloadavg()[0]]
    try:
        results: dict[tuple[str, int], list[tuple[float, int]]] = {}
        for _, url in servers.values():  # warm-up: first-request costs
            _round(url, 1, 2, args.max_tokens)
        for r in range(args.rounds):
            for clients in args.clients:
                for name, (_, url) in servers.items():
                    results.setdefault((name, clients), []).append(
                        _round(url, clients, args.requests, args.max_tokens))
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}/{args.rounds} done: load average {loads[-1]:.1f}",
                  file=sys.stderr, flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; load average {min(loads):.1f}-"
          f"{max(loads):.1f} during the run; {args.rounds} round(s), medians\n")
    ratio = "luminal / llama.cpp tokens/s" if len(servers) > 1 else ""
    print(f"| clients | server | requests/s | tokens/s | {ratio} |")
    print("|---|---|---|---|---|")
    for clients in args.clients:
        rates = {}
        for name in servers:
            runs = results[(name, clients)]
            rps = statistics.median(args.requests / wall for wall, _ in runs)
            tps = statistics.median(tokens / wall for wall, tokens in runs)
            rates[name] = tps
            print(f"| {clients} | {name} | {rps:.2f} | {tps:.1f} | |")
        if len(rates) > 1:
            print(f"| {clients} | ratio | | | {rates['luminal'] / rates['llama.cpp']:.2f} |")


if __name__ == "__main__":
    main()
