"""Implicit GEMM: a matmul whose right operand is computed while the GEMM packs it.

A convolution lowers to `W @ cols`, where `cols` (the im2col matrix, K = C*kh*kw rows of
N = OH*OW output positions) is a gather kernel that reads every input kh*kw times and writes
a matrix kh*kw times the input's size, which the GEMM then reads back from memory. Here such a
gather kernel is folded into the matmul's B-panel packing (`lm_gemm_packed`, csrc/runtime.h):
each panel is gathered from the (cache-resident) input right before the micro-kernel uses it,
and the im2col matrix is never written.

`fuse(program)` rewrites a `Program`: a `Matmul` without batch axes whose right operand is a
float32 temporary read as B(n, k) = buf[k*N + n], written by a `Kernel` that only moves data
(loads, masks, and the sums of a concatenation's masked loads) and whose domain, walked
row-major, is that (k, n) layout, and read only by such matmuls, becomes one `GatherMatmul`
per matmul (two convolutions of one input each gather their own panels). A 1 x 1
convolution's plain matmul (B read along n) gets the gather that reads B as it is
(`_pointwise`), so that it runs direct too; then the elementwise kernels after direct
convolutions become their epilogues (`epilogue.fuse`). Everything else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal.symbolic import INF, Expr, prod
from luminal_codegen import (
    BodyWriter,
    Call,
    Kernel,
    Matmul,
    MatOperand,
    Param,
    Program,
    dim_names,
    kernel_dims,
    unravel_declarations,
)
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import (
    Binary,
    Const,
    Load,
    Store,
    Value,
    Where,
    exprs_of,
    loop_var,
    map_exprs,
    walk,
)

from . import direct_conv, epilogue
from .dialect import C, odometer
from .epilogue import Epilogue
from .masks import case_chain, case_intervals, edge_atoms, without_atoms

# the longest sum a 1 x 1 convolution runs direct (a tile's columns of B, K x 128 bytes, stay
# in L1 and L2 across its row blocks): YOLOv8n's go to 512
POINTWISE_MAX_K = 512


@dataclass(frozen=True)
class GatherMatmul:
    """`matmul` with its right operand (parameter 2) computed by `gather`: the gather's
    domain axes before `split` walk k, the others n. Parameters: the matmul's output and
    left operand, then the gather's inputs."""

    matmul: Matmul
    gather: Kernel
    split: int
    epilogue: Epilogue | None = None  # then the output is the epilogue's, its inputs last

    @property
    def params(self) -> tuple[Param, ...]:
        if self.epilogue is None:
            return (*self.matmul.params[:2], *self.gather.params[1:])
        return (self.epilogue.kernel.params[0], self.matmul.params[1], *self.gather.params[1:],
                *self.epilogue.params)

    @property
    def dims(self) -> tuple[str, ...]:
        then = kernel_dims(self.epilogue.kernel) if self.epilogue else ()
        return tuple(sorted({*kernel_dims(self.matmul), *kernel_dims(self.gather), *then}))


def _moves_data(v: Value) -> bool:
    """Whether `v` only selects loaded values (a window, a pad, a concatenation: masked loads
    added up). Anything that computes (a fused bias + SiLU) is cheaper stored once than
    recomputed in every panel, where the gather's masks and divisions keep the compiler from
    vectorising the math."""
    if isinstance(v, (Load, Const)):
        return True
    if isinstance(v, Where):
        return _moves_data(v.x)
    if isinstance(v, Binary) and v.op == "add":
        return _moves_data(v.a) and _moves_data(v.b)
    return False


def _split(mm: Matmul, gather: Kernel) -> int | None:
    """The domain axis where the gather's n part starts, if its store is B's row-major
    (k, n) layout."""
    if not _moves_data(gather.out.value) or gather.params[0].dtype.name != "float32":
        return None
    if gather.out.buf != 0 or gather.out.index != flat_index(gather.domain, gather.loop_vars):
        return None
    for j in range(1, len(gather.domain)):
        if prod(gather.domain[j:]) == mm.n and prod(gather.domain[:j]) == mm.k:
            return j
    return None


