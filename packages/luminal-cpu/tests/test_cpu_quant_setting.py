"""`quant_activations`, the quantized matmul call's schedule setting (`Matmul.tuning`): each
value renders its `QUANT_ACTIVATIONS` precision whatever LUMINAL_CPU_QUANT_ACTIVATIONS says,
no setting renders the variable's, and a wrong name or value is refused by name."""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal.quant import dequantize
from luminal.testing.quant import random_blocks
from luminal_codegen import Matmul, Schedule, lower
from luminal_cpu import CpuBackend
from luminal_cpu.source import QUANT_ACTIVATIONS, kernel_source


def quantized_matmul(tuning=()) -> Matmul:
    g = lm.Graph()
    x = g.tensor((1, 1, 64))
    raw = random_blocks("q8_0", 8, 64, np.random.default_rng(0))
    y = (x @ dequantize(g.tensor(raw.shape, dtype=lm.uint8), "q8_0", (8, 64)).T).retrieve()
    lm.GenericCompiler().compile(g)
    root = g.resolve(y.id)
    (kernel,) = lower(g, Schedule(tuning={root: tuning} if tuning else {}),
                      CpuBackend.quant_kernels).kernels
    return kernel


@pytest.mark.parametrize("env", ["float", "int8"])
def test_each_value_renders_its_precision(env, monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", env)
    assert f", {QUANT_ACTIVATIONS[env]}, 0}}, (lm_out)" in kernel_source(quantized_matmul(), "k")
    for code, name in enumerate(QUANT_ACTIVATIONS):
        source = kernel_source(quantized_matmul((("quant_activations", code),)), "k")
        assert f", {QUANT_ACTIVATIONS[name]}, 0}}, (lm_out)" in source


def test_wrong_setting_or_value_is_refused():
    with pytest.raises(ValueError, match=r"quant_activations=99 is outside 0\.\.\d"):
        kernel_source(quantized_matmul((("quant_activations", 99),)), "k")
    with pytest.raises(ValueError, match=r"no setting \['unroll'\]"):
        kernel_source(quantized_matmul((("unroll", 2),)), "k")
