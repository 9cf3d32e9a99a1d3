"""The CUDA backend's compile-time passes, in pure Python: cuBLAS planning (checked by
emulating cuBLAS's column-major semantics), attention recognition, block-mode choice and the
half-precision compiler."""

from __future__ import annotations

import itertools

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.dtypes import bfloat16, float16, float32
from luminal_codegen.half import HalfPrecision
from luminal_codegen.ir import Kernel, Matmul, MatOperand
from luminal_cuda.attention import Attention, Dot
from luminal_cuda.dialect import wants_block_mode
from luminal_cuda.lowering import CudaLowering, lower
from luminal_cuda.matmul import OP_N, matmul_kernel, plan_gemm


def lowered(g: lm.Graph, fuse_attention: bool = True):
    g.compile(lm.GenericCompiler())
    return CudaLowering(g, fuse_attention)


# ----- cuBLAS planning ------------------------------------------------------------------------
def _emulate(calls, a_buf, b_buf, out_size):
    """What cublasGemmStridedBatchedEx computes (column-major), with our b as its A."""
    c_buf = np.zeros(out_size, np.float64)
    for c in calls:
        for t in range(c.batch):
            def mat(buf, off, ld, rows, cols, trans):
                r, q = (cols, rows) if trans != OP_N else (rows, cols)
                x = np.array([[buf[off + i + j * ld] for j in range(q)] for i in range(r)])
                return x.T if trans != OP_N else x

            opa = mat(b_buf, c.offset_a + t * c.stride_a, c.lda, c.m, c.k, c.transa)
            opb = mat(a_buf, c.offset_b + t * c.stride_b, c.ldb, c.k, c.n, c.transb)
            res = opa @ opb
            for i, j in itertools.product(range(c.m), range(c.n)):
                c_buf[c.offset_c + t * c.stride_c + i + j * c.ldc] = res[i, j]
    return c_buf


def _direct(mm: Matmul, dims, a_buf, b_buf, out_size):
    """out[b, m, n] = sum_k a[b, m, k] * b[b, n, k] straight from the IR's definition."""
    ev = lambda e: e.evaluate(dims)  # noqa: E731
    batch = [ev(d) for d in mm.batch]
    m, n, k = ev(mm.m), ev(mm.n), ev(mm.k)
    out = np.zeros(out_size)
    for idx in itertools.product(*(range(e) for e in batch)):
        env = dict(dims, **{v.name: i for v, i in zip(mm.batch_vars, idx)})
        for i, j in itertools.product(range(m), range(n)):
            acc = 0.0
            for r in range(k):
                acc += (a_buf[mm.a.offset.evaluate(env) + i * ev(mm.a.stride_row)
                              + r * ev(mm.a.stride_k)]
                        * b_buf[mm.b.offset.evaluate(env) + j * ev(mm.b.stride_row)
                                + r * ev(mm.b.stride_k)])
            out[mm.out_offset.evaluate(env) + i * ev(mm.out_stride) + j] = acc
    return out


def _matmul_graphs():
    def plain(g):
        return g.tensor((3, 5), name="a") @ g.tensor((5, 4), name="b")

    def transposed(g):
        return g.tensor((5, 3), name="a").T @ g.tensor((4, 5), name="b").T

    def batched(g):
        return g.tensor((2, 3, 5), name="a") @ g.tensor((2, 5, 4), name="b")

    def broadcast_batch(g):
        return g.tensor((2, 3, 3, 5), name="a") @ g.tensor((2, 1, 5, 4), name="b")

    def gqa(g):  # keys shared by the query heads of a group: a stride-0 batch axis
        q = g.tensor((1, 2, 3, 4, 8), name="q")
        k = g.tensor((1, 2, 6, 8), name="k")
        return q @ k.unsqueeze(2).transpose(-1, -2)

    def heads_to_rows(g):  # attention's output permute, written by the matmul directly
        p, v = g.tensor((2, 3, 4, 5), name="p"), g.tensor((2, 3, 5, 6), name="v")
        return (p @ v).transpose(1, 2).contiguous()

    def sliced(g):
        return g.tensor((6, 5), name="a")[1:4] @ g.tensor((5, 7), name="b")[:, 1:5]

    def symbolic(g):
        return g.tensor(("s", 6), name="a") @ g.tensor((6, 2), name="b")

    return [plain, transposed, batched, broadcast_batch, gqa, heads_to_rows, sliced, symbolic]


