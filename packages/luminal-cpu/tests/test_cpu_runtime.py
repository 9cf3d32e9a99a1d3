"""Execution semantics: zero-copy inputs, outputs that stay valid, assignments, kept state,
symbolic dims that grow and shrink on one compiled program."""

from __future__ import annotations

import luminal as lm
import numpy as np
from luminal.symbolic import smin, to_expr
from luminal_cpu import CpuBackend


def compiled(build):
    g = lm.Graph()
    handles = build(g)
    g.compile((lm.GenericCompiler(), CpuBackend()))
    return g, handles


def test_outputs_handed_out_never_change_and_inputs_are_read_in_place():
    g, (a, out) = compiled(lambda g: (a := g.tensor((3,)), (a * 2).retrieve()))
    x = np.ones(3, np.float32)
    a.set(x)
    g.execute()
    first = out.numpy()
    x[:] = 5  # set() keeps this very array: the next run reads the new values, no copy
    g.execute()
    np.testing.assert_array_equal(first, [2, 2, 2])
    np.testing.assert_array_equal(out.numpy(), [10, 10, 10])


def test_assignment_carries_state_across_runs():
    def build(g):
        state = g.tensor((4,), name="state")
        step = g.tensor((4,), name="step")
        new = state * 2 + step
        g.assign(state, new)
        return state, step, new.retrieve()

    g, (state, step, new) = compiled(build)
    state.set(np.zeros(4, np.float32))
    step.set(np.arange(4, dtype=np.float32))
    values = []
    for _ in range(5):
        g.execute()
        values.append(state.numpy().copy())
    want, s = [], np.zeros(4)
    for _ in range(5):
        s = s * 2 + np.arange(4)
        want.append(s.copy())
    np.testing.assert_array_equal(values, want)
    np.testing.assert_array_equal(new.numpy(), want[-1])


def test_growing_cache_with_symbolic_length():
    def build(g):
        cache = g.tensor(("len", 2), name="cache")
        row = g.tensor((1, 2), name="row")
        grown = lm.cat([cache, row], 0)
        g.assign(cache, grown)
        return cache, row, (grown.sum(0)).retrieve()

    g, (cache, row, total) = compiled(build)
    cache.set(np.zeros((0, 2), np.float32))
    rows = []
    for k in range(6):
        rows.append([k, 10 * k])
        row.set(np.array([rows[-1]], np.float32))
        g.execute()
        g.set_dim("len", k + 1)
        np.testing.assert_array_equal(cache.numpy(), np.array(rows, np.float32))
    np.testing.assert_array_equal(total.numpy(), np.array(rows).sum(0))


def test_dims_shrink_after_growing():
    g, (a, out) = compiled(lambda g: (a := g.tensor(("n",)), (a.softmax(0) * a).retrieve()))
    for n in (3, 1000, 2, 50):
        x = np.linspace(-1, 1, n, dtype=np.float32)
        a.set(x)
        g.execute()
        e = np.exp(x - x.max())
        np.testing.assert_allclose(out.numpy(), e / e.sum() * x, rtol=1e-5, atol=1e-7)


def test_kept_tensor_persists_and_can_be_read():
    g, (a, kept, out) = compiled(lambda g: (a := g.tensor((2,)), (k := (a + 1).keep()),
                                            (k * 3).retrieve()))
    a.set(np.array([1, 2], np.float32))
    g.execute()
    np.testing.assert_array_equal(kept.numpy(), [2, 3])
    np.testing.assert_array_equal(out.numpy(), [6, 9])


def test_output_arrays_are_recycled_once_released():
    g, (a, out) = compiled(lambda g: (a := g.tensor((1000,)), (a + 1).retrieve()))
    a.set(np.zeros(1000, np.float32))
    g.execute()
    first = out.numpy()
    g.execute()
    second = out.numpy()  # `first` is still held: a different array
    assert first.ctypes.data != second.ctypes.data
    address = first.ctypes.data
    del first
    g.execute()  # the released array comes back instead of a new allocation
    assert out.numpy().ctypes.data == address


def test_an_output_of_constant_shape_comes_in_its_shape():
    """The last row of a symbolic-length input (a decode step's last-position logits) has a
    constant shape: each run hands out an array of that shape (not a view of a larger one),
    recycled like any output once released, never changed while held."""
    g, (a, out) = compiled(lambda g: (a := g.tensor(("n", 5)), (a[-1:] * 2).retrieve()))
    arrays = []
    for n in (3, 1, 4):
        x = np.arange(n * 5, dtype=np.float32).reshape(n, 5)
        a.set(x)
        g.execute()
        arrays.append(g.fetch(out.id))  # (what a decode step reads: `numpy()` makes a view)
        assert arrays[-1].shape == (1, 5) and arrays[-1].base is None
    for n, got in zip((3, 1, 4), arrays):
        np.testing.assert_array_equal(got, np.arange(n * 5 - 5, n * 5).reshape(1, 5) * 2)
    addresses = {got.ctypes.data for got in arrays}
    assert len(addresses) == 3  # each held when the next run came
    arrays.clear()
    g.execute()
    assert g.fetch(out.id).ctypes.data in addresses


