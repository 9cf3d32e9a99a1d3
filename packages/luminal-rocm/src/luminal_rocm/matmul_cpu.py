"""Matmul kernels for CPU OpenCL devices (PoCL): explicit 16-wide vectors, register blocks.

A CPU OpenCL compiler vectorises across the work-items of a group, which fails on matmul
loops (about 1 GFLOP/s on PoCL). Here one work-item owns a register block and walks K with
`float16` vectors, which compile to AVX-512 (or pairs of AVX2) instructions; edge blocks take
a scalar path. The layout decides the vector axis:

- `nvec` (B contiguous along n, `x @ W`): each step loads 16 outputs' worth of B and
  broadcasts one element of each of the block's A rows;
- `kvec` (A and B contiguous along k, `x @ W.T`): dot products of 16-wide slices, summed
  across lanes at the end;
- `qvec` (GGUF-quantized W[n, k]): like kvec, a 32-weight block decoded per step (one scale,
  two 16-wide halves), shared by the block's rows of A.

Other layouts and dtypes fall back to `matmul_gpu`, which is correct everywhere.
"""

from __future__ import annotations

from luminal.dtypes import DType
from luminal.quant import BLOCK_BYTES
from luminal_codegen import Matmul, QuantOperand, kernel_dims
from luminal_codegen.matmul import MatmulCtx, batch_size, function

from .launch import LaunchSpec, ceil_to
from .matmul import unit

VW = 16
PRELUDE = """\
inline float lm_hsum16(float16 v) {
  float8 h = v.lo + v.hi; float4 q = h.lo + h.hi; float2 p = q.lo + q.hi; return p.x + p.y;
}
"""
# rows of A x (columns of B, or vectors of 16 columns for nvec) per work-item
BLOCKS = {"nvec": {"gemv": (1, 1), "gemm": (8, 1)},
          "kvec": {"gemv": (1, 8), "gemm": (4, 4)},
          "qvec": {"gemv": (1, 4), "gemm": (4, 4)}}
_VECTOR_DTYPES = ("float32", "float16")


def _layout(mm: Matmul) -> str | None:
    a_ok = mm.params[mm.a.buf].dtype.name in _VECTOR_DTYPES
    b = mm.b
    if isinstance(b, QuantOperand):
        return "qvec" if b.k_contiguous and a_ok and unit(mm.a.stride_k) else None
    if not (a_ok and mm.params[b.buf].dtype.name in _VECTOR_DTYPES):
        return None
    if unit(b.stride_row):
        return "nvec"
    if unit(b.stride_k) and unit(mm.a.stride_k):
        return "kvec"
    return None


def supports(mm: Matmul) -> bool:
    return _layout(mm) is not None


def _vload(dt: DType, buf: int, index: str) -> str:
    fn = "vload16" if dt.name == "float32" else "vload_half16"
    return f"{fn}(0, p{buf} + ({index}))"


def _vstore(ctx: MatmulCtx, value: str, index: str) -> list[str]:
    out = ctx.mm.out
    dt = ctx.dtype(out)
    if dt.name == "float32":
        return [f"vstore16({value}, 0, p{out} + ({index}));"]
    if dt.name == "float16":
        return [f"vstore_half16_rte({value}, 0, p{out} + ({index}));"]
    return [f"{{ float t[16]; vstore16({value}, 0, t);",
            f"  for (int c = 0; c < 16; c++) {{ {ctx.store(f'({index}) + c', 't[c]')} }} }}"]


def _edges(ctx: MatmulCtx, rows: str, cols: str) -> list[str]:
    """The scalar path for a block cut by the matrix edge: rows/cols are its extents."""
    return [
        f"for (long i = m0; i < lm_min(m0 + {rows}, M); i++)",
        f"  for (long j = n0; j < lm_min(n0 + {cols}, N); j++) {{",
        "    float s = 0.0f;",
        f"    for (long k = 0; k < K; k++) s += {ctx.load_a('i', 'k')} * {ctx.load_b('j', 'k')};",
        f"    {ctx.store(ctx.out_index('i', 'j'), 's')}",
        "  }",
    ]


def _nvec(ctx: MatmulCtx, rm: int) -> list[str]:
    b = ctx.mm.b
    load_b = _vload(ctx.dtype(b.buf), b.buf, ctx.b_index("n0", "k"))
    return [
        f"const long n0 = (long)get_global_id(0) * {VW}, m0 = (long)get_global_id(1) * {rm};",
        f"if (n0 + {VW} <= N && m0 + {rm} <= M) {{",
        f"  float16 s[{rm}];",
        f"  for (int i = 0; i < {rm}; i++) s[i] = (float16)(0.0f);",
        "  for (long k = 0; k < K; k++) {",
        f"    const float16 w = {load_b};",
        f"    for (int i = 0; i < {rm}; i++) s[i] += {ctx.load_a('m0 + i', 'k')} * w;",
        "  }",
        f"  for (int i = 0; i < {rm}; i++) {{",
        *("    " + s for s in _vstore(ctx, "s[i]", ctx.out_index("m0 + i", "n0"))),
        "  }",
        "} else {",
        *("  " + s for s in _edges(ctx, str(rm), str(VW))),
        "}",
    ]


def _reduce_block(ctx: MatmulCtx, rm: int, rn: int, tail: list[str]) -> list[str]:
    """Sum each accumulator's lanes, add the scalar `tail` (K not a multiple of 16), store."""
    return [
        f"  for (int i = 0; i < {rm}; i++) for (int j = 0; j < {rn}; j++) {{",
        "    float r = lm_hsum16(s[i][j]);",
        *("    " + t for t in tail),
        f"    {ctx.store(ctx.out_index('m0 + i', 'n0 + j'), 'r')}",
        "  }",
    ]


