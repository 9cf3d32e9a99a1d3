#!/usr/bin/env bash
# Runs luminal-cuda's GPU checks on a machine with an NVIDIA GPU and no network (the lent
# device machine of the development workplace), from a checkout that carries:
#   .whl/          the luminal wheels (`bash scripts/gpu-session.sh pack` builds them here)
#                  plus gguf's wheel (transformers reads the GGUF through it)
#   .model/        SmolLM2-135M-Instruct.Q4_1.gguf, whole or as part.* pieces sent in turn, or
#                  only its skeleton (scripts/gguf_skeleton.py strip, 0.6 MB): the stages then
#                  run on random weights of the same shapes and types (speed only; `models`
#                  still compares cuda with cpu on them); gemma3.skeleton.gguf.gz (2.1 MB), the
#                  same for Gemma 3 270M Q4_K_M (the `gemma` stage and MODEL=gemma3); or the
#                  real Gemma 3 file as gemma3.part.NN pieces, one or more per call, with
#                  gemma3.sha256: the pieces gather in the machine's model folder, and once
#                  they join into a file of that checksum it replaces the stand-in
# Usage: bash scripts/gpu-session.sh pack            (on the development machine)
#        bash scripts/gpu-session.sh pack-gemma      (the real Gemma 3 file cut into 55 MB
#                                                     pieces in .gpu-pieces/, to copy into
#                                                     .model/ one per call, and its checksum)
#        bash scripts/gpu-session.sh STAGE [STAGE...] (on the GPU machine; STAGE in
#        env tests models gemma profile bench; none just gathers pieces); logs go to $OUT
#        (or ./gpu-out). MODEL=gemma3 profiles and benchmarks Gemma 3 instead of SmolLM2.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
MODEL_DIR=${LUMINAL_CACHE:-/root/luminal-models}
MODEL=${MODEL:-smollm2}
export LUMINAL_CACHE=$MODEL_DIR PYTHONUNBUFFERED=1

