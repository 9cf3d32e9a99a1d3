"""Fused kernels through non-contiguous views, symbolic dims and every dtype, vs reference."""

from __future__ import annotations

import luminal as lm
import numpy as np
from cpu_helpers import check_vs_reference, run_on
from luminal_codegen import lower
from luminal_cpu import CpuBackend
from luminal_cpu.source import kernel_source

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_permuted_sliced_padded_views_fuse_into_one_chain():
    def build(g):
        a = g.tensor((6, 8, 5))
        b = g.tensor((5, 8))
        x = a.permute(2, 1, 0)[:, ::2, 1:5]  # (5, 4, 4) with a step and an offset
        y = b[:, 1::2].unsqueeze(-1).expand(5, 4, 4)
        z = (x * y + 1).exp2().pad((1, 2, 0, 0, 0, 0)) * 0.5
        return [a, b], [z, (x - y).flip(0)]

    check_vs_reference(build, [[randn(6, 8, 5), randn(5, 8)]])


def test_reductions_on_views_and_keepdim():
    def build(g):
        a = g.tensor((4, 7, 9))
        x = a.permute(1, 0, 2)[:, :, ::-2]
        return [a], [x.sum(0), x.amax(-1, keepdim=True), x.softmax(1), x.mean((0, 2))]

    check_vs_reference(build, [[randn(4, 7, 9)]])


def test_symbolic_dims_at_two_sizes_on_one_compiled_graph():
    def build(g):
        a = g.tensor(("n", 16))
        b = g.tensor((16,))
        h = (a * b).relu() + a.softmax(-1)
        return [a, b], [h, h.sum(0), a[1:, ::2].pad((0, 0, 2, 0))]

    check_vs_reference(build, [[randn(5, 16), randn(16)], [randn(23, 16), randn(16)],
                               [randn(3, 16), randn(16)]])


def _rotated_heads(g, heads: int, dim: int):
    """Heads of (seq, heads * dim) rows rotated by their halves and by adjacent pairs (both
    rotary forms), each read as (heads, seq, dim): a reshape along the symbolic seq."""
    x = g.tensor(("seq", heads * dim))
    cos, sin = g.tensor(("seq", dim // 2)), g.tensor(("seq", dim // 2))
    h = x.unflatten(-1, (heads, dim)).permute(1, 0, 2)
    a, b = h[..., : dim // 2], h[..., dim // 2:]
    halves = lm.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    pairs = h.unflatten(-1, (dim // 2, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    adjacent = lm.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return [x, cos, sin], [halves, adjacent]


def test_rotated_halves_of_heads_over_a_symbolic_seq_match_numpy_without_division():
    """RoPE's rotated half over heads split from a row of symbolic length: the index of a
    head is a division by a multiple of `seq` that only the loop extents decide
    (`luminal_codegen.simplify.bound_by_extents`); odd head counts and half widths, several
    lengths on one compiled graph, against NumPy's float32 arithmetic (the same operations in
    the same order: equal to the last bit)."""
    heads, dim = 3, 10
    datas = []
    for seq in (1, 6, 13):
        datas.append([randn(seq, heads * dim), randn(seq, dim // 2), randn(seq, dim // 2)])
    for (x, cos, sin), (halves, adjacent) in zip(
            datas, run_on(CpuBackend(), lambda g: _rotated_heads(g, heads, dim), datas)):
        h = x.reshape(len(x), heads, dim).transpose(1, 0, 2)
        a, b = h[..., : dim // 2], h[..., dim // 2:]
        np.testing.assert_array_equal(halves, np.concatenate([a * cos - b * sin,
                                                              b * cos + a * sin], -1))
        a, b = h[..., 0::2], h[..., 1::2]
        want = np.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(heads, len(x), dim)
        np.testing.assert_array_equal(adjacent, want)

    g = lm.Graph()
    for t in _rotated_heads(g, heads, dim)[1]:
        t.retrieve()
    g.compile(lm.GenericCompiler())
    for k, kernel in enumerate(lower(g).kernels):
        source = kernel_source(kernel, f"k{k}")
        # a thread's chunk of rows starts with one division, stepped onwards after
        body = [line for line in source.splitlines() if "lm_lo" not in line]
        assert not any(" / " in line or " % " in line or "lm_floor" in line
                       for line in body), source


def test_float16_and_bfloat16_compute_in_f32_store_half():
    for dt, np_dt in ((lm.float16, np.float16), (lm.bfloat16, lm.bfloat16.numpy)):
        def build(g, dt=dt):
            a = g.tensor((8, 12), dtype=dt)
            b = g.tensor((12,), dtype=dt)
            return [a, b], [(a * b + 1).sqrt().log2(), (a * a).sum(-1), a.amax(0),
                            a.to(lm.float32) * 3]

        data = [[np.abs(randn(8, 12)).astype(np_dt), np.abs(randn(12)).astype(np_dt)]]
        check_vs_reference(build, data, atol=1e-2, rtol=1e-2)


def test_int32_and_bool_ops_wrap_and_compare_like_numpy():
    def build(g):
        a = g.tensor((10,), dtype=lm.int32)
        b = g.tensor((10,), dtype=lm.int32)
        return [a, b], [a + b, a * b, a.fmod(b), a < b, (a < b) | (b < 0), a.sum(), a.amax()]

    big = np.array([2**31 - 1, -(2**31), 7, -7, 0, 5, 3, -1, 100, 2], np.int32)
    other = np.array([1, -1, 3, 2, 0, 0, -4, -1, 7, 2**30], np.int32)
    check_vs_reference(build, [[big, other]])


def test_inf_and_nan_semantics_survive_compilation():
    def build(g):
        a = g.tensor((6,))
        return [a], [a.amax(), a.exp(), a.reciprocal(), a.sqrt(), a.log2(), a.fmod(2.0)]

    data = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.5], np.float32)
    check_vs_reference(build, [[data]])


def test_scalar_and_empty_outputs():
    def build(g):
        a = g.tensor(("n", 3))
        return [a], [a.sum(), a * 2, g.constant(2.5) * 2]

    check_vs_reference(build, [[randn(4, 3)], [np.zeros((0, 3), np.float32)]])


def test_reductions_across_rows_run_lanes_side_by_side():
    def build(g):
        a = g.tensor(("n", 70))
        i = g.tensor(("n", 70), dtype=lm.int32)
        return [a, i], [a.sum(0) * 2, a.amax(0), a.mean(0, keepdim=True) - a[:1],
                        i.sum(0), (i > 0).any(0), a.half().sum(0)]

    x = randn(33, 70)
    x[3, 5] = np.nan
    ints = rng.integers(-5, 5, (33, 70)).astype(np.int32)
    check_vs_reference(build, [[x, ints], [x[:1], ints[:1]]], atol=1e-2, rtol=1e-3)
