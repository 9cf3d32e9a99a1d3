"""The C source of a whole compiled graph: one shared library with one entry point.

    int lm_run(void **buffers, const long *dims, int threads, const long *room);

`lm_run` first checks that every arena slot's members fit the bytes `room` gives the slot at
these dims, and returns 1 without running when one does not (the runtime lays the arena out
again and calls again); it then points the buffers of the values written straight into an
input (a KV cache's new rows) at their rows, so a decode step's Python binds neither. Then it
opens one OpenMP parallel region of `threads` threads (chosen per run by `threads.py`), whose
threads enter one team (csrc/runtime.h) and call every kernel in program order; kernels split
their work with the team's loops, each of which returns once all its chunks are done, which
orders the kernels without barriers; and returns 0.
Generic kernels are rendered by the backend-neutral renderer (`luminal_codegen`, C dialect);
matmuls become calls into the hand-written runtime (`csrc/runtime.c`, API `csrc/runtime.h`),
which is built once into a library of its own (`build_runtime`), so a graph's build compiles
only its kernels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from importlib.resources import files
from typing import NamedTuple

from luminal.symbolic import Expr
from luminal_codegen import (
    Kernel,
    Matmul,
    MemoryPlan,
    Program,
    QuantOperand,
    dim_names,
    kernel_dims,
    render_kernel,
)

from . import attention, flash, implicit_gemm, rows, toolchain
from .dialect import C

ENTRY_POINT = "lm_run"


class DirectWrite(NamedTuple):
    """A value the program computes straight into rows of an input (`Graph.write` into node
    `target`): buffer `buffer` starts `offset` (an expression of the dims) rows into input
    buffer `into`."""

    target: int
    buffer: int
    into: int
    offset: Expr
    row_bytes: int
_DTYPE_CODE = {"float32": "LM_F32", "float16": "LM_F16", "bfloat16": "LM_BF16"}
# the `luminal.quant` formats the runtime's quantized matmul decodes (runtime.c, kquant.c),
# each with its number in runtime.h's enum (LM_Q8_0 = 0 ...), which the repack passes to C
QTYPE_CODES = {"q8_0": 0, "q4_0": 1, "q4_1": 2, "q5_0": 3, "q4_k": 4, "q5_k": 5, "q6_k": 6}
_QTYPE_CODE = {q: f"LM_{q.upper()}" for q in QTYPE_CODES}
QUANT_KERNELS = frozenset(QTYPE_CODES)
# Batches whose operand offsets fit on the stack; more are rare (and go to the heap).
_STACK_BATCHES = 256


# how quantized matmuls along k may hold x (`lm_qmat.x_prec` in runtime.h)
# (a new name goes last: a searched schedule stores a setting as its position here)
QUANT_ACTIVATIONS = {"float": "LM_X_F32", "int8": "LM_X_I8", "int16": "LM_X_I16",
                     "int24": "LM_X_I24"}


def quant_activations() -> str:
    """How quantized matmuls along k hold x, from `LUMINAL_CPU_QUANT_ACTIVATIONS` (read when a
    graph is compiled; default "int16").

    - "int16" (the default): decode's matvec (up to 4 rows of x, csrc/qgemv16.c) writes x as
      two int16 digits per value (4.7e-10 of the block's max|x|: float-like; it is bound by
      memory, so the precision costs nothing), and prefill's GEMM (more rows, csrc/qgemm8.c)
      rounds x to 16 bits per group of 32 values (1.5e-5 of the group's max|x|; two int8
      digits). Gemma 3's first-forward logits are then within 3.1e-3 of transformers fp32,
      and its and SmolLM2's greedy tokens are transformers'.
    - "int24": the same decode; prefill keeps x to 24 bits (three int8 digits, 1.8e-7 of the
      group's max|x|: logits within 3e-5 of transformers), 1.3x slower than "int16".
    - "int8": llama.cpp's numerics, x rounded to int8 blocks in both (csrc/qgemv.c; about
      1e-3 relative to sum |x w|: it moved SmolLM2's greedy tokens away from transformers').
    - "float": x kept in float32 (exact up to summation order; the slowest)."""
    value = os.environ.get("LUMINAL_CPU_QUANT_ACTIVATIONS", "int16")
    if value not in QUANT_ACTIVATIONS:
        raise ValueError(f"LUMINAL_CPU_QUANT_ACTIVATIONS must be one of "
                         f"{', '.join(map(repr, QUANT_ACTIVATIONS))}, not {value!r}")
    return value


# the settings of `Matmul.tuning` the matmul call reads: `quant_activations` is the position
# of a `QUANT_ACTIVATIONS` name in that dict (search's settings are integers), so a name added
# to the dict is a new value without other edits
MATMUL_TUNABLE = ("quant_activations",)


def quant_activations_code(name: str) -> int:
    """The integer a schedule gives `quant_activations` for the `QUANT_ACTIVATIONS` name."""
    return list(QUANT_ACTIVATIONS).index(name)


def x_prec(mm: Matmul) -> str:
    """`lm_qmat.x_prec` for a quantized matmul: the schedule's `quant_activations`, else the
    `LUMINAL_CPU_QUANT_ACTIVATIONS` default."""
    tuned = dict(mm.tuning)
    unknown = tuned.keys() - set(MATMUL_TUNABLE) - set(C.tunable)
    if unknown:
        raise ValueError(f"the cpu backend's matmul has no setting {sorted(unknown)}; it has "
                         f"{list(MATMUL_TUNABLE)}")
    code = tuned.get("quant_activations")
    if code is None:
        return QUANT_ACTIVATIONS[quant_activations()]
    names = list(QUANT_ACTIVATIONS)
    if not 0 <= code < len(names):
        raise ValueError(f"quant_activations={code} is outside 0..{len(names) - 1} "
                         f"({', '.join(f'{k}: {n}' for k, n in enumerate(names))})")
    return QUANT_ACTIVATIONS[names[code]]


def _csrc(name: str) -> str:
    return files("luminal_cpu").joinpath("csrc", name).read_text()


# The runtime library's translation units, compiled at the same time and linked into one
# library (what they share: csrc/runtime_internal.h). As one unit it took 41-58 s to compile
# on 2 cores (gcc 12 -O3), which a user waited through at their first compile; alone they
# take 5, 5, 12 and 15 s (README: "The runtime library's first build").
RUNTIME_UNITS = (("runtime.c", "kquant.c"), ("qgemv.c",), ("qgemv16.c",), ("qgemm8.c",))


def runtime_units() -> list[tuple[str, str]]:
    """The C translation units of the runtime library (GEMM, GEMV, quantized kernels), as
    (name, source) pairs: each after the prelude, the API and the units' shared header."""
    shared = (C.prelude(), _csrc("runtime.h"), _csrc("runtime_internal.h"))
    return [(" + ".join(names), "\n".join((*shared, *map(_csrc, names))))
            for names in RUNTIME_UNITS]


