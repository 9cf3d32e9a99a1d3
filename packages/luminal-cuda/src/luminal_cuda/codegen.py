"""A lowered `Program` as one CUDA translation unit and a launch recipe per kernel.

Every kernel of a program goes into one source (one NVRTC compilation per graph, cached on
disk by CuPy keyed by source, options, GPU architecture and NVRTC version):

- `Kernel` -> a generated function (thread mode or block mode, see `dialect.py`);
- `Attention` -> the fused online-softmax kernel (`attention_kernel.py`);
- `Matmul` -> cuBLAS, with a generated fallback kernel for views cuBLAS cannot take;
- `Matmul` over a quantized weight -> `qmatvec` for few rows, else dequantize + cuBLAS;
- every level of independent calls (`fusion.py`) -> one fused entry running them side by side.

Nothing here needs a GPU: the source can be checked with `nvcc` alone (the test suite does).
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal_codegen.ir import Kernel, KernelLike, Matmul, Program, QuantOperand
from luminal_codegen.plan import MemoryPlan, plan_memory

from .attention import Attention
from .attention_kernel import render_attention
from .dialect import CUDA, THREADS, KernelFunction, RenderedKernel, render_cuda_kernel
from .fusion import Level, fused_entry, schedule
from .matmul import cublas_types, matmul_kernel
from .prelude import COPY_KERNEL
from .quant import QuantKernels, quant_kernels

NVRTC_OPTIONS = ("--std=c++14",)


@dataclass(frozen=True)
class Generated:
    """A generated kernel, launched over its domain."""

    kernel: RenderedKernel


@dataclass(frozen=True)
class Gemm:
    """A matmul for cuBLAS (`types` None: cuBLAS has no kernel for its dtypes), with the
    generated kernel that computes it when cuBLAS cannot take the operands' views."""

    matmul: Matmul
    types: tuple[int, int, int] | None
    fallback: RenderedKernel


@dataclass(frozen=True)
class QuantGemm:
    """A matmul with a quantized weight: `kernels.qmatvec` for few rows, else dequantize into
    a scratch buffer and run `dequantized` (a `Gemm` over the scratch) on cuBLAS."""

    matmul: Matmul
    kernels: QuantKernels
    dequantized: Gemm


Code = Generated | Gemm | QuantGemm


def fusible_function(code: Code) -> KernelFunction | None:
    """The body a fused launch can run for `code` (for a quantized matmul: its qmatvec, which
    it uses for few rows), or None when `code` is launched on its own (cuBLAS, or a kernel
    written for another block size than `THREADS`, as attention)."""
    if isinstance(code, Generated):
        return code.kernel.function if code.kernel.block == THREADS else None
    if isinstance(code, QuantGemm):
        return code.kernels.qmatvec
    return None


@dataclass(frozen=True)
class Module:
    """The translation unit of a program: the program with its calls in launch order (level by
    level), the code of each kernel, the memory plan, the levels of independent calls and, for
    each combination of kernels that some level launches together (kernel indices, in call
    order), the name of its fused entry."""

    program: Program
    source: str
    codes: tuple[Code, ...]
    plan: MemoryPlan
    levels: tuple[Level, ...]
    fused: dict[tuple[int, ...], str]


def kernel_code(kernel: KernelLike, name: str, slots: dict[str, int]) -> tuple[Code, list[str]]:
    """The launch recipe of one kernel and the source of the functions it needs; `slots` gives
    each dim's index in the program's `lm_dims` array."""
    if isinstance(kernel, Attention):
        rendered = render_attention(kernel, name, slots)
        return Generated(rendered), [rendered.source]
    if isinstance(kernel, Kernel):
        rendered = render_cuda_kernel(kernel, name, slots)
        return Generated(rendered), [rendered.source]
    assert isinstance(kernel, Matmul)
    if isinstance(kernel.b, QuantOperand):
        qk = quant_kernels(kernel, name, slots)
        inner, sources = kernel_code(qk.dequantized, f"{name}_deq_mm", slots)
        assert isinstance(inner, Gemm)
        code = QuantGemm(kernel, qk, inner)
        return code, [*sources, qk.dequant.source, *([qk.qmatvec.source] if qk.qmatvec else [])]
    fallback = render_cuda_kernel(matmul_kernel(kernel), f"{name}_fb", slots)
    return Gemm(kernel, cublas_types(kernel), fallback), [fallback.source]


def build_module(program: Program, prefix: str = "lm_k") -> Module:
    """One translation unit with every kernel of `program` (functions `lm_k0`, `lm_k1`...)
    and the fused entries of its levels. Kernels read dim `program.dims[i]` from slot i of
    the `lm_dims` array."""
    slots = {d: i for i, d in enumerate(program.dims)}
    codes, parts = [], [CUDA.prelude(), COPY_KERNEL]
    for i, kernel in enumerate(program.kernels):
        code, sources = kernel_code(kernel, f"{prefix}{i}", slots)
        codes.append(code)
        parts.extend(sources)
    program, levels = schedule(program)
    plan = plan_memory(program, [k for k, level in enumerate(levels) for _ in level.calls])
    fused: dict[tuple[int, ...], str] = {}
    for level in levels:
        members = tuple(k for k in (program.calls[c].kernel for c in level.calls)
                        if fusible_function(codes[k]) is not None)
        if len(members) > 1 and members not in fused:
            fused[members] = name = f"{prefix}_fused{len(fused)}"
            parts.append(fused_entry(name, [fusible_function(codes[k]) for k in members]))
    return Module(program, "\n".join(parts), tuple(codes), plan, levels, fused)