@pytest.mark.parametrize("build", _matmul_graphs(), ids=lambda f: f.__name__)
def test_cuda_gemm_plan_matches_matmul_definition(build):
    g = lm.Graph()
    build(g).retrieve()
    program = lowered(g).program()
    mms = [k for k in program.kernels if isinstance(k, Matmul)]
    assert mms, "the matmul was not recognised"
    dims = {"s": 3}
    rng = np.random.default_rng(0)
    for mm in mms:
        a_buf, b_buf = rng.standard_normal(400), rng.standard_normal(400)
        calls = plan_gemm(mm, dims)
        assert calls is not None, "cuBLAS should take these views"
        want = _direct(mm, dims, a_buf, b_buf, 400)
        got = _emulate(calls, a_buf, b_buf, 400)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cuda_gemm_plan_folds_nested_batches_into_one_call():
    g = lm.Graph()
    (g.tensor((2, 3, 4, 5), name="a") @ g.tensor((2, 3, 5, 6), name="b")).retrieve()
    (mm,) = [k for k in lowered(g).program().kernels if isinstance(k, Matmul)]
    (call,) = plan_gemm(mm, {})
    assert call.batch == 6


def test_cuda_gemm_plan_refuses_views_without_unit_stride():
    g = lm.Graph()
    (g.tensor((3, 5), name="a") @ g.tensor((5, 7), name="b")[:, ::2]).retrieve()
    (mm,) = [k for k in lowered(g).program().kernels if isinstance(k, Matmul)]
    assert plan_gemm(mm, {}) is None  # the generated fallback kernel runs it


def test_cuda_gemm_plan_refuses_overlapping_rows():
    g = lm.Graph()
    (g.tensor((1, 5), name="a").expand(3, 5) @ g.tensor((5, 4), name="b")).retrieve()
    (mm,) = [k for k in lowered(g).program().kernels if isinstance(k, Matmul)]
    rows = MatOperand(mm.a.buf, mm.a.offset, lm.Expr.const(0), mm.a.stride_k)
    from dataclasses import replace

    assert plan_gemm(replace(mm, a=rows), {}) is None
    fallback = matmul_kernel(mm)
    assert isinstance(fallback, Kernel) and fallback.domain == (mm.m, mm.n)


# ----- attention ------------------------------------------------------------------------------
def _attention_kernels(g, **kw):
    return [k for k in lowered(g, **kw).program().kernels if isinstance(k, Attention)]


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_attention_recognised_from_sdpa(causal):
    g = lm.Graph()
    q, k, v = (g.tensor((2, 3, "seq", 8), name=n) for n in "qkv")
    F.scaled_dot_product_attention(q, k, v, is_causal=causal).retrieve()
    (att,) = _attention_kernels(g)
    assert att.d == 8 and att.dv == 8 and len(att.batch) == 2
    assert any(isinstance(x, Dot) for x in _walk(att.score))
    # the (batch, heads, queries, keys) scores never get a buffer
    program = lowered(g).program()
    assert all(b.numel.evaluate({"seq": 5}) != 2 * 3 * 5 * 5 for b in program.buffers)


def test_cuda_attention_with_mask_and_kv_cache():
    nn = pytest.importorskip("luminal_nn")

    g = lm.Graph()
    att = nn.MultiHeadAttention(32, 4, 2)
    x = g.tensor((1, "seq", 32), name="x")
    cache = nn.KVCache(g, 1, 1, 2, 8)
    att(x, cache[0]).retrieve()
    (kernel,) = _attention_kernels(g)
    assert [str(e) for e in kernel.batch] == ["1", "2", "2"]
    assert str(kernel.sk) == "(past + seq)"


def test_cuda_attention_not_fused_when_probabilities_are_read():
    g = lm.Graph()
    q, k, v = (g.tensor((2, 4, 8), name=n) for n in "qkv")
    p = (q @ k.transpose(-1, -2) * 0.3).softmax(-1)
    p.retrieve()
    (p @ v).retrieve()
    assert _attention_kernels(g) == []


def test_cuda_attention_can_be_turned_off():
    g = lm.Graph()
    q, k, v = (g.tensor((2, 4, 8), name=n) for n in "qkv")
    F.scaled_dot_product_attention(q, k, v).retrieve()
    assert _attention_kernels(g, fuse_attention=False) == []


def test_cuda_attention_needs_softmax_over_keys():
    g = lm.Graph()
    q, k, v = (g.tensor((2, 4, 8), name=n) for n in "qkv")
    s = q @ k.transpose(-1, -2)
    (s.softmax(-2) @ v).retrieve()  # softmax over the queries: not attention
    assert _attention_kernels(g) == []


def _walk(v):
    from luminal_codegen.ir import walk

    return walk(v)


# ----- block mode -----------------------------------------------------------------------------
def test_cuda_long_rows_reduce_in_block_mode():
    g = lm.Graph()
    x = g.tensor((2, 4096), name="x")
    x.sum(-1).retrieve()
    y = g.tensor((100000, 4), name="y")
    y.sum(-1).retrieve()
    kernels = [k for k in lower(g).kernels if isinstance(k, Kernel)]
    modes = sorted(wants_block_mode(k) for k in kernels)
    assert modes == [False, True]


