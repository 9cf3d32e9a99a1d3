"""The dialects of the C-family renderer: C with OpenMP (CPU), CUDA C, OpenCL C and Metal.

Each one spells types, half-precision conversions, math functions, signatures and the parallel
walk of a kernel's domain for its language; the renderer (`render.py`) does the rest. On a CPU
a domain is an OpenMP work-shared loop over its outer axes with the last axis innermost (so
the compiler vectorises it); on a GPU every point of the domain is one thread, and each
reduction runs inside its thread (no atomics).
"""

from __future__ import annotations

from ..dtypes import DType
from .render import Dialect


def unravel_declarations(flat: str, extents: list[str], names: list[str]) -> list[str]:
    """Declarations of `names` from row-major position `flat` in `extents`."""
    lines, stride = [], ""
    for k in range(len(names) - 1, -1, -1):
        q = f"({flat} / ({stride}))" if stride else flat
        lines.append(f"const long {names[k]} = {q if k == 0 else f'{q} % ({extents[k]})'};")
        stride = f"{stride} * ({extents[k]})" if stride else f"({extents[k]})"
    return lines[::-1]


class CDialect(Dialect):
    """C11 for gcc/clang, parallel through orphaned OpenMP work-sharing: the caller runs all
    kernels inside one `#pragma omp parallel` region, and each kernel's `omp for` splits its
    domain (and ends with the barrier that orders it before the next kernel)."""

    name = "c"

    def signature(self, name, params, dims):
        # noinline keeps the entry point small: gcc's time grows with function size
        return "__attribute__((noinline)) " + super().signature(name, params, dims)

    def domain(self, extents, names, body, simd_last=False):
        if not names:
            return ["#pragma omp single", "{", *("  " + b for b in body), "}"]
        if len(names) == 1:
            loop = f"for (long {names[0]} = 0; {names[0]} < {extents[0]}; {names[0]}++) {{"
            pragma = "#pragma omp for simd schedule(static)" if simd_last else (
                "#pragma omp for schedule(static)")
            return [pragma, loop, *("  " + b for b in body), "}"]
        last, n = names[-1], extents[-1]
        inner = [*(["#pragma omp simd"] if simd_last else []),
                 f"for (long {last} = 0; {last} < {n}; {last}++) {{", *("  " + b for b in body),
                 "}"]
        # the fewest outer axes that give every thread rows to work on are one collapsed
        # work-shared loop (OpenMP splits their product and each thread steps its loop
        # variables forwards: no division per row); the axes inside them are plain loops,
        # which the compiler unrolls and vectorises when they are short
        heads = [f"for (long {v} = 0; {v} < {e}; {v}++)" for v, e in zip(names, extents)][:-1]
        shared, rows = 0, 1
        for e in extents[:-1]:
            shared += 1
            if not e.isdigit():
                break  # a symbolic extent: assume it is large
            rows *= int(e)
            if rows >= self.parallel_rows:
                break
        pragma = (f"#pragma omp for collapse({shared}) schedule(static)" if shared > 1 else
                  "#pragma omp for schedule(static)")
        return [
            pragma,
            *heads[: shared - 1],
            heads[shared - 1] + " {",
            *("  " + x for x in heads[shared:]),
            *("  " + x for x in inner),
            "}",
        ]

    # rows (points of the outer axes) a work-shared loop should split among the threads
    parallel_rows = 256

    lanes = 64

    def reduce_lanes(self, extents, names, declare, reset, loop, body, final):
        last, n, lanes = names[-1], extents[-1], self.lanes
        outer = " * ".join(f"({e})" for e in extents[:-1]) or "1"
        lane_loop = "for (long lm_j = 0; lm_j < lm_nj; lm_j++) {"
        return [
            f"const long lm_blocks = (({n}) + {lanes - 1}) / {lanes};",
            f"const long lm_tasks = {outer} * lm_blocks;",
            "#pragma omp for schedule(static)",
            "for (long lm_t = 0; lm_t < lm_tasks; lm_t++) {",
            *(["  const long lm_row = lm_t / lm_blocks;"] if len(names) > 1 else []),
            f"  const long lm_j0 = lm_t % lm_blocks * {lanes};",
            f"  const long lm_nj = ({n}) - lm_j0 < {lanes} ? ({n}) - lm_j0 : {lanes};",
            *("  " + x for x in unravel_declarations("lm_row", extents[:-1], names[:-1])),
            *("  " + x for x in declare),
            f"  {lane_loop} {' '.join(reset)} }}",
            f"  {loop}",
            "    #pragma omp simd",
            f"    {lane_loop}",
            f"      const long {last} = lm_j0 + lm_j;",
            *("      " + x for x in body),
            "    }",
            "  }",
            f"  {lane_loop}",
            f"    const long {last} = lm_j0 + lm_j;",
            *("    " + x for x in final),
            "  }",
            "}",
        ]

    def reduce_pragma(self, op: str, dt: DType) -> str | None:
        # OpenMP's simd reduction licenses reassociating the sum, which vectorises it without
        # -ffast-math (that flag would break inf/nan semantics everywhere else)
        if dt.name == "bool":
            return None
        if op == "sum":
            return "#pragma omp simd reduction(+:ACC)"
        return "#pragma omp simd reduction(max:ACC) reduction(|:ACC_nan)" if dt.is_float else (
            "#pragma omp simd reduction(max:ACC)")

    def prelude(self) -> str:
        return "#include <math.h>\n" + super().prelude()


