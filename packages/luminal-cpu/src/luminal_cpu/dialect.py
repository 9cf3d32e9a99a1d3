"""The C dialect of luminal's C-family renderer: C11 for gcc/clang, parallel through the
runtime's thread team (OpenMP threads, work shared without barriers: csrc/runtime.h).

On a CPU a kernel's domain is a work-shared loop over its outer axes with the last axis
innermost (so the compiler vectorises it); each reduction is a loop inside its point.
"""

from __future__ import annotations

from luminal.dtypes import DType
from luminal_codegen import Dialect, unravel_declarations


def _shared_loop(n: str, body: list[str], simd: bool = False,
                 chunk_start: tuple[str, ...] = (), points: str | None = None) -> list[str]:
    """A loop over `lm_i` in [0, n) whose iterations the team shares (csrc/runtime.h);
    `chunk_start` runs before each chunk [lm_lo, lm_hi) a thread claims. `points`, the
    domain's size, sizes the chunks (`lm_for_begin_work`: about a nanosecond a point, what
    YOLOv8n's elementwise, pool and concatenation kernels take on Zen 4)."""
    begin = f"lm_for_begin({n});" if points is None else f"lm_for_begin_work({n}, {points});"
    return [begin,
            "for (long lm_lo, lm_hi; lm_for_next(&lm_lo, &lm_hi);) {",
            *("  " + x for x in chunk_start),
            *(["  #pragma omp simd"] if simd else []),
            "  for (long lm_i = lm_lo; lm_i < lm_hi; lm_i++) {",
            *("    " + b for b in body), "  }", "}"]


def odometer(extents: list[str], names: list[str], flat: str = "lm_lo"
             ) -> tuple[list[str], str]:
    """Loop variables set from the row-major position `flat` (divided out once per chunk),
    and the statement stepping them to the next position (no division per row):
    `if (++last == extent) { last = 0; if (++previous == ...) ... }`."""
    start = [d.replace("const long", "long", 1)
             for d in unravel_declarations(flat, extents, names)]
    step = f"++{names[0]};"
    for v, e in zip(names[1:], extents[1:]):
        step = f"if (++{v} == ({e})) {{ {v} = 0; {step} }}"
    return start, step


# glibc's vector exp2f (libmvec, what `omp simd` loops call) hands every lane below -126 (a
# subnormal or zero result: a masked logit's -1e9 or -inf in a softmax) to the scalar exp2f,
# about 50x slower; measured on this repository's causal attention at sequence 2048, the
# default plan spent 45% of its time there. `lm_exp2` clamps such an x at -150 (whose result
# rounds to 0, as every smaller x's) and computes it as exp2f(x + 24) * 2^-24, so the call
# stays on the vector path: zero exactly where exp2f is, NaN and infinities unchanged,
# subnormal results may differ in their last bit. Arithmetic, not branches: with a branch the
# compiler calls exp2f on the unclamped x as well. The shift (24 or 0) and the scale (2^-24 or
# 1) are bits selected by an integer mask: from `low` as a float 0 or 1 gcc 12 made two cases,
# and its vectorised loops called exp2f twice per 16 lanes, one per case, under masks (SwiGLU
# 0.97 -> 0.49 ns per value, Zen 4, one thread; the same bits for all 2^32 inputs).
_EXP2 = """\
static inline float lm_exp2(float x) {
  float t = x > -150.0f ? x : -150.0f;
  t = x != x ? x : t;
  const int low = -(t < -126.0f);
  union { int i; float f; } shift = {low & 0x41c00000}, scale = {0x3f800000 - (low & 0x0c000000)};
  return exp2f(t + shift.f) * scale.f;
}
"""


# points of the last axis in one chunk of the team's loop when `split_axis` shares that axis
SPLIT_BLOCK = 512


