"""The core's multiply rate per instruction kind, and what it allows prefill's GEMM.

Times long runs of independent AVX-512 multiply-accumulates (12 chains, so latency never
limits them) for the instruction kinds a quantized GEMM could be built on, and the float FMA
and VNNI `vpdpbusd` interleaved (do they issue on separate pipes, adding up, or share them?).
Prints each kind's instructions and products per nanosecond and, from them, the ceiling of
prefill's int8-digit GEMM (`csrc/qgemm8.c`) against the float GEMM: with x as three int8
digits (the float-like default) each 64 byte products cost three `vpdpbusd`, with one digit
(llama.cpp's numerics, `LUMINAL_CPU_QUANT_ACTIVATIONS=int8`) one. Needs gcc and an x86-64
CPU with AVX-512 F / VNNI / BF16; one thread; run it on a quiet machine.

With `--model gemma3` (or `smollm2`, or a GGUF path) it also gives the ceiling this rate puts
on that model's 128-token prefill under each LUMINAL_CPU_QUANT_ACTIVATIONS setting: the
`vpdpbusd` a prompt's quantized matmuls need (digits x products / 64) plus the per-group
epilogue operations that issue on the same pipes (the micro-kernel's float multiply and FMAs,
measured here as sharing them or not), at one instruction per measured time on every thread.
Everything else a prefill does (attention, norms, the head, packing) comes on top.

    python benchmarks/simd_peak.py
    python benchmarks/simd_peak.py --model gemma3 --threads 2
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from compile_bench import cpu_model

# name -> (instruction, products per instruction)
KINDS = {
    "float32 FMA (vfmadd231ps)": ("vfmadd231ps", 16),
    "int8 x uint8 (vpdpbusd)": ("vpdpbusd", 64),
    "int16 x int16 (vpdpwssd)": ("vpdpwssd", 32),
    "bfloat16 (vdpbf16ps)": ("vdpbf16ps", 32),
}
CHAINS = 12
# the micro-kernel's per-group epilogue operations (csrc/qgemm8.c): each is timed beside
# CHAINS `vpdpbusd` (EPILOGUE_EACH of it per loop) to see whether it takes their pipes
EPILOGUE_OPS = {"vmulps": "vmulps %%zmm14, %%zmm15, %%zmm{i}",
                "vfmadd231ps": "vfmadd231ps %%zmm14, %%zmm15, %%zmm{i}",
                "vcvtdq2ps": "vcvtdq2ps %%zmm15, %%zmm{i}",
                "vpslld": "vpslld $8, %%zmm15, %%zmm{i}",
                "vaddps": "vaddps %%zmm14, %%zmm15, %%zmm{i}"}
EPILOGUE_EACH = 4
# per LUMINAL_CPU_QUANT_ACTIVATIONS setting: x's digits, rows of x per micro-tile, and the
# epilogue operations per group of a tile (32 columns of W), as csrc/qgemm8.c issues them;
# W with offsets (Q4_1, Q4_K, Q5_K) adds one FMA per row and vector of 16 columns
SETTINGS = {"int8": (1, 6, {"vmulps": 12, "vfmadd231ps": 12, "vcvtdq2ps": 12}),
            "int16": (2, 6, {"vmulps": 12, "vfmadd231ps": 12, "vcvtdq2ps": 12, "vpslld": 12}),
            "int24": (3, 4, {"vmulps": 8, "vfmadd231ps": 16, "vcvtdq2ps": 16, "vpslld": 8})}
GEMM_FORMATS = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"}
OFFSET_FORMATS = {"Q4_1", "Q4_K", "Q5_K"}
MATMULS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
PROMPT_TOKENS = 128


def _loop(name: str, sequence: list[str], iterations: int) -> str:
    """Times `sequence` (instructions with {i}: the destination zmm) per instruction; the
    destinations skip zmm14 and zmm15, the sources."""
    regs = [i if i < 14 else i + 2 for i in range(len(sequence))]
    body = "".join(f'"{op.format(i=r)}\\n"' for op, r in zip(sequence, regs))
    return f"""
  t0 = now();
  for (long i = 0; i < {iterations}L; i++)
    __asm__ volatile({body} ::: {", ".join(f'"xmm{r}"' for r in regs)});
  printf("{name}\\t%.6f\\n", (now() - t0) / {iterations}.0 * 1e9 / {len(sequence)});"""


def _plain(op: str) -> str:
    return op + " %%zmm14, %%zmm15, %%zmm{i}"


def source(iterations: int) -> str:
    loops = [_loop(op, [_plain(op)] * CHAINS, iterations) for op, _ in KINDS.values()]
    mixed = [_plain("vfmadd231ps"), _plain("vpdpbusd")] * (CHAINS // 2)
    loops.append(_loop("mixed", mixed, iterations))
    for name, op in EPILOGUE_OPS.items():
        beside = [_plain("vpdpbusd")] * CHAINS + [op] * EPILOGUE_EACH
        loops.append(_loop(f"beside {name}", beside, iterations))
    return ("#include <stdio.h>\n#include <time.h>\n"
            "static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);"
            " return t.tv_sec + t.tv_nsec * 1e-9; }\n"
            "int main(void) {\n  double t0;\n"
            '  __asm__ volatile("vpxord %%zmm14, %%zmm14, %%zmm14\\n"'
            '"vpxord %%zmm15, %%zmm15, %%zmm15\\n" ::: "xmm14", "xmm15");'
            + "".join(loops) + "\n  return 0;\n}\n")


def measure(iterations: int) -> dict[str, float]:
    """ns per instruction for each kind (and for the FMA / VNNI mix, per instruction)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp, "peak.c"), Path(tmp, "peak")
        src.write_text(source(iterations))
        build = subprocess.run(["gcc", "-O2", "-mavx512f", "-mavx512vnni", "-mavx512bf16",
                                str(src), "-o", str(exe)], capture_output=True, text=True)
        if build.returncode:
            raise SystemExit(f"simd_peak: gcc failed:\n{build.stderr}")
        run = subprocess.run([str(exe)], capture_output=True, text=True)
        if run.returncode:
            raise SystemExit(f"simd_peak: the timing program failed with status "
                             f"{run.returncode} (does this CPU have AVX-512 VNNI and BF16?)"
                             f"\n{run.stderr}")
    return {name: float(ns) for name, ns in (line.split("\t") for line in run.stdout.splitlines())}


