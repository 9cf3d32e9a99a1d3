"""The user-facing graph API: set / compile / execute cycles, handles across compilation,
kept and assigned state, NumPy interop and printing."""

from __future__ import annotations

import shutil
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from luminal.reference import ReferenceBackend


def compiled(g: lm.Graph) -> lm.Graph:
    return g.compile((lm.GenericCompiler(), ReferenceBackend()))


def test_readme_example():
    g = lm.Graph()
    a = g.tensor((3, 1), name="a").set(np.array([[1.0], [2.0], [3.0]], dtype=np.float32))
    b = g.tensor((1, 4), name="b").set([[1.0, 2.0, 3.0, 4.0]])
    c = (a @ b).relu().retrieve()
    compiled(g).execute()
    np.testing.assert_array_equal(c.numpy(), np.array([[1.0], [2.0], [3.0]]) @ [[1, 2, 3, 4]])


def test_reset_inputs_and_execute_again_reuses_the_runtime():
    g = lm.Graph()
    x = g.tensor((2, 3), name="x")
    y = (x.exp() * 2).sum(1).retrieve()
    compiled(g)
    runtime = g.runtime
    for k in range(3):
        data = np.full((2, 3), float(k), dtype=np.float32)
        x.set(data)
        g.execute()
        assert g.runtime is runtime
        np.testing.assert_allclose(y.numpy(), (np.exp(data) * 2).sum(1), rtol=1e-6)


def test_symbolic_dims_change_between_executions_without_recompiling():
    g = lm.Graph()
    x = g.tensor(("seq", 4), name="x")
    y = x.softmax(-1).sum(0).retrieve()
    compiled(g)
    runtime = g.runtime
    for seq in (1, 5, 3):
        data = np.random.default_rng(seq).standard_normal((seq, 4)).astype(np.float32)
        x.set(data)
        g.execute()
        assert g.runtime is runtime
        e = np.exp(data - data.max(-1, keepdims=True))
        np.testing.assert_allclose(y.numpy(), (e / e.sum(-1, keepdims=True)).sum(0), rtol=1e-5)


def test_set_dim_binds_a_dim_no_input_carries():
    g = lm.Graph()
    pos = g.arange("n").retrieve()
    g.set_dim("n", 4)
    compiled(g).execute()
    np.testing.assert_array_equal(pos.numpy(), np.arange(4))
    g.set_dim("n", 2).execute()
    np.testing.assert_array_equal(pos.numpy(), np.arange(2))


def test_a_decode_loop_s_inputs_are_still_checked():
    """What a decode step does: set the same small input again and move a dim no input's
    shape uses. Such runs skip checking the inputs that did not change, yet a wrong shape
    set on any input, or a dim changed under an input that was not set again, still fails."""
    g = lm.Graph()
    x = g.tensor((1, "seq"), name="x")
    w = g.tensor((3,), name="w").set(np.arange(3, dtype=np.float32))
    y = (x.sum() + w.sum() + g.arange("past").sum()).retrieve()
    g.set_dim("seq", 1).set_dim("past", 1)
    compiled(g)
    one = np.zeros((1, 1), np.float32)
    for past in range(1, 5):
        one[0, 0] = 10 * past
        g.set_data(x.id, one)
        g.set_dim("past", past).execute()
        assert float(y.numpy()) == 10 * past + 3 + past * (past - 1) // 2
    g.set_data(x.id, np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="'x' holds data of shape"):
        g.execute()
    g.set_data(x.id, one)
    g.set_data(w.id, np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="'w' holds data of shape"):
        g.execute()
    g.set_data(w.id, np.zeros(3, np.float32))
    g.execute()
    g.set_dim("seq", 2)
    with pytest.raises(ValueError, match="'x' holds data of shape"):
        g.execute()


def test_handles_stay_valid_after_generic_compiler():
    g = lm.Graph()
    x = g.tensor((3,), name="x").set([1.0, 2.0, 3.0])
    a = (x * 1 + 0).retrieve()  # simplified away: the handle now reads x
    b = (x.exp() * 2).retrieve()
    c = (x.exp() * 2).retrieve()  # merged with b by CSE
    d = (g.constant(2.0) * 3 + x).retrieve()  # constants folded
    compiled(g).execute()
    assert b.id == c.id
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(c.numpy(), np.exp([1.0, 2.0, 3.0]) * 2, rtol=1e-6)
    np.testing.assert_array_equal(d.numpy(), [7.0, 8.0, 9.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])


