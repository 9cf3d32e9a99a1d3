"""The CUDA C dialect for NVRTC, and kernel rendering with block-parallel reductions.

The core renderer writes a kernel as one thread per domain point, each reduction a loop inside
its thread. That is right when the domain is large. When it is small and the reductions long
(RMSNorm or softmax of a few rows, a decode step's vocabulary softmax), one thread would walk
thousands of elements alone, so such kernels render in *block mode*: one thread block per
domain point, every reduction at the top of the body strided over the block's threads and
combined with warp shuffles (`lm_block_reduce`); nested reductions stay per thread. Thread 0
stores the result.

Every kernel is a `__device__` *body* taking its block index as an argument (`lm_block`), and
an `extern "C" __global__` entry that calls it with `blockIdx.x`. Independent kernels can then
share one launch (`fusion.py`): a fused entry hands each body its own range of blocks.

Symbolic dims reach kernels through device memory (`const long long *lm_dims`, one slot per
dim of the program) rather than as by-value arguments: a captured CUDA graph then stays valid
when a dim changes, as long as its grids (sized for an upper bound, every kernel checks its
real extent) and buffers still fit. That is what lets decode replay one graph while the KV
cache grows (see `runtime.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.dtypes import DType
from luminal.symbolic import Expr
from luminal_codegen import (
    BodyWriter,
    Dialect,
    GpuDialect,
    buffer_params,
    dim_names,
    unravel_declarations,
)
from luminal_codegen.cooperative import CooperativeWriter
from luminal_codegen.ir import Kernel, domain_size, kernel_dims, top_reductions

from .prelude import CUDA_PRELUDE

THREADS = 256  # threads per block of thread-mode kernels
# A top-level reduction at least this long (or of unknown length) renders in block mode...
BLOCK_MIN_REDUCE = 128
# ...unless the domain has at least this many points: then every SM is busy anyway.
BLOCK_MAX_POINTS = 1 << 16


class NvrtcDialect(GpuDialect):
    """CUDA C for NVRTC without headers: float16 is 16-bit storage converted in PTX."""

    name = "cuda"
    helper_qualifier = "static __device__ __forceinline__"
    restrict = "__restrict__"
    half_storage = "lm_half"
    global_id = "(long)lm_block * blockDim.x + threadIdx.x"
    kernel_qualifier = 'extern "C" __global__'

    def load(self, dt: DType, buf: str, index: str) -> str:
        if dt.name == "float16":
            return f"lm_h2f({buf}[{index}])"
        return Dialect.load(self, dt, buf, index)

    def store(self, dt: DType, value: str) -> str:
        return f"lm_f2h({value})" if dt.name == "float16" else Dialect.store(self, dt, value)

    def round(self, dt: DType, value: str) -> str:
        return f"lm_round_h({value})" if dt.name == "float16" else Dialect.round(self, dt, value)

    def prelude(self) -> str:
        return CUDA_PRELUDE + Dialect.prelude(self)

    def arguments(self, params: list[tuple[str, str, bool]], uses_dims: bool) -> list[str]:
        """Buffers, then the device array of dim values when the kernel uses any dim."""
        args = [f"{'' if out else 'const '}{t} *{self.restrict} {n}" for t, n, out in params]
        if uses_dims:
            args.append(f"const long long *{self.restrict} lm_dims")
        return args

    def signature(self, name: str, params: list[tuple[str, str, bool]], dims: list[str],
                  attributes: str = "") -> str:
        args = self.arguments(params, bool(dims))
        return f"{self.qualifiers(attributes)} void {name}({', '.join(args)})"


def dim_loads(dims: tuple[str, ...], slots: dict[str, int]) -> list[str]:
    """Declarations reading a kernel's dims from `lm_dims` (C names from `dim_names`)."""
    names = dim_names(dims)
    return [f"const long {names[d]} = (long)lm_dims[{slots[d]}];" for d in dims]


CUDA = NvrtcDialect()


@dataclass(frozen=True)
class KernelFunction:
    """A kernel's body (`{name}_body`, a `__device__` function whose last argument is its block
    index) and its entry (`{name}`, launched alone). `params` are the buffer parameters
    (C element type, name, written) and `uses_dims` whether `lm_dims` follows them."""

    name: str
    params: tuple[tuple[str, str, bool], ...]
    uses_dims: bool
    source: str