def _operand_is_gathered(mm: Matmul) -> bool:
    b = mm.b
    return (not mm.batch and isinstance(b, MatOperand) and b.offset == 0
            and b.stride_row == 1 and b.stride_k == mm.n
            and mm.params[2].dtype.name == "float32")


def fuse(program: Program) -> Program:
    """`program` with every gather-then-matmul pair of the module docstring fused (a gather
    read by several such matmuls, two convolutions of one input, is fused into each), and
    the elementwise kernels after direct convolutions folded into them (`epilogue`)."""
    return epilogue.fuse(_pointwise(_fuse_gathers(program)), _direct_without_epilogue)


def _pointwise(program: Program) -> Program:
    """`program` with each matmul whose right operand a 1 x 1 convolution reads (a float32
    buffer walked along n, constant sizes, no batch) given the gather that reads it as it is,
    so that it runs as a direct convolution (`direct_conv`) and takes an epilogue. Only for
    products of at least TILE_M rows over a whole tile of columns (smaller ones are the GEMV
    shapes `lm_gemm` has paths for) and sums of at most POINTWISE_MAX_K terms (longer ones
    are left to the GEMM's cache blocking)."""
    kernels = list(program.kernels)
    for kid, mm in enumerate(program.kernels):
        if (not isinstance(mm, Matmul) or mm.batch or not isinstance(mm.b, MatOperand)
                or (mm.out, mm.a.buf, mm.b.buf) != (0, 1, 2)):
            continue
        b = mm.b
        if not all(e.is_const for e in (mm.m, mm.n, mm.k, b.offset, b.stride_row, b.stride_k,
                                        mm.a.offset, mm.a.stride_row, mm.a.stride_k,
                                        mm.out_offset, mm.out_stride)):
            continue
        if (b.stride_row.value != 1 or b.stride_k.value < mm.n.value or mm.a.stride_k.value != 1
                or mm.m.value < direct_conv.TILE_M or mm.n.value < direct_conv.TILE_N
                or mm.k.value > POINTWISE_MAX_K
                or any(mm.params[j].dtype.name != "float32" for j in (0, 1, b.buf))):
            continue
        domain = (mm.k, mm.n)
        k, n = (loop_var(j, e) for j, e in enumerate(domain))
        read = Load(1, b.offset + k * b.stride_k + n, Expr.const(1), mm.params[b.buf].dtype)
        gather = Kernel((Param(read.dtype, output=True), mm.params[b.buf]), domain,
                        Store(0, flat_index(domain, (k, n)), read))
        operand = MatOperand(2, Expr.const(0), Expr.const(1), mm.n)
        params = (*mm.params[:2], gather.params[0])
        kernels[kid] = GatherMatmul(replace(mm, params=params, b=operand), gather, 1)
    return replace(program, kernels=kernels)  # the calls' arguments stay (out, A, B)


def _direct_without_epilogue(kernel) -> bool:
    return (isinstance(kernel, GatherMatmul) and kernel.epilogue is None
            and direct_conv.match(kernel) is not None)


