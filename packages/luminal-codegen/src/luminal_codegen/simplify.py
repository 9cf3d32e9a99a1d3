"""Kernel-level simplification: merging domain axes that every access walks as one.

After fusion a kernel's domain is its output shape, e.g. (seq, 9, 64). When every index the
kernel uses is affine in two neighbouring loop variables with the outer coefficient equal to
the inner one times the inner extent, the pair walks memory exactly like a single variable over
the product: merging them gives fewer, longer loops (one flat, vectorisable loop for plain
elementwise kernels) and no index division at run time.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.symbolic import Expr

from .ir import Kernel, Store, affine, exprs_of, loop_var, map_exprs


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
