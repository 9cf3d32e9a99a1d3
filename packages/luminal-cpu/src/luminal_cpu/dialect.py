"""The C dialect of luminal's C-family renderer: C11 for gcc/clang, parallel through OpenMP.

On a CPU a kernel's domain is an OpenMP work-shared loop over its outer axes with the last axis
innermost (so the compiler vectorises it); each reduction is a loop inside its point.
"""

from __future__ import annotations

from luminal.codegen import Dialect, unravel_declarations
from luminal.dtypes import DType


class CDialect(Dialect):
    """C11 for gcc/clang, parallel through orphaned OpenMP work-sharing: the caller runs all
    kernels inside one `#pragma omp parallel` region, and each kernel's `omp for` splits its
    domain (and ends with the barrier that orders it before the next kernel)."""

    name = "c"
    # noinline keeps the entry point small: gcc's time grows with function size
    kernel_qualifier = "__attribute__((noinline)) static"

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
    # both are heuristics a searched schedule may override per kernel (`Kernel.tuning`)
    tunable = ("parallel_rows", "lanes")

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

    def reduce_pragma(self, op: str, dt: DType, acc: str) -> str | None:
        # OpenMP's simd reduction licenses reassociating the sum, which vectorises it without
        # -ffast-math (that flag would break inf/nan semantics everywhere else)
        if dt.name == "bool":
            return None
        if op == "sum":
            return f"#pragma omp simd reduction(+:{acc})"
        return f"#pragma omp simd reduction(max:{acc}) reduction(|:{acc}_nan)" if dt.is_float \
            else f"#pragma omp simd reduction(max:{acc})"

    def prelude(self) -> str:
        return "#include <math.h>\n" + super().prelude()




C = CDialect()
