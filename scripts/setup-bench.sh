#!/usr/bin/env bash
# Installs the peers the benchmarks compare against that the tests do not need: llama.cpp,
# through llama-cpp-python built from its PyPI sdist for this CPU (about 15 minutes on 2
# cores the first time; pip caches the wheel). Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/setup.sh
CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  .venv/bin/python -m pip install -q "llama-cpp-python[server]==0.3.36"
