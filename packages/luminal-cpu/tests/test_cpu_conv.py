"""Convolutions on the cpu backend against PyTorch: the implicit GEMM (im2col gathered while
the GEMM packs its panels, never stored) and the paths it leaves alone (batches, groups); pools
and concatenations rendered a row at a time (luminal_cpu.rows)."""

from __future__ import annotations

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
import torch
from luminal_cpu import CpuBackend, direct_conv, implicit_gemm, rows
from luminal_cpu.implicit_gemm import GatherMatmul

rng = np.random.default_rng(7)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv_graph(x_shape, w_shape, bias: bool, silu: bool, **kw):
    g = lm.Graph()
    x, w = g.tensor(x_shape, name="x"), g.tensor(w_shape, name="w")
    b = g.tensor((w_shape[0],), name="b") if bias else None
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(w_shape)]
    y = conv(x, w, b, **kw)
    y = (y * y.sigmoid() if silu else y).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    return g, (x, w, b), y


def torch_conv(x, w, b, silu, **kw):
    conv = {3: torch.nn.functional.conv1d, 4: torch.nn.functional.conv2d,
            5: torch.nn.functional.conv3d}[w.ndim]
    y = conv(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
             None if b is None else torch.from_numpy(b).double(), **kw)
    return (torch.nn.functional.silu(y) if silu else y).numpy()


def gather_matmuls(g) -> int:
    return sum(isinstance(k, GatherMatmul) for k in g.runtime.program.kernels)


CASES = [
    # (N, C, H, W), (O, C/groups, kh, kw), stride, padding, dilation, groups, implicit
    ((1, 3, 17, 19), (8, 3, 3, 3), 1, 1, 1, 1, True),
    ((1, 3, 32, 32), (16, 3, 3, 3), 2, 1, 1, 1, True),   # YOLO's stem
    ((1, 5, 13, 11), (7, 5, 5, 3), (2, 3), (2, 0), 1, 1, True),
    ((1, 4, 15, 15), (6, 4, 3, 3), 1, 2, 2, 1, True),    # dilation
    ((1, 16, 9, 9), (33, 16, 1, 1), 1, 0, 1, 1, True),   # 1x1: x read as it is, direct
    ((1, 16, 2, 9), (33, 16, 1, 1), 1, 0, 1, 1, False),  # 1x1 under a tile's columns: GEMM
    ((1, 6, 12, 10), (4, 6, 2, 2), 2, 0, 1, 1, True),    # non-overlapping windows
    ((2, 4, 11, 13), (8, 4, 3, 3), 1, 1, 1, 1, False),   # a batch: the im2col GEMM
    ((1, 8, 10, 10), (12, 2, 3, 3), 1, 1, 1, 4, False),  # groups
    ((1, 8, 14, 14), (8, 1, 3, 3), 2, 1, 1, 8, False),   # depthwise
    ((1, 3, 7, 7), (5, 3, 7, 7), 1, 3, 1, 1, True),      # kernel as large as the input
    # rows wider than a panel (32): runs inside the image skip the masks, edges keep them
    ((1, 3, 6, 75), (8, 3, 3, 3), 1, 1, 1, 1, True),
    ((1, 4, 9, 140), (8, 4, 3, 3), 2, 1, 1, 1, True),    # strided: unmasked strided loads
    ((1, 2, 5, 40), (3, 2, 1, 1), 1, 3, 1, 1, True),     # whole runs in the padding
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,groups,implicit", CASES)
@pytest.mark.parametrize("silu", [False, True])
def test_conv2d_matches_torch(x_shape, w_shape, stride, padding, dilation, groups, implicit,
                              silu):
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    g, (x, w, b), y = conv_graph(x_shape, w_shape, True, silu, **kw)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, silu, **kw),
                               rtol=1e-4, atol=1e-4)
    assert (gather_matmuls(g) > 0) == implicit


def direct_convs(g) -> int:
    return sum(isinstance(k, GatherMatmul) and direct_conv.match(k) is not None
               for k in g.runtime.program.kernels)


