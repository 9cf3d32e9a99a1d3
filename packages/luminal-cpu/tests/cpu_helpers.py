"""Helpers of the luminal-cpu tests: run a graph on a backend, compare with the reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import luminal as lm
import numpy as np
from luminal.reference import ReferenceBackend
from luminal_cpu import CpuBackend


def run_on(backend, build: Callable, datas: Sequence[Sequence[np.ndarray]]) -> list[list]:
    """Build a graph with `build(g) -> (inputs, outputs)`, compile it once for `backend` and
    execute it once per data set; the outputs of every execution."""
    g = lm.Graph()
    inputs, outputs = build(g)
    outputs = [o.retrieve() for o in outputs]
    g.compile((lm.GenericCompiler(), backend))
    results = []
    for data in datas:
        for t, a in zip(inputs, data):
            t.set(a)
        g.execute()
        results.append([np.array(o.numpy()) for o in outputs])
    return results


def check_vs_reference(build: Callable, datas, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    """The cpu backend gives the reference backend's results (same compiled graph for every
    data set, so symbolic dims are exercised at several sizes)."""
    got = run_on(CpuBackend(), build, datas)
    want = run_on(ReferenceBackend(), build, datas)
    for g_outs, w_outs in zip(got, want):
        for g_out, w_out in zip(g_outs, w_outs):
            assert g_out.shape == w_out.shape and g_out.dtype == w_out.dtype
            np.testing.assert_allclose(g_out.astype(np.float64), w_out.astype(np.float64),
                                       atol=atol, rtol=rtol)


def group(qtype: str) -> int:
    """Values of x per scale in prefill's GEMM (csrc/qgemm8.c): one scale of x per scale of W,
    so 16 for Q6_K (its scales change every 16), 32 for the others."""
    return 16 if qtype == "q6_k" else 32


def quant_matmul_activations(x: np.ndarray, qtype: str, transposed: bool) -> np.ndarray:
    """What the cpu backend's quantized matmul multiplies the `qtype` weights by, as float64,
    for x @ W.T (batch axes folded into the rows of x): in decode's matvec (at most 4 rows)
    `x` rounded to integer digits (the default and int24, csrc/qgemv16.c; not Q8_0) or int8
    blocks (LUMINAL_CPU_QUANT_ACTIVATIONS=int8, csrc/qgemv.c); in prefill's GEMM (more rows,
    csrc/qgemm8.c) `x` rounded to 16 bits per group (the default), to int8 per group (int8) or
    24 bits (int24: `x`, up to 1.8e-7 of a group's max|x|); `x` itself in every other
    product."""
    from luminal.quant import BLOCK_FORMATS
    from luminal.testing.quant import decode_activations, int8_activations, int8_digit_activations
    from luminal_cpu.source import quant_activations

    rows = x.size // x.shape[-1]
    setting = quant_activations()
    if transposed and rows <= 4:
        if setting == "int8":
            return int8_activations(x, BLOCK_FORMATS[qtype].block_size)
        if setting in ("int16", "int24") and qtype != "q8_0":
            return decode_activations(x, qtype)
    if transposed and rows > 4:
        if setting == "int8":
            return int8_activations(x, group(qtype))
        if setting == "int16":
            return int8_digit_activations(x, group(qtype), digits=2)
    return x.astype(np.float64)
