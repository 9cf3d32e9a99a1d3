"""Errors are raised early (at graph-build time where possible) and say what to fix."""

from __future__ import annotations

import re

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.reference import ReferenceBackend


@pytest.fixture
def g():
    return lm.Graph()


@pytest.mark.parametrize(
    ("build", "shapes"),
    [
        (lambda a, b: a + b, ("(2, 3)", "(4, 5)")),
        (lambda a, b: a * b, ("(2, 3)", "(4, 5)")),
        (lambda a, b: a < b, ("(2, 3)", "(4, 5)")),
        (lambda a, b: lm.where(a > 0, a, b), ("(2, 3)", "(4, 5)")),
        (lambda a, b: a @ b, ("(2, 3)", "(4, 5)")),
        (lambda a, b: lm.cat([a, b], 1), ("(2, 3)", "(4, 5)")),
        (lambda a, b: lm.stack([a, b]), ("(2, 3)", "(4, 5)")),
    ],
)
def test_shape_mismatch_names_both_shapes_at_build_time(g, build, shapes):
    a, b = g.tensor((2, 3), name="a"), g.tensor((4, 5), name="b")
    with pytest.raises(ValueError) as err:
        build(a, b)
    for shape in shapes:
        assert shape in str(err.value)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda x: x.reshape(4, 2), r"\(2, 3\) \(6 elements\) cannot become \(4, 2\)"),
        (lambda x: x.reshape(-1, -1), "only one dim can be -1"),
        (lambda x: x.permute(0, 0), r"not a permutation .* shape \(2, 3\)"),
        (lambda x: x.expand(4, 3), r"cannot expand shape \(2, 3\) to \(4, 3\)"),
        (lambda x: x.sum(2), "dim 2 is out of range for a tensor with 2 dims"),
        (lambda x: x.softmax(-3), "dim -3 is out of range"),
        (lambda x: x[2], "index 2 is out of bounds for dim 0 with size 2"),
        (lambda x: x[0, 0, 0], r"too many indices \(3\) for a tensor of shape \(2, 3\)"),
        (lambda x: x.pad((1,)), "pair per padded dim"),
        (lambda x: -(x > 0), "bool"),
        (lambda x: x.split([1, 1], 1), r"do not sum to the dim size 3"),
        (lambda x: F.layer_norm(x, (4,)), r"normalized_shape \(4,\) does not match .* \(2, 3\)"),
        (lambda x: F.conv2d(x, x), r"2 spatial dims .* got \(2, 3\) and \(2, 3\)"),
        (lambda x: x.gelu("fast"), "approximate must be 'none' or 'tanh'"),
    ],
)
def test_build_errors_say_what_is_wrong(g, build, message):
    x = g.tensor((2, 3), name="x")
    with pytest.raises((ValueError, IndexError, TypeError), match=message):
        build(x)


def test_operands_from_two_graphs(g):
    other = lm.Graph()
    with pytest.raises(ValueError, match="different graphs"):
        g.tensor((2,)) + other.tensor((2,))


def test_unknown_dtype_lists_the_supported_ones(g):
    with pytest.raises(TypeError, match=r"unsupported dtype 'float64'.*float32.*int32.*bool"):
        g.tensor((2,), dtype="float64")
    with pytest.raises(TypeError, match="unsupported dtype"):
        g.tensor((2,)).to(np.complex64)


def test_set_with_wrong_shape_shows_both_shapes(g):
    a = g.tensor((2, 3), name="a")
    with pytest.raises(ValueError, match=re.escape("'a' expects shape (2, 3) but got an array of "
                                                   "shape (2, 4)")):
        a.set(np.zeros((2, 4)))


def test_set_with_wrong_rank_says_rank(g):
    a = g.tensor((2, 3), name="a")
    with pytest.raises(ValueError, match=r"\(2, 3, 1\) \(rank 3 instead of 2\)"):
        a.set(np.zeros((2, 3, 1)))
    with pytest.raises(ValueError, match=r"rank 0 instead of 2"):
        a.set(1.0)


def test_set_with_inconsistent_symbolic_dim_binds_nothing(g):
    a = g.tensor(("n", "n"), name="a")
    with pytest.raises(ValueError, match="dim 'n' would be both 2 and 3"):
        a.set(np.zeros((2, 3)))
    assert "n" not in g.dims
    b = g.tensor((lm.Expr.var("n") * 2,), name="b")
    g.set_dim("n", 2)
    with pytest.raises(ValueError, match=r"dim \(2 \* n\) is 4 with n=2"):
        b.set(np.zeros(6))


def test_set_with_non_numeric_data(g):
    with pytest.raises(TypeError, match="cannot use list data of dtype <U1 as float32"):
        g.tensor((2,), name="a").set(["x", "y"])


def test_set_on_a_computed_tensor(g):
    with pytest.raises(TypeError, match=r"set\(\) works on inputs"):
        (g.tensor((2,)) + 1).set([1.0, 2.0])


def test_unbound_symbolic_dim_at_execute(g):
    x = g.tensor(("seq", 4), name="x")
    (x * 2).retrieve()
    with pytest.raises(lm.UnboundDimError, match=r"symbolic dim 'seq' is unbound.*set_dim"):
        g.execute()


def test_unbound_dim_in_evaluation():
    with pytest.raises(lm.UnboundDimError, match="'a', 'b'"):
        (lm.Expr.var("a") + lm.Expr.var("b")).evaluate({})


def test_execute_with_input_never_set(g):
    x = g.tensor((3,), name="x").set([1.0, 2.0, 3.0])
    y = g.tensor((3,), name="y")
    (x + y).retrieve()
    with pytest.raises(ValueError, match=r"input 'y' \(3,\) was never set\(\)"):
        g.execute()


def test_data_no_longer_matching_a_rebound_dim(g):
    x = g.tensor(("n",), name="x")
    y = g.tensor(("n",), name="y")
    (x * y).retrieve()
    x.set(np.ones(3))
    y.set(np.ones(4))  # rebinds n = 4: x's data is stale
    with pytest.raises(ValueError, match=r"'x' holds data of shape \(3,\) .* n=4, so \(4,\)"):
        g.execute()


def test_negative_dim(g):
    with pytest.raises(ValueError, match="negative dimension"):
        g.tensor((2, -1))
    with pytest.raises(ValueError, match=r"must be in \[0, 2147483647\], got -1"):
        g.set_dim("n", -1)


def test_reading_results_too_early_or_not_retrieved(g):
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    y = x * 2
    z = (y + 1).retrieve()
    with pytest.raises(RuntimeError, match="not been executed"):
        z.numpy()
    g.compile(lm.GenericCompiler())
    g.execute()
    with pytest.raises((KeyError, ValueError), match=r"retrieve\(\)"):
        y.numpy()


def test_graph_changed_after_compile(g):
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    (x * 2).retrieve()
    g.compile((lm.GenericCompiler(), ReferenceBackend()))
    (x + 1).retrieve()
    with pytest.raises(lm.GraphModifiedError, match="compile"):
        g.execute()


def test_not_a_compiler(g):
    with pytest.raises(TypeError, match="is not a compiler"):
        g.compile((lm.GenericCompiler(), "reference"))


def test_bool_of_graph_tensor(g):
    with pytest.raises(TypeError, match="no value at graph-build time"):
        bool(g.tensor((1,)) > 0)