DIRECT = [
    # (N, C, H, W), (O, C, kh, kw), stride, padding, dilation, direct: convolutions whose
    # input the micro-kernel loads straight (luminal_cpu.direct_conv), and ones it does not
    ((1, 16, 20, 37), (13, 16, 3, 3), 1, 1, 1, True),   # rows past one tile, 13 = 8 + 5 channels
    ((1, 5, 9, 64), (8, 5, 3, 3), 1, 0, 1, True),       # no padding: 62 columns
    ((1, 3, 11, 47), (40, 3, 5, 5), 1, 2, 1, True),     # many channels, a small input
    ((1, 4, 6, 5), (9, 4, 3, 2), 1, (1, 0), 1, True),   # narrower than a vector
    ((1, 2, 4, 70), (3, 2, 2, 3), 1, (3, 4), 1, True),  # rows and columns wholly in the padding
    ((1, 5, 12, 9), (7, 5, 3, 3), (2, 1), 0, 1, True),  # stride 2 down the columns only
    ((1, 72, 64, 64), (40, 72, 3, 3), 1, 1, 1, True),   # many channels, input past 1 MiB
    ((1, 3, 33, 131), (16, 3, 3, 3), 2, 1, 1, True),    # stride 2 along rows (YOLO's stem)
    ((1, 6, 9, 70), (11, 6, 3, 2), 2, 0, 1, True),      # stride 2, 35 columns: two tiles
    ((1, 3, 7, 67), (5, 3, 2, 2), 2, 0, 1, True),       # stride 2, two taps, a ragged last tile
    ((1, 4, 10, 45), (9, 4, 5, 5), 2, 2, 1, True),      # stride 2, taps shifted by two lanes
    ((1, 2, 6, 9), (3, 2, 3, 4), 2, (2, 3), 1, True),   # stride 2, columns wholly in the padding
    ((1, 8, 20, 70), (20, 8, 3, 3), 2, 1, 1, True),     # stride 2, 8 + 8 + 4 channels reuse a split
    ((1, 176, 6, 40), (9, 176, 3, 3), 2, 1, 1, True),   # stride 2, splits past SPLIT_CACHE_BYTES
    ((1, 4, 15, 15), (6, 4, 3, 3), 1, 2, 2, False),     # dilation
    ((1, 4, 15, 40), (6, 4, 3, 3), 2, 1, 2, False),     # stride 2 with dilation
    ((1, 4, 15, 40), (6, 4, 3, 3), 3, 1, 1, False),     # stride 3
]


@pytest.mark.parametrize("x_shape,w_shape,stride,padding,dilation,direct", DIRECT)
def test_direct_conv_matches_torch_with_nan_and_inf(x_shape, w_shape, stride, padding,
                                                    dilation, direct):
    kw = dict(stride=stride, padding=padding, dilation=dilation)
    g, (x, w, b), y = conv_graph(x_shape, w_shape, True, False, **kw)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    xs[0, 0, 0, 0], xs[0, -1, -1, -1], xs[0, 0, x_shape[2] // 2, 2] = np.nan, np.inf, -np.inf
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, False, **kw),
                               rtol=1e-4, atol=1e-4)
    assert direct_convs(g) == direct


@pytest.mark.parametrize("x_shape", [(1, 6, 14, 190), (1, 6, 66, 140)])
def test_stride_two_splits_reused_across_tiles_on_two_threads(monkeypatch, x_shape):
    """A stride-2 convolution's even / odd input split is kept by each thread for the next
    tile over the same columns (`direct_conv.SPLIT_CACHE_BYTES`): with 2 threads a thread's
    chunk starts inside a column's run of output-channel tiles (5 channel tiles, 3 column
    tiles, 7 rows: 105 tiles, one chunk per thread; 33 rows: 495 tiles, work enough for two
    chunks per thread, `lm_for_begin_work`), so it must split anew there. Same bits as on
    one thread and torch's values."""
    from luminal_cpu import threads

    w_shape = (37, 6, 3, 3)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    results = []
    for count in ("1", "2"):
        monkeypatch.setenv("LUMINAL_CPU_THREADS", count)
        threads.governor.cache_clear()
        g, (x, w, b), y = conv_graph(x_shape, w_shape, True, True, stride=2, padding=1)
        x.set(xs), w.set(ws), b.set(bs)
        g.execute()
        assert direct_convs(g)
        results.append(y.numpy().copy())
    threads.governor.cache_clear()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], torch_conv(xs, ws, bs, True, stride=2, padding=1),
                               rtol=1e-4, atol=1e-4)


