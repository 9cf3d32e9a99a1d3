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
by that kernel alone, and the kernel is elementwise over the product: its domain is M by
axes of N points in all (the image's rows and columns, or N), it stores float32 in
row-major order, and it reads the product only at the element it
stores (no reductions). The kernel's other inputs are any buffers, read at any index.
Compilers without AVX-512 keep the packed GEMM (`implicit_gemm.render`), which writes the
product into the output, and the kernel's value then runs over it in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from luminal.symbolic import Expr
from luminal_codegen import (
    BodyWriter,
    Call,
    Kernel,
    Program,
    kernel_dims,
    unravel_declarations,
)
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import (
    Bind,
    Load,
    Reduce,
    SoftmaxSum,
    Unary,
    Value,
    map_loads,
    map_values,
    walk,
)

from .dialect import C, CDialect

RUN = Expr.var("lm_l", 0, 1 << 30)  # the position in the run of outputs
LANE = Expr.var("lm_j", 0, 16)  # the position in a block of 16 outputs (`render_function`)
# how far along its row the epilogue of a tile prefetches the output for writing (floats): the
# tile two on over the row's columns, which the same output channels' tiles write 16 tiles
# later (a direct convolution's tiles are 32 columns wide, output channels innermost). The
# output is written 8 rows at a time, a stream per row, and each store missed the cache:
# the hardware's prefetchers follow too few streams (the input side of `direct_conv` has
# the same problem). The address may be past the output (integer arithmetic: a prefetch
# never faults).
STORE_AHEAD = 64

# 2^x in arithmetic the compiler vectorises inline: in an epilogue over a tile's 32 columns,
# libmvec's exp2f (a call per 16 lanes, `lm_exp2`'s range masks around it) cost more than
# the tile's store and read back it saves. x = k + f with k = rint(x), |f| <= 1/2; 2^f as the
# Taylor series of e^(f ln 2) to degree 7 (remainder below 6e-9 relative), its coefficients
# ln(2)^i / i! folded and evaluated with explicit fmaf (one rounding per step, whatever
# -ffp-contract says), times 2^k as two powers of two, so results from 2^-151 (rounds to 0)
# to 2^129 (infinity) round once, subnormals included; NaN stays NaN. Within 1 ulp of exp2
# (every 37th float from -170 to 150 against double precision). The fmaf and folded steps
# took a bias + SiLU epilogue from 0.67-0.79 to 0.50-0.52 ns per output (Zen 4, one thread,
# a C microbenchmark over 32 x 65536 outputs): SiLU's exp is most of an epilogue's arithmetic.
INLINE_EXP2 = """\
#ifndef LM_EPI_EXP2
#define LM_EPI_EXP2
static inline float lm_epi_exp2(float x) {
  float t = x > -151.0f ? x : -151.0f;  /* NaN too: put back at the end */
  t = t < 129.0f ? t : 129.0f;
  const float k = rintf(t), y = t - k;
  float p = 1.52527338e-5f;
  p = fmaf(p, y, 1.54035304e-4f);
  p = fmaf(p, y, 1.33335581e-3f);
  p = fmaf(p, y, 9.61812911e-3f);
  p = fmaf(p, y, 5.55041087e-2f);
  p = fmaf(p, y, 2.40226507e-1f);
  p = fmaf(p, y, 6.93147181e-1f);
  p = fmaf(p, y, 1.0f);
  const int k1 = (int)k >> 1, k2 = (int)k - k1;  /* floor: both powers stay normal */
  union { int i; float f; } s1 = {(k1 + 127) << 23}, s2 = {(k2 + 127) << 23};
  const float r = p * s1.f * s2.f;
  return x != x ? x : r;
}
#endif"""


# 2^x of 16 floats, for epilogues, which compute their exp2s a block of 16 outputs at a time
# (`render_function`). With AVX-512 (F and DQ) it is `lm_epi_exp2`'s polynomial in
# intrinsics without its clamps and NaN check: k = rint(x) and y = x - k (vreduceps, exact),
# 2^y as there, then vscalefps scales by 2^k, rounding once into the subnormals, to 0 and to
# infinity for any k (x = +-inf: y = 0, k = +-inf), NaN staying NaN. Bit for bit
# `lm_epi_exp2`'s results (every 7th float pattern, 614 million, and the specials, checked
# in C). gcc 12 turns `lm_epi_exp2`'s selects and integer exponent arithmetic into
# mask-register sequences, 28 instructions per 16 lanes against 10 here: a bias + SiLU
# epilogue 0.46-0.48 -> 0.28 ns per output (Zen 4, one thread, the generated epilogue over
# a tile in L1). Otherwise `lm_epi_exp2` lane by lane.
BLOCK_EXP2 = """\
#ifndef LM_EPI_EXP2_16
#define LM_EPI_EXP2_16
#if defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
static inline void lm_epi_exp2_16(float *restrict out, const float *restrict in) {
  const __m512 x = _mm512_loadu_ps(in);
  const __m512 k = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 y = _mm512_reduce_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(1.52527338e-5f);
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.54035304e-4f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.33335581e-3f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(9.61812911e-3f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(5.55041087e-2f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(2.40226507e-1f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(6.93147181e-1f));
  p = _mm512_fmadd_ps(p, y, _mm512_set1_ps(1.0f));
  _mm512_storeu_ps(out, _mm512_scalef_ps(p, k));
}
#else
static inline void lm_epi_exp2_16(float *restrict out, const float *restrict in) {
  #pragma omp simd
  for (int j = 0; j < 16; j++) out[j] = lm_epi_exp2(in[j]);
}
#endif
#endif"""


def _exp2s(value: Value) -> list[Unary]:
    """`value`'s float32 exp2s, if none is under another (each block computes their
    arguments first); else none: the value is computed lane by lane."""
    exps = [v for v in walk(value) if isinstance(v, Unary) and v.op == "exp2"]
    nested = any(isinstance(u, Unary) and u.op == "exp2" for v in exps for u in walk(v.x))
    if nested or any(v.dtype.name != "float32" for v in exps):
        return []
    return exps


class _InlineExp2Dialect(CDialect):
    math_functions = {**CDialect.math_functions, "exp2": "lm_epi_exp2"}


# the C dialect with exp2 as `INLINE_EXP2` (a kernel using it includes that source): for
# epilogues and row kernels (`rows`), where libmvec's call per 16 lanes is most of a SiLU
INLINE_EXP2_C = _InlineExp2Dialect()


@dataclass(frozen=True)
class Epilogue:
    """`kernel` applied to a product: its parameters `product` read the product (at the
    element it stores), `inputs` are its other inputs, in the fused call's order."""

    kernel: Kernel
    product: tuple[int, ...]
    inputs: tuple[int, ...]
    split: int  # the kernel's axes before it walk the M rows, the others a row; 0: one axis
    n: int  # the product's row length

    @property
    def params(self):
        return tuple(self.kernel.params[j] for j in self.inputs)


def _split(kernel: Kernel, product: tuple[int, ...], m: int, n: int) -> int | None:
    """Where `kernel`'s axes that walk a row start, if it is elementwise over the (m, n)
    product (module docstring); 0 for a single axis of m * n points."""
    if kernel_dims(kernel):  # constant sizes and indices
        return None
    sizes = [e.value for e in kernel.domain]
    split = next((j for j in range(1, len(sizes)) if math.prod(sizes[:j]) == m
                  and math.prod(sizes[j:]) == n), 0 if sizes == [m * n] else None)
    if split is None or kernel.out.buf != 0 or kernel.params[0].dtype.name != "float32":
        return None
    index = flat_index(kernel.domain, kernel.loop_vars)
    if kernel.out.index != index:
        return None
    for v in walk(kernel.out.value):
        if isinstance(v, (Reduce, SoftmaxSum, Bind)):
            return None
        if isinstance(v, Load) and v.buf in product and (v.index != index or v.valid != 1):
            return None
    return split


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
        split = (_split(kernel, reads, mm.m.value, mm.n.value)
                 if reads and mm.out_offset == 0 and mm.out_stride == mm.n else None)
        if split is None:
            calls.append(call)
            continue
        inputs = tuple(j for j in range(1, len(call.args)) if j not in reads)
        kernels.append(replace(conv, epilogue=Epilogue(kernel, reads, inputs, split, mm.n.value)))
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
    vectorises it as it does the kernel (inlined into the tile loop, 1.6x slower).

    A value with exp2s runs in blocks of 16 outputs: one loop computes the exp2s' arguments
    into arrays, `lm_epi_exp2_16` takes each array, and a second loop computes the value
    reading them (the few loads and operations before an exp2 run twice); the last
    n % 16 outputs run lane by lane."""
    k = epi.kernel
    names = [v.name for v in k.loop_vars]
    sizes = [str(e.value) for e in k.domain]
    src = len(k.params)  # the run of the product: a parameter number the kernel leaves free
    value = map_loads(k.out.value, lambda x: replace(x, buf=src, index=RUN)
                      if x.buf in epi.product else x)
    inputs = "".join(f", const {C.storage_type(k.params[j].dtype)} *restrict p{j}"
                     for j in epi.inputs)
    at = f"lm_n0 + {RUN.name}"
    if epi.split == 0:  # one axis: the flat position
        row, within = [], [f"const long {names[0]} = (lm_m0 + lm_i) * {epi.n} + {at};"]
    else:
        split = epi.split
        row = unravel_declarations("(lm_m0 + lm_i)", sizes[:split], names[:split])
        within = unravel_declarations(f"({at})", sizes[split:], names[split:])

    def loop(head: str, lines: list[str], indent: str, start: tuple[str, ...] = ()) -> list[str]:
        body = (*start, *within, *(f"(void){v};" for v in names), *lines)
        return [f"{indent}#pragma omp simd", f"{indent}for ({head}) {{",
                *(f"{indent}  " + x for x in body), f"{indent}}}"]

    def lanes(v: Value) -> list[str]:  # the lines computing v, its store last
        writer = BodyWriter(INLINE_EXP2_C, {})
        out = writer.emit(v)
        return [*writer.root.lines, f"lm_out[{RUN.name}] = {out};"]

    exps = _exp2s(value)
    blocks: list[str] = []
    first = "0"
    if exps:
        # the exp2s' results: arrays named as parameters the kernel leaves free, read at LANE
        results = {e: Load(src + 1 + j, LANE, Expr.const(1), e.dtype) for j, e in enumerate(exps)}
        args = BodyWriter(INLINE_EXP2_C, {})
        stores = [f"lm_x{j}[{LANE.name}] = {args.emit(e.x)};" for j, e in enumerate(exps)]
        lane = f"long {LANE.name} = 0; {LANE.name} < 16; {LANE.name}++"
        start = (f"const long {RUN.name} = lm_b + {LANE.name};",)
        blocks = [
            "    for (long lm_b = 0; lm_b + 16 <= lm_n; lm_b += 16) {",
            *(f"      float lm_x{j}[16], p{src + 1 + j}[16];" for j in range(len(exps))),
            *loop(lane, [*args.root.lines, *stores], "      ", start),
            *(f"      lm_epi_exp2_16(p{src + 1 + j}, lm_x{j});" for j in range(len(exps))),
            *loop(lane, lanes(map_values(value, results.get)), "      ", start),
            "    }",
        ]
        first = "lm_n & ~15L"
    return [
        *INLINE_EXP2.splitlines(),
        *(BLOCK_EXP2.splitlines() if exps else ()),
        f"static __attribute__((noinline)) void {name}(const float *lm_src, long lm_lds, "
        f"float *lm_dst, long lm_ldd, long lm_m0, long lm_mr, long lm_n0, long lm_n{inputs}) {{",
        "  for (long lm_i = 0; lm_i < lm_mr; lm_i++) {",
        *("    " + x for x in row),
        f"    const float *p{src} = lm_src + lm_i * lm_lds;",
        "    float *lm_out = lm_dst + lm_i * lm_ldd;",
        *(f"    __builtin_prefetch((const void *)((unsigned long)lm_out + "
          f"sizeof(float) * {ahead}), 1);" for ahead in (STORE_AHEAD, STORE_AHEAD + 16)),
        *blocks,
        *loop(f"long {RUN.name} = {first}; {RUN.name} < lm_n; {RUN.name}++", lanes(value),
              "    "),
        "  }",
        "}",
    ]
