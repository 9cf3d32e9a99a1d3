"""`einsum`: Einstein summation as broadcast products and sums over labelled axes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..shape import show_shape

if TYPE_CHECKING:
    from ..tensor import GraphTensor


def _parse(equation: str, n: int) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != n:
        raise ValueError(f"einsum: {equation!r} names {len(terms)} operands, got {n}")
    for t in [*terms, rhs]:
        if "." in t:
            raise NotImplementedError("einsum: ellipsis ('...') is not supported")
        if not all(c.isalpha() for c in t):
            raise ValueError(f"einsum: {equation!r}: subscripts must be letters")
    if not arrow:  # implicit output: letters used once, in alphabetical order
        letters = "".join(terms)
        rhs = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    if len(set(rhs)) != len(rhs) or any(c not in lhs for c in rhs):
        raise ValueError(f"einsum: {equation!r}: bad output subscripts {rhs!r}")
    return terms, rhs


def _diagonal_letters(t: GraphTensor, term: str) -> tuple[GraphTensor, str]:
    """Repeated letters in one operand ('ii') read that operand's diagonal."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i, j = term.index(c), term.index(c, term.index(c) + 1)
        t = t.diagonal(0, i, j)  # the diagonal becomes the last axis
        term = "".join(x for k, x in enumerate(term) if k not in (i, j)) + c
    return t, term


def einsum(equation: str, *operands: GraphTensor) -> GraphTensor:
    """PyTorch `torch.einsum` (no ellipsis): each operand's axes are aligned on the union of
    letters, multiplied with broadcasting, and the letters missing from the output summed."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse(equation, len(operands))
    letters = list(out) + sorted({c for t in terms for c in t} - set(out))
    sizes: dict[str, object] = {}
    total = None
    for t, term in zip(operands, terms):
        if t.ndim != len(term):
            raise ValueError(f"einsum: operand {show_shape(t.layout.shape)} has {t.ndim} dims "
                             f"but subscripts {term!r}")
        t, term = _diagonal_letters(t, term)
        for c, d in zip(term, t.layout.shape):
            if sizes.setdefault(c, d) != d and d != 1 and sizes[c] != 1:
                raise ValueError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {d}")
            if sizes[c] == 1:
                sizes[c] = d
        present = [c for c in letters if c in term]
        aligned = t.permute([term.index(c) for c in present]) if present else t
        shape = [aligned.layout.shape[present.index(c)] if c in present else 1 for c in letters]
        aligned = aligned.reshape(shape)
        total = aligned if total is None else total * aligned
    summed = tuple(range(len(out), len(letters)))
    if summed:
        total = total.sum(summed)
    full = tuple(sizes[c] for c in out)
    return total.expand(full) if tuple(total.layout.shape) != full else total
