"""SmolLM2 on the rocm backend (OpenCL; PoCL on a CPU in CI) against luminal-cpu: the same
greedy tokens for the fixed prompts of test_llama_model.py, with the GGUF's quantized weights
(Q4_1 / Q8_0 blocks decoded in the kernels of each backend).

Both backends sum in float32 in different orders, so logits differ by about 5e-5; a greedy
divergence is excused only at a near tie of luminal-cpu's two best logits (as test_llama_model
does against transformers). Without an OpenCL device the tests skip, or fail where the device is
required (`rocm` in `LUMINAL_REQUIRE_HW`, or `CI=true`): see `luminal_rocm.testing`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from luminal_models.generate import Generator
from luminal_models.llama import Llama
from luminal_models.tokenizer import Tokenizer

pytest.importorskip("luminal_rocm", reason="luminal-rocm is not installed")
pytest.importorskip("luminal_cpu", reason="luminal-cpu is not installed")

from llama_helpers import check_greedy, float_like_cpu_generator, greedy, prompt_ids
from luminal_rocm.testing import require_opencl

STEPS = 32
LOGITS_ATOL = 1e-3  # float32 summation order only (measured: about 5e-5)


@pytest.fixture(scope="module")
def rocm_backend():
    return require_opencl()


@pytest.fixture(scope="module")
def quantized(smollm2_file: Path) -> Llama:
    return Llama.from_gguf(smollm2_file, quantized=True, progress=False)


@pytest.fixture(scope="module")
def generators(rocm_backend, quantized: Llama, smollm2_tokenizer: Tokenizer) -> dict:
    return {"rocm": Generator(quantized, smollm2_tokenizer, rocm_backend),
            "cpu": float_like_cpu_generator(quantized, smollm2_tokenizer)}


@pytest.mark.parametrize("prompt", ["story", "chat"])
def test_llama_rocm_greedy_matches_cpu(generators, smollm2_tokenizer: Tokenizer, prompt):
    tok = smollm2_tokenizer
    ids = prompt_ids(tok, prompt)
    want, margins, want_logits = greedy(generators["cpu"], ids, STEPS, tok.eos_ids)
    got, _, got_logits = greedy(generators["rocm"], ids, STEPS, tok.eos_ids)
    diverged = check_greedy(got, want, margins, "cpu")
    for step in range(len(want) if diverged is None else diverged + 1):
        np.testing.assert_allclose(got_logits[step], want_logits[step], atol=LOGITS_ATOL, rtol=0,
                                   err_msg=f"logits at step {step}")
    if diverged is not None:
        return
    if prompt == "story":
        assert len(got) == STEPS
    else:
        assert tok.decode(got).strip().startswith("The capital of France is Paris")
