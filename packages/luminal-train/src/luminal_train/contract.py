"""Gradients of a broadcasting `Mul` as matrix products.

Every luminal matmul is `SumReduce(Mul(a.expand, b.expand))`, so its gradients, and those of
convolutions, linear layers and attention, arrive at a `Mul` whose input was read through a
broadcast: the gradient of that input is `(g * other)` summed over the broadcast axes. Built
literally, that sum is a reduction over a non-last axis (or over several axes one at a time)
that no device compiler recognises as a matmul, so it runs as a slow generic reduction.

`mul_grad` builds the same sum as a matrix product instead. Each axis of the product is
classified by which operands really vary along it (a stride-0 axis of a view is a broadcast
that the operand ignores):

    kept axes   used by both: batch   by g only: rows (M)   by other only: columns (N)
    summed axes used by both: the contraction (K); used by one operand only, that operand is
                summed first; used by neither, the result is scaled by the axis length

The operands are permuted to `(batch..., M, K)` and `(batch..., K, N)` (a copy only where the
axes cannot be merged as a view), multiplied with `matmul` - the pattern every backend turns
into its GEMM - and the result is permuted back. The summed axes are left with length 1, and
`transpose_view` does the rest of the scatter (permutations, windows, slices).
"""

from __future__ import annotations

from luminal import GraphTensor
from luminal.shape import View
from luminal.symbolic import Expr, prod


def _unused(t: GraphTensor, k: int) -> bool:
    """Whether `t` ignores axis k (a broadcast axis that is not partly padding)."""
    return t.layout.strides[k] == 0 and not t.layout.axis_masked(k)


def _pick_first(t: GraphTensor, axes: list[int]) -> GraphTensor:
    """`t` with each of `axes` (broadcast axes) cut to length 1."""
    view = t.layout
    for k in axes:
        view = view.slice(k, 0, 1)
    return t._with_view(view)


def summed_axes(view: View) -> list[int]:
    """The axes a gradient read through `view` is summed over: broadcast, unpadded, length > 1."""
    return [k for k, (d, s) in enumerate(zip(view.shape, view.strides))
            if s == 0 and d != 1 and not view.axis_masked(k)]


def reduced_view(view: View, axes: list[int]) -> View:
    """`view` with `axes` (broadcast axes) of length 1."""
    shape = tuple(Expr.const(1) if k in axes else d for k, d in enumerate(view.shape))
    mask = None
    if view.mask is not None:
        mask = tuple((Expr.const(0), Expr.const(1)) if k in axes else m
                     for k, m in enumerate(view.mask))
    return View(shape, view.strides, view.offset, mask)


def mul_grad(g: GraphTensor, other: GraphTensor, axes: list[int]) -> GraphTensor | None:
    """`(g * other).sum(axes, keepdim=True)` as a matrix product, or None when no axis is a
    contraction (then the plain product and sum is as good)."""
    shape = list(g.layout.shape)
    nd = len(shape)
    big = [k for k in range(nd) if shape[k] != 1]
    g_used = {k for k in big if not _unused(g, k)}
    o_used = {k for k in big if not _unused(other, k)}
    summed = set(axes)
    contract = [k for k in axes if k in g_used and k in o_used]
    if not contract:
        return None
    a = _pick_first(g, [k for k in big if k not in g_used])
    b = _pick_first(other, [k for k in big if k not in o_used])
    only_a = [k for k in axes if k in g_used and k not in o_used]
    only_b = [k for k in axes if k in o_used and k not in g_used]
    if only_a:
        a = a.sum(only_a, keepdim=True)
    if only_b:
        b = b.sum(only_b, keepdim=True)
    scale = prod([shape[k] for k in axes if k not in g_used and k not in o_used])
    batch = [k for k in big if k not in summed and k in g_used and k in o_used]
    rows = [k for k in big if k not in summed and k in g_used and k not in o_used]
    cols = [k for k in big if k not in summed and k in o_used and k not in g_used]
    lengths = [shape[k] for k in batch]

    def operand(t: GraphTensor, first: list[int], second: list[int]) -> GraphTensor:
        order = batch + first + second
        rest = [k for k in range(nd) if k not in order]  # all of length 1 in t by now
        t = t.permute(order + rest)
        return t.reshape((*lengths, prod([shape[k] for k in first]),
                          prod([shape[k] for k in second])))

    out = operand(a, rows, contract) @ operand(b, contract, cols)
    out = out.reshape((*lengths, *[shape[k] for k in rows], *[shape[k] for k in cols]))
    placed = batch + rows + cols  # the axes of `out`, in order
    out = out.permute(sorted(range(len(placed)), key=lambda i: placed[i]))
    keep = sorted(placed)
    full = [shape[k] if k in keep else Expr.const(1) for k in range(nd)]
    out = out.reshape(full)
    spread = [k for k in big if k not in summed and k not in g_used and k not in o_used]
    if spread:
        out = out.expand([shape[k] if k in spread else full[k] for k in range(nd)])
    if scale != 1:
        out = out * scale
    return out