# ----- half precision -------------------------------------------------------------------------
@pytest.mark.parametrize("half", [float16, bfloat16])
def test_cuda_half_precision_keeps_io_dtypes(half):
    g = lm.Graph()
    x = g.tensor(("seq", 16), name="x")
    w = g.tensor((16, 16), name="w")
    pos = g.arange(0, "seq").to(lm.float32)
    y = ((x @ w).relu() + pos.unsqueeze(-1)).retrieve()
    g.compile(lm.GenericCompiler())
    HalfPrecision(half).compile(g)
    assert g.nodes[y.id].dtype == float32
    assert g.nodes[w.id].dtype == half and g.nodes[x.id].dtype == half
    casts = [n for n in g.nodes.values() if isinstance(n.op, lm.ops.Cast) and n.dtype.is_float
             and any(isinstance(g.nodes[e.src].op, lm.ops.Iota) for e in n.inputs)]
    assert casts and all(n.dtype == float32 for n in casts)  # positions stay exact


def test_cuda_half_precision_is_close_to_float32_on_the_reference_backend():
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((5, 32)).astype(np.float32), rng.standard_normal((32, 32))

    def run(compilers):
        g = lm.Graph()
        x = g.tensor((5, 32), name="x").set(xs)
        w = g.tensor((32, 32), name="w").set(ws.astype(np.float32) / 6)
        y = F.rms_norm((x @ w).silu(), (32,)).softmax(-1).retrieve()
        g.compile(compilers)
        g.execute()
        return y.numpy()

    full = run(lm.GenericCompiler())
    half = run((lm.GenericCompiler(), HalfPrecision("float16")))
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, full, rtol=2e-2, atol=2e-3)


def test_cuda_half_precision_keeps_norm_statistics_in_float32():
    # SmolLM2's residual stream reaches a few hundred: the sum of 576 squares overflows float16
    # (65504), which made every float16 logit zero on the GPU. Norm and softmax sums stay
    # float32; the matmul's sum (a full activation) is stored in half.
    rng = np.random.default_rng(1)
    xs = (rng.standard_normal((3, 576)) * 300).astype(np.float32)
    ws = (rng.standard_normal((576, 64)) / 24).astype(np.float32)

    def build():
        g = lm.Graph()
        x = g.tensor((3, 576), name="x").set(xs)
        w = g.tensor((576, 64), name="w").set(ws)
        y = (F.rms_norm(x, (576,)) @ w).softmax(-1).retrieve()
        return g, y

    g, y = build()
    g.compile((lm.GenericCompiler(), HalfPrecision("float16")))
    sums = [n for n in g.nodes.values() if isinstance(n.op, lm.ops.SumReduce)]
    assert {n.dtype for n in sums} == {float16, float32}  # the matmul's in half, the rest not
    g.execute()
    ref_graph, ref = build()
    ref_graph.compile(lm.GenericCompiler())
    ref_graph.execute()
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=3e-2, atol=3e-3)


def test_cuda_half_precision_rejects_other_dtypes():
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        HalfPrecision("int32")


def test_cuda_half_precision_assigned_cache_shares_dtype():
    g = lm.Graph()
    cache = g.tensor((1, "past", 4), name="cache")
    new = g.tensor((1, 1, 4), name="new")
    grown = lm.cat([cache, new], dim=1)
    g.assign(cache, grown)
    (grown * 2).sum().retrieve()
    g.compile(lm.GenericCompiler())
    HalfPrecision().compile(g)
    target, src = next(iter(g.assignments.items()))
    assert g.nodes[target].dtype == g.nodes[src].dtype == float16


# ----- dims of recorded graphs ----------------------------------------------------------------
def test_cuda_dim_buckets():
    from luminal_cuda.dims import bucket

    assert [bucket(v) for v in (0, 1, 16, 17, 32, 33, 1000)] == [0, 1, 16, 32, 32, 64, 1024]


def test_cuda_growing_sizes_allow_buckets_shrinking_ones_do_not():
    from luminal_cuda.dims import DimPolicy, nondecreasing

    past, seq = lm.Expr.var("past"), lm.Expr.var("seq")
    assert nondecreasing((past + seq) * 64, "past")
    assert nondecreasing((past + 31) // 32, "past")
    assert not nondecreasing(100 - past, "past")
    assert not nondecreasing(past % 7, "past")
    policy = DimPolicy.of(["n", "past", "seq"], cublas_dims=["seq"], sizes=[100 - lm.Expr.var("n"),
                                                                           (past + seq) * 4])
    assert policy.hard == {"n", "seq"}
    assert policy.key({"n": 40, "past": 40, "seq": 40}) == (40, 64, 40)
