"""Horizontal fusion (`fusion.py`): levels of independent calls, the memory plan made with
them, and fused launches; numbers are checked end to end by the emulated and GPU tests."""

from __future__ import annotations

import numpy as np
import pytest
from luminal_codegen.plan import plan_memory
from luminal_cuda import CudaBackend
from luminal_cuda.attention import THREADS as ATTENTION_THREADS
from luminal_cuda.dialect import THREADS
from luminal_cuda.runtime import CudaRuntime, RuntimeOptions


def accesses(program, call):
    params = program.kernels[call.kernel].params
    reads = {b for p, b in zip(params, call.args) if not p.output}
    writes = {b for p, b in zip(params, call.args) if p.output}
    return reads, writes


def test_levels_keep_every_dependency_and_share_no_memory_within_a_level(decoder_graph):
    g, _ = decoder_graph()
    program, module = CudaBackend().build(g)
    assert [c for level in module.levels for c in level.calls] == list(range(len(program.calls)))
    level_of = {c: k for k, level in enumerate(module.levels) for c in level.calls}
    writer = {}
    for c, call in enumerate(program.calls):
        reads, writes = accesses(program, call)
        for b in reads:  # each input is written at an earlier level
            assert b not in writer or level_of[writer[b]] < level_of[c]
        for b in writes:
            writer[b] = c
    slot_of = module.plan.slot_of
    for level in module.levels:
        used: dict[int, int] = {}  # slot -> the one buffer of this level in it
        for c in level.calls:
            reads, writes = accesses(program, program.calls[c])
            for b in reads | writes:
                if b in slot_of:
                    assert used.setdefault(slot_of[b], b) == b, "a level's buffers share a slot"
    assert any(len(level.calls) > 1 for level in module.levels)
    assert module.fused, "the q/k/v projections (one input) should share a launch"


def test_plan_memory_refuses_steps_out_of_order(decoder_graph):
    g, _ = decoder_graph()
    program, _ = CudaBackend().build(g)
    n = len(program.calls)
    with pytest.raises(ValueError, match="nondecreasing"):
        plan_memory(program, [0] * (n - 1) + [-1])
    with pytest.raises(ValueError, match="every call"):
        plan_memory(program, [0] * (n + 1))


def test_fused_launches_replace_independent_ones_and_keep_block_sizes(fake_cupy,
                                                                     decoder_graph):
    g, x = decoder_graph()
    program, module = CudaBackend().build(g)
    runtime = CudaRuntime(g, program, module, fake_cupy, 0, RuntimeOptions(graph_cache=0))
    g.set_runtime(runtime)
    x.set(np.zeros((1, 1, 64), np.float32))
    g.execute()
    launches = [op for op in fake_cupy.log if op[0] == "launch"]
    assert len(launches) < len(program.calls)
    fused = [op for op in launches if "_fused" in op[1]]
    assert fused and all(op[3] == (THREADS,) for op in fused)
    attention = [op for op in launches if any(
        op[1] == c.kernel.name and "lm_dot" in c.kernel.source
        for c in module.codes if hasattr(c, "kernel") and hasattr(c.kernel, "source"))]
    assert attention and all(op[3] == (ATTENTION_THREADS,) for op in attention)
    copies = [op for op in launches if op[1] == "lm_copies"]
    assert len(copies) == 1  # both cache assignments in one launch
