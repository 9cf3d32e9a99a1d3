"""CUDA C for a fused `Attention` kernel: one pass over the keys with an online softmax.

One thread block per (batch, query row). The query row is staged in shared memory; each warp
walks keys j = warp, warp + W, ... with its lanes across the head dimension: a key's dot
product is one coalesced row read and a warp sum, and each lane keeps the running max `m`,
normaliser `l` and its share of the weighted sum of value rows `acc` in registers, rescaling
them when the max grows (the flash-attention recurrence). At the end the warps' states meet in
shared memory, rescaled to the common max. Keys whose score is -inf (masked) are skipped. Decode
(one query) gets the whole block on the cache; prefill gets one block per query. Queries of a
KV head share its cache rows in L2.
"""

from __future__ import annotations

from luminal.symbolic import INF, Expr
from luminal_codegen.indexing import unravel
from luminal_codegen.ir import Value, kernel_dims
from luminal_codegen.render import BodyWriter, Scope, dim_names

from .attention import I_VAR, J_VAR, THREADS, Attention, Dot
from .dialect import CUDA, RenderedKernel, dim_loads, kernel_function


class _ScoreWriter(BodyWriter):
    """Writes the score function; `Dot()` is the dot product computed in the key loop."""

    def deps(self, v: Value) -> frozenset[str]:
        if isinstance(v, Dot):
            return frozenset((J_VAR.name,))
        return super().deps(v)

    def code(self, v: Value) -> str:
        if isinstance(v, Dot):
            return "lm_dot"
        return super().code(v)


