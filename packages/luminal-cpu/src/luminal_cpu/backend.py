"""`CpuBackend`: compiles the whole graph to one native shared library."""

from __future__ import annotations

import time

from luminal.backend import Backend, BackendStatus
from luminal.graph import Graph
from luminal_codegen import lower, plan_memory

from . import attention, device, implicit_gemm, toolchain
from .dialect import C
from .repack import packed_inputs, packed_loads
from .runtime import CpuRuntime, direct_writes, read_written_rows
from .source import (
    MATMUL_TUNABLE,
    QUANT_KERNELS,
    build_runtime,
    program_source,
    quant_activations,
    quant_activations_code,
)

NO_COMPILER = "no C compiler found (looked for $CC, gcc, clang, cc): install gcc or clang"


class CpuBackend(Backend):
    """Generated C for the whole graph, built by the system C compiler (OpenMP threads, SIMD
    through auto-vectorisation and AVX-512 matmul kernels) and cached on disk.

    After `graph.compile((..., CpuBackend()))`, `graph.runtime.stats` holds the compile-time
    breakdown and whether the library came from the cache.
    """

    name = "cpu"
    priority = 100
    schedulable = True
    in_place_writes = True  # the runtime computes written rows straight into the input
    # CDialect's settings search tries (README "Schedule space"), with the values worth
    # trying: how many outer axes one work-shared loop collapses (by rows per split), how
    # many outputs a strided reduction computes side by side, a reduction split among the
    # threads, the axis the threads partition, and a loop interchange
    kernel_space = {"parallel_rows": (1, 4096), "lanes": (16, 256), "split_k": (4,),
                    "split_axis": (1,), "loop_order": (1,)}
    # the `luminal.quant` formats whose matmuls run on packed blocks (what search's regions
    # are lowered with)
    quant_kernels = QUANT_KERNELS
    # the settings of `schedule_space` that the quantized matmul call takes (`Matmul.tuning`)
    # rather than generated kernels
    matmul_settings = frozenset(MATMUL_TUNABLE)

    @property
    def schedule_space(self) -> dict[str, tuple[int, ...]]:
        """`kernel_space`, and `quant_activations` (how decode's quantized matvec holds x, as
        the position of a `QUANT_ACTIVATIONS` name) with the values that keep results within
        search's check of the reference: "float" (exact up to summation order) and the value
        the user chose with LUMINAL_CPU_QUANT_ACTIVATIONS. A value that rounds x (int8: about
        1e-3 relative to sum |x w|) is searched only when the user opted into it, so search
        never trades accuracy the user did not give up (int8 moved SmolLM2's greedy tokens)."""
        chosen = dict.fromkeys(("float", quant_activations()))
        return {**self.kernel_space,
                "quant_activations": tuple(map(quant_activations_code, chosen))}
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool")

    def probe(self) -> BackendStatus:
        cc = toolchain.compiler()
        if cc is None:
            return BackendStatus(False, reason=NO_COMPILER)
        if cc.error:
            return BackendStatus(False, reason=f"{cc.argv[0]} cannot build shared libraries "
                                               f"here: {cc.error}")
        notes = [] if cc.openmp else ["no OpenMP: single-threaded"]
        notes += [] if cc.vector_math else ["no vector math library: scalar exp/log/sin"]
        extra = f" ({'; '.join(notes)})" if notes else ""
        return BackendStatus(True, device=device.description() + extra)

    def compile(self, graph: Graph) -> None:
        status = self.probe()
        if not status.available:
            raise RuntimeError(f"backend 'cpu' cannot compile: {status.reason}")
        cc = toolchain.compiler()
        t0 = time.perf_counter()
        program = lower(graph, self.schedule, self.quant_kernels, C.max_kernel_args)
        direct = direct_writes(graph, program)
        # before fusing gathers into matmuls, which would fold the cache's copy into them;
        # prefill attention as one tiled kernel before that too, its product with the values
        # then being a plain matmul
        program = implicit_gemm.fuse(attention.fuse(read_written_rows(program, direct)))
        plan = plan_memory(program)
        packed, packed_kernels = packed_inputs(graph, program)
        program = packed_loads(program, packed)
        t1 = time.perf_counter()
        source = program_source(program, toolchain.VECTOR_MATH if cc.vector_math else "",
                                plan, direct, packed_kernels)
        t2 = time.perf_counter()
        support = build_runtime(cc)
        library = toolchain.build(source, cc, links=(support.path,))
        t3 = time.perf_counter()
        runtime = CpuRuntime(graph, program, plan, library, direct, packed)
        runtime.stats.update({
            "lower_s": t1 - t0, "render_s": t2 - t1, "build_s": t3 - t2,
            "cached": library.cached, "kernels": len(program.kernels),
            "calls": len(program.calls),
        })
        graph.set_runtime(runtime)