def build_runtime(cc: toolchain.Compiler) -> toolchain.Library:
    """The runtime library that every graph's library links, built by `cc` (once per compiler,
    flags and CPU: then from the cache), saying so on stderr when it is compiled."""
    return toolchain.build_units(
        runtime_units(), cc,
        announce="luminal-cpu: compiling the CPU runtime library for this machine "
                 "(once per compiler and CPU; it takes up to a minute)")


def _render_matmul(mm: Matmul, name: str, packed: bool) -> str:
    dims = kernel_dims(mm)
    names = dim_names(dims)

    def ex(e: Expr) -> str:
        return e.render_c(names)

    params = [(C.storage_type(p.dtype), f"p{k}", p.output) for k, p in enumerate(mm.params)]
    lines = [C.signature(name, params, [names[d] for d in dims]) + " {"]
    batch = " * ".join(f"({ex(b)})" for b in mm.batch) or "1"
    bvars = [v.name for v in mm.batch_vars]
    lines += [
        f"  const long lm_nb = {batch};",
        f"  long lm_sa[{_STACK_BATCHES}], lm_sb[{_STACK_BATCHES}], lm_sc[{_STACK_BATCHES}];",
        f"  const int lm_heap = lm_nb > {_STACK_BATCHES};",
        "  long *lm_ao = lm_heap ? (long *)malloc(sizeof(long) * lm_nb) : lm_sa;",
        "  long *lm_bo = lm_heap ? (long *)malloc(sizeof(long) * lm_nb) : lm_sb;",
        "  long *lm_co = lm_heap ? (long *)malloc(sizeof(long) * lm_nb) : lm_sc;",
        "  for (long lm_t = 0; lm_t < lm_nb; lm_t++) {",
    ]
    stride = ""
    for k in range(len(bvars) - 1, -1, -1):
        q = f"(lm_t / ({stride}))" if stride else "lm_t"
        extent = ex(mm.batch[k])
        lines.append(f"    const long {bvars[k]} = {q if k == 0 else f'{q} % ({extent})'};")
        stride = f"{stride} * ({extent})" if stride else f"({extent})"
    b = mm.b
    lines.append(f"    lm_ao[lm_t] = {ex(mm.a.offset)};")
    lines.append(f"    lm_co[lm_t] = {ex(mm.out_offset)};")
    if not isinstance(b, QuantOperand):
        lines.append(f"    lm_bo[lm_t] = {ex(b.offset)};")
    lines.append("  }")
    a_dt = _DTYPE_CODE[mm.params[mm.a.buf].dtype.name]
    c_dt = _DTYPE_CODE[mm.params[mm.out].dtype.name]
    out = f"(lm_out){{p{mm.out}, {c_dt}, lm_co, {ex(mm.out_stride)}}}"
    a = f"(lm_mat){{p{mm.a.buf}, {a_dt}, {ex(mm.a.stride_row)}, {ex(mm.a.stride_k)}}}"
    shape = f"{ex(mm.m)}, {ex(mm.n)}, {ex(mm.k)}"
    if isinstance(b, QuantOperand):
        w = (f"(lm_qmat){{p{b.buf}, {_QTYPE_CODE[b.qtype]}, {int(b.k_contiguous)}, "
             f"{ex(b.rows)}, {ex(b.cols)}, {x_prec(mm)}, {int(packed)}}}")
        lines.append(f"  lm_qgemm(lm_nb, lm_ao, {shape}, {a}, {w}, {out});")
    else:
        b_dt = _DTYPE_CODE[mm.params[b.buf].dtype.name]
        bm = f"(lm_mat){{p{b.buf}, {b_dt}, {ex(b.stride_row)}, {ex(b.stride_k)}}}"
        lines.append(f"  lm_gemm(lm_nb, lm_ao, lm_bo, {shape}, {a}, {bm}, {out});")
    lines += ["  if (lm_heap) { free(lm_ao); free(lm_bo); free(lm_co); }", "}"]
    return "\n".join(lines) + "\n"