def kernel_function(name: str, params: list[tuple[str, str, bool]], dims: list[str],
                    body: list[str]) -> KernelFunction:
    """`body` (lines reading the block index `lm_block`) as a body and an entry."""
    args = CUDA.arguments(params, bool(dims))
    names = [n for _, n, _ in params] + (["lm_dims"] if dims else [])
    source = "\n".join([
        f"static __device__ void {name}_body({', '.join([*args, 'const long lm_block'])}) {{",
        *("  " + line for line in body),
        "}",
        f"{CUDA.signature(name, params, dims)} {{ {name}_body({', '.join(names)}, blockIdx.x); }}",
    ]) + "\n"
    return KernelFunction(name, tuple(params), bool(dims), source)


class _BlockWriter(CooperativeWriter):
    """Renders the reductions of the root scope cooperatively over the thread block."""

    def lane_loop(self, var: str, size: str) -> str:
        return f"for (long {var} = threadIdx.x; {var} < {size}; {var} += blockDim.x) {{"

    def combine(self, op: str, ctype: str, value: str) -> str:
        functor = {"or": "LmOr", "sum": "LmAdd", "max": "LmMax"}[op]
        return f"lm_block_reduce({value}, {functor}(), {_IDENTITY[op, ctype]})"


# what a thread with no steps contributes to each combination
_IDENTITY = {("or", "int"): "0", ("sum", "unsigned int"): "0u", ("sum", "float"): "0.0f",
             ("max", "int"): "(int)0x80000000u", ("max", "float"): "-INFINITY"}


def wants_block_mode(kernel: Kernel) -> bool:
    """Block mode pays when a top-level reduction is long and the domain is small."""
    tops = top_reductions(kernel.out.value)
    if not tops:
        return False
    long_reduce = any(not r.size.is_const or r.size.value >= BLOCK_MIN_REDUCE for r in tops)
    points = domain_size(kernel)
    return long_reduce and (not points.is_const or points.value < BLOCK_MAX_POINTS)


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel (body and entry) and how to launch it: `block` threads per block, one thread
    per domain point (thread mode) or one block per point (block mode)."""

    function: KernelFunction
    points: Expr  # domain size
    block: int
    block_mode: bool

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def source(self) -> str:
        return self.function.source

    @property
    def uses_dims(self) -> bool:
        return self.function.uses_dims

    def blocks(self, points: int) -> int:
        """The grid for `points` domain points."""
        return points if self.block_mode else -(-points // self.block)


def render_cuda_kernel(kernel: Kernel, name: str, slots: dict[str, int],
                       block_mode: bool | None = None) -> RenderedKernel:
    """`kernel` as CUDA C (thread mode or block mode, see the module docstring); `slots` gives
    each dim's index in the program's `lm_dims` array."""
    if block_mode is None:
        block_mode = wants_block_mode(kernel)
    dims = kernel_dims(kernel)
    names = dim_names(dims)
    writer = (_BlockWriter if block_mode else BodyWriter)(CUDA, names)
    store = writer.emit_store(kernel)
    extents = [writer.expr(e) for e in kernel.domain]
    loop_names = [v.name for v in kernel.loop_vars]
    params = buffer_params(kernel, CUDA)
    body = dim_loads(dims, slots)
    if block_mode:
        total = " * ".join(f"({e})" for e in extents) or "1"
        # the grid may be sized for larger dims: whole blocks leave together, and no thread
        # returns later, since every thread must reach the block reductions' barriers
        body += [
            "const long lm_gid = lm_block;",
            f"if (lm_gid >= {total}) return;",
            *unravel_declarations("lm_gid", extents, loop_names),
            *writer.root.lines,
            f"if (threadIdx.x == 0) {store}",
        ]
    else:
        body += CUDA.domain(extents, loop_names, [*writer.root.lines, store])
    function = kernel_function(name, params, [names[d] for d in dims], body)
    return RenderedKernel(function, domain_size(kernel), THREADS, block_mode)
