#!/usr/bin/env bash
# Every CPU figure of the LLM job in one run, with the machine named: luminal against
# llama.cpp (and transformers) on SmolLM2-135M and Gemma 3 270M, quiet and with one core kept
# busy, the quantized matvecs as a share of copy bandwidth, and the GEMM-bound work against
# PyTorch eager. Needs `scripts/setup-bench.sh` (llama.cpp, transformers) and both models
# (`luminal models`). Takes about 7 minutes on 2 vCPUs (Zen 4), more after a change that
# recompiles the kernels.
#
#   bash benchmarks/llm_cpu_suite.sh [PYTHON] > suite.log 2>&1
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
stamp() { echo; echo "== $* ($(date -u +%H:%M:%S) UTC, load average$(uptime | sed 's/.*average[s]*://'))"; }

stamp "machine"
lscpu | grep -E '^(Model name|CPU family|Model|Thread|Core|Socket|CPU\(s\)|L3)' || true
grep -m1 -o -E 'avx512_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
git log -1 --format='luminal at %h (%cs)' 2>/dev/null || true

for model in smollm2 gemma3; do
  stamp "$model: luminal, llama.cpp, transformers"
  "$python" benchmarks/llm_bench.py --model "$model" --systems luminal,llama.cpp,transformers \
    --runs 3 --max-wait 10
  stamp "$model: one core kept busy"
  "$python" benchmarks/llm_bench.py --model "$model" --systems luminal,llama.cpp --runs 3 \
    --max-wait 10 --busy 1
done
stamp "gemma3: luminal with float-like 24-bit prompt activations (int24)"
"$python" benchmarks/llm_bench.py --model gemma3 --systems luminal,llama.cpp --runs 3 \
  --max-wait 10 --activations int24
stamp "gemma3: luminal with llama.cpp's 8-bit activations"
"$python" benchmarks/llm_bench.py --model gemma3 --systems luminal,llama.cpp --runs 3 \
  --max-wait 10 --activations int8
stamp "quantized matvec against copy bandwidth"
"$python" benchmarks/cpu_bench.py --quick --gemv --rounds 3
stamp "GEMM-bound work against PyTorch eager"
"$python" benchmarks/cpu_bench.py --quick
stamp "done"
