"""Backend-neutral code generation: the kernel IR, graph lowering with fusion, and the
C-family renderer with its dialects (C/OpenMP, CUDA C, OpenCL C, Metal).

    from luminal.codegen import lower, render_kernel, C
    program = lower(graph)                      # kernels, calls, buffers, dims
    source = render_kernel(program.kernels[0], "k0", C)

See docs/kernel-ir.md for how a backend uses it.
"""

from .dialects import CUDA, METAL, OPENCL, C, CDialect, CudaDialect, MetalDialect, OpenCLDialect
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
    kernel_dims,
)
from .lower import lower
from .plan import MemoryPlan, plan_memory
from .render import Dialect, dim_names, render_kernel
from .schedule import Schedule

__all__ = [
    "CUDA",
    "METAL",
    "OPENCL",
    "BufferSpec",
    "C",
    "CDialect",
    "Call",
    "CudaDialect",
    "Dialect",
    "Kernel",
    "KernelLike",
    "MatOperand",
    "Matmul",
    "MemoryPlan",
    "MetalDialect",
    "OpenCLDialect",
    "Param",
    "Program",
    "QuantOperand",
    "Schedule",
    "dim_names",
    "kernel_dims",
    "lower",
    "plan_memory",
    "render_kernel",
]
