"""Gradients of broadcasting products built as matrix products (`contract.py`)."""

from __future__ import annotations

import itertools

import luminal as lm
import luminal_train as lt
import numpy as np
import pytest
from luminal import ops

torch = pytest.importorskip("torch")

SHAPE = (3, 4, 2, 5)


def _patterns(seed: int):
    """Random broadcast patterns (which axes each operand has) of x, y and the cotangent."""
    rng = np.random.default_rng(seed)
    for _ in range(12):
        yield tuple(tuple(bool(b) for b in rng.integers(0, 2, 4)) for _ in range(3))


@pytest.mark.parametrize("seed", range(4))
def test_train_broadcast_mul_grads_match_torch(seed: int) -> None:
    """x * y * c with every mix of batch, row, column, contracted, one-sided and unused axes."""
    rng = np.random.default_rng(100 + seed)
    for masks in _patterns(seed):
        shapes = [tuple(d if keep else 1 for d, keep in zip(SHAPE, m)) for m in masks]
        vals = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        g = lm.Graph()
        x, y, c = (g.tensor(s, name=n).set(v) for s, n, v in zip(shapes, "xyc", vals))
        loss = (x * y * c).sum()
        gx, gy = lt.grad(loss, [x, y])
        gx.retrieve()
        gy.retrieve()
        g.execute()
        tx, ty, tc = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in vals)
        (tx * ty * tc).sum().backward()
        for ours, theirs in ((gx, tx), (gy, ty)):
            np.testing.assert_allclose(ours.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_train_linear_weight_grad_is_one_matmul() -> None:
    """The weight gradient of a linear layer is a single SumReduce over the last axis of a Mul
    (the pattern backends lower to their GEMM), not a reduction over the batch axis."""
    g = lm.Graph()
    x = g.tensor((8, 6), name="x")
    w = g.tensor((5, 6), name="w")
    (gw,) = lt.grad((x @ w.T).square().sum(), [w])
    reduces = [n for n in g.nodes.values() if isinstance(n.op, ops.SumReduce)]
    grad_reduce = g.nodes[gw.id] if isinstance(gw.node.op, ops.SumReduce) else None
    for n in itertools.chain([grad_reduce] if grad_reduce else [], reduces):
        src = g.nodes[n.inputs[0].src]
        if isinstance(src.op, ops.Mul) and n.op.axis != len(src.shape) - 1:
            pytest.fail(f"a product summed over axis {n.op.axis} of {len(src.shape)}")