def _fuse_gathers(program: Program) -> Program:
    writer_of: dict[int, int] = {}  # temp buffer -> the call writing it
    readers: dict[int, list[int]] = {}  # buffer -> the calls reading it
    for c, call in enumerate(program.calls):
        for p, buf in zip(program.kernels[call.kernel].params, call.args):
            if p.output:
                writer_of[buf] = c
            else:
                readers.setdefault(buf, []).append(c)
    kernels: list = list(program.kernels)
    fused_ids: dict[GatherMatmul, int] = {}
    replaced: dict[int, Call] = {}  # matmul call -> its fused call
    dropped: set[int] = set()  # the gather calls folded into matmuls
    for buf, calls in readers.items():
        w = writer_of.get(buf)
        if w is None or program.buffers[buf].role != "temp":
            continue
        gather = program.kernels[program.calls[w].kernel]
        fused = []
        for c in calls:
            mm, args = program.kernels[program.calls[c].kernel], program.calls[c].args
            split = (_split(mm, gather) if isinstance(gather, Kernel) and isinstance(mm, Matmul)
                     and _operand_is_gathered(mm) and args[2] == buf
                     and buf not in args[:2] else None)
            if split is None:
                break
            fused.append((c, GatherMatmul(mm, gather, split)))
        else:
            for c, g in fused:
                kid = fused_ids.setdefault(g, len(kernels))
                if kid == len(kernels):
                    kernels.append(g)
                args = program.calls[c].args
                replaced[c] = Call(kid, (*args[:2], *program.calls[w].args[1:]))
            dropped.add(w)
    if not replaced:
        return program
    calls = [replaced.get(c, call) for c, call in enumerate(program.calls) if c not in dropped]
    used = sorted({call.kernel for call in calls})
    renumber = {old: new for new, old in enumerate(used)}
    return replace(program, kernels=[kernels[k] for k in used],
                   calls=[Call(renumber[call.kernel], call.args) for call in calls])


