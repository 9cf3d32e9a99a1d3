"""Matmul, attention and gather recognition: the special kernels compute what the primitive
graph computes, and are used where they should be."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from cpu_helpers import check_vs_reference, run_on
from luminal_codegen import Kernel, Matmul, lower
from luminal_codegen.ir import Bind, walk
from luminal_cpu import CpuBackend

rng = np.random.default_rng(1)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def program_of(build):
    g = lm.Graph()
    _, outputs = build(g)
    for o in outputs:
        o.retrieve()
    g.compile(lm.GenericCompiler())
    return lower(g)


@pytest.mark.parametrize("m", [1, 3, 4, 5, 37, 200])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_matmul_every_layout_and_size(m, layout):
    k, n = 70, 45

    def build(g):
        a = g.tensor((k, m) if layout[0] == "t" else (m, k))
        b = g.tensor((n, k) if layout[1] == "t" else (k, n))
        x = a.T if layout[0] == "t" else a
        y = b.T if layout[1] == "t" else b
        return [a, b], [x @ y]

    a = randn(*((k, m) if layout[0] == "t" else (m, k)))
    b = randn(*((n, k) if layout[1] == "t" else (k, n)))
    check_vs_reference(build, [[a, b]], atol=1e-4)
    assert any(isinstance(kern, Matmul) for kern in program_of(build).kernels)


@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_decode_products_over_a_kv_cache(m, layout):
    """A few query rows against a batch of keys (B along k: sixteen columns per register
    transpose where K is a multiple of 16) or of values (B along n: 64 columns of sums in
    registers), at sizes on and off those multiples."""
    def build(g):
        a = g.tensor((2, m, "k"))
        b = g.tensor((2, "n", "k") if layout == "nt" else (2, "k", "n"))
        return [a, b], [a @ (b.transpose(1, 2) if layout == "nt" else b)]

    sizes = [(64, 16), (64, 50), (256, 64), (48, 200), (70, 130), (16, 1)]
    check_vs_reference(build, [[randn(2, m, k), randn(2, n, k) if layout == "nt"
                                else randn(2, k, n)] for k, n in sizes], atol=1e-4)


def test_batched_broadcast_and_symbolic_matmul():
    def build(g):
        a = g.tensor((2, 3, "s", 24))
        b = g.tensor((24, 17))
        c = g.tensor((3, 17, "s"))
        return [a, b, c], [(a @ b).relu(), (a @ b) @ c, a[:, :, ::2] @ b]

    check_vs_reference(build, [[randn(2, 3, s, 24), randn(24, 17), randn(3, 17, s)]
                               for s in (5, 11)], atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(8, 8, 0), (64, 8, 0), (0, 8, 64), (64, 0, 64), (3, 0, 5),
                                   (0, 0, 0)])
def test_matmul_with_a_zero_size_dim(m, k, n):
    """An empty product writes nothing and a sum over K = 0 is zeros (the tiled kernel used
    to divide by its tile count, 0 for N = 0: SIGFPE)."""
    def build(g):
        a, b = g.tensor((m, k)), g.tensor((k, n))
        return [a, b], [a @ b]

    check_vs_reference(build, [[randn(m, k), randn(k, n)]])


def test_matmul_with_a_symbolic_dim_bound_to_zero():
    def build(g):
        a, b = g.tensor((16, 24)), g.tensor((24, "s"))
        return [a, b], [a @ b]

    check_vs_reference(build, [[randn(16, 24), randn(24, s)] for s in (0, 5, 0)], atol=1e-4)


def test_half_operands_are_read_without_a_converted_copy():
    def build(g):
        x = g.tensor((6, 32))
        w16 = g.tensor((20, 32), dtype=lm.float16)
        wbf = g.tensor((32, 20), dtype=lm.bfloat16)
        xh = x.half()
        return [x, w16, wbf], [F.linear(x, w16.to(lm.float32)), x @ wbf.to(lm.float32),
                               xh @ w16.T, xh[:1] @ w16.T, x[:2] @ wbf.to(lm.float32)]

    bf16 = randn(32, 20).astype(lm.bfloat16.numpy)
    data = [[randn(6, 32), randn(20, 32, dtype=np.float16), bf16]]
    check_vs_reference(build, data, atol=2e-2, rtol=2e-2)
    kernels = program_of(build).kernels
    assert sum(isinstance(k, Matmul) for k in kernels) == 5
    # the only other kernel rounds x to float16; the weights are never converted in memory
    (other,) = [k for k in kernels if not isinstance(k, Matmul)]
    assert [p.dtype for p in other.params] == [lm.float16, lm.float32]


def test_grouped_query_attention_reads_kv_heads_without_copies():
    def build(g):
        q = g.tensor((6, "s", 16))
        k = g.tensor((2, "s", 16))
        v = g.tensor((2, "s", 16))
        return [q, k, v], [F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                          enable_gqa=True)]

    check_vs_reference(build, [[randn(6, s, 16), randn(2, s, 16), randn(2, s, 16)]
                               for s in (1, 9)], atol=1e-5)
    kernels = program_of(build).kernels
    assert sum(isinstance(k, Matmul) for k in kernels) == 2
    assert all(isinstance(k, Matmul) or len(k.domain) <= 3 for k in kernels)


def test_embedding_becomes_a_row_gather():
    def build(g):
        idx = g.tensor(("s",), dtype=lm.int32)
        w = g.tensor((50, 12))
        v = g.tensor((50, 3))
        # two tables indexed alike share their one-hot comparisons after CSE
        return [idx, w, v], [lm.cat([F.embedding(idx, w) * 2, F.embedding(idx, v)], -1)]

    ids = [np.array([3, 0, 49, 7], np.int32), np.array([2, 11], np.int32)]
    check_vs_reference(build, [[i, randn(50, 12), randn(50, 3)] for i in ids])
    # ids outside the table: the reference backend raises IndexError; the cpu backend's
    # documented behaviour is a row of zeros
    ((out,),) = run_on(CpuBackend(), build, [[np.array([-1, 50, 2], np.int32),
                                              randn(50, 12), randn(50, 3)]])
    assert not out[:2].any() and out[2].any()
    (kernel,) = program_of(build).kernels
    assert isinstance(kernel, Kernel)
    assert any(isinstance(v, Bind) for v in walk(kernel.out.value))


def test_matmul_stores_straight_into_a_permuting_copy():
    def build(g):
        p = g.tensor((4, "s", 5))
        v = g.tensor((4, 5, 8))
        heads = p @ v  # (4, s, 8)
        return [p, v], [heads.permute(1, 0, 2).reshape(-1, 32) * 2]

    check_vs_reference(build, [[randn(4, s, 5), randn(4, 5, 8)] for s in (1, 6)], atol=1e-5)
    kinds = [type(k).__name__ for k in program_of(build).kernels]
    assert kinds == ["Matmul", "Kernel"]  # the matmul writes rows; no separate copy


def test_batch_sharing_the_right_operand_folds_into_rows():
    """A linear layer over (batch, seq, features) and im2col convolution rows are one tall
    GEMM: batch axes that the weight ignores become rows (also with a symbolic batch); a
    batch that both operands walk stays a batch."""

    def build(g):
        x = g.tensor(("b", 1, 6, 24))
        w = g.tensor((17, 24))
        y = g.tensor(("b", 24, 5))
        return [x, w, y], [x @ w.T, x @ y.unsqueeze(1)]

    check_vs_reference(build, [[randn(b, 1, 6, 24), randn(17, 24), randn(b, 24, 5)]
                               for b in (1, 3)], atol=1e-4)
    mms = [k for k in program_of(build).kernels if isinstance(k, Matmul)]
    shapes = sorted((len(k.batch), k.m.evaluate({"b": 3})) for k in mms)
    assert shapes == [(0, 18), (1, 6)], shapes


@pytest.mark.parametrize("m, n", [(16, 9), (16, 100), (40, 300)])
def test_long_k_products_split_along_k_and_do_not_depend_on_threads(m, n, monkeypatch):
    """A product with few output tiles and a long K (a weight gradient over a batch) is split
    along K across the threads; the split follows the shapes only, so 1 and 2 threads give
    the same bits, and the reference's values."""
    from luminal_cpu import threads

    k = 4096

    def build(g):
        a, b = g.tensor((m, k)), g.tensor((k, n))
        return [a, b], [a @ b]

    data = [[randn(m, k), randn(k, n)]]
    results = []
    for count in ("1", "2"):
        monkeypatch.setenv("LUMINAL_CPU_THREADS", count)
        threads.governor.cache_clear()
        results.append(run_on(CpuBackend(), build, data)[0][0])
    threads.governor.cache_clear()
    np.testing.assert_array_equal(results[0], results[1])
    check_vs_reference(build, data, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("m, k, n, batch", [(200, 700, 600, 0), (300, 300, 520, 0),
                                            (37, 3000, 600, 0), (256, 1152, 1024, 0),
                                            (64, 144, 300, 3)])
def test_left_operand_packed_once_for_every_tile(m, k, n, batch, monkeypatch):
    """A left operand that every tile (and every batch) reads, a convolution's weights, is
    packed once per product by the team and its tiles are taller: rows past one tile
    (300 > 256), K past one block and split along K (3000; 1152 split in 2 as YOLOv8's
    256-channel 3x3 convolution is, whose partial sums share the team's scratch with the
    packed A: a race there showed on 2 threads), and a batch sharing it (a batched
    convolution) give NumPy's float64 product, the same bits on 1 and 2 threads, run after
    run."""
    from luminal_cpu import threads

    def build(g):
        w = g.tensor((m, k))
        x = g.tensor((batch, k, n) if batch else (k, n))
        return [w, x], [w @ x]

    w, x = randn(m, k), randn(*((batch, k, n) if batch else (k, n)))
    results = []
    for count in ("1", "2"):
        monkeypatch.setenv("LUMINAL_CPU_THREADS", count)
        threads.governor.cache_clear()
        results.append(run_on(CpuBackend(), build, [[w, x]] * 6))
    threads.governor.cache_clear()
    want = w.astype(np.float64) @ x.astype(np.float64)
    for (got,) in results[0] + results[1]:
        np.testing.assert_array_equal(got, results[0][0][0])
        np.testing.assert_allclose(got, want, atol=2e-3 * np.sqrt(k / 100), rtol=1e-4)
