"""Hostile values through the public API: each gets a clear error (or a documented rule)
instead of wrapping, overflowing, reaching generated source, or a KeyError."""

from __future__ import annotations

import shutil
import subprocess

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.symbolic import MAX_DIM, Expr


@pytest.mark.parametrize(("dtype", "value", "message"), [
    (lm.int32, [2**40 + 7, 1], r"value 1099511627783 does not fit in int32"),
    (lm.int32, [-(2**31) - 1], r"value -2147483649 does not fit in int32"),
    (lm.int32, [1.5], r"value 1\.5 does not fit in int32"),
    (lm.int32, [float("nan")], r"value nan does not fit in int32"),
    (lm.uint8, [256], r"value 256 does not fit in uint8"),
    (lm.float32, [1e300], r"value 1e\+300 does not fit in float32 \(largest finite value"),
    (lm.float16, [70000.0], r"value 70000\.0 does not fit in float16"),
    (lm.bfloat16, [1e39], r"value 1e\+39 does not fit in bfloat16"),
])
def test_set_refuses_values_the_dtype_cannot_hold(dtype, value, message):
    g = lm.Graph()
    x = g.tensor((len(value),), name="x", dtype=dtype)
    with pytest.raises(ValueError, match=rf"input 'x': {message}"):
        x.set(np.array(value))
    assert x.id not in g.data  # nothing was bound


def test_set_follows_numpy_where_values_fit():
    g = lm.Graph()
    f = g.tensor((3,), name="f").set(np.array([np.inf, -np.inf, np.nan]))
    i = g.tensor((2,), name="i", dtype=lm.int32).set(np.array([2.0, -(2.0**31)]))
    b = g.tensor((2,), name="b", dtype=lm.bool).set(np.array([7, 0]))
    h = g.tensor((1,), name="h", dtype=lm.float16).set(np.array([65519.0]))  # rounds to max
    np.testing.assert_array_equal(g.data[f.id][:2], [np.inf, -np.inf])
    assert np.isnan(g.data[f.id][2])
    assert g.data[i.id].tolist() == [2, -(2**31)] and g.data[b.id].tolist() == [True, False]
    assert g.data[h.id][0] == np.float16(65504)


@pytest.mark.parametrize(("value", "error", "message"), [
    (2**63 + 5, ValueError, r"must be in \[0, 2147483647\], got 9223372036854775813"),
    (2**62, ValueError, r"must be in \[0, 2147483647\]"),
    (MAX_DIM + 1, ValueError, r"must be in \[0, 2147483647\]"),
    (-1, ValueError, r"must be in \[0, 2147483647\], got -1"),
    (3.0, TypeError, "must be bound to an int, got 3.0"),
    (True, TypeError, "must be bound to an int, got True"),
])
def test_set_dim_range_and_type(value, error, message):
    g = lm.Graph()
    with pytest.raises(error, match=message):
        g.set_dim("n", value)
    g.set_dim("n", MAX_DIM)
    g.set_dim("n", np.int64(5))
    assert g.dims["n"] == 5


@pytest.mark.parametrize("name", ["_r\n#include \"/etc/hostname\"\n", "_g0", "_x", ""])
def test_reserved_or_empty_dim_names_are_refused(name):
    g = lm.Graph()
    with pytest.raises((ValueError, TypeError), match=r"reserved|non-empty"):
        g.tensor((name, 2))
    with pytest.raises((ValueError, TypeError), match=r"reserved|non-empty"):
        g.set_dim(name, 1)


def test_internal_variables_must_be_identifiers():
    assert Expr.var("_r0").name == "_r0"
    with pytest.raises(ValueError, match="is not an identifier"):
        Expr.var('_r\n#include "x"')


@pytest.mark.parametrize("backend", ["reference", None])
def test_numpy_after_compile_before_execute_is_a_clear_error(backend):
    g = lm.Graph()
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    y = (x * 2).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend(backend)))
    with pytest.raises(RuntimeError, match=r"not been executed yet: call g\.execute\(\) first"):
        y.numpy()
    g.execute()
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    g.compile((lm.GenericCompiler(), lm.backend(backend)))  # a recompile needs a new execute
    with pytest.raises(RuntimeError, match="not been executed yet"):
        y.numpy()


