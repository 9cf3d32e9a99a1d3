"""Epilogues: the elementwise kernel after a direct convolution, applied to each output tile
while it is in registers.

A convolution lowers to its product and then, in a kernel of its own, whatever reads the
product element by element (the bias, an activation: YOLO's bias + SiLU). That kernel reads
the whole product back from memory, which the convolution has just written out. Here it is
folded into the convolution: each finished 8 x 32 tile goes through the kernel's value (the
product's loads reading the tile) and only the kernel's result is stored; the product is
never written.

`fuse(program)` folds a call of a `Kernel` into the call just before it when that one is a
direct convolution (`direct_conv.match`) writing a float32 temporary (M x N, row-major) read
by that kernel alone, and the kernel is elementwise over the product: its domain is (M, N),
it stores float32 in row-major order, and it reads the product only at the element it
stores (no reductions). The kernel's other inputs are any buffers, read at any index.
Compilers without AVX-512 keep the packed GEMM (`implicit_gemm.render`), which writes the
product into the output, and the kernel's value then runs over it in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from luminal.symbolic import Expr
from luminal_codegen import BodyWriter, Call, Kernel, Program, kernel_dims
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import Bind, Load, Reduce, SoftmaxSum, map_loads, walk

from .dialect import C

RUN = Expr.var("lm_l", 0, 1 << 30)  # the position in the run of outputs


@dataclass(frozen=True)
class Epilogue:
    """`kernel` applied to a product: its parameters `product` read the product (at the
    element it stores), `inputs` are its other inputs, in the fused call's order."""

    kernel: Kernel
    product: tuple[int, ...]
    inputs: tuple[int, ...]

    @property
    def params(self):
        return tuple(self.kernel.params[j] for j in self.inputs)


def _elementwise(kernel: Kernel, product: tuple[int, ...], m: int, n: int) -> bool:
    if len(kernel.domain) != 2 or kernel_dims(kernel):  # constant sizes and indices
        return False
    if (kernel.domain[0].value, kernel.domain[1].value) != (m, n):
        return False
    if kernel.out.buf != 0 or kernel.params[0].dtype.name != "float32":
        return False
    index = flat_index(kernel.domain, kernel.loop_vars)
    if kernel.out.index != index:
        return False
    for v in walk(kernel.out.value):
        if isinstance(v, (Reduce, SoftmaxSum, Bind)):
            return False
        if isinstance(v, Load) and v.buf in product and (v.index != index or v.valid != 1):
            return False
    return True


def fuse(program: Program, direct: Callable[[object], bool]) -> Program:
    """`program` with each elementwise kernel after a direct convolution folded into it
    (module docstring); `direct(kernel)` tells whether a kernel is a direct convolution
    (an `implicit_gemm.GatherMatmul`) without an epilogue."""
    readers: dict[int, int] = {}
    for call in program.calls:
        for p, buf in zip(program.kernels[call.kernel].params, call.args):
            if not p.output:
                readers[buf] = readers.get(buf, 0) + 1
    kernels = list(program.kernels)
    calls = []
    for call in program.calls:
        prev = calls[-1] if calls else None
        conv = kernels[prev.kernel] if prev else None
        kernel = kernels[call.kernel]
        product = prev.args[0] if prev else None
        if (conv is None or not direct(conv) or not isinstance(kernel, Kernel)
                or program.buffers[product].role != "temp" or readers.get(product) != 1):
            calls.append(call)
            continue
        mm = conv.matmul
        reads = tuple(j for j, buf in enumerate(call.args) if buf == product and j > 0)
        if (not reads or mm.out_offset != 0 or mm.out_stride != mm.n
                or not _elementwise(kernel, reads, mm.m.value, mm.n.value)):
            calls.append(call)
            continue
        inputs = tuple(j for j in range(1, len(call.args)) if j not in reads)
        kernels.append(replace(conv, epilogue=Epilogue(kernel, reads, inputs)))
        calls[-1] = Call(len(kernels) - 1, (call.args[0], *prev.args[1:],
                                            *(call.args[j] for j in inputs)))
    used = sorted({c.kernel for c in calls})
    renumber = {old: new for new, old in enumerate(used)}
    return replace(program, kernels=[kernels[k] for k in used],
                   calls=[Call(renumber[c.kernel], c.args) for c in calls])


def render_function(epi: Epilogue, name: str) -> list[str]:
    """`static void name(const float *src, long lds, float *dst, long ldd, long m0, long mr,
    long n0, long n, inputs...)`: dst[i * ldd + l] = the kernel's value at (m0 + i, n0 + l)
    for i < mr, l < n, the product's element read from src[i * lds + l] (src may be dst:
    each element is read before it is written). Not inlined: on its own the compiler
    vectorises it as it does the kernel (inlined into the tile loop, 1.6x slower)."""
    k = epi.kernel
    i0, i1 = (v.name for v in k.loop_vars)
    src = len(k.params)  # the run of the product: a parameter number the kernel leaves free
    value = map_loads(k.out.value, lambda x: replace(x, buf=src, index=RUN)
                      if x.buf in epi.product else x)
    writer = BodyWriter(C, {})
    out = writer.emit(value)
    inputs = "".join(f", const {C.storage_type(k.params[j].dtype)} *restrict p{j}"
                     for j in epi.inputs)
    return [
        f"static __attribute__((noinline)) void {name}(const float *lm_src, long lm_lds, "
        f"float *lm_dst, long lm_ldd, long lm_m0, long lm_mr, long lm_n0, long lm_n{inputs}) {{",
        "  for (long lm_i = 0; lm_i < lm_mr; lm_i++) {",
        f"    const long {i0} = lm_m0 + lm_i;",
        f"    const float *p{src} = lm_src + lm_i * lm_lds;",
        "    float *lm_out = lm_dst + lm_i * lm_ldd;",
        f"    (void){i0};",
        "    #pragma omp simd",
        f"    for (long {RUN.name} = 0; {RUN.name} < lm_n; {RUN.name}++) {{",
        f"      const long {i1} = lm_n0 + {RUN.name};",
        f"      (void){i1};",
        *("      " + x for x in writer.root.lines),
        f"      lm_out[{RUN.name}] = {out};",
        "    }",
        "  }",
        "}",
    ]
