"""luminal-cpu benchmarks: fused elementwise bandwidth, MLP and transformer-block forward vs
PyTorch eager (2 threads), and compile time of a 30-layer transformer.

    PYTHONPATH=packages/luminal-core/src:packages/luminal-cpu/src \\
        .venv/bin/python benchmarks/cpu_bench.py [--quick]

Every ratio compares numbers measured in the same run. Timings are the median of several
runs after a warm-up (the machine may be shared: the best run is printed too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import torch
from luminal_cpu import CpuBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/luminal-cpu/tests"))
import cpu_transformer as T

torch.set_num_threads(2)


def timeit(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(median, best) seconds over `reps` runs after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def cpu_seconds(fn: Callable[[], object], reps: int) -> float:
    """Median CPU time of this process (all its threads) over `reps` runs: what a kernel costs
    on a shared machine, where wall time also counts the waits for a core."""
    fn()
    times = []
    for _ in range(reps):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _tokens(n: int) -> str:
    return f"{n} token" + ("s" if n != 1 else "")


def row(name: str, lm_t: tuple[float, float], other: str, other_t: tuple[float, float],
        extra: str = "") -> None:
    ratio = other_t[0] / lm_t[0]
    print(f"| {name} | {lm_t[0] * 1e3:.2f} ({lm_t[1] * 1e3:.2f}) | {other} "
          f"{other_t[0] * 1e3:.2f} ({other_t[1] * 1e3:.2f}) | {ratio:.2f}x {extra}|")


# ----- fused elementwise chain ---------------------------------------------------------------
def chain(x):
    """8 elementwise ops: the same expression for luminal tensors and NumPy arrays."""
    t = x * 1.5
    t = t + 0.5
    t = t * x
    t = t - 0.25
    t = t * 0.5
    u = x * x
    t = t + u
    return t * t


def copy_bandwidth(x: np.ndarray, reps: int) -> tuple[float, float]:
    """(NumPy, torch with 2 threads) GB/s copying x: bytes read plus bytes written."""
    dst = np.empty_like(x)
    np_copy_t = timeit(lambda: np.copyto(dst, x), reps)
    src_t, dst_t = torch.from_numpy(x), torch.from_numpy(dst)
    torch_copy_t = timeit(lambda: dst_t.copy_(src_t), reps)  # parallel, unlike NumPy's
    moved = 2 * x.nbytes
    return moved / np_copy_t[0] / 1e9, moved / torch_copy_t[0] / 1e9


def bench_chain(n: int, reps: int) -> None:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    g = lm.Graph()
    xt = g.tensor((n,))
    out = chain(xt).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xt.set(x)
    kernels = g.runtime.stats["kernels"]
    holder = {}

    def run_lm():
        g.execute()
        holder["y"] = out.numpy()  # keep the latest result, as a user loop would

    lm_t = timeit(run_lm, reps)
    np.testing.assert_allclose(holder["y"], chain(x), rtol=1e-5, atol=1e-5)
    np_t = timeit(lambda: chain(x), reps)
    np_gbs, torch_gbs = copy_bandwidth(x, reps)
    gbs = 2 * x.nbytes / lm_t[0] / 1e9
    copy_gbs = max(np_gbs, torch_gbs)
    print(f"| fused 8-op chain, {n // 2**20}Mi floats ({kernels} kernel) | "
          f"{lm_t[0] * 1e3:.2f} ({lm_t[1] * 1e3:.2f}) | NumPy {np_t[0] * 1e3:.2f} "
          f"({np_t[1] * 1e3:.2f}) | {np_t[0] / lm_t[0]:.2f}x |")
    print(f"| same chain: bytes moved per second vs a copy of the array | {gbs:.1f} GB/s | "
          f"copy: NumPy {np_gbs:.1f} GB/s, torch (2 threads) {torch_gbs:.1f} GB/s | "
          f"{gbs / copy_gbs:.0%} of the faster copy |")


# ----- GEMV weight streaming (decode) --------------------------------------------------------
GEMV_FORMATS = ("f32", "q8_0", "q4_1", "q4_0", "q5_0", "q4_k", "q5_k", "q6_k")


def gemv_weight(qtype: str, rows: int, cols: int, rng: np.random.Generator):
    """(bytes to bind, float64 matrix they decode to) of a random rows x cols `qtype` weight:
    gguf's quantizer where it has one, else random blocks (luminal.testing.quant)."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize as gguf_dequantize
    from gguf.quants import quantize
    from luminal.testing.quant import random_blocks

    w = rng.standard_normal((rows, cols)).astype(np.float32)
    if qtype == "f32":
        return w, w.astype(np.float64)
    try:
        data = quantize(w, getattr(Q, qtype.upper()))
    except NotImplementedError:
        data = random_blocks(qtype, rows, cols, rng)
    return data, gguf_dequantize(data, getattr(Q, qtype.upper())).astype(np.float64)


