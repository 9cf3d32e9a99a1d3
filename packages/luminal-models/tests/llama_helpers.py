"""Helpers shared by the SmolLM2 tests that compare greedy generation across systems."""

from __future__ import annotations

import warnings

import luminal as lm
import numpy as np
import pytest
from luminal_models.generate import Generator
from luminal_models.tokenizer import Tokenizer

PROMPTS = {"story": "Once upon a time", "chat": "What is the capital of France?"}
TIE_MARGIN = 0.05  # a greedy divergence is excused only where the oracle's top-2 are closer


def cpu_backend():
    """luminal-cpu's backend; skipped (with the reason) only where luminal-cpu is not
    importable: installed but unable to run is a failure."""
    pytest.importorskip("luminal_cpu", reason="luminal-cpu is not installed")
    try:
        return lm.backend("cpu")
    except ValueError:
        # importable from a source checkout but not pip-installed, so no entry point
        # announces it: register its plugin module by hand
        import luminal_cpu.plugin
        from luminal import plugins

        plugins.get_plugin_manager().register(luminal_cpu.plugin, name="luminal-cpu")
        return lm.backend("cpu")


def float_like_cpu_generator(model, tokenizer: Tokenizer) -> Generator:
    """A Generator on luminal-cpu compiled with its float-like `int24` setting (its default
    rounds a prompt's x to 16 bits per group): the reference other backends are compared
    with. The setting is read when the Generator compiles."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int24")
        return Generator(model, tokenizer, cpu_backend())


def forward_logits(model, ids: list[int], backend) -> np.ndarray:
    """One uncached forward of a causal LM over `ids` on `backend`: logits (len(ids), vocab)."""
    g = lm.Graph()
    tokens = g.tensor((1, "seq"), dtype=lm.int32)
    logits = model(tokens).retrieve()
    g.compile((lm.GenericCompiler(), backend))
    tokens.set([ids])
    g.execute()
    return logits.numpy()[0]


def check_greedy(got: list[int], want: list[int], margins: list[float],
                 oracle: str) -> int | None:
    """`got` equals the `oracle`'s greedy ids `want` (None is returned); a divergence is
    tolerated only at a step where the oracle's top-2 logits differ by less than TIE_MARGIN,
    and then that step is returned, after a warning naming it."""
    for step, (a, b) in enumerate(zip(got, want)):
        if a != b:
            assert margins[step] < TIE_MARGIN, (
                f"greedy ids diverge from {oracle}'s at step {step} ({a} vs {b}) where its "
                f"top-2 logits differ by {margins[step]:.3f} >= {TIE_MARGIN}")
            warnings.warn(f"greedy ids diverge from {oracle}'s at step {step}, a near tie "
                          f"(top-2 margin {margins[step]:.3f})", stacklevel=2)
            return step
    assert len(got) == len(want), (got, want)
    return None


def prompt_ids(tok: Tokenizer, prompt: str) -> list[int]:
    """The token ids of one of PROMPTS (the chat one through the chat template)."""
    if prompt == "chat":
        return tok.encode(tok.apply_chat_template([{"role": "user", "content": PROMPTS[prompt]}]))
    return tok.encode(PROMPTS[prompt])


def check_against_cpu(label: str, got: list[int], got_logits: list[np.ndarray],
                      cpu_run: tuple, atol: float) -> int | None:
    """Greedy ids `got` equal luminal-cpu's (`cpu_run` = its ids, top-2 margins and logits;
    a divergence only at a near tie, see `check_greedy`) and the logits of every step up to
    a divergence within `atol` of cpu's; prints the largest difference under `label`.
    Returns the step of the divergence, or None."""
    want, margins, want_logits = cpu_run
    diverged = check_greedy(got, want, margins, "cpu")
    compared = len(want) if diverged is None else diverged + 1
    worst = max(float(np.abs(got_logits[s] - want_logits[s]).max()) for s in range(compared))
    print(f"{label}: {compared} steps compared, max |logit diff| {worst:.2e} (logits span "
          f"{float(np.ptp(want_logits[0])):.1f}), diverged at {diverged}")
    for step in range(compared):
        np.testing.assert_allclose(got_logits[step], want_logits[step], atol=atol, rtol=0,
                                   err_msg=f"{label}: logits at step {step}")
    return diverged


def greedy(gen: Generator, ids: list[int], steps: int, stops: frozenset[int]):
    """Greedy ids and, per step, the gap between the two best logits and the logits."""
    gen.reset()
    logits = gen.forward(ids)
    out, margins, all_logits = [], [], []
    for _ in range(steps):
        all_logits.append(logits.copy())
        top2 = np.partition(logits, -2)[-2:]
        token = int(logits.argmax())
        out.append(token)
        margins.append(float(top2[1] - top2[0]))
        if token in stops or len(out) == steps:
            break
        logits = gen.forward([token])
    return out, margins, all_logits


def cpu_generator(path):
    """A `Generator` for the GGUF at `path` on luminal-cpu (its quantized weights kept)."""
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama
    from luminal_models.tokenizer import Tokenizer

    return Generator(Llama.from_gguf(path, progress=False), Tokenizer.from_gguf(path),
                     cpu_backend())


def hf_greedy(model, ids: list[int], steps: int, stops: frozenset[int]):
    """transformers' greedy ids and, per step, the gap between its two best logits."""
    import torch

    out_ids, margins = [], []
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        for _ in range(steps):
            logits = out.logits[0, -1]
            top2 = torch.topk(logits, 2).values
            token = int(logits.argmax())
            out_ids.append(token)
            margins.append(float(top2[0] - top2[1]))
            if token in stops:
                break
            out = model(torch.tensor([[token]]), past_key_values=out.past_key_values,
                        use_cache=True)
    return out_ids, margins
