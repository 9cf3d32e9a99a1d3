"""SmolLM2 on the cuda backend (a real NVIDIA GPU) against luminal-cpu: the same greedy tokens
for 64 steps on the fixed prompts, in float32 and in float16 compute, with the GGUF's quantized
weights (Q4_1 / Q8_0 blocks decoded by each backend's own kernels).

float32 differs from luminal-cpu only in summation order (cuBLAS, warp reductions), so logits
agree to LOGITS_ATOL["float32"]; float16 stores weights, activations and the KV cache in half
precision (float32 accumulation), so its logits move by LOGITS_ATOL["float16"]. A greedy
divergence is excused only at a near tie of luminal-cpu's two best logits. Skipped without a
GPU (a failure where `cuda` is in `LUMINAL_REQUIRE_HW`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from luminal.testing.hardware import has_cuda, required_hardware
from luminal_models.generate import Generator
from luminal_models.llama import Llama
from luminal_models.tokenizer import Tokenizer

pytest.importorskip("luminal_cuda", reason="luminal-cuda is not installed")

from llama_helpers import check_against_cpu, float_like_cpu_generator, greedy, prompt_ids

pytestmark = pytest.mark.cuda

STEPS = 64
LOGITS_ATOL = {"float32": 1e-3, "float16": 0.15}  # measured on an H100: 4.1e-5 and 9.6e-2


@pytest.fixture(scope="module")
def quantized(smollm2_file: Path) -> Llama:
    if not has_cuda() and "cuda" not in required_hardware():
        pytest.skip("no cuda device")
    return Llama.from_gguf(smollm2_file, quantized=True, progress=False)


@pytest.fixture(scope="module")
def cpu_runs(quantized: Llama, smollm2_tokenizer: Tokenizer) -> dict:
    gen = float_like_cpu_generator(quantized, smollm2_tokenizer)
    return {p: greedy(gen, prompt_ids(smollm2_tokenizer, p), STEPS, smollm2_tokenizer.eos_ids)
            for p in ("story", "chat")}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("prompt", ["story", "chat"])
def test_llama_cuda_greedy_matches_cpu(quantized, cpu_runs, smollm2_tokenizer: Tokenizer,
                                       prompt, dtype):
    from luminal_cuda import CudaBackend

    tok = smollm2_tokenizer
    backend = CudaBackend(dtype=None if dtype == "float32" else dtype)
    gen = Generator(quantized, tok, backend)
    got, _, got_logits = greedy(gen, prompt_ids(tok, prompt), STEPS, tok.eos_ids)
    diverged = check_against_cpu(f"cuda {dtype} {prompt}", got, got_logits, cpu_runs[prompt],
                                 LOGITS_ATOL[dtype])
    if diverged is None and prompt == "chat":
        assert tok.decode(got).strip().startswith("The capital of France is Paris")