def slot_shares(best: dict[str, float]) -> dict[str, float]:
    """Each epilogue operation's cost in `vpdpbusd` issue slots (0: other pipes, 1: the same)."""
    vnni = best["vpdpbusd"]
    per_loop = {name: best[f"beside {name}"] * (CHAINS + EPILOGUE_EACH) for name in EPILOGUE_OPS}
    return {name: max(0.0, (t - CHAINS * vnni) / EPILOGUE_EACH / vnni)
            for name, t in per_loop.items()}


def prefill_ceiling(model: str, best: dict[str, float], threads: int) -> None:
    """Prints the ceiling of `model`'s prefill matmuls under each setting."""
    from luminal_models.gguf_file import GGUFFile
    from luminal_models.hub import resolve_model

    shares = slot_shares(best)
    gguf = GGUFFile(resolve_model(model))
    tensors = [t for t in gguf.tensors.values()
               if t.name.startswith("blk.") and t.name.split(".")[2] in MATMULS]
    gguf.close()
    skipped = sorted({t.qtype.name for t in tensors} - GEMM_FORMATS)
    tensors = [t for t in tensors if t.qtype.name in GEMM_FORMATS]
    macs = sum(t.shape[0] * t.shape[1] for t in tensors) * PROMPT_TOKENS
    print(f"\n{model}: {PROMPT_TOKENS}-token prefill, {macs / 1e9:.2f} G multiply-adds in "
          f"{len(tensors)} quantized matmuls (the head and attention not counted"
          + (f"; {', '.join(skipped)} tensors are not quantized-GEMM formats" if skipped else "")
          + "); epilogue operations in vpdpbusd slots: "
          + ", ".join(f"{name} {share:.2f}" for name, share in shares.items()))
    print(f"\n| setting | vpdpbusd (G) | epilogue slots (G) | ceiling ms, {threads} threads | "
          "tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for setting, (digits, rows, ops) in SETTINGS.items():
        dots = macs * digits / 64
        epilogue = 0.0
        for t in tensors:
            group = 16 if t.qtype.name == "Q6_K" else 32
            per_tile = sum(count * shares[name] for name, count in ops.items())
            if t.qtype.name in OFFSET_FORMATS:
                per_tile += 2 * rows * shares["vfmadd231ps"]
            epilogue += t.shape[0] * t.shape[1] * PROMPT_TOKENS * per_tile / (rows * 32 * group)
        ms = (dots + epilogue) * best["vpdpbusd"] / threads / 1e6
        print(f"| {setting} | {dots / 1e9:.2f} | {epilogue / 1e9:.2f} | {ms:.1f} | "
              f"{PROMPT_TOKENS / ms * 1e3:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000_000,
                        help="loop trips per kind (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (default 3)")
    parser.add_argument("--model", help="also the prefill ceiling of this model (gemma3, "
                                        "smollm2 or a GGUF path)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads the ceiling assumes, each at the measured rate "
                             "(default: the CPUs, %(default)s)")
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, ns in measure(args.iterations).items():
            best[name] = min(ns, best.get(name, ns))
    cpu = cpu_model()
    print(f"{cpu}, one thread, best of {args.rounds}, load average "
          f"{os.getloadavg()[0]:.2f}\n")
    print("| instruction | ns each | products per ns |")
    print("| --- | --- | --- |")
    rate = {}
    for name, (op, products) in KINDS.items():
        rate[op] = products / best[op]
        print(f"| {name} | {best[op]:.3f} | {rate[op]:.1f} |")
    fma, vnni = best["vfmadd231ps"], best["vpdpbusd"]
    mixed = best["mixed"]
    print(f"\nFMA and vpdpbusd interleaved: {mixed:.3f} ns per instruction; separate pipes "
          f"would give {max(fma, vnni) / 2:.3f}, shared ones {(fma + vnni) / 2:.3f}: "
          f"{'shared' if mixed > 0.75 * (fma + vnni) / 2 else 'separate'}.")
    print(f"Prefill GEMM ceiling against the float kernel: x as three int8 digits "
          f"{rate['vpdpbusd'] / 3 / rate['vfmadd231ps']:.2f}x, as one digit "
          f"{rate['vpdpbusd'] / rate['vfmadd231ps']:.2f}x; bfloat16 x in two parts "
          f"{rate['vdpbf16ps'] / 2 / rate['vfmadd231ps']:.2f}x.")
    if args.model:
        prefill_ceiling(args.model, best, args.threads)


if __name__ == "__main__":
    main()