def test_conv_chain_stores_the_activation_once():
    """conv -> bias + SiLU -> 3x3 conv: the second conv's windows read the stored activation
    (not recomputed per window read) and its im2col is gathered inside the GEMM."""
    g = lm.Graph()
    x = g.tensor((1, 4, 20, 20), name="x")
    w1, w2 = g.tensor((8, 4, 3, 3), name="w1"), g.tensor((6, 8, 3, 3), name="w2")
    b1 = g.tensor((8,), name="b1")
    h = F.conv2d(x, w1, b1, padding=1)
    y = F.conv2d(h * h.sigmoid(), w2, stride=2, padding=1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    data = [randn(1, 4, 20, 20), randn(8, 4, 3, 3), randn(6, 8, 3, 3), randn(8)]
    for t, a in zip((x, w1, w2, b1), data):
        t.set(a)
    g.execute()
    want = torch_conv(torch_conv(data[0], data[1], data[3], True, padding=1), data[2], None,
                      False, stride=2, padding=1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert gather_matmuls(g) == 2
    source_exps = [k for k in g.runtime.program.kernels
                   if isinstance(k, GatherMatmul) and "exp2" in repr(k.gather)]
    assert not source_exps  # SiLU is computed once, outside the gathers


def test_conv2d_symbolic_spatial_dims():
    """One compiled graph at several image sizes (the pack function reads the dims)."""
    g = lm.Graph()
    x = g.tensor((1, 3, "h", "w"), name="x")
    w = g.tensor((5, 3, 3, 3), name="w")
    y = F.conv2d(x, w, stride=2, padding=1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    assert gather_matmuls(g) == 1
    ws = randn(5, 3, 3, 3)
    w.set(ws)
    for h, wd in ((9, 14), (32, 17), (5, 5)):
        xs = randn(1, 3, h, wd)
        x.set(xs)
        g.execute()
        np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, None, False, stride=2,
                                                         padding=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape", [((1, 3, 40), (4, 3, 5)),
                                             ((1, 2, 6, 7, 5), (3, 2, 3, 3, 2))])
def test_conv1d_and_conv3d(x_shape, w_shape):
    g, (x, w, b), y = conv_graph(x_shape, w_shape, True, False, stride=2, padding=1)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, False, stride=2, padding=1),
                               rtol=1e-4, atol=1e-4)
    assert gather_matmuls(g) == 1


def test_large_conv_spans_several_panels():
    """K and N both past one GEMM block (LM_KC = 256, LM_NC = 256) and M past one tile."""
    g, (x, w, b), y = conv_graph((1, 40, 23, 29), (100, 40, 3, 3), True, True, padding=1)
    xs, ws, bs = randn(1, 40, 23, 29), randn(100, 40, 3, 3) * 0.1, randn(100)
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, True, padding=1),
                               rtol=1e-4, atol=1e-4)
    assert gather_matmuls(g) == 1