def _kvec(ctx: MatmulCtx, rm: int, rn: int) -> list[str]:
    a, b = ctx.mm.a.buf, ctx.mm.b.buf
    tail = [f"for (long t = k; t < K; t++) r += "
            f"{ctx.load_a('m0 + i', 't')} * {ctx.load_b('n0 + j', 't')};"]
    return [
        f"const long n0 = (long)get_global_id(0) * {rn}, m0 = (long)get_global_id(1) * {rm};",
        f"if (n0 + {rn} <= N && m0 + {rm} <= M) {{",
        f"  float16 s[{rm}][{rn}];",
        f"  for (int i = 0; i < {rm}; i++) for (int j = 0; j < {rn}; j++) "
        "s[i][j] = (float16)(0.0f);",
        "  long k = 0;",
        f"  for (; k + {VW} <= K; k += {VW}) {{",
        f"    float16 x[{rm}], w[{rn}];",
        f"    for (int i = 0; i < {rm}; i++) x[i] = "
        f"{_vload(ctx.dtype(a), a, ctx.a_index('m0 + i', 'k'))};",
        f"    for (int j = 0; j < {rn}; j++) w[j] = "
        f"{_vload(ctx.dtype(b), b, ctx.b_index('n0 + j', 'k'))};",
        f"    for (int i = 0; i < {rm}; i++) for (int j = 0; j < {rn}; j++) "
        "s[i][j] += x[i] * w[j];",
        "  }",
        *_reduce_block(ctx, rm, rn, tail),
        "} else {",
        *("  " + s for s in _edges(ctx, str(rm), str(rn))),
        "}",
    ]


def _decode(q: QuantOperand) -> list[str]:
    """Declares `d` (scale), `w0`, `w1` (weights 0-15 and 16-31) of block `q`, and for Q4_1
    the offset `mn`."""
    if q.qtype == "q8_0":
        return ["const float d = vload_half(0, (__global const half *)q);",
                "const float16 w0 = convert_float16(vload16(0, (__global const char *)(q + 2)));",
                "const float16 w1 = convert_float16(vload16(0, "
                "(__global const char *)(q + 18)));"]
    start, bias = ("2", " - 8.0f") if q.qtype == "q4_0" else ("4", "")
    lines = ["const float d = vload_half(0, (__global const half *)q);",
             f"const uchar16 v = vload16(0, q + {start});",
             f"const float16 w0 = convert_float16(v & (uchar)15){bias};",
             f"const float16 w1 = convert_float16(v >> (uchar)4){bias};"]
    if q.qtype == "q4_1":
        lines.append("const float mn = vload_half(0, (__global const half *)(q + 2));")
    return lines


def _qvec(ctx: MatmulCtx, q: QuantOperand, rm: int, rn: int) -> list[str]:
    a = ctx.mm.a.buf
    size = BLOCK_BYTES[q.qtype]
    update = "d * (x0[i] * w0 + x1[i] * w1)"
    if q.qtype == "q4_1":
        update += " + mn * (x0[i] + x1[i])"
    return [
        f"const long n0 = (long)get_global_id(0) * {rn}, m0 = (long)get_global_id(1) * {rm};",
        "const long nb = K / 32;",
        f"if (n0 + {rn} <= N && m0 + {rm} <= M) {{",
        f"  float16 s[{rm}][{rn}];",
        f"  for (int i = 0; i < {rm}; i++) for (int j = 0; j < {rn}; j++) "
        "s[i][j] = (float16)(0.0f);",
        "  for (long blk = 0; blk < nb; blk++) {",
        "    const long k = blk * 32;",
        f"    float16 x0[{rm}], x1[{rm}];",
        f"    for (int i = 0; i < {rm}; i++) {{",
        f"      x0[i] = {_vload(ctx.dtype(a), a, ctx.a_index('m0 + i', 'k'))};",
        f"      x1[i] = {_vload(ctx.dtype(a), a, ctx.a_index('m0 + i', 'k + 16'))};",
        "    }",
        f"    for (int j = 0; j < {rn}; j++) {{",
        f"      __global const uchar *q = p{q.buf} + ((n0 + j) * nb + blk) * {size};",
        *("      " + s for s in _decode(q)),
        f"      for (int i = 0; i < {rm}; i++) s[i][j] += {update};",
        "    }",
        "  }",
        *_reduce_block(ctx, rm, rn, []),
        "} else {",
        *("  " + s for s in _edges(ctx, str(rm), str(rn))),
        "}",
    ]


def _kernel(ctx: MatmulCtx, name: str, which: str) -> tuple[str, LaunchSpec]:
    mm = ctx.mm
    layout = _layout(mm)
    rm, rn = BLOCKS[layout][which]
    if layout == "nvec":
        block = _nvec(ctx, rm)
        cols = ceil_to(mm.n, VW) // VW
    else:
        block = _kvec(ctx, rm, rn) if layout == "kvec" else _qvec(ctx, mm.b, rm, rn)
        cols = ceil_to(mm.n, rn) // rn
    body = [
        *ctx.header("(long)get_global_id(2)"),
        *block,
    ]
    size = (cols, ceil_to(mm.m, rm) // rm, batch_size(mm))
    return function(ctx.signature(name), body), LaunchSpec(name, kernel_dims(mm), size,
                                                            (1, 1, 1))


def gemv(ctx: MatmulCtx, name: str) -> tuple[str, LaunchSpec]:
    return _kernel(ctx, name, "gemv")


def gemm(ctx: MatmulCtx, name: str) -> tuple[str, LaunchSpec]:
    return _kernel(ctx, name, "gemm")
