"""The backend-neutral code generator (luminal_codegen): fusion decisions, memory planning and
the dialects of the C-family renderer."""

from __future__ import annotations

import luminal as lm
import pytest
from luminal_codegen import Kernel, lower, plan_memory, render_kernel
from luminal_cpu.dialect import C


def lowered(build):
    g = lm.Graph()
    for t in build(g):
        t.retrieve()
    g.compile(lm.GenericCompiler())
    return lower(g)


def test_elementwise_chain_and_its_reduction_fuse_into_one_kernel():
    program = lowered(lambda g: [((g.tensor((8, 16)) * 2 + 1).exp2().sqrt().sum(-1))])
    assert len(program.kernels) == 1 and len(program.calls) == 1


def test_views_never_copy():
    def build(g):
        a = g.tensor((4, 6))
        return [(a.T[1:, ::2].pad((1, 1)) * a.T[:5].flip(0)).contiguous()]

    (kernel,) = lowered(build).kernels
    assert len(kernel.params) == 2  # one output, one input: both views read `a` in place


def test_softmax_is_four_kernels_and_the_normalisation_broadcasts():
    program = lowered(lambda g: [g.tensor((3, 10)).softmax(-1)])
    assert len(program.calls) == 4


def test_a_cheap_node_with_several_readers_is_recomputed_not_stored():
    """A mask read by two reductions is computed inside both: one kernel per reduction, no
    buffer for the mask; a node that would compound the recomputation is stored."""
    def build(g):
        x, y = g.tensor((6, 8)), g.tensor((6, 8))
        mask = (x < y).to(lm.float32) * -1 + 1
        return [(mask * x).sum(-1), mask.sum(-1)]

    program = lowered(build)
    assert len(program.calls) == 2 and len(program.buffers) == 4

    def chain(g):
        x, a, b = g.tensor((4, 8)), g.tensor((4, 8)), g.tensor((4, 8))
        h = x + a  # read twice: recomputed
        r = h + b  # read twice and holds h: stored
        return [h.sum(-1), r.sum(-1), r.amax(-1)]

    assert len(lowered(chain).calls) == 4

    def softmax_input(g):
        s = g.tensor((4, 64)) * 2 + 1  # read by a long reduction (the max): stored
        return [(s - s.amax(-1, keepdim=True)).exp2()]

    assert len(lowered(softmax_input).calls) == 3


def test_padded_and_sliced_reads_index_each_axis_without_division():
    """Reading a producer through a pad or a crop keeps per-axis indices (no / or % per
    element; a thread's chunk of rows starts with one division, stepped onwards after)."""
    def build(g):
        x = g.tensor((2, 3, 6, 6))
        return [x.exp2()[:, :, 1:5, 1:5] * 2, x.exp2()[:, :, 1:, :5].pad((1, 0, 0, 1)) * 2]

    source = "".join(render_kernel(k, f"k{i}", C) for i, k in enumerate(lowered(build).kernels))
    body = "\n".join(line for line in source.split("{", 1)[1].splitlines()
                     if "= (lm_lo" not in line and "= lm_lo" not in line)
    assert " / " not in body and " % " not in body


def test_only_enough_outer_axes_are_work_shared():
    """The team shares the fewest outer axes that give the threads rows to share (here 64 x 4
    = 256); the short inner axes stay plain loops the compiler can unroll."""
    def build(g):
        x = g.tensor((64, 16, 6, 6)) * 2  # cheap: recomputed per window read, not stored
        return [x.unfold(2, 3, 1).unfold(3, 3, 1).permute(0, 2, 3, 1, 4, 5).contiguous()]

    (kernel,) = lowered(build).kernels
    source = render_kernel(kernel, "k", C)
    assert "lm_for_begin_work((64) * (4), " in source and source.count("for (long _i") == 4


def test_axes_merge_into_one_flat_loop_for_contiguous_elementwise():
    (kernel,) = lowered(lambda g: [g.tensor((5, 6, 7)) * 3]).kernels
    assert len(kernel.domain) == 1 and kernel.domain[0] == 210


def test_memory_plan_reuses_slots_without_aliasing_a_calls_inputs():
    def build(g):
        x = g.tensor(("n", 32))
        for _ in range(6):
            x = (x.softmax(-1) + 1).contiguous()
        return [x]

    program = lowered(build)
    plan = plan_memory(program)
    temps = [k for k, b in enumerate(program.buffers) if b.role == "temp"]
    assert len(plan.slots) < len(temps)
    slot = plan.slot_of
    for call in program.calls:
        params = program.kernels[call.kernel].params
        outs = {slot.get(b) for p, b in zip(params, call.args) if p.output} - {None}
        ins = {slot.get(b) for p, b in zip(params, call.args) if not p.output} - {None}
        assert not outs & ins
    offsets, total = plan.layout({"n": 10})
    assert total >= max(offsets) and all(o % 64 == 0 for o in offsets)


@pytest.fixture
def half_kernel() -> Kernel:
    def build(g):
        a = g.tensor(("n", 32), dtype=lm.float16)  # 16 or more: an omp simd reduction
        return [(a * a).sum(-1).sqrt()]

    (kernel,) = lowered(build).kernels
    return kernel


@pytest.mark.parametrize(("dialect", "expected"), [
    (C, ["lm_for_begin_work(", "_Float16", "sqrtf(", "#pragma omp simd reduction(+:"]),
])
def test_dialects_render_the_same_kernel(half_kernel, dialect, expected):
    source = render_kernel(half_kernel, "k", dialect)
    for text in expected:
        assert text in source, (text, source)
    assert "lm_floordiv" in dialect.prelude()