def test_two_convs_of_one_input_each_gather():
    """YOLO's detection head runs two 3x3 convolutions on one feature map: their shared im2col
    is gathered inside each GEMM, never stored."""
    g = lm.Graph()
    x = g.tensor((1, 6, 12, 12), name="x")
    w1, w2 = g.tensor((5, 6, 3, 3), name="w1"), g.tensor((9, 6, 3, 3), name="w2")
    y1 = F.conv2d(x, w1, padding=1).retrieve()
    y2 = F.conv2d(x, w2, padding=1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    data = [randn(1, 6, 12, 12), randn(5, 6, 3, 3), randn(9, 6, 3, 3)]
    for t, a in zip((x, w1, w2), data):
        t.set(a)
    g.execute()
    for y, w in ((y1, data[1]), (y2, data[2])):
        np.testing.assert_allclose(y.numpy(), torch_conv(data[0], w, None, False, padding=1),
                                   rtol=1e-4, atol=1e-4)
    program = g.runtime.program
    assert gather_matmuls(g) == 2
    assert all(isinstance(program.kernels[c.kernel], GatherMatmul) for c in program.calls)


def rendered_by_rows(g) -> int:
    """Kernels of `g`'s program that luminal_cpu.rows renders (pools, concatenations)."""
    return sum(rows.render(k, "k") is not None for k in g.runtime.program.kernels
               if not isinstance(k, GatherMatmul))


POOLS = [
    # (N, C, H, W), kernel, stride, padding: SPPF's 5x5 (rows wider than a vector), strided,
    # no padding (no edges), a window as large as the padded input; rows past
    # rows.MASKED_ROW_MAX (their edge columns in loops of their own), strided too
    ((1, 6, 21, 45), 5, 1, 2),
    ((1, 3, 9, 150), 5, 1, 2),
    ((1, 2, 11, 133), 3, 2, 1),
    ((1, 3, 17, 38), 3, 2, 1),
    ((1, 4, 8, 36), 2, 2, 0),
    ((1, 2, 5, 6), 5, 1, 2),
]


@pytest.mark.parametrize("x_shape,kernel,stride,padding", POOLS)
def test_max_pool2d_matches_torch_with_nan_and_inf(x_shape, kernel, stride, padding):
    g = lm.Graph()
    x = g.tensor(x_shape, name="x")
    y = F.max_pool2d(x, kernel, stride, padding).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    # one max along the rows, then one down the columns (`F.max_pool2d` is separable); a
    # pool without padding has masks in neither, and one of them renders generically
    assert rendered_by_rows(g) == (2 if padding else 1)
    xs = randn(*x_shape)
    flat = xs.reshape(-1)
    picks = rng.choice(flat.size, 12, replace=False)
    flat[picks[:4]], flat[picks[4:8]], flat[picks[8:]] = np.nan, np.inf, -np.inf
    x.set(xs)
    g.execute()
    want = torch.nn.functional.max_pool2d(torch.from_numpy(xs), kernel, stride, padding)
    np.testing.assert_array_equal(y.numpy(), want.numpy())


@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d_matches_torch(include_pad):
    g = lm.Graph()
    x = g.tensor((1, 3, 11, 40), name="x")
    y = F.avg_pool2d(x, 3, 1, 1, count_include_pad=include_pad).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xs = randn(1, 3, 11, 40)
    x.set(xs)
    g.execute()
    want = torch.nn.functional.avg_pool2d(torch.from_numpy(xs).double(), 3, 1, 1,
                                          count_include_pad=include_pad)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_sppf_pools_and_concatenation_match_torch():
    """YOLOv8's SPPF: three chained 5x5 max pools concatenated with their input along the
    channels, then a 1x1 convolution; and C2f's concatenation with a bias + SiLU branch. The
    concatenations' channel ranges each get their own unmasked row loop."""
    g = lm.Graph()
    x = g.tensor((1, 4, 12, 40), name="x")
    w, b = g.tensor((6, 20, 1, 1), name="w"), g.tensor((4,), name="b")
    p1 = F.max_pool2d(x, 5, 1, 2)
    p2 = F.max_pool2d(p1, 5, 1, 2)
    p3 = F.max_pool2d(p2, 5, 1, 2)
    z = x + b.reshape((1, 4, 1, 1))
    cat = lm.cat([x, p1, p2, p3, z * z.sigmoid()], 1)
    y = F.conv2d(cat, w).retrieve()
    c = cat.retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    assert rendered_by_rows(g) >= 2
    xs, ws, bs = randn(1, 4, 12, 40), randn(6, 20, 1, 1), randn(4)
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    t = torch.from_numpy(xs).double()
    pools = [t]
    for _ in range(3):
        pools.append(torch.nn.functional.max_pool2d(pools[-1], 5, 1, 2))
    zt = t + torch.from_numpy(bs).double().reshape(1, 4, 1, 1)
    want = torch.cat([*pools, torch.nn.functional.silu(zt)], 1)
    np.testing.assert_allclose(c.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), torch_conv(want.numpy(), ws, None, False),
                               rtol=1e-4, atol=1e-4)


