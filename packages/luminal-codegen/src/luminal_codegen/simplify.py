"""Kernel-level simplification: merging domain axes that every access walks as one, and
deciding the divisions and comparisons that symbolic loop extents settle.

After fusion a kernel's domain is its output shape, e.g. (seq, 9, 64). When every index the
kernel uses is affine in two neighbouring loop variables with the outer coefficient equal to
the inner one times the inner extent, the pair walks memory exactly like a single variable over
the product: merging them gives fewer, longer loops (one flat, vectorisable loop for plain
elementwise kernels) and no index division at run time.

A loop whose extent is a dim (`seq`) has a variable with no numeric upper bound, so the
symbolic simplifier cannot drop the division that a reshape along it leaves behind:
`(128*seq*h + 128*s + c) // (128*seq)` is `h` for `s < seq`, `c < 128`, but only the extents
say so. `bound_by_extents` decides such divisions, remainders and comparisons from upper bounds
written in the dims (`128*(seq - 1) + 127 < 128*seq`), so the generated loop indexes memory
affinely (Gemma 3's RoPE on the queries divided and took a modulo per value).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from luminal.symbolic import INF, Expr, add, floordiv, mul

from .ir import Kernel, Reduce, Store, affine, exprs_of, loop_var, map_exprs, walk


def _mergeable(exprs: list[Expr], outer: Expr, inner: Expr, inner_extent: Expr) -> bool:
    for e in exprs:
        if not (e.free_vars & {outer.name, inner.name}):
            continue
        split = affine(e, (outer, inner))
        if split is None:
            return False
        (c_outer, c_inner), _ = split
        if c_outer != c_inner * inner_extent:
            return False
    return True


def _merge(kernel: Kernel, j: int) -> Kernel:
    domain = kernel.domain
    new_domain = (*domain[:j], domain[j] * domain[j + 1], *domain[j + 2 :])
    old = kernel.loop_vars
    env: dict[str, Expr] = {}
    for k, var in enumerate(old):
        if k < j:
            env[var.name] = loop_var(k, new_domain[k])
        elif k == j:
            env[var.name] = Expr.const(0)
        elif k == j + 1:
            env[var.name] = loop_var(j, new_domain[j])
        else:
            env[var.name] = loop_var(k - 1, new_domain[k - 1])

    def sub(e: Expr) -> Expr:
        return e.substitute(env)

    out = kernel.out
    store = Store(out.buf, sub(out.index), map_exprs(out.value, sub))
    return replace(kernel, domain=new_domain, out=store)


def drop_unit_axes(kernel: Kernel) -> Kernel:
    """`kernel` without the domain axes of extent 1 (keepdim reductions leave them)."""
    keep = [k for k, d in enumerate(kernel.domain) if d != 1]
    if len(keep) == len(kernel.domain):
        return kernel
    domain = tuple(kernel.domain[k] for k in keep)
    env = {v.name: Expr.const(0) for v in kernel.loop_vars}
    for new, k in enumerate(keep):
        env[kernel.loop_vars[k].name] = loop_var(new, domain[new])

    def sub(e: Expr) -> Expr:
        return e.substitute(env)

    out = kernel.out
    return replace(kernel, domain=domain,
                   out=Store(out.buf, sub(out.index), map_exprs(out.value, sub)))


def merge_axes(kernel: Kernel) -> Kernel:
    """`kernel` without unit axes and with every mergeable pair of neighbouring domain axes
    merged."""
    kernel = drop_unit_axes(kernel)
    j = 0
    while j < len(kernel.domain) - 1:
        exprs = [kernel.out.index, *exprs_of(kernel.out.value)]
        outer, inner = kernel.loop_vars[j], kernel.loop_vars[j + 1]
        if _mergeable(exprs, outer, inner, kernel.domain[j + 1]):
            kernel = _merge(kernel, j)
        else:
            j += 1
    return kernel


def _loop_name(name: str) -> bool:
    # the compiler's own index variables start with "_"; a user's dims never do
    return name.startswith("_")


def _upper(e: Expr, extents: Mapping[str, Expr]) -> Expr | None:
    """An expression of the dims that `e` never exceeds, given each loop variable of `extents`
    below its extent; None when no such bound is found."""
    loops = {v for v in e.free_vars if _loop_name(v)}
    if not loops:
        return e  # dims and constants bound themselves
    if not (loops & extents.keys()):
        return Expr.const(e.vmax) if e.vmax < INF else None
    if e.op == "var":
        return add(extents[e.name], -1)
    bounds = []
    if e.op in ("add", "mul"):
        if e.op == "mul" and any(f.vmin < 0 for f in e.args):
            return None  # only a product of non-negative factors grows with each of them
        for t in e.args:
            bounds.append(_upper(t, extents))
            if bounds[-1] is None:
                return None
        return add(*bounds) if e.op == "add" else mul(*bounds)
    x, d = e.args if e.op in ("floordiv", "mod") else (None, None)
    if x is not None and d.is_const and d.value > 0 and x.vmin >= 0:
        if e.op == "mod":
            return Expr.const(d.value - 1)
        bound = _upper(x, extents)
        return None if bound is None else floordiv(bound, d)
    return None


def _below(x: Expr, d: Expr, extents: Mapping[str, Expr]) -> bool:
    """Whether 0 <= x < d wherever the loop variables of `extents` are within their extents."""
    if x.vmin < 0:
        return False
    bound = _upper(x, extents)
    return bound is not None and add(d, mul(bound, -1)).vmin >= 1


def _decide(e: Expr, extents: Mapping[str, Expr]) -> Expr:
    if e.op in ("num", "var") or not (e.free_vars & extents.keys()):
        return e
    args = [_decide(a, extents) for a in e.args]
    if e.op in ("floordiv", "mod") and not args[1].is_const:
        x, d = args
        terms = x.args if x.op == "add" else (x,)
        quotients, rest = [], []
        for t in terms:
            q = floordiv(t, d)
            if mul(q, d) is t:  # an exact multiple of d
                quotients.append(q)
            else:
                rest.append(t)
        remainder = add(*rest)
        if _below(remainder, d, extents):
            return add(*quotients) if e.op == "floordiv" else remainder
        return e.with_args((x, d))
    if e.op == "lt":
        a, b = args
        bound = _upper(add(a, mul(b, -1)), extents)
        if bound is not None and bound.vmax < 0:
            return Expr.const(1)
    return e.with_args(args)


def symbolic_extents(kernel: Kernel) -> dict[str, Expr]:
    """Each loop variable of `kernel` (domain and reductions) whose extent is not a constant,
    with that extent."""
    out = {v.name: d for v, d in zip(kernel.loop_vars, kernel.domain) if not d.is_const}
    for r in walk(kernel.out.value):
        if isinstance(r, Reduce) and not r.size.is_const:
            out[r.var.name] = r.size
    return out


def bound_by_extents(e: Expr, extents: Mapping[str, Expr]) -> Expr:
    """`e` with the divisions, remainders and comparisons decided that the symbolic `extents`
    of its loop variables settle (`symbolic_extents`); equal to `e` at every point of the
    loops."""
    return _decide(e, extents) if extents else e