pack() {
  rm -rf .whl packages/*/build && mkdir -p .whl
  for p in core codegen cpu cuda nn models train; do
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl "packages/luminal-$p" || exit 1
  done
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d .whl 'gguf==0.19.0' || exit 1
}

pack_gemma() {
  local src
  src=$("$PY" -c "from luminal_models.hub import gemma3_path; print(gemma3_path(progress=False))") \
    || exit 1
  rm -rf .gpu-pieces && mkdir -p .gpu-pieces .model
  split -b 55M -d "$src" .gpu-pieces/gemma3.part. || exit 1
  sha256sum < "$src" | cut -d' ' -f1 > .model/gemma3.sha256
  ls -l .gpu-pieces
}

install() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
  mkdir -p "$MODEL_DIR"
  if compgen -G ".model/part.*" >/dev/null; then cp .model/part.* "$MODEL_DIR/"; fi
  if [ -f .model/SmolLM2-135M-Instruct.Q4_1.gguf ]; then cp .model/*.gguf "$MODEL_DIR/"; fi
  if [ ! -f "$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" ] && compgen -G "$MODEL_DIR/part.*" >/dev/null \
     && [ "$(ls "$MODEL_DIR"/part.* | wc -l)" -ge 2 ]; then
    cat "$MODEL_DIR"/part.* > "$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
  fi
  if [ ! -f "$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" ] && [ -f .model/smollm2.skeleton.gguf.gz ]; then
    mkdir -p /tmp/synthetic
    "$PY" scripts/gguf_skeleton.py fill .model/smollm2.skeleton.gguf.gz \
      /tmp/synthetic/SmolLM2-135M-Instruct.Q4_1.gguf || exit 1
    MODEL=/tmp/synthetic/SmolLM2-135M-Instruct.Q4_1.gguf
    echo "SYNTHETIC WEIGHTS (random, SmolLM2's shapes and types): speed figures only"
  fi
  local gemma=$MODEL_DIR/gemma-3-270m-q4_k_m.gguf
  if compgen -G ".model/gemma3.part.*" >/dev/null; then cp .model/gemma3.part.* "$MODEL_DIR/"; fi
  if [ ! -f "$gemma" ] && [ -f .model/gemma3.sha256 ] \
     && compgen -G "$MODEL_DIR/gemma3.part.*" >/dev/null; then
    cat "$MODEL_DIR"/gemma3.part.* > "$gemma.joining"
    if [ "$(sha256sum < "$gemma.joining" | cut -d' ' -f1)" = "$(cat .model/gemma3.sha256)" ]; then
      mv "$gemma.joining" "$gemma"
    else
      rm -f "$gemma.joining"
      echo "Gemma 3: $(ls "$MODEL_DIR"/gemma3.part.* | wc -l) pieces gathered, not all yet"
    fi
  fi
  if [ -f "$gemma" ]; then
    export LUMINAL_GEMMA3_GGUF=$gemma
    if [ "$MODEL" = gemma3 ]; then MODEL=$gemma; fi
    echo "Gemma 3: the real file (checksum verified)"
  elif [ -f .model/gemma3.skeleton.gguf.gz ]; then
    mkdir -p /tmp/synthetic
    "$PY" scripts/gguf_skeleton.py fill .model/gemma3.skeleton.gguf.gz \
      /tmp/synthetic/gemma-3-270m-q4_k_m.gguf || exit 1
    export LUMINAL_GEMMA3_GGUF=/tmp/synthetic/gemma-3-270m-q4_k_m.gguf
    if [ "$MODEL" = gemma3 ]; then MODEL=$LUMINAL_GEMMA3_GGUF; fi
    echo "Gemma 3: SYNTHETIC WEIGHTS (random, its shapes and quant types)"
  fi
}

env_report() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  "$PY" - <<'PY'
import sys, cupy, numpy
print("python", sys.version.split()[0], "numpy", numpy.__version__, "cupy", cupy.__version__)
print("cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion(),
      "nvrtc", cupy.cuda.nvrtc.getVersion())
try:
    import torch; print("torch", torch.__version__, torch.version.cuda)
except Exception as e: print("torch:", e)
import luminal_cuda; print("probe:", luminal_cuda.probe())
PY
  "$PY" -m luminal.cli backends || true
  ls -la "$MODEL_DIR" || true
}

run_tests() {
  LUMINAL_REQUIRE_HW=cuda "$PY" -m pytest -p no:cacheprovider -n 12 -q -m cuda \
    packages/luminal-cuda/tests 2>&1 | tee "$OUT/cuda-tests.log" | tail -40
}

run_models() {
  LUMINAL_REQUIRE_HW=cuda "$PY" -m pytest -p no:cacheprovider -q -rs -s \
    packages/luminal-models/tests/test_llama_cuda.py 2>&1 | tee "$OUT/models-tests.log" | tail -30
}

run_gemma() {
  LUMINAL_REQUIRE_HW=cuda "$PY" -m pytest -p no:cacheprovider -q -rs -s \
    packages/luminal-models/tests/test_gemma3_cuda.py 2>&1 | tee "$OUT/gemma-tests.log" | tail -30
}

run_profile() {
  "$PY" benchmarks/cuda_profile.py --model "$MODEL" --trace "${TRACE:-0}" \
    ${DTYPES:+--dtype "$DTYPES"} 2>&1 | tee "$OUT/profile-$(basename "$MODEL" .gguf).log"
}

run_bench() {
  local name; name=$(basename "$MODEL" .gguf)${TAG:+-$TAG}  # TAG: runs of one model kept apart
  "$PY" benchmarks/cuda_bench.py --model "$MODEL" --runs "${RUNS:-5}" ${SYSTEMS:+--systems "$SYSTEMS"} \
    --json > "$OUT/bench-$name.json" 2> "$OUT/bench-$name.err"
  cat "$OUT/bench-$name.json"; tail -5 "$OUT/bench-$name.err"
}

if [ "${1:-}" = pack ]; then pack; exit; fi
if [ "${1:-}" = pack-gemma ]; then pack_gemma; exit; fi
install
for stage in "$@"; do
  echo "=== $stage"
  case $stage in
    env) env_report ;;
    tests) run_tests ;;
    models) run_models ;;
    gemma) run_gemma ;;
    bench) run_bench ;;
    profile) run_profile ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
