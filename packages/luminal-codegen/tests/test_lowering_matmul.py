"""Which SumReduce(Mul) patterns the lowering turns into matmuls (a GEMM call on the backends
that have one), and which it leaves to reduction kernels."""

from __future__ import annotations

import luminal as lm
from luminal_codegen import Kernel, lower


def kinds(g: lm.Graph) -> list[str]:
    return [type(k).__name__ for k in lower(g).kernels]


def test_a_single_rows_sum_of_squares_is_a_reduction_not_a_matmul():
    """A norm of one row (a decode step's last layer): a GEMM call for one dot product costs
    more than the reduction, and the norm's epilogue stays in the reduction's kernel."""
    g = lm.Graph()
    x = g.tensor((1, 1, 640))
    (1 / ((x * x).sum(-1) / 640 + 1e-6).sqrt()).retrieve()
    kernels = lower(g).kernels
    assert [type(k).__name__ for k in kernels] == ["Kernel"]
    assert isinstance(kernels[0], Kernel)


def test_products_with_more_than_one_output_stay_matmuls():
    for x_shape, w_shape in (((1, 1, 640), (640, 2)), ((1, 3, 640), (640, 1)),
                             ((1, "seq", 640), (640, 1))):
        g = lm.Graph()
        (g.tensor(x_shape) @ g.tensor(w_shape)).retrieve()
        assert "Matmul" in kinds(g), (x_shape, w_shape)

