"""Quantized matmuls in the lowering: fused only for the formats a backend has kernels for."""

from __future__ import annotations

import luminal as lm
from luminal.quant import dequantize, row_bytes
from luminal_codegen import Matmul, QuantOperand, lower


def test_lowering_fuses_only_the_backends_formats():
    """A backend's quantized matmul is used for the formats it lists; the others run the
    decomposition (a float product of the decoded weight)."""
    g = lm.Graph()
    x = g.tensor((1, 256))
    raw = g.tensor((4, row_bytes("q4_k", 256)), dtype=lm.uint8)
    (x @ dequantize(raw, "q4_k", (4, 256)).T).retrieve()

    def quant_operands(kernels):
        return [k.b.qtype for k in lower(g, quant_kernels=kernels).kernels
                if isinstance(k, Matmul) and isinstance(k.b, QuantOperand)]

    assert quant_operands({"q4_k"}) == ["q4_k"]
    assert quant_operands({"q8_0", "q4_0", "q4_1"}) == []