def kernel_source(kernel: Kernel | Matmul | implicit_gemm.GatherMatmul
                  | attention.FusedAttention, name: str,
                  packed: bool = False) -> str:
    """One kernel as a C function; `packed`: a matmul whose weight is in the repacked
    layout at every call (repack.py)."""
    if isinstance(kernel, implicit_gemm.GatherMatmul):
        return implicit_gemm.render(kernel, name, _DTYPE_CODE)
    if isinstance(kernel, attention.FusedAttention):
        return attention.render(kernel, name, kernel_source)
    if isinstance(kernel, Matmul):
        return _render_matmul(kernel, name, packed)
    tiled = flash.match(kernel)
    if tiled is not None:
        return flash.render(kernel, tiled, name)
    return rows.render(kernel, name) or render_kernel(kernel, name, C)


def program_source(program: Program, vector_math: str = "", plan: MemoryPlan | None = None,
                   direct_writes: Sequence[DirectWrite] = (),
                   packed_kernels: frozenset[int] = frozenset()) -> str:
    """The complete C translation unit of `program`; `vector_math` declares the vectorisable
    math functions the toolchain found (`toolchain.VECTOR_MATH`), if any. The entry point
    checks the arena slots of `plan` against their room and binds `direct_writes` (see the
    module docstring). The matmul kernels `packed_kernels` read their weight repacked
    (`repack.packed_inputs`)."""
    parts = [C.prelude(), vector_math, _csrc("runtime.h")]
    if any(isinstance(k, attention.FusedAttention) or (isinstance(k, Kernel) and flash.match(k))
           for k in program.kernels):
        parts.append(_csrc("flash.h"))
    parts += [kernel_source(k, f"lm_k{i}", i in packed_kernels)
              for i, k in enumerate(program.kernels)]
    parts.append(_entry_point(program, plan, direct_writes))
    return "\n".join(parts)


def _entry_point(program: Program, plan: MemoryPlan | None,
                 direct_writes: Sequence[DirectWrite]) -> str:
    names = dim_names(program.dims)
    lines = [f"int {ENTRY_POINT}(void **b, const long *lm_d, int threads, const long *room) {{",
             "  (void)room;"]
    lines += [f"  const long {c} = lm_d[{k}]; (void){c};" for k, c in enumerate(names.values())]
    # a slot's members of constant size always fit the room of any layout
    for slot, sizes in enumerate(plan.sizes if plan is not None else ()):
        grown = sorted({s.render_c(names) for s in sizes if not s.is_const})
        if grown:
            fits = " || ".join(f"({e}) > room[{slot}]" for e in grown)
            lines.append(f"  if ({fits}) return 1;")
    lines += [f"  b[{w.buffer}] = (char *)b[{w.into}] + ({w.offset.render_c(names)}) * "
              f"{w.row_bytes}L;" for w in direct_writes]
    lines += ["  lm_team team = {0};", "  #pragma omp parallel num_threads(threads)", "  {",
              "    lm_team_enter(&team);"]
    for call in program.calls:
        kernel = program.kernels[call.kernel]
        args = [
            f"({C.storage_type(p.dtype)} *)b[{buf}]" for p, buf in zip(kernel.params, call.args)
        ]
        dims = kernel.dims if isinstance(
            kernel, (implicit_gemm.GatherMatmul, attention.FusedAttention)) else kernel_dims(kernel)
        args += [names[d] for d in dims]
        lines.append(f"    lm_k{call.kernel}({', '.join(args)});")
    lines += ["    lm_team_leave();", "  }", "  return 0;", "}", ""]
    return "\n".join(lines)