def test_retrieved_view_reads_through_its_view():
    g = lm.Graph()
    x = g.tensor((2, 3), name="x").set(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = (x * 10).retrieve()
    t = y.T  # a view of a retrieved node: no new node, read on the host
    compiled(g).execute()
    np.testing.assert_array_equal(t.numpy(), (np.arange(6).reshape(2, 3) * 10).T)


def test_keep_survives_compilation_and_can_be_read():
    g = lm.Graph()
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    kept = (x * 3).keep()
    (x + 1).retrieve()
    compiled(g).execute()
    assert kept.id in g.nodes
    np.testing.assert_array_equal(kept.numpy(), [3.0, 6.0])


def test_assign_carries_state_across_executions():
    g = lm.Graph()
    state = g.tensor((2,), name="state").set([0.0, 10.0])
    step = g.tensor((2,), name="step").set([1.0, -1.0])
    new = state + step
    g.assign(state, new)
    total = new.sum().retrieve()
    compiled(g)
    for k in range(1, 4):
        g.execute()
        np.testing.assert_array_equal(state.numpy(), [k, 10.0 - k])
        assert total.item() == 10.0
    state.set([5.0, 5.0])  # the host can overwrite state between executions
    g.execute()
    np.testing.assert_array_equal(state.numpy(), [6.0, 4.0])


def test_assign_checks_target_and_value():
    g = lm.Graph()
    state = g.tensor((2,), name="state")
    with pytest.raises(TypeError, match="must be an input"):
        g.assign(state + 1, state)
    with pytest.raises(ValueError, match="does not match"):
        g.assign(state, state.sum())


def test_numpy_interop():
    g = lm.Graph()
    x = g.tensor((2, 2), name="x").set([[1, 2], [3, 4]])
    y = (x > 2).retrieve()
    z = x.sum().retrieve()
    compiled(g).execute()
    arr = np.asarray(y)
    assert arr.dtype == np.bool_ and arr.tolist() == [[False, False], [True, True]]
    assert np.asarray(x, dtype=np.int64).dtype == np.int64
    assert z.item() == 10.0 and y.tolist() == arr.tolist()


def test_execute_without_a_backend_uses_the_reference():
    g = lm.Graph()
    x = g.tensor((2,), name="x").set([1.0, 4.0])
    y = x.sqrt().retrieve()
    g.execute()
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])


def test_scalar_input():
    g = lm.Graph()
    s = g.tensor((), name="s").set(3.0)
    y = (s * 2).retrieve()
    g.execute()
    assert y.item() == 6.0