class _GpuDialect(Dialect):
    """One thread per domain point, from a flat global id."""

    global_id = ""
    kernel_qualifier = ""
    buffer_qualifier = ""

    def domain(self, extents, names, body, simd_last=False):
        total = " * ".join(f"({e})" for e in extents) or "1"
        return [
            f"const long lm_gid = {self.global_id};",
            f"if (lm_gid >= {total}) return;",
            *unravel_declarations("lm_gid", extents, names),
            *body,
        ]

    def signature(self, name, params, dims):
        args = [
            f"{self.buffer_qualifier}{'' if out else 'const '}{t} *{self.restrict} {n}"
            for t, n, out in params
        ] + [f"long {d}" for d in dims]
        return f"{self.kernel_qualifier} void {name}({', '.join(args)})"


class CudaDialect(_GpuDialect):
    """CUDA C for NVRTC; half buffers are `__half` (cuda_fp16.h)."""

    name = "cuda"
    helper_qualifier = "static __device__ __forceinline__"
    restrict = "__restrict__"
    half_storage = "__half"
    global_id = "(long)blockIdx.x * blockDim.x + threadIdx.x"
    kernel_qualifier = 'extern "C" __global__'

    def load(self, dt, ref):
        return f"__half2float({ref})" if dt.name == "float16" else super().load(dt, ref)

    def store(self, dt, value):
        return f"__float2half({value})" if dt.name == "float16" else super().store(dt, value)

    def round(self, dt, value):
        if dt.name == "float16":
            return f"__half2float(__float2half({value}))"
        return super().round(dt, value)

    def prelude(self) -> str:
        return "#include <cuda_fp16.h>\n" + super().prelude()


class OpenCLDialect(_GpuDialect):
    """OpenCL C 1.2; half buffers go through vload_half/vstore_half (no cl_khr_fp16)."""

    name = "opencl"
    helper_qualifier = "inline"
    global_id = "(long)get_global_id(0)"
    kernel_qualifier = "__kernel"
    buffer_qualifier = "__global "
    half_storage = "half"

    def load(self, dt, ref):
        if dt.name == "float16":
            buf, idx = ref.split("[", 1)
            return f"vload_half({idx[:-1]}, {buf})"
        return super().load(dt, ref)

    def store_statement(self, dt, buf, index, value):
        if dt.name == "float16":
            return f"vstore_half({value}, {index}, {buf});"
        return super().store_statement(dt, buf, index, value)

    def round(self, dt, value):
        if dt.name == "float16":
            return f"lm_round_half({value})"
        return super().round(dt, value)

    def unary(self, op, x):
        if op == "recip":
            return f"(1.0f / {x})"
        return {"log2": "log2", "exp2": "exp2", "sin": "sin", "sqrt": "sqrt"}[op] + f"({x})"

    def fmod(self, a, b):
        return f"fmod({a}, {b})"

    def prelude(self) -> str:
        return super().prelude() + (
            "inline float lm_round_half(float x) { half h[1]; vstore_half(x, 0, h); "
            "return vload_half(0, h); }\n"
        )


class MetalDialect(_GpuDialect):
    """Metal Shading Language; the thread position arrives as a kernel argument."""

    name = "metal"
    helper_qualifier = "static inline"
    restrict = ""
    half_storage = "half"
    global_id = "(long)lm_tid"
    kernel_qualifier = "kernel"
    buffer_qualifier = "device "

    def signature(self, name, params, dims):
        args = [
            f"device {'' if out else 'const '}{t} *{n} [[buffer({k})]]"
            for k, (t, n, out) in enumerate(params)
        ]
        args += [f"constant long &{d} [[buffer({len(params) + k})]]" for k, d in enumerate(dims)]
        args.append("uint lm_tid [[thread_position_in_grid]]")
        return f"kernel void {name}({', '.join(args)})"

    def unary(self, op, x):
        if op == "recip":
            return f"(1.0f / {x})"
        # precise:: keeps IEEE results under Metal's default fast-math
        return {"log2": "precise::log2", "exp2": "precise::exp2", "sin": "precise::sin",
                "sqrt": "precise::sqrt"}[op] + f"({x})"

    def fmod(self, a, b):
        return f"precise::fmod({a}, {b})"

    def prelude(self) -> str:
        return "#include <metal_stdlib>\nusing namespace metal;\n" + super().prelude()


C = CDialect()
CUDA = CudaDialect()
OPENCL = OpenCLDialect()
METAL = MetalDialect()
