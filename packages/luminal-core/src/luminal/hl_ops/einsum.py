"""`einsum`: Einstein summation as broadcast products and sums over labelled axes."""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

from ..errors import OpError
from ..shape import show_shape

if TYPE_CHECKING:
    from ..tensor import GraphTensor


def _parse(equation: str, operands) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise OpError(f"einsum: {equation!r} names {len(terms)} operands, got {len(operands)}")
    for t in [*terms, rhs]:
        if not all(c.isalpha() for c in t.replace("...", "", 1)):
            raise OpError(f"einsum: {equation!r}: subscripts must be letters and one '...'")
    # '...' stands for the leading dims an operand has beyond its letters, broadcast against
    # each other from the right: fresh letters name them
    counts = [x.ndim - len(t) + 3 if "..." in t else 0 for t, x in zip(terms, operands)]
    batch = "".join([c for c in string.ascii_letters if c not in eq][:max(counts)])
    terms = [t.replace("...", batch[len(batch) - k:] if k > 0 else "")
             for t, k in zip(terms, counts)]
    if not arrow:  # implicit output: the '...' dims, then letters used once, alphabetically
        letters = "".join(terms)
        rhs = batch + "".join(sorted(c for c in set(letters)
                                     if letters.count(c) == 1 and c not in batch))
    rhs = rhs.replace("...", batch)
    if len(set(rhs)) != len(rhs) or any(c not in "".join(terms) for c in rhs):
        raise OpError(f"einsum: {equation!r}: bad output subscripts {rhs!r}")
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
    """PyTorch `torch.einsum`: each operand's axes are aligned on the union of
    letters, multiplied with broadcasting, and the letters missing from the output summed."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    terms, out = _parse(equation, operands)
    letters = list(out) + sorted({c for t in terms for c in t} - set(out))
    sizes: dict[str, object] = {}
    total = None
    for t, term in zip(operands, terms):
        if t.ndim != len(term):
            raise OpError(f"einsum: operand {show_shape(t.layout.shape)} has {t.ndim} dims "
                             f"but subscripts {term!r}")
        t, term = _diagonal_letters(t, term)
        for c, d in zip(term, t.layout.shape):
            if sizes.setdefault(c, d) != d and d != 1 and sizes[c] != 1:
                raise OpError(f"einsum: subscript {c!r} has sizes {sizes[c]} and {d}")
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
