"""The Metal Shading Language dialect of luminal's C-family renderer.

A kernel renders in one of two modes:

- *thread mode* (core's `GpuDialect`): one thread per point of the domain, its loop variables
  decoded from `thread_position_in_grid`, each reduction a loop inside its thread;
- *threadgroup mode*, for a small domain with long reductions (RMSNorm or softmax of a few rows,
  a decode step's vocabulary softmax): one threadgroup per domain point, every reduction at the
  top of the body strided over the group's threads and combined with `simd_sum` / `simd_max`
  (`simd_or` for flags) inside each simdgroup, then across simdgroups through threadgroup
  memory (`lm_tg_*` in the prelude). Nested reductions stay per thread; thread 0 stores.

Symbolic dims are kernel arguments (`constant long &` bound with `setBytes`), so one pipeline
serves every value of a dim. float16 buffers are Metal's native `half`; bfloat16 buffers are
`ushort` converted by bit operations (core's helpers), which every Metal version compiles.
Values are computed in float32 (luminal's semantics); `precise::` math keeps IEEE results under
Metal's default fast-math.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal.symbolic import Expr
from luminal_codegen import (
    BodyWriter,
    GpuDialect,
    Kernel,
    OnlineSoftmax,
    Scope,
    buffer_params,
    dim_names,
    kernel_dims,
    render_kernel,
    row_softmax,
    unravel_declarations,
)
from luminal_codegen.cooperative import CooperativeWriter
from luminal_codegen.ir import Reduce, SoftmaxSum, Value, children, domain_size, top_reductions

THREADS = 256  # threads per threadgroup (a pipeline with a lower limit gets its limit)
# A top-level reduction at least this long (or of unknown length) renders in threadgroup mode...
THREADGROUP_MIN_REDUCE = 128
# ...unless the domain has at least this many points: then the GPU is busy with threads alone.
THREADGROUP_MAX_POINTS = 1 << 16

# Thread coordinates a kernel receives besides its buffers and dims (Metal attributes).
THREAD_ARGS = "uint lm_tid [[thread_position_in_grid]]"
GROUP_ARGS = ("uint lm_group [[threadgroup_position_in_grid]], "
              "uint lm_lid [[thread_position_in_threadgroup]], "
              "uint lm_tgsize [[threads_per_threadgroup]], "
              "uint lm_lane [[thread_index_in_simdgroup]], "
              "uint lm_sg [[simdgroup_index_in_threadgroup]]")

# Combining one value per thread over the threadgroup: within each simdgroup by a SIMD
# operation, then the simdgroups' partial results through `s` (32 slots: up to 1024 threads).
# Every simdgroup combines all partials itself, so every thread gets the result.
_GROUP_REDUCE = """\
static inline {t} {name}({t} v, threadgroup {t} *s, uint lane, uint sg, uint size) {{
  v = {simd}(v);
  if (lane == 0) s[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  v = {simd}(lane < (size + 31) / 32 ? s[lane] : {identity});
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return v;
}}
"""
GROUP_REDUCERS = "".join(
    _GROUP_REDUCE.format(t=t, name=name, simd=simd, identity=identity)
    for name, t, simd, identity in (
        ("lm_tg_sum", "float", "simd_sum", "0.0f"),
        ("lm_tg_usum", "uint", "simd_sum", "0u"),
        ("lm_tg_max", "float", "simd_max", "-INFINITY"),
        ("lm_tg_imax", "int", "simd_max", "(int)0x80000000u"),
        ("lm_tg_or", "int", "simd_or", "0"),
    )
)
# the scratch array each reducer combines through (declared by the kernels that use it)
_SCRATCH = {"float": "lm_sf", "uint": "lm_su", "int": "lm_si"}


class MetalDialect(GpuDialect):
    """Metal Shading Language; the thread position arrives as a kernel argument."""

    name = "metal"
    # Metal's argument table holds 31 buffers per kernel (dims are bound like buffers)
    max_kernel_args = 31
    helper_qualifier = "static inline"
    restrict = ""
    half_storage = "half"
    global_id = "(long)lm_tid"
    kernel_qualifier = "kernel"
    buffer_qualifier = "device "

    def signature(self, name, params, dims, attributes=""):
        """Buffers `[[buffer(k)]]`, then the dims (`constant long &`), then `attributes`: the
        thread coordinates (default: the thread's position in the grid)."""
        args = [
            f"device {'' if out else 'const '}{t} *{n} [[buffer({k})]]"
            for k, (t, n, out) in enumerate(params)
        ]
        args += [f"constant long &{d} [[buffer({len(params) + k})]]" for k, d in enumerate(dims)]
        args.append(attributes or THREAD_ARGS)
        return f"{self.kernel_qualifier} void {name}({', '.join(args)})"

    # precise:: keeps IEEE results under Metal's default fast-math
    math_functions = {op: f"precise::{op}" for op in ("log2", "exp2", "sin", "sqrt", "fmod")}

    def prelude(self) -> str:
        return ("#include <metal_stdlib>\nusing namespace metal;\n" + super().prelude()
                + GROUP_REDUCERS)


METAL = MetalDialect()


class _GroupWriter(CooperativeWriter):
    """Renders the reductions of the root scope cooperatively over the threadgroup."""

    unsigned = "uint"

    def __init__(self, names: dict[str, str]):
        super().__init__(METAL, names)
        self.scratch: set[str] = set()

    def lane_loop(self, var: str, size: str) -> str:
        return f"for (long {var} = lm_lid; {var} < {size}; {var} += lm_tgsize) {{"

    def softmax_sum(self, s: SoftmaxSum, scope: Scope) -> str:
        """An online softmax split over the threadgroup (decode attention: one query, many
        keys): each thread folds a strided share of the steps into its own running max, sum
        and accumulator, then the group takes the largest max and adds up every thread's sum
        and accumulator rescaled to it. A thread that saw only -inf logits has weight 0 (its
        accumulator is NaN where the decomposition's `0 * inf` is)."""
        if scope.depth != 0:
            return super().softmax_sum(s, scope)
        online = OnlineSoftmax(METAL, self.fresh())
        inner = Scope(1)
        self.scope_of[s.var.name] = inner
        logit, body = self.emit(s.logit), self.emit(s.body)
        var, size = self.names.get(s.var.name, s.var.name), self.expr(s.size)
        m, rescale = online.m, f"{online.name}_g"
        scope.lines.extend(online.declare())
        scope.lines.append(self.lane_loop(var, size))
        scope.lines.extend("  " + line for line in [*inner.lines, *online.step(logit),
                                                    online.accumulate(online.acc, body)])
        scope.lines.append("}")
        group_max = self.combine("max", "float", m)
        scope.lines += [
            f"float {online.name}_gm = {group_max};",
            f"float {rescale} = {m} == -INFINITY ? 0.0f : "
            f"{METAL.unary('exp2', f'{m} - {online.name}_gm')};",
            f"{online.l} = {self.combine('sum', 'float', f'{online.l} * {rescale}')};",
            f"{online.acc} = {self.combine('sum', 'float', f'{online.acc} * {rescale}')};",
            f"{online.nan} = {self.combine('or', 'int', online.nan)};",
            f"{m} = {online.name}_gm;",
        ]
        result = self.fresh()
        scope.lines.append(f"float {result} = {METAL.round(s.dtype, online.result(online.acc))};")
        return result

    def combine(self, op: str, ctype: str, value: str) -> str:
        reducer = {("or", "int"): "lm_tg_or", ("sum", "uint"): "lm_tg_usum",
                   ("sum", "float"): "lm_tg_sum", ("max", "int"): "lm_tg_imax",
                   ("max", "float"): "lm_tg_max"}[op, ctype]
        self.scratch.add(ctype)
        return f"{reducer}({value}, {_SCRATCH[ctype]}, lm_lane, lm_sg, lm_tgsize)"


def _top_softmax_sums(v: Value) -> list[SoftmaxSum]:
    """The `SoftmaxSum`s of a tree outside every reduction (and every other `SoftmaxSum`)."""
    out, stack, seen = [], [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or isinstance(x, Reduce):
            continue
        seen.add(id(x))
        if isinstance(x, SoftmaxSum):
            out.append(x)
        else:
            stack.extend(children(x))
    return out


def wants_threadgroup(kernel: Kernel) -> bool:
    """Threadgroup mode pays when a top-level reduction (or online softmax) is long and the
    domain is small."""
    tops = [*top_reductions(kernel.out.value), *_top_softmax_sums(kernel.out.value)]
    if not tops:
        return False
    long_reduce = any(not r.size.is_const or r.size.value >= THREADGROUP_MIN_REDUCE
                      for r in tops)
    points = domain_size(kernel)
    return long_reduce and (not points.is_const or points.value < THREADGROUP_MAX_POINTS)


@dataclass(frozen=True)
class RenderedKernel:
    """A Metal kernel function and how to dispatch it: `threadgroup` mode dispatches one
    threadgroup per domain point, thread mode one thread per point (in groups of `THREADS`)."""

    name: str
    source: str
    dims: tuple[str, ...]
    points: Expr
    threadgroup: bool


def render_metal_kernel(kernel: Kernel, name: str, threadgroup: bool | None = None
                        ) -> RenderedKernel:
    """`kernel` as MSL in thread or threadgroup mode (default: `wants_threadgroup`). In thread
    mode a kernel whose `SoftmaxSum` core renders row-wise (attention: one query-key dot product
    per key shared by the whole row of value columns) runs one thread per row."""
    if threadgroup is None:
        threadgroup = wants_threadgroup(kernel)
    dims = kernel_dims(kernel)
    if not threadgroup and row_softmax(kernel) is not None:
        rows = Expr.const(1)
        for extent in kernel.domain[:-1]:
            rows = rows * extent
        return RenderedKernel(name, render_kernel(kernel, name, METAL), dims, rows, False)
    names = dim_names(dims)
    writer = _GroupWriter(names) if threadgroup else BodyWriter(METAL, names)
    store = writer.emit_store(kernel)
    extents = [writer.expr(e) for e in kernel.domain]
    loop_names = [v.name for v in kernel.loop_vars]
    signature = METAL.signature(name, buffer_params(kernel, METAL), [names[d] for d in dims],
                                GROUP_ARGS if threadgroup else THREAD_ARGS)
    if threadgroup:
        total = " * ".join(f"({e})" for e in extents) or "1"
        scratch = [f"threadgroup {t} {_SCRATCH[t]}[32];" for t in sorted(writer.scratch)]
        # a whole threadgroup leaves together: every thread must reach the barriers
        body = [
            *scratch,
            "const long lm_gid = (long)lm_group;",
            f"if (lm_gid >= {total}) return;",
            *unravel_declarations("lm_gid", extents, loop_names),
            *writer.root.lines,
            f"if (lm_lid == 0) {store}",
        ]
    else:
        body = METAL.domain(extents, loop_names, [*writer.root.lines, store])
    source = "\n".join([signature + " {", *("  " + line for line in body), "}"]) + "\n"
    return RenderedKernel(name, source, dims, domain_size(kernel), threadgroup)
