"""Helpers shared by the SmolLM2 tests that compare greedy generation across systems."""

from __future__ import annotations

import warnings

import luminal as lm
import pytest

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


def cpu_generator(path):
    """A `Generator` for the GGUF at `path` on luminal-cpu (its quantized weights kept)."""
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama
    from luminal_models.tokenizer import Tokenizer

    return Generator(Llama.from_gguf(path, progress=False), Tokenizer.from_gguf(path),
                     cpu_backend())
