"""The core's multiply rate per instruction kind, and what it allows prefill's GEMM.

Times long runs of independent AVX-512 multiply-accumulates (12 chains, so latency never
limits them) for the instruction kinds a quantized GEMM could be built on, and the float FMA
and VNNI `vpdpbusd` interleaved (do they issue on separate pipes, adding up, or share them?).
Prints each kind's instructions and products per nanosecond and, from them, the ceiling of
prefill's int8-digit GEMM (`csrc/qgemm8.c`) against the float GEMM: with x as three int8
digits (the float-like default) each 64 byte products cost three `vpdpbusd`, with one digit
(llama.cpp's numerics, `LUMINAL_CPU_QUANT_ACTIVATIONS=int8`) one. Needs gcc and an x86-64
CPU with AVX-512 F / VNNI / BF16; one thread; run it on a quiet machine.

    python benchmarks/simd_peak.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

# name -> (instruction, products per instruction)
KINDS = {
    "float32 FMA (vfmadd231ps)": ("vfmadd231ps", 16),
    "int8 x uint8 (vpdpbusd)": ("vpdpbusd", 64),
    "int16 x int16 (vpdpwssd)": ("vpdpwssd", 32),
    "bfloat16 (vdpbf16ps)": ("vdpbf16ps", 32),
}
CHAINS = 12


def _loop(name: str, sequence: list[str], iterations: int) -> str:
    body = "".join(f'"{op} %%zmm14, %%zmm15, %%zmm{i}\\n"' for i, op in enumerate(sequence))
    return f"""
  t0 = now();
  for (long i = 0; i < {iterations}L; i++)
    __asm__ volatile({body} ::: {", ".join(f'"xmm{i}"' for i in range(len(sequence)))});
  printf("{name}\\t%.6f\\n", (now() - t0) / {iterations}.0 * 1e9 / {len(sequence)});"""


def source(iterations: int) -> str:
    loops = [_loop(op, [op] * CHAINS, iterations) for op, _ in KINDS.values()]
    mixed = ["vfmadd231ps", "vpdpbusd"] * (CHAINS // 2)
    loops.append(_loop("mixed", mixed, iterations))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000_000,
                        help="loop trips per kind (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="best of this many (default 3)")
    args = parser.parse_args()
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, ns in measure(args.iterations).items():
            best[name] = min(ns, best.get(name, ns))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), "unknown CPU")
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


if __name__ == "__main__":
    main()