def render_attention(k: Attention, name: str, slots: dict[str, int]) -> RenderedKernel:
    """Source of the fused kernel; launched with one block of `THREADS` per (batch, query)
    (or more: surplus blocks leave at once)."""
    names_all: set[str] = set(kernel_dims(k))
    for e in (k.sq, k.sk, k.q.offset, k.q.stride_row, k.q.stride_k, k.k.offset, k.k.stride_row,
              k.k.stride_k, k.v.offset, k.v.stride_row, k.v.stride_k, k.out_offset,
              k.out_stride):
        names_all |= {n for n in e.free_vars if not n.startswith("_")}
    dims = tuple(sorted(names_all))
    names = dim_names(dims)
    writer = _ScoreWriter(CUDA, names)
    inner = Scope(1)
    writer.scope_of[J_VAR.name] = inner
    score = writer.emit(k.score)
    d, dv = k.d.value, k.dv.value
    t = Expr.var("lm_t", 0, max(d, dv) - 1)

    def ex(e: Expr) -> str:
        return e.render_c(names)

    def ref(buf: int, e: Expr) -> str:
        return CUDA.load(k.params[buf].dtype, f"p{buf}", ex(e))

    q_ref = ref(1, k.q.offset + I_VAR * k.q.stride_row + t * k.q.stride_k)
    k_ref = ref(2, k.k.offset + J_VAR * k.k.stride_row + t * k.k.stride_k)
    v_ref = ref(3, k.v.offset + t * k.v.stride_row + J_VAR * k.v.stride_k)
    batch_vars = [Expr.var(f"_b{j}", 0, INF) for j in range(len(k.batch))]
    out_index = ex(k.out_offset + I_VAR * k.out_stride + t)
    out_dt = k.params[0].dtype
    decl = [f"const long {v.name} = {ex(e)};"
            for v, e in zip(batch_vars, unravel(Expr.var("lm_b", 0, INF), k.batch))]
    params = [(CUDA.storage_type(p.dtype), f"p{j}", p.output) for j, p in enumerate(k.params)]
    c = CUDA.float_literal(k.log2e)
    batch = Expr.const(1)
    for e in k.batch:
        batch = batch * e
    warps, per_lane = THREADS // 32, -(-dv // 32)
    lines = [
        *dim_loads(dims, slots),
        f"const long lm_sq = {ex(k.sq)}, lm_sk = {ex(k.sk)};",
        f"if (lm_sq <= 0 || lm_block >= lm_sq * {ex(batch)}) return;",
        "const long _qi = lm_block % lm_sq, lm_b = lm_block / lm_sq;",
        *decl,
        f"__shared__ float lm_q[{d}];",
        f"__shared__ float lm_wm[{warps}], lm_wl[{warps}], lm_wacc[{warps}][{dv}];",
        f"for (long lm_t = threadIdx.x; lm_t < {d}; lm_t += blockDim.x) lm_q[lm_t] = {q_ref};",
        "__syncthreads();",
        *writer.root.lines,
        "const int lm_lane = threadIdx.x & 31, lm_warp = threadIdx.x >> 5;",
        f"float lm_m = -INFINITY, lm_l = 0.0f, lm_acc[{per_lane}];",
        "#pragma unroll",
        f"for (int lm_i = 0; lm_i < {per_lane}; lm_i++) lm_acc[lm_i] = 0.0f;",
        f"for (long _rj = lm_warp; _rj < lm_sk; _rj += {warps}) {{",
        "  float lm_dot = 0.0f;",
        f"  for (long lm_t = lm_lane; lm_t < {d}; lm_t += 32) lm_dot += lm_q[lm_t] * {k_ref};",
        "  lm_dot = lm_warp_sum(lm_dot);",
        *("  " + x for x in inner.lines),
        f"  const float lm_x = {score};",
        "  if (lm_x == -INFINITY) continue;  /* the same key on every lane: warp-uniform */",
        "  const float lm_mn = lm_x > lm_m ? lm_x : lm_m;",
        f"  const float lm_c = exp2f((lm_m - lm_mn) * {c});",
        f"  const float lm_p = exp2f((lm_x - lm_mn) * {c});",
        "  lm_l = lm_l * lm_c + lm_p;",
        "  #pragma unroll",
        f"  for (int lm_i = 0; lm_i < {per_lane}; lm_i++) {{",
        "    const long lm_t = lm_lane + 32 * lm_i;",
        f"    if (lm_t < {dv}) lm_acc[lm_i] = lm_acc[lm_i] * lm_c + lm_p * {v_ref};",
        "  }",
        "  lm_m = lm_mn;",
        "}",
        "if (lm_lane == 0) { lm_wm[lm_warp] = lm_m; lm_wl[lm_warp] = lm_l; }",
        "#pragma unroll",
        f"for (int lm_i = 0; lm_i < {per_lane}; lm_i++) {{",
        "  const long lm_t = lm_lane + 32 * lm_i;",
        f"  if (lm_t < {dv}) lm_wacc[lm_warp][lm_t] = lm_acc[lm_i];",
        "}",
        "__syncthreads();",
        # every warp's state rescaled to the common max; a row with every key masked gives
        # 0 / 0 = NaN, as PyTorch's scaled_dot_product_attention does
        "float lm_gm = -INFINITY, lm_gl = 0.0f;",
        f"for (int w = 0; w < {warps}; w++) lm_gm = lm_wm[w] > lm_gm ? lm_wm[w] : lm_gm;",
        f"float lm_s[{warps}];",
        f"for (int w = 0; w < {warps}; w++) {{",
        f"  lm_s[w] = lm_wm[w] == -INFINITY ? 0.0f : exp2f((lm_wm[w] - lm_gm) * {c});",
        "  lm_gl += lm_wl[w] * lm_s[w];",
        "}",
        f"for (long lm_t = threadIdx.x; lm_t < {dv}; lm_t += blockDim.x) {{",
        "  float a = 0.0f;",
        f"  for (int w = 0; w < {warps}; w++) a += lm_wacc[w][lm_t] * lm_s[w];",
        f"  p0[{out_index}] = {CUDA.store(out_dt, CUDA.round(out_dt, 'a / lm_gl'))};",
        "}",
    ]
    function = kernel_function(name, params, [names[x] for x in dims], lines)
    return RenderedKernel(function, k.sq * batch, THREADS, True)
