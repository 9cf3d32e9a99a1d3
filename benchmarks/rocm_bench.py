"""luminal-rocm (OpenCL) next to luminal-cpu: a fused elementwise chain, matmuls, overhead.

    python benchmarks/rocm_bench.py                     # rocm and cpu (when importable)
    python benchmarks/rocm_bench.py --backends rocm --runs 20
    LUMINAL_OPENCL_DEVICE=0:0 python benchmarks/rocm_bench.py

Workloads (float32, on a (2048, 2048) matrix x unless stated):
  chain     (relu(x * 0.5 + 1) * x + x * x).sum(-1): an elementwise chain fused into a row
            reduction; GB/s counts one read of x (what a perfectly fused kernel moves)
  softmax   softmax over rows (exp-bound); GB/s counts one read of x and one write
  gemm      (M, K) @ (K, N) with M = N = K = 1024, GFLOP/s
  gemv      (1, 4096) @ (4096, 4096)^T, the decode shape of a linear layer; GB/s of weights
  qgemv     the same with Q4_1 weights (`luminal.quant.dequantize`); GB/s of quantized bytes
  overhead  one tiny elementwise kernel: the cost of one execute() + fetch

Each figure is the median over --runs timed runs of execute() followed by reading the output
(which waits for the device), after one warm-up run; compile time is reported separately
(cold = nothing cached in this process; the disk caches may be warm).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable

import luminal as lm
import numpy as np
from luminal import quant


def _matrix(g: lm.Graph, n: int) -> lm.GraphTensor:
    data = np.random.default_rng(0).standard_normal((n, n), np.float32)
    return g.tensor((n, n), name="x").set(data)


def _chain(g: lm.Graph, n: int = 2048):
    x = _matrix(g, n)
    y = ((x * 0.5 + 1).relu() * x + x * x).sum(-1)
    return y, n * n * 4, "GB/s"


def _softmax(g: lm.Graph, n: int = 2048):
    return _matrix(g, n).softmax(-1), 2 * n * n * 4, "GB/s"


def _gemm(g: lm.Graph, n: int = 1024):
    rng = np.random.default_rng(0)
    a = g.tensor((n, n), name="a").set(rng.standard_normal((n, n), np.float32))
    b = g.tensor((n, n), name="b").set(rng.standard_normal((n, n), np.float32))
    return a @ b, 2 * n**3, "GFLOP/s"


def _gemv(g: lm.Graph, n: int = 4096):
    rng = np.random.default_rng(0)
    x = g.tensor((1, n), name="x").set(rng.standard_normal((1, n), np.float32))
    w = g.tensor((n, n), name="w").set(rng.standard_normal((n, n), np.float32))
    return x @ w.T, n * n * 4, "GB/s"


def _qgemv(g: lm.Graph, n: int = 4096, qtype: str = "q4_1"):
    rng = np.random.default_rng(0)
    x = g.tensor((1, n), name="x").set(rng.standard_normal((1, n), np.float32))
    raw = rng.integers(0, 256, (n, n // 32, quant.BLOCK_BYTES[qtype]), dtype=np.uint8)
    raw[..., 0:4] = rng.uniform(-0.1, 0.1, (n, n // 32, 2)).astype(np.float16).view(np.uint8)
    w = g.tensor((n, quant.row_bytes(qtype, n)), name="w", dtype="uint8").set(raw.reshape(n, -1))
    return x @ quant.dequantize(w, qtype, (n, n)).T, raw.nbytes, "GB/s"


def _overhead(g: lm.Graph):
    x = g.tensor((16,), name="x").set(np.ones(16, np.float32))
    return (x * 2).exp(), 0, "us/run"


WORKLOADS: dict[str, Callable] = {"chain": _chain, "softmax": _softmax, "gemm": _gemm,
                                  "gemv": _gemv, "qgemv": _qgemv, "overhead": _overhead}
# Constructed directly when the distribution is importable but not installed (PYTHONPATH
# checkouts have no entry points); anything else goes through the plugin registry.
KNOWN = {"rocm": ("luminal_rocm", "OpenCLBackend"), "cpu": ("luminal_cpu", "CpuBackend")}


def get_backend(name: str):
    try:
        return lm.backend(name)
    except Exception:
        if name not in KNOWN:
            raise
        module, cls = KNOWN[name]
        backend = getattr(importlib.import_module(module), cls)()
        status = backend.probe()
        if not status.available:
            raise RuntimeError(f"backend {name!r} is not available: {status.reason}") from None
        return backend


def measure(workload: Callable, backend, runs: int) -> tuple[float, float, float, str]:
    """(compile seconds, median run seconds, work units per run, unit)."""
    g = lm.Graph()
    out, work, unit = workload(g)
    out.retrieve()
    t0 = time.perf_counter()
    g.compile((lm.GenericCompiler(), backend))
    compile_s = time.perf_counter() - t0
    g.execute()
    out.numpy()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        g.execute()
        out.numpy()
        times.append(time.perf_counter() - t)
    return compile_s, statistics.median(times), work, unit


def _rate(seconds: float, work: float, unit: str) -> str:
    if unit == "us/run":
        return f"{seconds * 1e6:.0f} us/run"
    return f"{work / seconds / 1e9:.2f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="rocm,cpu",
                        help="comma-separated backend names (default: rocm,cpu)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    backends = {}
    for name in args.backends.split(","):
        try:
            backends[name] = get_backend(name)
        except Exception as e:  # not installed or not available here: say so, keep going
            print(f"skipping {name}: {e}")
    for name, backend in backends.items():
        print(f"{name}: {backend.probe().device}")
    print("\n| workload | backend | compile (s) | median run (ms) | rate |")
    print("|---|---|---|---|---|")
    for wname in args.workloads.split(","):
        for bname, backend in backends.items():
            compile_s, run_s, work, unit = measure(WORKLOADS[wname], backend, args.runs)
            print(f"| {wname} | {bname} | {compile_s:.2f} | {run_s * 1e3:.3f} | "
                  f"{_rate(run_s, work, unit)} |", flush=True)


if __name__ == "__main__":
    main()
