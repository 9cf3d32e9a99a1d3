"""Property tests over random graphs: GenericCompiler never changes a result, removes every
node that no output needs, and merges duplicate subexpressions."""

from __future__ import annotations

import luminal as lm
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from luminal import ops
from luminal.hl_ops.binary import broadcast_shape
from luminal.reference import ReferenceBackend

UNARY = [
    lambda t: t.sin(),
    lambda t: t.tanh(),
    lambda t: t.sigmoid(),
    lambda t: t.relu(),
    lambda t: -t.abs(),
    lambda t: t * 2.5 + 1,
    lambda t: t * 1 + 0,  # identities for the simplifier
    lambda t: t.abs().sqrt(),
    lambda t: t.tanh().exp(),
    lambda t: (t.abs() + 1).log(),
    lambda t: (t > 0).float() * t,
    lambda t: t.contiguous(),
]
BINARY = [
    lambda a, b: a + b,
    lambda a, b: a - b,
    lambda a, b: a * b,
    lambda a, b: lm.maximum(a, b),
    lambda a, b: lm.where(a > b, a, b * 0.5),
    lambda a, b: a / (b.abs() + 1),
]


def _reduce(t, p):
    axis, keep = p % t.ndim, bool(p % 2)
    reduce = (t.sum, t.amax, t.mean)[(p // t.ndim) % 3]
    return reduce(axis, keep)


def _move(t, p):
    kind, axis = p % 6, (p // 6) % t.ndim
    if kind == 0:
        return t.permute(*reversed(range(t.ndim)))
    if kind == 1:
        return t.flip(axis)
    if kind == 2:
        return t[(slice(None),) * axis + (slice(None, None, 2),)]
    if kind == 3:
        pads = [0, 0] * (t.ndim - 1 - axis) + [1, 0]
        return t.pad(pads)
    if kind == 4:
        return t.reshape(-1) if t.ndim > 1 else t.unsqueeze(0)
    return t[None].expand(2, *t.shape)


Step = tuple[int, int, int, int]  # (kind, first operand, second operand, parameter)
programs = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 20), st.integers(0, 20), st.integers(0, 50)),
    min_size=1, max_size=10,
)
shapes = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
                  min_size=1, max_size=3)


def _build(g: lm.Graph, inputs: list, program: list[Step]) -> list:
    """Run `program` over a pool that starts as `inputs`; every result joins the pool."""
    pool = list(inputs)
    for kind, i, j, p in program:
        a, b = pool[i % len(pool)], pool[j % len(pool)]
        if a.ndim > 3 or a.numel() > 64:
            a = a.sum(0)
        if kind == 0:
            out = UNARY[p % len(UNARY)](a)
        elif kind == 1:
            try:
                broadcast_shape("", a.layout.shape, b.layout.shape)
            except ValueError:
                b = a.flip(0)
            out = BINARY[p % len(BINARY)](a, b)
        elif kind == 2:
            out = _reduce(a, p) if a.ndim else a * 3
        else:
            out = _move(a, p) if a.ndim else a + 1
        pool.append(out)
    return pool[len(inputs):]


def _inputs(g: lm.Graph, input_shapes, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [g.tensor(s, name=f"x{k}").set(rng.uniform(-2, 2, s).astype(np.float32))
            for k, s in enumerate(input_shapes)]


def _run(input_shapes, program, outputs: list[int], optimise: bool, seed: int = 0):
    g = lm.Graph()
    results = _build(g, _inputs(g, input_shapes, seed), program)
    chosen = [results[k % len(results)].retrieve() for k in outputs]
    g.compile((lm.GenericCompiler(), ReferenceBackend()) if optimise else ReferenceBackend())
    g.execute()
    return [t.numpy() for t in chosen]


@settings(max_examples=150, deadline=None)
@given(shapes, programs, st.lists(st.integers(0, 20), min_size=1, max_size=3))
def test_generic_compiler_preserves_results(input_shapes, program, outputs):
    plain = _run(input_shapes, program, outputs, optimise=False)
    optimised = _run(input_shapes, program, outputs, optimise=True)
    for want, got in zip(plain, optimised):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _live(g: lm.Graph) -> set[int]:
    live, stack = set(), list(g.outputs())
    while stack:
        nid = stack.pop()
        if nid not in live:
            live.add(nid)
            stack.extend(e.src for e in g.nodes[nid].inputs)
    return live


@settings(max_examples=100, deadline=None)
@given(shapes, programs, st.integers(0, 20))
def test_generic_compiler_removes_dead_nodes(input_shapes, program, output):
    g = lm.Graph()
    inputs = _inputs(g, input_shapes, 0)
    results = _build(g, inputs, program)
    results[output % len(results)].retrieve()
    before, live = set(g.nodes), _live(g)
    g.compile(lm.GenericCompiler())
    dead = {n for n in before - live if n in g.nodes and not isinstance(g.nodes[n].op, ops.Input)}
    assert not dead, f"dead nodes survived: {[g.nodes[n] for n in dead]}"
    assert all(t.id in g.nodes for t in inputs)  # inputs stay, so their handles work


@settings(max_examples=100, deadline=None)
@given(shapes, programs, st.integers(0, 20))
def test_generic_compiler_merges_duplicate_subexpressions(input_shapes, program, output):
    g = lm.Graph()
    inputs = _inputs(g, input_shapes, 0)
    first = _build(g, inputs, program)[output % len(program)].retrieve()
    second = _build(g, inputs, program)[output % len(program)].retrieve()
    g.compile(lm.GenericCompiler())
    assert first.id == second.id
    keys = [(n.op, tuple((e.src, e.view) for e in n.inputs), n.dtype)
            for n in g.nodes.values() if not isinstance(n.op, ops.Input)]
    assert len(keys) == len(set(keys)), "two live nodes still compute the same thing"


def _compare_optimised(build):
    """`build(g)` -> retrieved tensors; values with and without GenericCompiler."""
    results = []
    for compilers in (ReferenceBackend(), (lm.GenericCompiler(), ReferenceBackend())):
        g = lm.Graph()
        outs = [t.retrieve() for t in build(g)]
        g.compile(compilers).execute()
        results.append([t.numpy() for t in outs])
    for want, got in zip(*results):
        np.testing.assert_array_equal(got, want)
    return results[1]


def test_cse_keeps_apart_the_same_op_through_different_views():
    def build(g):
        x = g.tensor((3,), name="x").set([1.0, 2.0, 4.0])
        return [x * 2 + x.flip(0) * 2]

    (out,) = _compare_optimised(build)
    np.testing.assert_array_equal(out, [10.0, 8.0, 10.0])


def test_constant_folding_respects_padding():
    def build(g):
        padded = g.constant(2.0).expand(3).pad((1, 0)) * 3  # [0, 6, 6, 6]
        return [padded + g.tensor((4,), name="y").set(np.ones(4))]

    (out,) = _compare_optimised(build)
    np.testing.assert_array_equal(out, [1.0, 7.0, 7.0, 7.0])


def test_simplifier_keeps_identities_that_change_the_view():
    def build(g):
        x = g.tensor((2, 3), name="x").set(np.arange(6).reshape(2, 3))
        return [x.T + 0, x.T * 1, (x * 1)[:, 1:], x.pad((1, 0)) * g.constant(1.0)]

    outs = _compare_optimised(build)
    np.testing.assert_array_equal(outs[0], np.arange(6).reshape(2, 3).T)
