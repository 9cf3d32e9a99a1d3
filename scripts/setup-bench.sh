#!/usr/bin/env bash
# Installs the peers the benchmarks compare against that the tests do not need: llama.cpp,
# through llama-cpp-python built from its PyPI sdist for this CPU (about 15 minutes on 2
# cores the first time; pip caches the wheel). Run after scripts/setup.sh.
# GGML_NATIVE is off on purpose: the native build picked ggml's AMX path on Sapphire Rapids and
# crashed at the first generated token. The explicit x86 feature list below runs on both
# machines we measure on (AMD Zen 4 and Intel Sapphire Rapids, both AVX-512 with VNNI and BF16).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  .venv/bin/python -m pip install -q "llama-cpp-python[server]==0.3.36"