def test_dfl_head_concatenation_along_rows_and_transposed_softmax_match_torch():
    """YOLOv8's DFL head: three scales' box outputs (each + its bias) concatenated along the
    anchors, viewed as (4 sides, 16 bins, anchors), transposed so that the softmax runs over
    the bins, transposed back and weighted by the bin numbers. The concatenation along the
    row is rendered as one unmasked run per input; the softmax is computed along memory.
    Ragged scales (anchor counts that are not multiples of a vector), NaN and infinities."""
    g = lm.Graph()
    sizes = (37, 20, 5)
    xs = [g.tensor((1, 64, n), name=f"x{i}") for i, n in enumerate(sizes)]
    bs = [g.tensor((64, 1), name=f"b{i}") for i in range(3)]
    cat = lm.cat([x + b for x, b in zip(xs, bs)], 2)
    t = cat.reshape((1, 4, 16, sum(sizes))).permute((0, 3, 1, 2))
    soft = t.softmax(3)
    weights = g.arange(16).to(lm.float32)
    y = (soft * weights).sum(3).retrieve()
    s_out = soft.retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    assert rendered_by_rows(g) >= 1
    xv = [randn(1, 64, n) for n in sizes]
    xv[0][0, 3, 2], xv[1][0, 17, 19], xv[2][0, 40, 0] = np.nan, np.inf, -np.inf
    xv[0][0, 48:64, 36] = -np.inf  # a whole softmax row of -inf: NaN, like torch
    bv = [randn(64, 1) for _ in range(3)]
    for tensor, value in zip([*xs, *bs], [*xv, *bv]):
        tensor.set(value)
    g.execute()
    tt = torch.cat([torch.from_numpy(a) + torch.from_numpy(b) for a, b in zip(xv, bv)], 2)
    want = torch.softmax(tt.double().reshape(1, 4, 16, -1).permute(0, 3, 1, 2), 3)
    np.testing.assert_allclose(s_out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), (want * torch.arange(16).double()).sum(3).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_output_rows_concatenated_along_channels_and_anchors_match_torch():
    """YOLOv8's output: box rows and the class scores of three scales (each + its bias,
    through a sigmoid, concatenated along the anchors) concatenated along the channels. The
    class rows' case runs one loop per scale, whose index has no remainder left (a scale's
    anchors are one period of it); NaN and infinities."""
    g = lm.Graph()
    shapes = ((6, 7), (3, 4), (2, 2))
    xs = [g.tensor((1, 5, h, w), name=f"x{i}") for i, (h, w) in enumerate(shapes)]
    bs = [g.tensor((5, 1, 1), name=f"b{i}") for i in range(3)]
    box = g.tensor((1, 4, 58), name="box")
    cls = lm.cat([(x + b).reshape((1, 5, -1)) for x, b in zip(xs, bs)], 2).sigmoid()
    y = lm.cat([box * 2.0, cls], 1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    sources = [rows.render(k, "k") for k in g.runtime.program.kernels
               if not isinstance(k, GatherMatmul)]
    (cat,) = [src for src in sources if src is not None and "lm_epi_exp2(" in src]
    assert cat.count("for (long") >= 4 and "%" not in cat and "floormod" not in cat
    xv = [randn(1, 5, h, w) for h, w in shapes]
    xv[0][0, 1, 2, 3], xv[1][0, 4, 0, 1], xv[2][0, 0, 1, 1] = np.nan, np.inf, -np.inf
    bv, boxv = [randn(5, 1, 1) for _ in range(3)], randn(1, 4, 58)
    for tensor, value in zip([*xs, *bs, box], [*xv, *bv, boxv]):
        tensor.set(value)
    g.execute()
    tc = torch.cat([(torch.from_numpy(a) + torch.from_numpy(b)).reshape(1, 5, -1)
                    for a, b in zip(xv, bv)], 2).double().sigmoid()
    want = torch.cat([torch.from_numpy(boxv).double() * 2, tc], 1)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel,padding", [(1, 0), (3, 1)])
def test_upsampled_concatenation_feeds_the_gemm(kernel, padding):
    """YOLOv8's neck: a 2x nearest upsample concatenated with a skip connection, then a
    convolution. The concatenation's inputs each get their own unmasked runs in the im2col
    gather, the upsampled one read once per two outputs (rows 70 wide: runs at odd starts
    too)."""
    g = lm.Graph()
    x, skip = g.tensor((1, 4, 5, 35), name="x"), g.tensor((1, 3, 10, 70), name="skip")
    w = g.tensor((6, 7, kernel, kernel), name="w")
    up = F.interpolate(x, scale_factor=2, mode="nearest")
    y = F.conv2d(lm.cat([up, skip], 1), w, padding=padding).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    assert gather_matmuls(g) == 1
    xs, ss, ws = randn(1, 4, 5, 35), randn(1, 3, 10, 70), randn(6, 7, kernel, kernel)
    x.set(xs), skip.set(ss), w.set(ws)
    g.execute()
    t = torch.nn.functional.interpolate(torch.from_numpy(xs), scale_factor=2, mode="nearest")
    want = torch_conv(np.concatenate([t.numpy(), ss], 1), ws, None, False, padding=padding)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def epilogues(g) -> int:
    return sum(isinstance(k, GatherMatmul) and k.epilogue is not None
               for k in g.runtime.program.kernels)


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("x_shape,w_shape,stride,padding", [
    ((1, 5, 13, 45), (11, 5, 3, 3), 1, 1),  # 11 = 8 + 3 channels, a ragged last tile
    ((1, 3, 18, 70), (16, 3, 3, 3), 2, 1),  # YOLO's stem
])
def test_bias_and_silu_run_as_the_direct_convolutions_epilogue(x_shape, w_shape, stride,
                                                                padding, avx512, monkeypatch):
    """conv -> bias + SiLU: the SiLU kernel becomes the direct convolution's epilogue (its
    product never stored), NaN propagating and huge values saturating as in torch; without
    AVX-512 the packed GEMM's product goes through the same epilogue in place."""
    if not avx512:
        monkeypatch.setenv("CC", "gcc -mno-avx512f")
    kw = dict(stride=stride, padding=padding)
    g, (x, w, b), y = conv_graph(x_shape, w_shape, True, True, **kw)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    xs[0, 0, 0, 0], xs[0, -1, -1, -1], xs[0, 1, x_shape[2] // 2, 5] = np.nan, 1e30, -1e30
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, True, **kw),
                               rtol=1e-4, atol=1e-4)
    assert epilogues(g) == 1 and len(g.runtime.program.kernels) == 1


