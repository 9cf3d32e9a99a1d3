"""Graph.compile pauses the cycle collector's walk over pre-existing objects, and restores it."""

import gc

import luminal as lm
import numpy as np


def _graph() -> tuple[lm.Graph, lm.GraphTensor]:
    g = lm.Graph()
    x = g.tensor((2, 3), name="x").set(np.arange(6, dtype=np.float32).reshape(2, 3))
    return g, (x.exp2() + 1).sum(1).retrieve()


def test_compile_leaves_the_collector_as_it_found_it():
    g, y = _graph()
    before = gc.get_freeze_count()
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    assert gc.isenabled() and gc.get_freeze_count() == before
    g.execute()
    np.testing.assert_allclose(y.numpy(), (2.0 ** np.arange(6).reshape(2, 3) + 1).sum(1))


class _Probe:
    """A compiler that records whether pre-existing objects are frozen while it runs."""

    def __init__(self, inner=None):
        self.inner, self.frozen = inner, None

    def compile(self, graph) -> None:
        self.frozen = gc.get_freeze_count()
        if self.inner is not None:  # a nested compile, as search compiles its regions
            sub, _ = _graph()
            sub.compile(self.inner)


def test_outermost_compile_freezes_once_and_nested_ones_do_not():
    inner = _Probe()
    outer = _Probe(inner)
    g, _ = _graph()
    g.compile(outer)
    assert outer.frozen > 0  # the objects that existed before compile() are frozen
    # the nested compile neither thawed them nor froze what was made since (frozen objects
    # that are freed leave the count, so it may only shrink)
    assert 0 < inner.frozen <= outer.frozen
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_alone():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        probe = _Probe()
        g, _ = _graph()
        g.compile(probe)
        # neither thawed nor frozen more (freed frozen objects leave the count)
        assert 0 < probe.frozen <= frozen and 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        probe = _Probe()
        g, _ = _graph()
        g.compile(probe)
        assert probe.frozen == 0 and not gc.isenabled()
    finally:
        gc.enable()