def test_to_dot_describes_nodes_before_and_after_compilation():
    g = lm.Graph()
    x = g.tensor((2, 3), name="x").set(np.ones((2, 3)))
    y = (x.T * 2 + 0).retrieve()
    before = g.to_dot()
    assert before.startswith("digraph luminal {") and before.rstrip().endswith("}")
    assert "Input x" in before and "Mul" in before and "Add" in before
    assert "style=dashed" in before  # x is read through a transposed view
    compiled(g)
    after = g.to_dot()
    assert "Add" not in after  # + 0 was simplified away
    assert f"n{y.id} " in after


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` is not installed")
def test_display_renders_svg(tmp_path):
    g = lm.Graph()
    (g.tensor((2,), name="x") * 2).retrieve()
    path = g.display(str(tmp_path / "graph.svg"))
    assert Path(path).read_text().lstrip().startswith(("<?xml", "<svg"))


def test_repr_lists_nodes():
    g = lm.Graph()
    x = g.tensor((2,), name="x")
    (x + 1).retrieve()
    text = repr(g)
    assert "Input x" in text and "Add" in text and "float32(2,)" in text
    assert "GraphTensor" in repr(x) and "(2,)" in repr(x)


def test_write_stores_rows_in_place_across_executions():
    """Graph.write: each run stores its rows at the offset; the input keeps its array and the
    rest of its data; the run reads the rows before the offset and the new ones."""
    g = lm.Graph()
    cache = g.tensor((1, 6, 2), name="cache").set(np.zeros((1, 6, 2), np.float32))
    x = g.tensor((1, "seq", 2), name="x")
    rows = x * 2.0
    g.write(cache, rows, 1, "past")
    seen = lm.cat([cache[:, :"past"], rows], dim=1).retrieve()
    g.set_dim("past", 0)
    compiled(g)
    array, want, past = g.data[cache.id], np.zeros((1, 6, 2), np.float32), 0
    for n in (3, 1, 2):
        step = np.arange(2 * n, dtype=np.float32).reshape(1, n, 2) + past
        x.set(step)
        g.set_dim("past", past)
        g.execute()
        want[:, past:past + n] = 2 * step
        past += n
        np.testing.assert_array_equal(seen.numpy(), want[:, :past])
        np.testing.assert_array_equal(cache.numpy(), want)
    assert g.data[cache.id] is array  # written in place, never rebound


def test_write_refuses_rows_that_do_not_fit_and_bad_arguments():
    g = lm.Graph()
    cache = g.tensor((1, 4, 2), name="cache").set(np.ones((1, 4, 2), np.float32))
    x = g.tensor((1, "seq", 2), name="x")
    g.write(cache, x + 0.0, 1, "past")
    (cache * 1.0).retrieve()
    compiled(g)
    x.set(np.zeros((1, 2, 2), np.float32))
    g.set_dim("past", 3)
    with pytest.raises(ValueError, match=r"'cache': rows 3\.\.4 along axis 1 do not fit its 4"):
        g.execute()
    np.testing.assert_array_equal(cache.numpy(), np.ones((1, 4, 2)))  # untouched
    with pytest.raises(TypeError, match="must be an input"):
        g.write(cache + 1.0, x, 1, 0)
    with pytest.raises(ValueError, match="outside dim 1"):
        g.write(cache, g.tensor((1, 1, 3)), 1, 0)
    with pytest.raises(ValueError, match="dim 3 is out of range"):
        g.write(cache, x, 3, 0)


def test_inputs_set_after_a_run_are_checked_again():
    """execute() re-checks only what changed since its last check: an input set since, or
    the inputs with symbolic dims when a dim changed; a mismatch is still named."""
    g = lm.Graph()
    a = g.tensor(("n", 3), name="a").set(np.ones((4, 3), np.float32))
    b = g.tensor(("n",), name="b").set(np.ones(4, np.float32))
    w = g.tensor((3,), name="w").set(np.ones(3, np.float32))
    ((a * w).sum(1) + b).retrieve()
    compiled(g).execute()
    b.set(np.ones(5, np.float32))  # binds n = 5: a no longer matches
    with pytest.raises(ValueError, match="input 'a' holds data of shape"):
        g.execute()
    a.set(np.ones((5, 3), np.float32))
    g.execute()
    g.set_data(w.id, np.ones(4, np.float32))  # bypassing set()'s own check
    with pytest.raises(ValueError, match="input 'w' holds data of shape"):
        g.execute()


def test_scalar_constants_are_one_node_per_value_and_dtype():
    g = lm.Graph()
    x = g.tensor((4,), name="x").set(np.array([1.0, -2.0, 0.5, 3.0], np.float32))
    a, b = g.constant(2.0), g.constant(2)
    assert a.id == b.id  # 2 and 2.0 are one float32 value
    assert g.constant(2.0, lm.int32).id != a.id
    assert g.constant(-0.0).id != g.constant(0.0).id  # 1/x tells them apart
    assert g.constant(float("nan")).id == g.constant(float("nan")).id
    assert g.constant("n").id == g.constant("n").id != g.constant("n + 1").id
    before = len(g.nodes)
    outs = [(x * 0.5 + 1.0).retrieve(), (x * 0.5 - 1.0).retrieve(), (x * 0.5).retrieve()]
    # three products, two sums, and one node each for 0.5, 1.0 and -1.0 (what - 1.0 adds)
    assert len(g.nodes) - before == 3 + 2 + 3
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    g.execute()
    xs = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    for out, want in zip(outs, (xs * 0.5 + 1, xs * 0.5 - 1, xs * 0.5)):
        np.testing.assert_array_equal(out.numpy(), want)


def test_an_interned_constant_a_compiler_removed_is_made_again():
    g = lm.Graph()
    c = g.constant(3.0)
    g.remove(c.id)  # what DCE does to a constant nothing reads
    again = g.constant(3.0)
    assert again.id != c.id and again.id in g.nodes


def test_graph_shared_builds_once_per_key():
    g, other = lm.Graph(), lm.Graph()
    built = []

    def build():
        built.append(1)
        return g.arange(4)

    first = g.shared(("positions", 4), build)
    assert g.shared(("positions", 4), build) is first and len(built) == 1
    g.shared(("positions", 5), build)
    other.shared(("positions", 4), build)  # per graph
    assert len(built) == 3