@pytest.mark.parametrize("avx512", [True, False])
def test_epilogue_exp2_over_its_whole_range(avx512, monkeypatch):
    """An epilogue's exp2 (its own inline polynomial, in blocks of 16 with AVX-512's
    intrinsics or lane by lane without, the last n % 16 lane by lane) within 1 ulp of NumPy's
    from 2^-160 (0) through the subnormals to 2^140 (infinity), NaN kept."""
    if not avx512:
        monkeypatch.setenv("CC", "gcc -mno-avx512f")
    g = lm.Graph()
    x, w = g.tensor((1, 2, 4, 600), name="x"), g.tensor((2, 2, 3, 3), name="w")
    y = (F.conv2d(x, w, padding=1) * 150.0).exp2().retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xs = np.zeros((1, 2, 4, 600), np.float32)  # channel 1: weights 0 (one is no axis)
    xs[0, 0] = np.linspace(-1.07, 0.94, 2400, dtype=np.float32).reshape(4, 600)
    xs[0, 0, 1, 7] = np.nan  # the taps' zero weights carry it to rows 0-2, columns 6-8
    ws = np.zeros((2, 2, 3, 3), np.float32)
    ws[:, 0, 1, 1] = 1, -1
    x.set(xs), w.set(ws)
    g.execute()
    got = y.numpy()[0]
    with np.errstate(over="ignore"):
        want = np.exp2((np.float32(150) * np.stack([xs[0, 0], -xs[0, 0]])).astype(np.float64))
        want = want.astype(np.float32)
    want[:, 0:3, 6:9] = np.nan
    assert (np.isnan(got) == np.isnan(want)).all()
    ok = ~np.isnan(want)
    np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=1)
    assert np.isinf(got).any() and (got == 0).any() and epilogues(g) == 1