def test_to_dot_escapes_control_characters_in_names():
    g = lm.Graph()
    x = g.tensor((2,), name='x\0y\n"z\\\ud800').set([1.0, 2.0])
    (x + 1).retrieve()
    dot = g.to_dot()
    assert "\0" not in dot and "\ud800" not in dot
    assert r'Input x\\x00y\\x0a\"z\\\\ud800' in dot
    dot.encode("utf-8")  # strict: no lone surrogate
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("bad", [[1, 4], [-1, 0]])
def test_out_of_range_embedding_ids_are_an_error_on_the_reference_backend(bad):
    g = lm.Graph()
    w = g.tensor((4, 3), name="w").set(np.arange(12, dtype=np.float32).reshape(4, 3))
    ids = g.tensor(("k",), name="ids", dtype=lm.int32)
    rows = F.embedding(ids, w).retrieve()
    g.compile(lm.GenericCompiler())
    ids.set(np.array(bad, np.int32))
    with pytest.raises(IndexError, match=rf"input 'ids': index {max(bad) if min(bad) >= 0 else -1}"
                       r" is out of range for an axis of size 4 \(ids must be in \[0, 4\)\)"):
        g.execute()
    ids.set(np.array([3, 0, 2], np.int32))
    g.execute()
    np.testing.assert_array_equal(rows.numpy(), [[9, 10, 11], [0, 1, 2], [6, 7, 8]])


def _selection(op: str):
    """(graph, ids input, output) of one id-taking op over a (2, 3) table."""
    g = lm.Graph()
    x = g.tensor((2, 3), name="x").set(np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    if op == "gather":
        ids = g.tensor((2, 2), name="ids", dtype=lm.int32)
        return g, ids, x.gather(1, ids).retrieve()
    ids = g.tensor((2,), name="ids", dtype=lm.int32)
    if op == "index_select":
        return g, ids, x.index_select(1, ids).retrieve()
    return g, ids, F.one_hot(ids, 3).retrieve()


BAD_IDS = {"gather": [[0, 3], [-1, 2]], "index_select": [0, 3], "one_hot": [-1, 2]}


@pytest.mark.parametrize("op", ["gather", "index_select", "one_hot"])
def test_out_of_range_ids_are_an_error_on_the_reference_backend(op):
    g, ids, _ = _selection(op)
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    ids.set(np.array(BAD_IDS[op], np.int32))
    with pytest.raises(IndexError, match=r"input 'ids': index -?\d+ is out of range for an "
                                         r"axis of size 3 \(ids must be in \[0, 3\)\)"):
        g.execute()


@pytest.mark.parametrize("op", ["gather", "index_select", "one_hot"])
def test_out_of_range_ids_pick_nothing_on_compiled_backends(op):
    # documented: compiled backends do not check; an id outside picks a zero, as torch's
    # one-hot product would, and never reads outside the table
    pytest.importorskip("luminal_cpu")
    g, ids, out = _selection(op)
    g.compile((lm.GenericCompiler(), lm.backend("cpu")))
    ids.set(np.array(BAD_IDS[op], np.int32))
    g.execute()
    want = {"gather": [[1, 0], [0, 6]], "index_select": [[1, 0], [4, 0]],
            "one_hot": [[0, 0, 0], [0, 0, 1]]}[op]
    np.testing.assert_array_equal(out.numpy(), want)


def test_int32_sums_wrap_modulo_2_32_like_numpy():
    g = lm.Graph()
    x = g.tensor((3,), name="x", dtype=lm.int32).set(np.array([2**31 - 1, 2**31 - 1, 5], np.int32))
    s = x.sum(0).retrieve()
    g.execute()
    assert s.numpy().item() == np.array([2**31 - 1, 2**31 - 1, 5], np.int32).sum(dtype=np.int32)