class CDialect(Dialect):
    """C11 for gcc/clang, parallel through the runtime's thread team: the caller runs all
    kernels inside one `#pragma omp parallel` region, and each kernel's work-shared loop
    (`lm_for_begin` / `lm_for_next`) splits its domain into chunks the threads claim, and
    returns once every chunk is done, which orders it before the next kernel (no barrier:
    a thread kept off its core holds nobody up unless it holds a chunk)."""

    name = "c"
    # noinline keeps the entry point small: gcc's time grows with function size
    kernel_qualifier = "__attribute__((noinline)) static"

    def domain(self, extents, names, body, simd_last=False, row="1"):
        """The work-shared loops over `extents`; `row`: the points each point's `body` runs
        (a row kernel's row), for sizing the team's chunks."""
        if not names:
            return _shared_loop("1", body)
        ordered = self.ordered(extents, names)
        simd_last = simd_last and ordered[1] == names  # it vectorises the original last axis
        extents, names = ordered
        if len(names) == 1:
            return _shared_loop(extents[0], [f"const long {names[0]} = lm_i;", *body],
                                simd=simd_last, points=f"({extents[0]}) * ({row})")
        if self.split_axis == 1:
            return self._blocks(extents, names, body, simd_last, row)
        last, n = names[-1], extents[-1]
        inner = [*(["#pragma omp simd"] if simd_last else []),
                 f"for (long {last} = 0; {last} < {n}; {last}++) {{", *("  " + b for b in body),
                 "}"]
        heads = [f"for (long {v} = 0; {v} < {e}; {v}++)" for v, e in zip(names, extents)][:-1]
        shared = self._shared_axes(extents)
        product = " * ".join(f"({e})" for e in extents[:shared])
        start, step = odometer(extents[:shared], names[:shared])
        return _shared_loop(product, [
            *(x + " {" for x in heads[shared:]),
            *inner,
            *("}" for _ in heads[shared:]),
            step,
        ], chunk_start=tuple(start),
            points=" * ".join(f"({e})" for e in (*extents, row)))

    def _shared_axes(self, extents: list[str]) -> int:
        """How many outer axes (not the last) one work-shared loop collapses: those outside
        the axis `split_axis` names, with it; by default the fewest that give every thread
        rows to work on (the axes inside are plain loops, which the compiler unrolls and
        vectorises when they are short)."""
        if 1 < self.split_axis <= len(extents):
            return len(extents) - self.split_axis + 1
        shared, rows = 0, 1
        for e in extents[:-1]:
            shared += 1
            if not e.isdigit():
                break  # a symbolic extent: assume it is large
            rows *= int(e)
            if rows >= self.parallel_rows:
                break
        return shared

    def _blocks(self, extents, names, body, simd_last, row):
        """The team shares every axis, the last in blocks of `SPLIT_BLOCK` points (a few
        long rows, or one, still keep every thread busy)."""
        last, n, block = names[-1], extents[-1], SPLIT_BLOCK
        return [
            f"const long lm_nblk = (({n}) + {block - 1}) / {block};",
            *_shared_loop(" * ".join(f"({e})" for e in extents[:-1]) + " * lm_nblk", [
                "const long lm_row = lm_i / lm_nblk;",
                *unravel_declarations("lm_row", extents[:-1], names[:-1]),
                f"const long lm_j0 = lm_i % lm_nblk * {block};",
                f"const long lm_j1 = ({n}) - lm_j0 < {block} ? ({n}) : lm_j0 + {block};",
                *(["#pragma omp simd"] if simd_last else []),
                f"for (long {last} = lm_j0; {last} < lm_j1; {last}++) {{",
                *("  " + b for b in body), "}"],
                points=" * ".join(f"({e})" for e in (*extents, row))),
        ]

    def split_reduction(self, extents, names, arrays, count, partial, final):
        # The partials live in the stack of one thread of the team, which hands their address
        # to the others (`single copyprivate`: this kernel's one barrier) and returns only
        # once the combining loop is complete; not in static storage, which two runs of the
        # same library (identical graphs executed from two Python threads) would share.
        points = " * ".join(f"({e})" for e in extents) or "1"
        pointers = ", ".join(name for _, name in arrays)
        return [
            *(f"{t} {name}_own[{count}], *{name} = {name}_own;" for t, name in arrays),
            f"#pragma omp single copyprivate({pointers})",
            f"{{ {' '.join(f'{name} = {name}_own;' for _, name in arrays)} }}",
            *_shared_loop(f"{points} * {self.split_k}", [
                f"const long lm_p = lm_i / {self.split_k}, lm_s = lm_i % {self.split_k};",
                *unravel_declarations("lm_p", extents, names), *partial]),
            *_shared_loop(points, [
                "const long lm_p = lm_i;", *unravel_declarations("lm_p", extents, names),
                *final]),
        ]

    # rows (points of the outer axes) a work-shared loop should split among the threads
    parallel_rows = 256
    # which axis, counted from the last (1), the team partitions: every axis outside it is
    # shared with it and the axes inside it are plain loops; the last axis is shared in
    # blocks. 0, or more than the kernel's axes: by `parallel_rows`
    split_axis = 0

    lanes = 64
    # heuristics a searched schedule may override per kernel (`Kernel.tuning`), with the
    # values they render; `loop_order` and `split_k` are the base dialect's (see `Dialect`)
    tunable = {"parallel_rows": (1, 1 << 30), "lanes": (1, 1024), "loop_order": (0, 8),
               "split_axis": (0, 8), "split_k": (1, 64)}

    def reduce_lanes(self, extents, names, declare, reset, loop, body, final):
        last, n, lanes = names[-1], extents[-1], self.lanes
        outer = " * ".join(f"({e})" for e in extents[:-1]) or "1"
        lane_loop = "for (long lm_j = 0; lm_j < lm_nj; lm_j++) {"
        return [
            f"const long lm_blocks = (({n}) + {lanes - 1}) / {lanes};",
            *_shared_loop(f"{outer} * lm_blocks", [
                *(["const long lm_row = lm_i / lm_blocks;"] if len(names) > 1 else []),
                f"const long lm_j0 = lm_i % lm_blocks * {lanes};",
                f"const long lm_nj = ({n}) - lm_j0 < {lanes} ? ({n}) - lm_j0 : {lanes};",
                *unravel_declarations("lm_row", extents[:-1], names[:-1]),
                *declare,
                f"{lane_loop} {' '.join(reset)} }}",
                loop,
                "  #pragma omp simd",
                f"  {lane_loop}",
                f"    const long {last} = lm_j0 + lm_j;",
                *("    " + x for x in body),
                "  }",
                "}",
                lane_loop,
                f"  const long {last} = lm_j0 + lm_j;",
                *("  " + x for x in final),
                "}",
            ]),
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

    # exp2 through `lm_exp2` (below); the others as the base dialect spells them
    math_functions = {**Dialect.math_functions, "exp2": "lm_exp2"}

    def prelude(self) -> str:
        return "#include <math.h>\n" + super().prelude() + _EXP2




C = CDialect()