@pytest.mark.parametrize("avx512", [True, False])
def test_epilogue_exp2_at_every_kth_float(avx512, monkeypatch):
    """The epilogue's exp2 within 1 ulp of NumPy's at every 4099th float from -160 to 140
    (both signs, the subnormals included), in blocks of 16 and lane by lane."""
    if not avx512:
        monkeypatch.setenv("CC", "gcc -mno-avx512f")
    top = [int(np.array(v, np.float32).view(np.uint32)) for v in (140.0, -160.0)]
    bits = np.concatenate([np.arange(0, top[0], 4099, dtype=np.uint32),
                           np.arange(1 << 31, top[1], 4099, dtype=np.uint32)])
    values = bits.view(np.float32)
    width = 600  # rows of 600: 18 tiles of 32 and one of 24 (a block of 16 and 8 lanes)
    xs = np.zeros(-(-len(values) // width) * width, np.float32)
    xs[:len(values)] = values
    xs = np.stack([xs.reshape(-1, width), np.zeros((len(xs) // width, width), np.float32)])
    xs = xs[None]  # channel 1: zeros, weighted 0 (a one-channel product is no direct one)
    g = lm.Graph()
    x, w = g.tensor(xs.shape, name="x"), g.tensor((2, 2, 3, 3), name="w")
    y = F.conv2d(x, w, padding=1).exp2().retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    ws = np.zeros((2, 2, 3, 3), np.float32)
    ws[:, 0, 1, 1] = 1  # the centre tap alone: both output channels exp2(x)
    x.set(xs), w.set(ws)
    g.execute()
    with np.errstate(over="ignore"):
        want = np.exp2(xs[0, 0].astype(np.float64)).astype(np.float32)
    np.testing.assert_array_max_ulp(y.numpy()[0], np.stack([want, want]), maxulp=1)
    assert epilogues(g) == 1


@pytest.mark.parametrize("x_shape,w_shape", [
    ((1, 48, 40, 45), (32, 48, 1, 1)),    # C2f's 1x1, 1800 columns: a ragged last tile
    ((1, 520, 4, 9), (16, 520, 1, 1)),    # a sum past POINTWISE_MAX_K: left to the GEMM
])
def test_pointwise_convolutions_run_direct_with_their_epilogue(x_shape, w_shape):
    """1x1 conv -> bias + SiLU: the matmul reads x as it is (a direct convolution of one tap)
    with the SiLU as its epilogue, NaN propagating as in torch."""
    g, (x, w, b), y = conv_graph(x_shape, w_shape, True, True)
    xs, ws, bs = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    xs[0, 3, 1, 2] = np.nan
    x.set(xs), w.set(ws), b.set(bs)
    g.execute()
    np.testing.assert_allclose(y.numpy(), torch_conv(xs, ws, bs, True), rtol=1e-4, atol=1e-4)
    direct = w_shape[1] <= implicit_gemm.POINTWISE_MAX_K
    assert direct_convs(g) == epilogues(g) == int(direct)


@pytest.mark.parametrize("x_shape", [(1, 20, 30, 50), (1, 6, 64, 160)])
def test_pointwise_strip_shared_by_channel_tiles_on_two_threads(monkeypatch, x_shape):
    """A 1 x 1 convolution without an epilogue copies each column tile's inputs into a
    per-thread strip that its output-channel tiles read (`direct_conv._unit_stride`): 19
    channels (three tiles, the last ragged), ragged last columns (1500 = 46 * 32 + 28), and
    with 2 threads chunks that start inside a column's run of channel tiles. Same bits on
    one and two threads, torch's values, NaN propagated."""
    from luminal_cpu import source, threads

    w_shape = (19, x_shape[1], 1, 1)
    xs, ws = randn(*x_shape), randn(*w_shape)
    xs[0, 2, 5, 7] = np.nan
    results = []
    for count in ("1", "2"):
        monkeypatch.setenv("LUMINAL_CPU_THREADS", count)
        threads.governor.cache_clear()
        g, (x, w, _), y = conv_graph(x_shape, w_shape, False, False)
        (conv,) = [k for k in g.runtime.program.kernels if isinstance(k, GatherMatmul)]
        assert direct_conv.match(conv) and "lm_strip" in source.kernel_source(conv, "k")
        x.set(xs), w.set(ws)
        g.execute()
        results.append(y.numpy().copy())
    threads.governor.cache_clear()
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], torch_conv(xs, ws, None, False), rtol=1e-4,
                               atol=1e-4)


def test_a_product_read_twice_keeps_its_own_kernels():
    """A convolution whose output two kernels read is stored; neither becomes its epilogue."""
    g = lm.Graph()
    x, w = g.tensor((1, 3, 10, 40), name="x"), g.tensor((8, 3, 3, 3), name="w")
    h = F.conv2d(x, w, padding=1)
    y1, y2 = h.relu().retrieve(), (h * h.sigmoid()).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    xs, ws = randn(1, 3, 10, 40), randn(8, 3, 3, 3)
    x.set(xs), w.set(ws)
    g.execute()
    want = torch_conv(xs, ws, None, False, padding=1)
    np.testing.assert_allclose(y1.numpy(), np.maximum(want, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2.numpy(), torch_conv(xs, ws, None, True, padding=1),
                               rtol=1e-4, atol=1e-4)
    assert epilogues(g) == 0 and direct_convs(g) == 1
