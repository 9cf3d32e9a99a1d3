"""Rendering a lowered `Program` to OpenCL C: one source, with its launches, per IR kernel.

Each IR kernel is a self-contained source (helpers + kernel functions), the unit the device
deduplicates: identical kernels of different graphs (the same layer in a model rebuilt, the
same elementwise chain in two tests) share one build. The helpers are kept apart from the
kernel functions (`prelude` / `body`) so that the device can also build many kernels as one
OpenCL program (`Device.build_all`): a driver spends most of a build on fixed costs (PoCL:
about 0.1-0.2 s per program, a few milliseconds per extra kernel in it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from luminal.symbolic import Expr, lt
from luminal_codegen import Kernel, Matmul, Program, dim_names, kernel_dims, render_kernel
from luminal_codegen.matmul import MatmulCtx

from . import matmul_cpu, matmul_gpu
from .dialect import DeviceDialect
from .launch import LaunchSpec, ceil_to
from .matmul import GEMV_MAX_ROWS, QUANT_PRELUDE


@dataclass(frozen=True)
class KernelSource:
    """The OpenCL C of one IR kernel and the kernel functions in it (a matmul has one per
    variant; `LaunchSpec.when` picks at run time). `prelude` holds the helper chunks the
    `body` (the kernel functions only) needs; programs that batch kernels include each chunk
    once. `renamed(names)` renders the body again with each kernel function `old` named
    `names[old]` (a batch gives every source's kernels names of their own)."""

    prelude: tuple[str, ...]
    body: str
    launches: tuple[LaunchSpec, ...]
    renamed: Callable[[Mapping[str, str]], str] = field(compare=False, repr=False)

    @property
    def source(self) -> str:
        """The whole program of this kernel alone (also its identity for deduplication)."""
        return "".join(self.prelude) + self.body


def _elementwise(kernel: Kernel, dialect: DeviceDialect, max_group: int) -> KernelSource:
    if kernel.tuning:
        dialect = dialect.tuned(kernel.tuning)
    group = min(dialect.group_size, max_group)
    total = Expr.const(1)
    for d in kernel.domain:
        total = total * d
    threads = (total + (dialect.points - 1)) // dialect.points
    spec = LaunchSpec("k", kernel_dims(kernel), (ceil_to(threads, group),), (group,))
    return KernelSource((dialect.prelude(),), render_kernel(kernel, "k", dialect), (spec,),
                        lambda names: render_kernel(kernel, names["k"], dialect))


def _matmul(mm: Matmul, dialect: DeviceDialect, cpu: bool) -> KernelSource:
    """A GEMV where `m` is small and a GEMM elsewhere (only one of them when `m` is a
    constant), from the CPU family where `cpu` and it supports the layout."""
    use_cpu = cpu and matmul_cpu.supports(mm)
    family = matmul_cpu if use_cpu else matmul_gpu
    ctx = MatmulCtx(mm, dialect, dim_names(kernel_dims(mm)))
    small = lt(mm.m, GEMV_MAX_ROWS + 1)
    variants = []  # (kernel function writer, its name, when it runs)
    if not (small.is_const and small.value == 0):
        variants.append((family.gemv, "k_v", small))
    if not (small.is_const and small.value == 1):
        variants.append((family.gemm, "k", 1 - small))
    parts = [write(ctx, name) for write, name, _ in variants]
    prelude = (dialect.prelude(), *([matmul_cpu.PRELUDE] if use_cpu else []),
               *([QUANT_PRELUDE] if ctx.quant else []))
    return KernelSource(
        prelude, "".join(src for src, _ in parts),
        tuple(replace(spec, when=when) for (_, spec), (_, _, when) in zip(parts, variants)),
        lambda names: "".join(write(ctx, names[name])[0] for write, name, _ in variants))


def render_program(program: Program, dialect: DeviceDialect, cpu: bool,
                   max_group: int) -> list[KernelSource]:
    """`program.kernels[i]` as `KernelSource` number i. `cpu` selects the matmul kernels made
    for CPU devices (see `luminal_rocm.matmul`); `max_group` is the device's work-group limit."""
    return [
        _matmul(k, dialect, cpu) if isinstance(k, Matmul) else _elementwise(k, dialect, max_group)
        for k in program.kernels
    ]
