"""Rendering a lowered `Program` to one Metal library: the source and how to dispatch each call.

Every IR kernel becomes one or more kernel functions (`k3`, or `k3` and `k3_v` for a matmul
with a GEMM and a GEMV variant); a graph's whole program is one MSL source, compiled with one
`newLibraryWithSource` call.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.ir import Graph
from luminal.symbolic import Expr
from luminal_codegen import Kernel, Matmul, Program, Schedule, kernel_arguments, lower

from .dialect import METAL, THREADS, render_metal_kernel
from .matmul import QUANT_KERNELS, QUANT_PRELUDE, render_matmul


@dataclass(frozen=True)
class Launch:
    """One kernel function: `function` takes the call's buffers then the values of `dims`.
    Where `when` is nonzero it is dispatched as `size` threads in groups of up to `threads`
    (`per_thread`: every thread independent), else as `size` threadgroups of exactly
    `threads` threads (they cooperate through threadgroup memory and SIMD-group operations)."""

    function: str
    dims: tuple[str, ...]
    size: Expr
    threads: int
    when: Expr
    per_thread: bool


@dataclass(frozen=True)
class KernelSource:
    """The kernel functions of one IR kernel and their launches (a matmul picks one launch
    by its row count at run time)."""

    body: str
    launches: tuple[Launch, ...]
    quantized: bool = False


def render_kernel_source(kernel: Kernel | Matmul, name: str, cpu: bool = False) -> KernelSource:
    """`kernel` as MSL function(s) named after `name`. `cpu` renders only one-thread-per-point
    functions (no threadgroup or simdgroup cooperation): what can also run as C++ on a CPU."""
    if isinstance(kernel, Matmul):
        mm = render_matmul(kernel, name, per_thread_only=cpu)
        launches = tuple(Launch(v.name, mm.dims, v.size, v.threads, v.when, v.per_thread)
                         for v in mm.variants)
        return KernelSource("".join(v.source for v in mm.variants), launches, mm.quantized)
    rk = render_metal_kernel(kernel, name, threadgroup=False if cpu else None)
    launch = Launch(name, rk.dims, rk.points, THREADS, Expr.const(1), not rk.threadgroup)
    return KernelSource(rk.source, (launch,))


def library_source(sources: list[KernelSource]) -> str:
    """One MSL library holding every kernel function of `sources`."""
    quant = QUANT_PRELUDE if any(s.quantized for s in sources) else ""
    return METAL.prelude() + quant + "".join(s.body for s in sources)


def lower_for_metal(graph: Graph, schedule: Schedule | None = None) -> Program:
    """`graph` lowered as Metal runs it: quantized matmuls where Metal has kernels for the
    format, and no kernel taking more arguments than Metal binds."""
    return lower(graph, schedule, QUANT_KERNELS, METAL.max_kernel_args)


def render_program(program: Program, cpu: bool = False) -> tuple[str, list[KernelSource]]:
    """The library source of `program` and kernel `i`'s functions (named `k{i}`) as entry i.
    Raises ValueError for a kernel with more arguments than Metal can bind (`program` was not
    lowered with `max_args=METAL.max_kernel_args`)."""
    for i, k in enumerate(program.kernels):
        if kernel_arguments(k) > METAL.max_kernel_args:
            raise ValueError(
                f"metal: kernel {i} takes {kernel_arguments(k)} buffers and dims, more than the "
                f"{METAL.max_kernel_args} arguments Metal binds per kernel; lower the graph "
                f"with max_args=METAL.max_kernel_args")
    sources = [render_kernel_source(k, f"k{i}", cpu) for i, k in enumerate(program.kernels)]
    return library_source(sources), sources