def gemv_graph(qtype: str, data: np.ndarray, x: np.ndarray, rows: int, cols: int,
               activations: str | None):
    """(execute, output) of x @ W.T compiled with LUMINAL_CPU_QUANT_ACTIVATIONS=activations
    (None: the default)."""
    from luminal.quant import dequantize

    saved = os.environ.pop("LUMINAL_CPU_QUANT_ACTIVATIONS", None)
    if activations is not None:
        os.environ["LUMINAL_CPU_QUANT_ACTIVATIONS"] = activations
    try:
        g = lm.Graph()
        xt = g.tensor((1, cols))
        if qtype == "f32":
            wt = weight = g.tensor((rows, cols))
        else:
            wt = g.tensor(data.shape, dtype=lm.uint8)
            weight = dequantize(wt, qtype, (rows, cols))
        out = (xt @ weight.T).retrieve()
        g.compile((lm.GenericCompiler(), CpuBackend()))
    finally:
        os.environ.pop("LUMINAL_CPU_QUANT_ACTIVATIONS", None)
        if saved is not None:
            os.environ["LUMINAL_CPU_QUANT_ACTIVATIONS"] = saved
    xt.set(x)
    wt.set(data)
    return g.execute, out


GEMV_BYTES = 96 * 2**20  # each GEMV weight streamed: three times the 32 MB L3 of our machines


