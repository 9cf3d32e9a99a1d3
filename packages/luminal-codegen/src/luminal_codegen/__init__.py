"""Backend-neutral code generation: the kernel IR, graph lowering with fusion, and one
C-family renderer. Dialects live in their backends (luminal-cpu: C/OpenMP, luminal-cuda: CUDA C,
luminal-rocm: OpenCL C, luminal-metal: Metal Shading Language) and extend `Dialect` (or
`GpuDialect`).

    from luminal_codegen import lower, render_kernel
    from luminal_cpu.dialect import C
    program = lower(graph)                      # kernels, calls, buffers, dims
    source = render_kernel(program.kernels[0], "k0", C)

See docs/kernel-ir.md for how a backend uses it.
"""

from .gpu import GpuDialect, unravel_declarations
from .ir import (
    BufferSpec,
    Call,
    Kernel,
    KernelLike,
    Matmul,
    MatOperand,
    Param,
    Program,
    QuantOperand,
    domain_size,
    kernel_arguments,
    kernel_dims,
    top_reductions,
)
from .lower import lower
from .plan import MemoryPlan, plan_memory
from .render import (
    BodyWriter,
    Dialect,
    OnlineSoftmax,
    Scope,
    buffer_params,
    dim_names,
    helper_functions,
    render_kernel,
    row_softmax,
)
from .schedule import Schedule

__all__ = [
    "BodyWriter",
    "BufferSpec",
    "Call",
    "Dialect",
    "GpuDialect",
    "Kernel",
    "KernelLike",
    "MatOperand",
    "Matmul",
    "MemoryPlan",
    "OnlineSoftmax",
    "Param",
    "Program",
    "QuantOperand",
    "Schedule",
    "Scope",
    "buffer_params",
    "dim_names",
    "domain_size",
    "helper_functions",
    "kernel_arguments",
    "kernel_dims",
    "lower",
    "plan_memory",
    "render_kernel",
    "row_softmax",
    "top_reductions",
    "unravel_declarations",
]