def _coarse(value: Value, var: Expr) -> tuple[int, str, Value] | None:
    """`(c, q, v)` when `value` reads `var` only as `var // c` (an input upsampled c times
    along the run): `v` is `value` with `var // c` as the variable named `q`."""
    divisors = {e.args[1].value for x in exprs_of(value) for e in _subexprs(x)
                if e.op == "floordiv" and e.args[1].is_const and var.name in e.args[0].free_vars}
    if len(divisors) != 1:
        return None
    (c,) = divisors
    q = Expr.var("_q", 0, var.vmax // c if var.vmax < INF else INF)
    at = [map_exprs(value, lambda e, d=d: e.substitute({var.name: q * c + d})) for d in range(c)]
    if c < 2 or any(_live_exprs(v) != _live_exprs(at[0]) for v in at[1:]):
        return None
    return c, q.name, at[0]


def _live_exprs(value: Value) -> list[Expr]:
    """The masks and indices a gather evaluates: not those of loads whose mask is constantly
    false (a concatenation's other inputs, once a case fixed the axis)."""
    return [e for x in walk(value) if isinstance(x, (Load, Where))
            and not (isinstance(x, Load) and x.valid.is_const and x.valid.value == 0)
            for e in ((x.index, x.valid) if isinstance(x, Load) else (x.cond,))]


def _subexprs(e: Expr):
    yield e
    if e.op not in ("num", "var"):
        for a in e.args:
            yield from _subexprs(a)


def _render_pack(g: GatherMatmul, name: str) -> list[str]:
    """The packing function of `g` (csrc/runtime.h, `lm_pack_fn`): each row of the block is
    gathered in runs along the gather's innermost axis, cut where a panel ends, vectorised.
    Where the input is padded, a run's interior (where every mask along the run holds) is
    gathered without masks, which keeps strided windows vectorised (masked strided loads are
    scalar or lane-indexed gathers); only the padded edges evaluate the masks."""
    k = g.gather
    dims = kernel_dims(k)
    names = dim_names(dims)
    extents = [e.render_c(names) for e in k.domain]
    axes = [v.name for v in k.loop_vars]
    k_ext, n_ext = extents[: g.split], extents[g.split:]
    last = axes[-1]
    inputs = [f"  const {C.storage_type(p.dtype)} *restrict p{i} = lm_c->p[{i - 1}];"
              for i, p in enumerate(k.params) if i > 0]
    # the n axes start at lm_n0 (divided out once per row of the block), then step by runs
    start, _ = odometer(n_ext, [*axes[g.split:-1], "lm_s"], "lm_n0")
    next_row = odometer(n_ext[:-1], axes[g.split:-1])[1] if len(n_ext) > 1 else ""

    def loop(value: Value, lo: str, hi: str) -> list[str]:
        writer = BodyWriter(C, names)
        out = writer.emit(value)
        return ["#pragma omp simd",
                f"for (long lm_t = {lo}; lm_t < {hi}; lm_t++) {{",
                f"  const long {last} = lm_s + lm_t;",
                *("  " + x for x in writer.root.lines),
                f"  lm_dst[lm_t] = {out};",
                "}"]

    def full_run(value: Value) -> list[str]:
        """A whole panel row: a loop of constant length, which the compiler turns into a few
        straight vector operations; an upsampled input (read at `last // c`) is read once per
        c outputs and its values stored c times (loads and permutes, not lane gathers)."""
        coarse = _coarse(value, k.loop_vars[-1])
        if coarse is None:
            return loop(value, "0", "LM_NR")
        c, q, once = coarse
        writer = BodyWriter(C, names)
        out = writer.emit(once)
        return [f"if (lm_s % {c} == 0) {{",
                f"  for (long lm_t = 0; lm_t < LM_NR / {c}; lm_t++) {{",
                f"    const long {q} = lm_s / {c} + lm_t;",
                *("    " + x for x in writer.root.lines),
                *(f"    lm_dst[{c} * lm_t + {d}] = {out};" for d in range(c)),
                "  }",
                "} else {",
                *("  " + x for x in loop(value, "0", "LM_NR")),
                "}"]

    def runs(value: Value) -> list[str]:
        edges = edge_atoms(value, (k.loop_vars[-1],))
        if not edges:
            return ["if (lm_run == LM_NR) {", *("  " + x for x in full_run(value)),
                    "} else {", *("  " + x for x in loop(value, "0", "lm_run")), "}"]
        inside = " && ".join(f"({a.render_c(names)})" for a in edges)
        interior = without_atoms(value, edges)
        # [lm_a, lm_b): where every edge mask holds (one interval, found from both ends)
        return ["long lm_a = 0, lm_b = lm_run;",
                f"for (; lm_a < lm_b; lm_a++) {{ const long {last} = lm_s + lm_a; "
                f"if ({inside}) break; }}",
                f"for (; lm_b > lm_a; lm_b--) {{ const long {last} = lm_s + lm_b - 1; "
                f"if ({inside}) break; }}",
                "if (lm_a == 0 && lm_b == LM_NR) {",
                *("  " + x for x in full_run(interior)),
                "} else {",
                *("  " + x for x in loop(value, "0", "lm_a")),
                *("  " + x for x in loop(interior, "lm_a", "lm_b")),
                *("  " + x for x in loop(value, "lm_b", "lm_run")),
                "}"]

    # a concatenation's inputs (masks of one k axis alone) each get their own unmasked runs
    cases = case_intervals(k.out.value, zip(k.loop_vars[: g.split], k.domain[: g.split]))
    body = runs(k.out.value) if cases is None else case_chain(*cases, k.out.value, runs)

    return [
        f"typedef struct {{ const void *p[{max(len(k.params) - 1, 1)}]; "
        f"long d[{max(len(dims), 1)}]; }} {name}_ctx;",
        f"static void {name}_pack(const void *lm_ctx, long lm_n0, long lm_nc, long lm_k0, "
        "long lm_kc, float *restrict lm_bp, long lm_w) {",
        f"  const {name}_ctx *lm_c = (const {name}_ctx *)lm_ctx;",
        *inputs,
        *(f"  const long {names[d]} = lm_c->d[{i}];" for i, d in enumerate(dims)),
        "  (void)lm_w;  /* always LM_NR: constant here, so no division by it */",
        "  const long lm_panel = LM_NR * lm_kc;",
        "  for (long lm_k = 0; lm_k < lm_kc; lm_k++) {",
        "    float *restrict lm_row = lm_bp + lm_k * LM_NR;",
        "    const long lm_kk = lm_k0 + lm_k;",
        *("    " + x for x in unravel_declarations("lm_kk", k_ext, axes[: g.split])),
        *("    " + x for x in start),
        "    for (long lm_j = 0; lm_j < lm_nc;) {",
        "      long lm_run = LM_NR - lm_j % LM_NR;",
        "      if (lm_run > lm_nc - lm_j) lm_run = lm_nc - lm_j;",
        f"      if (lm_run > ({n_ext[-1]}) - lm_s) lm_run = ({n_ext[-1]}) - lm_s;",
        "      float *restrict lm_dst = lm_row + lm_j / LM_NR * lm_panel + lm_j % LM_NR;",
        *("      " + x for x in body),
        "      lm_j += lm_run;",
        f"      lm_s += lm_run; if (lm_s == ({n_ext[-1]})) {{ lm_s = 0; {next_row} }}",
        "    }",
        "    for (long lm_j = lm_nc; lm_j % LM_NR; lm_j++)",
        "      lm_row[lm_j / LM_NR * lm_panel + lm_j % LM_NR] = 0.0f;",
        "  }",
        "}",
    ]


def render(g: GatherMatmul, name: str, dtype_code: dict[str, str]) -> str:
    """`g` as a C function: its packing function, then the call into `lm_gemm_packed`."""
    mm = g.matmul
    dims = g.dims
    names = dim_names(dims)

    def ex(e: Expr) -> str:
        return e.render_c(names)

    gather_dims = kernel_dims(g.gather)
    gather_params = g.gather.params[1:]
    then = g.epilogue
    params = [(C.storage_type(g.params[0].dtype), "p0", True),
              (C.storage_type(mm.params[1].dtype), "p1", False),
              *((C.storage_type(p.dtype), f"g{i}", False) for i, p in enumerate(gather_params)),
              *((C.storage_type(p.dtype), f"e{i}", False)
                for i, p in enumerate(then.params if then else ()))]
    ctx = (f"{{{{{', '.join(f'g{i}' for i in range(len(gather_params))) or '0'}}}, "
           f"{{{', '.join(names[d] for d in gather_dims) or '0'}}}}}")
    a_dt = dtype_code[mm.params[1].dtype.name]
    c_dt = dtype_code[mm.params[0].dtype.name]
    packed = [
        f"  const {name}_ctx lm_ctx = {ctx};",
        f"  const long lm_co = {ex(mm.out_offset)};",
        f"  lm_gemm_packed({ex(mm.m)}, {ex(mm.n)}, {ex(mm.k)}, "
        f"(lm_mat){{p1 + {ex(mm.a.offset)}, {a_dt}, {ex(mm.a.stride_row)}, {ex(mm.a.stride_k)}}}, "
        f"(lm_packer){{{name}_pack, &lm_ctx}}, "
        f"(lm_out){{p0, {c_dt}, &lm_co, {ex(mm.out_stride)}}});",
    ]
    finish = []
    if then is not None:  # the product is in the output: the epilogue runs over it in place
        inputs = "".join(f", e{i}" for i in range(len(then.inputs)))
        finish = [f"  lm_for_begin({ex(mm.m)});",
                  "  for (long lm_lo, lm_hi; lm_for_next(&lm_lo, &lm_hi);)",
                  f"    {name}_epi(p0 + lm_lo * {ex(mm.n)}, {ex(mm.n)}, p0 + lm_lo * {ex(mm.n)}, "
                  f"{ex(mm.n)}, lm_lo, lm_hi - lm_lo, 0, {ex(mm.n)}{inputs});"]
    conv = direct_conv.match(g)
    include = []
    if conv is not None:  # the packed GEMM stays for compilers without AVX-512
        include = ["#if defined(__AVX512F__)", "#include <immintrin.h>", "#endif"]
        packed = ["#if defined(__AVX512F__)", *direct_conv.render(g, conv, name), "#else",
                  *packed, *finish, "#endif"]
    else:
        packed += finish
    return "\n".join([
        *include,
        *(epilogue.render_function(then, f"{name}_epi") if then else ()),
        *_render_pack(g, name),
        C.signature(name, params, [names[d] for d in dims]) + " {",
        *packed,
        "}",
    ]) + "\n"