def bench_gemv(values: int, reps: int, rounds: int,
               formats: tuple[str, ...] = GEMV_FORMATS) -> None:
    """x @ W.T for one token with W fp32 and GGUF-quantized: weight bytes per second, for the
    default activation setting and, for the quantized formats, each other one
    (`luminal_cpu.source.QUANT_ACTIVATIONS`), timed in interleaved rounds with a copy of a
    GEMV_BYTES array (the faster of NumPy's and torch's) in each round, so that on a shared
    machine the percentage compares figures taken in the same minutes (medians over all
    rounds). Every weight is at least GEMV_BYTES, more than the L3 holds, so weights and copy
    both stream from DRAM: `values` weights are quantized and their rows repeated until the
    matrix is that large (the repeats are distinct memory: no cache hit helps the kernel).
    The 32-value formats use SmolLM2's LM head width (576 columns); the K-quants need columns
    in multiples of 256, so they use 2048 (Gemma 3's FFN width)."""
    from luminal_cpu.source import QUANT_ACTIVATIONS, quant_activations

    rng = np.random.default_rng(3)
    default = quant_activations()
    buffer = rng.standard_normal(GEMV_BYTES // 4).astype(np.float32)
    for qtype in formats:
        cols = 2048 if qtype.endswith("_k") else 576
        # rows a multiple of 16, as real models' are (luminal-cpu repacks the 32-value formats
        # only then)
        block, w = gemv_weight(qtype, values // cols // 16 * 16, cols, rng)
        repeats = -(-GEMV_BYTES // block.nbytes)
        data = np.tile(block, (repeats, 1))
        rows = data.shape[0]
        x = rng.standard_normal((1, cols)).astype(np.float32)
        settings = [default] if qtype == "f32" else \
            [default] + [a for a in QUANT_ACTIVATIONS if a != default]
        runs = {a: gemv_graph(qtype, data, x, rows, cols, a) for a in settings}
        times: dict[str, list[float]] = {a: [] for a in settings}
        copies = []
        for _ in range(rounds):
            copies.append(max(copy_bandwidth(buffer, reps)))
            for a, (execute, _) in runs.items():
                times[a].append(timeit(execute, reps)[0])
        copy_gbs = statistics.median(copies)
        want = np.tile(x @ w.T, repeats)
        scale = np.tile(np.abs(x).astype(np.float64) @ np.abs(w.T), repeats)
        for a, (execute, out) in runs.items():
            # int8 activations: about 1e-3 of sum |x w| away from the float product
            assert np.all(np.abs(out.numpy() - want) <= 1e-2 * scale + 1e-30), (qtype, a)
            median, best = statistics.median(times[a]), min(times[a])
            gbs = data.nbytes / median / 1e9
            per_cpu_s = data.nbytes / cpu_seconds(execute, reps) / 1e9
            if qtype == "f32":
                np_t = timeit(lambda x=x, w=data: x @ w.T, reps)  # float32, as luminal reads it
                other = f"NumPy {data.nbytes / np_t[0] / 1e9:.1f} GB/s"
            else:
                other = "-"
            label = "" if qtype == "f32" else f", x {a}" + (" (default)" if a == default else "")
            print(f"| GEMV 1x{cols} @ {cols}x{rows} {qtype}{label} ({data.nbytes / 1e6:.0f} MB) | "
                  f"{median * 1e3:.2f} ({best * 1e3:.2f}), {gbs:.1f} GB/s | {other} | "
                  f"{gbs / copy_gbs:.0%} of copy bandwidth ({copy_gbs:.1f} GB/s); "
                  f"{per_cpu_s:.1f} GB per CPU-second |")


# ----- MLP (SwiGLU FFN) ----------------------------------------------------------------------
def bench_mlp(seq: int, reps: int) -> None:
    cfg = T.Config()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((seq, cfg.hidden)).astype(np.float32)
    w = T.random_weights(cfg, rng)
    g = lm.Graph()
    xt = g.tensor((seq, cfg.hidden))
    ws = {n: g.tensor(w[n].shape) for n in ("w_gate", "w_up", "w_down")}
    out = F.linear(F.silu(F.linear(xt, ws["w_gate"])) * F.linear(xt, ws["w_up"]),
                   ws["w_down"]).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xt.set(x)
    for n, t in ws.items():
        t.set(w[n])
    tx = torch.from_numpy(x)
    tw = {n: torch.from_numpy(w[n]) for n in ws}

    def torch_mlp():
        with torch.no_grad():
            h = torch.nn.functional.silu(torch.nn.functional.linear(tx, tw["w_gate"]))
            h = h * torch.nn.functional.linear(tx, tw["w_up"])
            return torch.nn.functional.linear(h, tw["w_down"])

    lm_t = timeit(g.execute, reps)
    np.testing.assert_allclose(out.numpy(), torch_mlp().numpy(), rtol=1e-3, atol=1e-3)
    torch_t = timeit(torch_mlp, reps)
    flops = 2 * seq * cfg.hidden * cfg.ffn * 3
    row(f"SwiGLU MLP 576->1536->576, {_tokens(seq)}", lm_t, "torch", torch_t,
        f"({flops / lm_t[0] / 1e9:.0f} GFLOP/s) ")


# ----- transformer block ---------------------------------------------------------------------
def torch_block(cfg: T.Config, x, w, cos, sin):
    fn = torch.nn.functional
    seq, hd = x.shape[0], cfg.head_dim

    def rope(t):
        half = hd // 2
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

    def rms(t, weight):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + cfg.eps) * weight

    h = rms(x, w["attn_norm"])
    q = fn.linear(h, w["wq"]).view(seq, cfg.heads, hd).transpose(0, 1)
    k = fn.linear(h, w["wk"]).view(seq, cfg.kv_heads, hd).transpose(0, 1)
    v = fn.linear(h, w["wv"]).view(seq, cfg.kv_heads, hd).transpose(0, 1)
    att = fn.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=True)
    x = x + fn.linear(att.transpose(0, 1).reshape(seq, cfg.hidden), w["wo"])
    h = rms(x, w["ffn_norm"])
    return x + fn.linear(fn.silu(fn.linear(h, w["w_gate"])) * fn.linear(h, w["w_up"]),
                         w["w_down"])


def bench_block(seq: int, reps: int) -> None:
    cfg = T.Config(layers=1)
    rng = np.random.default_rng(2)
    g, x, cos, sin, weights, out = T.build(cfg)
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xs = rng.standard_normal((seq, cfg.hidden)).astype(np.float32)
    c, s = T.rope_tables(seq, cfg.head_dim)
    w = T.random_weights(cfg, rng)
    x.set(xs)
    cos.set(c)
    sin.set(s)
    for n, t in weights[0].items():
        t.set(w[n])
    tw = {n: torch.from_numpy(a) for n, a in w.items()}
    args = (torch.from_numpy(xs), tw, torch.from_numpy(c), torch.from_numpy(s))

    def run_torch():
        with torch.no_grad():
            return torch_block(cfg, *args)

    lm_t = timeit(g.execute, reps)
    np.testing.assert_allclose(out.numpy(), run_torch().numpy(), rtol=1e-3, atol=1e-3)
    torch_t = timeit(run_torch, reps)
    row(f"transformer block (576 hidden, 9/3 heads, SwiGLU 1536), {_tokens(seq)}", lm_t,
        "torch", torch_t)


# ----- compile time --------------------------------------------------------------------------
def bench_compile(layers: int) -> None:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LUMINAL_CACHE"] = cache
        results = []
        for _ in range(2):
            g, *_ = T.build(T.Config(layers=layers))
            start = time.perf_counter()
            lm.GenericCompiler().compile(g)
            generic = time.perf_counter() - start
            start = time.perf_counter()
            g.compile(CpuBackend())
            results.append((generic, time.perf_counter() - start, g.runtime.stats))
        del os.environ["LUMINAL_CACHE"]
    (g1, cold, stats), (g2, warm, _) = results
    print(f"| compile {layers}-layer transformer ({len(g.nodes)} nodes, {stats['kernels']} "
          f"kernels, {stats['calls']} calls): cpu backend | cold {cold:.2f} s | from cache "
          f"{warm:.2f} s | GenericCompiler before it: {g1:.2f} s / {g2:.2f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--gemv", action="store_true",
                        help="only the copy bandwidth and the GEMV rows")
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved timing rounds per GEMV activation setting (default 3)")
    parser.add_argument("--formats", default=",".join(GEMV_FORMATS),
                        help="comma-separated GEMV weight formats (default %(default)s)")
    args = parser.parse_args()
    formats = tuple(args.formats.split(","))
    unknown = sorted(set(formats) - set(GEMV_FORMATS))
    if unknown:
        parser.error(f"--formats: unknown {unknown}; choose from {', '.join(GEMV_FORMATS)}")
    reps = 5 if args.quick else 20
    print(f"threads: luminal OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
          f"torch {torch.get_num_threads()}; times in ms: median (best)\n")
    print("| benchmark | luminal-cpu | other | speedup |")
    print("| --- | --- | --- | --- |")
    bench_chain(16 * 1024 * 1024, reps)
    bench_gemv(8192 * 2048, reps, args.rounds, formats)
    if args.gemv:
        return
    for seq in (1, 128):
        bench_mlp(seq, reps * 5 if seq == 1 else reps)
    for seq in (1, 128):
        bench_block(seq, reps * 5 if seq == 1 else reps)
    bench_compile(30)


if __name__ == "__main__":
    main()