def test_written_rows_land_in_the_input_array():
    """Graph.write on cpu: where the written rows are one contiguous block (batch 1) the
    program computes them straight into the input's array; where they are not (batch 2), or
    the written value is also retrieved, the runtime stores them after the run. Either way the
    input keeps its array and the run reads the rows before the offset plus the new ones."""
    for batch, retrieve_rows in ((1, False), (1, True), (2, False)):
        def build(g, batch=batch, retrieve_rows=retrieve_rows):
            cache = g.tensor((batch, 8, 3), name="cache")
            x = g.tensor((batch, "seq", 3), name="x")
            rows = (x * 3.0 + 1.0).keep()
            g.write(cache, rows, 1, "past")
            if retrieve_rows:
                rows.retrieve()
            seen = lm.cat([cache[:, :"past"], rows], dim=1).sum(-1).retrieve()
            return cache, x, rows, seen

        g = lm.Graph()
        cache, x, rows, seen = build(g)
        cache.set(np.full((batch, 8, 3), -7.0, np.float32))
        g.set_dim("past", 0)
        g.compile((lm.GenericCompiler(), CpuBackend()))
        array, want, past = g.data[cache.id], np.full((batch, 8, 3), -7.0, np.float32), 0
        for n in (4, 1, 1, 2):
            step = np.random.default_rng(past).standard_normal((batch, n, 3)).astype(np.float32)
            x.set(step)
            g.set_dim("past", past)
            g.execute()
            want[:, past:past + n] = step * 3 + 1
            past += n
            np.testing.assert_allclose(seen.numpy(), want[:, :past].sum(-1), atol=1e-5)
            np.testing.assert_allclose(rows.numpy(), step * 3 + 1, rtol=1e-6)
            np.testing.assert_allclose(cache.numpy(), want, rtol=1e-6)
            assert g.data[cache.id] is array


def test_arena_is_given_back_when_the_dims_fall():
    # a prefill's temporaries (n = 2048 rows of 256 floats between two matmuls) are not kept
    # resident through the decode steps (n = 1) that follow, and come back when needed
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 256)).astype(np.float32)
    w2 = rng.standard_normal((256, 8)).astype(np.float32)

    def build(g):
        x = g.tensor(("n", 64))
        return x, ((x @ g.tensor((64, 256)).set(w1)).relu() @ g.tensor((256, 8)).set(w2)).retrieve()

    g, (x, out) = compiled(build)
    sizes = []
    for n in (2048, 1, 2, 2048):
        data = rng.standard_normal((n, 64)).astype(np.float32)
        x.set(data)
        g.execute()
        np.testing.assert_allclose(out.numpy(), np.maximum(data @ w1, 0) @ w2, rtol=1e-4,
                                   atol=1e-3)
        sizes.append(g.runtime._arena.size)
    assert sizes[0] >= 2048 * 256 * 4
    assert sizes[1] < sizes[0] // 100 and sizes[2] < sizes[0] // 100
    assert sizes[3] >= 2048 * 256 * 4


def test_arena_is_laid_out_again_only_when_a_slot_outgrows_its_room(monkeypatch):
    # a decode-like run, one row longer each time: the compiled entry point itself checks the
    # slots against their room and asks for a new layout (with headroom) only when one no
    # longer fits, so most runs bind nothing in Python
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 32)).astype(np.float32)

    def build(g):
        x = g.tensor(("n", 16))
        return x, ((x @ g.tensor((16, 32)).set(w)).relu().softmax(0) * 2).retrieve()

    g, (x, out) = compiled(build)
    runtime, layouts = g.runtime, []
    lay_out = runtime._lay_out_arena
    monkeypatch.setattr(runtime, "_lay_out_arena", lambda dims: (layouts.append(dims["n"]),
                                                                 lay_out(dims)))
    for n in range(1, 201):
        data = rng.standard_normal((n, 16)).astype(np.float32)
        x.set(data)
        g.execute()
        h = np.maximum(data @ w, 0)
        e = np.exp(h - h.max(0))
        np.testing.assert_allclose(out.numpy(), e / e.sum(0) * 2, rtol=1e-5, atol=1e-6)
    assert layouts[0] == 1 and 1 < len(layouts) < 40, layouts


def test_attention_over_written_rows_reads_the_input_itself():
    """`cat([cache[:, :past], rows])` where `rows` is computed straight into the cache at
    `past` (an in-place KV cache) is the cache's first rows: a matmul reading it reads the
    cache, with no copy of the cache per run; a concatenation with other rows is kept."""
    for scale in (1.0, 2.0):
        g = lm.Graph()
        cache = g.tensor((1, 8, 3), name="cache")
        x = g.tensor((1, "seq", 3), name="x")
        w = g.tensor((3, 2), name="w")
        rows = (x * 3.0 + 1.0).keep()
        past_rows = smin(to_expr("past"), 8)  # as nn.InPlaceLayerCache clamps it
        g.write(cache, rows, 1, past_rows)
        keys = lm.cat([cache[:, :past_rows], rows * scale if scale != 1.0 else rows], dim=1)
        seen = (keys @ w).retrieve()
        cache.set(np.zeros((1, 8, 3), np.float32))
        weights = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
        w.set(weights)
        g.set_dim("past", 0)
        g.compile((lm.GenericCompiler(), CpuBackend()))
        program = g.runtime.program
        cache_buf = next(k for k, b in enumerate(program.buffers)
                         if b.role == "input" and g.data.get(b.node) is g.data[cache.id])
        readers = [c for c in program.calls if cache_buf in c.args]
        kinds = {type(program.kernels[c.kernel]).__name__ for c in readers}
        assert (kinds == {"Matmul"}) == (scale == 1.0), kinds
        want, past = np.zeros((1, 8, 3), np.float32), 0
        for n in (3, 1, 1, 2, 1):
            step = np.random.default_rng(past + 1).standard_normal((1, n, 3)).astype(np.float32)
            x.set(step)
            g.set_dim("past", past)
            g.execute()
            keys_want = np.concatenate([want[:, :past], (step * 3 + 1) * scale], axis=1)
            want[:, past:past + n] = step * 3 + 1
            past += n
            np.testing.assert_allclose(seen.numpy(), keys_want @ weights, rtol=1e-5, atol=1e-5)
