"""Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and Q6_K weights repacked with their rows interleaved by 16
(luminal_cpu/repack.py): the layout round-trips to GGUF's bytes; decode's int16 matvec
(csrc/qgemv16.c), prefill's GEMM (csrc/qgemm8.c), the float fallbacks, the build without
AVX-512 and generated kernels that load the bytes (a tied embedding's row gather, through
`packed_index`) read it, checked against float64 NumPy on the `gguf` package's
dequantization as test_cpu_qgemv16 / test_cpu_qgemm8 do (decode: x held as three byte digits
per value, Q8_0 included); the runtime repacks exactly the inputs that every reader can read
packed, never writes the caller's array nor keeps it alive, reads back GGUF's bytes, repacks
a weight once, and repacks a new array the user sets."""

from __future__ import annotations

import ctypes
import gc
import weakref

import luminal as lm
import numpy as np
import pytest
from cpu_helpers import group
from luminal.device_array import DeviceArray
from luminal.quant import dequantize
from luminal.testing.quant import int8_digit_activations, int8_triple_activations, random_blocks
from luminal_cpu import CpuBackend, toolchain
from luminal_cpu.repack import (
    FORMATS,
    QTYPE_CODES,
    ROWS,
    block_bytes,
    block_values,
    repack,
    repack_native,
    unpack,
)
from luminal_cpu.source import build_runtime
from luminal_nn import Embedding, QuantizedParameter
from luminal_nn import functional as F
from test_cpu_qgemv import check_bad_row, weight
from test_cpu_qgemv16 import check as check_held

gguf = pytest.importorskip("gguf")
rng = np.random.default_rng(41)
formats = pytest.mark.parametrize("qtype", sorted(FORMATS))


def length(qtype: str, n: int) -> int:
    """A row length for `qtype` near n values: n itself (a multiple of 32) for the 32-value
    formats, else n rounded up to whole 256-value blocks."""
    b = block_values(qtype)
    return -(-n // b) * b


@pytest.fixture(autouse=True)
def default_setting(monkeypatch):
    """The layout is used under the default setting (int16) only."""
    monkeypatch.delenv("LUMINAL_CPU_QUANT_ACTIVATIONS", raising=False)


def compiled(raw: np.ndarray, shape: tuple[int, int], m: int, extra=None, qtype="q4_1"):
    """(graph, x input, weight input, y) of y = x @ W.T for m rows of x; `extra(w_bytes)` may
    add another reader of the weight's bytes (its value retrieved)."""
    g = lm.Graph()
    xt = g.tensor((m, shape[1]))
    wt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    y = (xt @ dequantize(wt, qtype, shape).T).retrieve()
    if extra is not None:
        extra(wt).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    return g, xt, wt, y


def check(got: np.ndarray, x: np.ndarray, w: np.ndarray, qtype: str) -> None:
    """test_cpu_qgemv16's check with x as the packed kernels hold it: three byte digits per
    value scaled per block of the format (32 values; the K-quants 256) for every packed format
    (Q8_0 too: GGUF's Q8_0 keeps float32 x; GGUF-layout K-quants two int16 digits)."""
    check_held(got, x, w, qtype, held=int8_triple_activations(x, block_values(qtype)))


def is_packed(g: lm.Graph, wt) -> bool:
    return isinstance(g.data[wt.id], DeviceArray) and bool(g.runtime._packed)


def prefill_check(got: np.ndarray, x: np.ndarray, w: np.ndarray, qtype: str) -> None:
    """qgemm8's two byte digits per value, the default (test_cpu_qgemm8's bound)."""
    xq = int8_digit_activations(x, group(qtype), digits=2)
    want, scale = xq @ w.T, np.abs(xq) @ np.abs(w.T)
    assert np.all(np.abs(got - want) <= 2e-6 * scale + 1e-30)


@formats
def test_layout_round_trips_and_matches_its_table(qtype):
    rows, cols = 32, length(qtype, 96)
    raw, _ = weight(qtype, rows, cols)
    packed = repack(raw, qtype, rows)
    assert packed.nbytes == raw.nbytes and packed.__array_interface__["data"][0] % 64 == 0
    assert np.array_equal(unpack(packed, qtype, rows), raw.reshape(-1))
    bb, nblocks = block_bytes(qtype), cols // block_values(qtype)
    blocks = raw.reshape(rows, nblocks, bb)
    g, j, i = 1, nblocks - 1, 5  # row 16 + 5, the last block
    chunk = packed[(g * nblocks + j) * 16 * bb:][:16 * bb]
    b = blocks[ROWS * g + i, j]
    # the module's table: a field of width w <= 4 at offset o is row i's w bytes at 16 o + w i;
    # a wider field's 4-byte word at o + 4 t is row i's 4 bytes at 16 (o + 4 t) + 4 i
    at = 0
    for width in FORMATS[qtype][1]:
        step = min(width, 4)
        for o in range(at, at + width, step):
            assert bytes(chunk[16 * o + step * i:][:step]) == bytes(b[o:o + step]), (o, width)
        at += width
    assert at == bb
    with pytest.raises(ValueError, match="multiple of 16"):
        repack(raw[:24], qtype, 24)


@pytest.fixture(scope="module")
def support():
    """The runtime library, whose C repacks (`repack_native`)."""
    return build_runtime(toolchain.compiler()).handle


def check_native(raw: np.ndarray, qtype: str, rows: int, library) -> None:
    """`repack_native` writes `repack`'s bytes, into a new aligned array and in place, on 1 to
    3 threads (more than the groups, too), and leaves the caller's array alone when not in
    place."""
    want, saved = repack(raw, qtype, rows), raw.copy()
    for threads in (1, 2, 3):
        got = repack_native(raw, qtype, rows, library, threads)
        assert got.ctypes.data % 64 == 0 and np.array_equal(got, want)
        assert np.array_equal(raw, saved)
        mine = raw.copy()
        flat = repack_native(mine, qtype, rows, library, threads, in_place=True)
        assert np.shares_memory(flat, mine) and np.array_equal(flat, want)


@formats
@pytest.mark.parametrize("rows, n", [(16, 32), (48, 160), (80, 2048), (32, 8192)])
def test_native_repack_writes_the_reference_bytes(qtype, rows, n, support):
    """Random bytes (the repack moves bytes, whatever they hold), one to five groups, short and
    long rows (a group of 16 of Q6_K's 8192-value rows: 107 KB)."""
    raw = rng.integers(0, 256, (rows, length(qtype, n) // block_values(qtype) * block_bytes(qtype)),
                       dtype=np.uint8)
    check_native(raw, qtype, rows, support)


def _local_gguf_files() -> list:
    """The GGUF models already on this machine (nothing is downloaded for this test)."""
    hub = pytest.importorskip("luminal_models.hub")
    found = [hub.installed_smollm2(), hub.cache_dir() / "gemma-3-270m-q4_k_m.gguf"]
    return [p for p in found if p is not None and p.exists()]


def test_native_repack_writes_the_reference_bytes_of_real_models(support):
    """Every packable weight of the local SmolLM2 and Gemma 3 GGUF files (up to 256 rows of
    each: Q4_1, Q8_0, Q5_0, Q4_K, Q6_K...)."""
    files = _local_gguf_files()
    if not files:
        pytest.skip("no local GGUF model")
    seen = set()
    for path in files:
        for t in gguf.GGUFReader(path).tensors:
            qtype = t.tensor_type.name.lower()
            rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
            if qtype not in FORMATS or rows % ROWS:
                continue
            data = np.asarray(t.data).reshape(rows, -1)[:256]
            check_native(np.ascontiguousarray(data), qtype, data.shape[0], support)
            seen.add(qtype)
    assert seen


@pytest.mark.parametrize("qtype", ["q4_1", "q6_k"])
def test_native_repack_refuses_bad_sizes_before_writing(qtype, support):
    """A truncated tensor (a byte short, a block short, rows not a multiple of 16) is a clear
    error, with nothing written; so are an array it cannot repack in place and a format that
    has no packed layout."""
    rows, cols = 32, length(qtype, 512)
    raw = rng.integers(0, 256, (rows, cols // block_values(qtype) * block_bytes(qtype)),
                       dtype=np.uint8)
    saved = raw.copy()
    for bad, r in [(raw.reshape(-1)[:-1], rows), (raw.reshape(-1)[:-block_bytes(qtype)], rows),
                   (raw[:24], 24), (raw, 40)]:
        for in_place in (False, True):
            with pytest.raises(ValueError, match="multiple of 16 and whole"):
                repack_native(bad.copy(), qtype, r, support, 2, in_place=in_place)
    with pytest.raises(ValueError, match="writable C-contiguous uint8"):
        repack_native(raw[:, ::2], qtype, rows, support, in_place=True)
    with pytest.raises(KeyError):
        repack_native(raw, "q2_k", rows, support)
    assert np.array_equal(raw, saved)
    # the C checks too, whatever its caller checked: nothing written
    keep = raw.copy()
    assert support.lm_repack_rows16(ctypes.c_void_p(keep.ctypes.data),
                                    ctypes.c_void_p(keep.ctypes.data), ctypes.c_long(keep.size - 1),
                                    ctypes.c_int(QTYPE_CODES[qtype]), ctypes.c_long(rows),
                                    ctypes.c_int(1)) == -1
    assert np.array_equal(keep, raw)


@formats
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_packed_matvec_matches_gguf(m, threads, qtype, monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_THREADS", threads)
    for rows, n in [(16, 32), (32, 160), (48, 608), (64, 2048)]:
        cols = length(qtype, n)
        raw, w = weight(qtype, rows, cols)
        g, xt, wt, y = compiled(raw, (rows, cols), m, qtype=qtype)
        magnitude = 10.0 ** rng.integers(-3, 3, (m, 1))
        x = (rng.standard_normal((m, cols)) * magnitude).astype(np.float32)
        x[0, :32] = 0  # a block of zeros: dx = 0
        x[:, 7::61] *= 3e4  # outliers beside small values
        xt.set(x)
        g.execute()
        assert is_packed(g, wt)
        check(y.numpy(), x, w, qtype)


@pytest.mark.parametrize("qtype", sorted(q for q in FORMATS if block_values(q) == 256))
@pytest.mark.parametrize("quants, scales", [(0xFF, 0xFF), (0x00, 0x80), (0xA5, 0x5A)])
def test_packed_k_quants_hold_the_largest_sums(qtype, quants, scales):
    """The K-quant kernels sum each sub-block in int32 lanes of their own row: every quant (Q5_K /
    Q6_K: its high bits too) and scale byte set (0x00 / 0x80: Q6_K's q - 32 = -32 times scale -128,
    the largest products), x at +-max|x| in whole rows (the first digit at +-32767 everywhere) and
    mixed, 1 and 4 rows of x; d (and dmin) stay random."""
    rows, n = 32, 768
    raw, _ = weight(qtype, rows, n)
    blocks = raw.reshape(rows, n // 256, -1)
    if qtype != "q6_k":  # d, dmin, 12 bytes of 6-bit scales and mins, (Q5_K: 32 of qh,) nibbles
        blocks[..., 4:16], blocks[..., 16:] = scales, quants
    else:  # 128 bytes of low nibbles, 64 of high bits, 16 int8 scales, d
        blocks[..., :192], blocks[..., 192:208] = quants, scales
    fmt = gguf.GGMLQuantizationType[qtype.upper()]
    w = gguf.quants.dequantize(raw, fmt).astype(np.float64)
    for m in (1, 4):
        g, xt, wt, y = compiled(raw, (rows, n), m, qtype=qtype)
        x = np.full((m, n), 2.5, np.float32)
        x[1::2] = -2.5
        if m == 4:
            x[3, ::3] = -2.5
        xt.set(x)
        g.execute()
        assert is_packed(g, wt)
        check(y.numpy(), x, w, qtype)


@pytest.mark.parametrize("qtype", sorted(q for q in FORMATS if block_values(q) == 256))
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_packed_k_quants_take_x_as_three_byte_digits(qtype, m):
    """The packed K-quant kernels (lm_qr_k_rows16, lm_qr_q6k_rows16) hold x as three signed byte
    digits per value scaled per 256-value block (lm_k8x3_quantize: 6.0e-8 of the block's max|x|
    per value), whatever the block holds: one at +-max|x| throughout (every first digit at
    +-127), a single outlier beside values 1e-6 of it, a block of zeros and random ones; 1-4
    rows of x, against float64 NumPy of the gguf-dequantized weights."""
    rows, n = 32, 1280
    raw, w = weight(qtype, rows, n)
    g, xt, wt, y = compiled(raw, (rows, n), m, qtype=qtype)
    x = rng.standard_normal((m, n)).astype(np.float32)
    x[:, :256] = np.where(rng.random((m, 256)) < 0.5, -3.0, 3.0)  # +-max|x| everywhere
    x[:, 256:512] *= np.float32(1e-3)
    x[:, 300] = 1e3  # one outlier
    x[0, 512:768] = 0  # dx = 0
    xt.set(x)
    g.execute()
    assert is_packed(g, wt)
    held = int8_triple_activations(x, 256)
    # the digits' bound: 1 / 131072 of dx = max|x| / 127 per value, plus the float32 roundings
    # of the scale 127 / max|x| and of dx (2^-24 each, relative: |x| 2^-23 together): 1.8e-7
    # max|x| in all
    amax = np.abs(x.reshape(m, -1, 256)).max(-1, keepdims=True).astype(np.float64)
    err = np.abs(held - x).reshape(m, -1, 256)
    assert np.all(err <= amax * (1 / 127 / 131072 + 2.0**-23))
    check(y.numpy(), x, w, qtype)


@formats
@pytest.mark.parametrize("threads", ["1", "2"])
def test_prefill_reads_the_packed_layout(threads, qtype, monkeypatch):
    monkeypatch.setenv("LUMINAL_CPU_THREADS", threads)
    for m, rows, cols in [(5, 16, 256), (37, 80, length(qtype, 608))]:
        raw, w = weight(qtype, rows, cols)
        g, xt, wt, y = compiled(raw, (rows, cols), m, qtype=qtype)
        x = rng.standard_normal((m, cols)).astype(np.float32)
        x[:, 7::61] *= 3e4
        xt.set(x)
        g.execute()
        assert is_packed(g, wt)
        prefill_check(y.numpy(), x, w, qtype)


@formats
@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e-35])
def test_rows_without_a_rounding_take_the_float_kernels_on_the_packed_layout(bad, qtype):
    rows, cols = 32, 512
    raw, w = weight(qtype, rows, cols)
    for m in (2, 6):  # decode's float matvec, prefill's float GEMM
        g, xt, wt, y = compiled(raw, (rows, cols), m, qtype=qtype)
        x = rng.standard_normal((m, cols)).astype(np.float32)
        if bad == 1e-35:
            x[0] *= np.float32(1e-35)
        else:
            x[0, 37] = bad
        xt.set(x)
        g.execute()
        assert is_packed(g, wt)
        # prefill's other rows keep their two digits
        held = None if m == 2 else int8_digit_activations(
            np.nan_to_num(x, posinf=0, neginf=0), group(qtype), digits=2)
        check_bad_row(y.numpy(), x, w, bad, held)


@formats
def test_without_avx512_the_portable_kernels_read_the_packed_layout(qtype, monkeypatch):
    monkeypatch.setenv("CC", "gcc -mno-avx512f")
    rows, cols = 48, length(qtype, 608)
    raw, w = weight(qtype, rows, cols)
    for m in (1, 4, 9):
        g, xt, wt, y = compiled(raw, (rows, cols), m, qtype=qtype)
        x = rng.standard_normal((m, cols)).astype(np.float32)
        xt.set(x)
        g.execute()
        assert is_packed(g, wt)
        exact = x.astype(np.float64) @ w.T
        scale = np.abs(x).astype(np.float64) @ np.abs(w.T)
        assert np.all(np.abs(y.numpy() - exact) <= 1e-5 * scale + 1e-30)


@formats
@pytest.mark.parametrize("held", [True, False])
@pytest.mark.parametrize("owner", ["itself", "a larger array"])
def test_graph_data_reads_back_ggufs_bytes_and_no_second_copy_is_kept(held, owner, qtype):
    """An array the caller still holds at the first run is repacked into the graph's own
    array (the caller's never written, nor kept alive); one that nothing else holds (a
    model's weights after `Module.release_to`) is repacked in place: never two copies. The
    same holds for a view into a larger allocation that nothing else holds (GGUF readers
    return such views, to start each tensor on a 64-byte boundary)."""
    rows, cols = 32, length(qtype, 160)
    raw, _ = weight(qtype, rows, cols)
    if owner == "a larger array":
        whole = np.empty(raw.size + 63, np.uint8)
        start = -whole.ctypes.data % 64
        whole[start:start + raw.size] = raw.reshape(-1)
        raw = whole[start:start + raw.size].reshape(raw.shape)
        del whole
    saved, address = raw.copy(), raw.__array_interface__["data"][0]
    g, xt, wt, _ = compiled(raw, (rows, cols), 1, qtype=qtype)
    alive = weakref.ref(raw)
    if not held:
        del raw
    xt.set(rng.standard_normal((1, cols)).astype(np.float32))
    g.execute()
    assert is_packed(g, wt)
    kept = g.data[wt.id]
    assert (kept.buffer.__array_interface__["data"][0] == address) is not held
    if held:
        assert np.array_equal(raw, saved)
        del raw
        gc.collect()
        assert alive() is None  # the graph holds the packed copy only
    assert np.array_equal(np.asarray(kept), saved)  # read back: GGUF's bytes
    g.execute()  # not repacked again
    assert g.data[wt.id] is kept


@pytest.mark.parametrize("qtype", ["q4_1", "q4_k"])
def test_prepare_repacks_before_the_first_run(qtype):
    """`Graph.prepare()` (what luminal-models' Generator calls after loading) repacks the
    weights set already, in place when nothing else holds them; the runs then bind them as
    they are."""
    rows, cols = 48, length(qtype, 512)
    raw, w = weight(qtype, rows, cols)
    address = raw.__array_interface__["data"][0]
    g, xt, wt, y = compiled(raw, (rows, cols), 3, qtype=qtype)
    del raw
    g.prepare()
    packed = g.data[wt.id]
    assert isinstance(packed, DeviceArray)
    assert packed.buffer.__array_interface__["data"][0] == address
    x = rng.standard_normal((3, cols)).astype(np.float32)
    xt.set(x)
    g.execute()
    assert g.data[wt.id] is packed
    check(y.numpy(), x, w, qtype)


def test_the_callers_array_is_never_written_and_a_new_one_is_repacked():
    rows, cols = 32, 608
    raw, w = weight("q4_1", rows, cols)
    raw.flags.writeable = False  # the runtime must not need to write it
    g, xt, wt, y = compiled(raw, (rows, cols), 1)
    x = rng.standard_normal((1, cols)).astype(np.float32)
    xt.set(x)
    g.execute()
    check(y.numpy(), x, w, "q4_1")
    first = g.data[wt.id]
    raw2, w2 = weight("q4_1", rows, cols)
    wt.set(raw2)
    g.execute()
    assert is_packed(g, wt) and g.data[wt.id] is not first
    check(y.numpy(), x, w2, "q4_1")
    assert np.array_equal(np.asarray(g.data[wt.id]), raw2)


@formats
def test_inputs_a_reader_cannot_read_packed_keep_ggufs_layout(qtype, monkeypatch):
    rows, cols = 32, length(qtype, 160)
    raw, w = weight(qtype, rows, cols)
    x = rng.standard_normal((1, cols)).astype(np.float32)

    def run(extra=None, shape=(rows, cols), data=raw, want=w):
        g, xt, wt, y = compiled(data, shape, 1, extra, qtype)
        xt.set(x)
        g.execute()
        check(y.numpy(), x, want, qtype)
        return is_packed(g, wt), g, wt

    assert run()[0]
    # the bytes also read by a matmul that cannot read the layout (W along n: x @ W): the
    # whole input stays GGUF's
    other = rng.standard_normal((1, rows)).astype(np.float32)

    def along_n(b):
        return b.graph.tensor(other.shape).set(other) @ dequantize(b, qtype, (rows, cols))

    packed, g, wt = run(along_n)
    assert not packed and np.array_equal(g.data[wt.id], raw)
    # rows not a multiple of 16
    raw24, w24 = weight(qtype, 24, cols)
    assert not run(shape=(24, cols), data=raw24, want=w24)[0]
    # the other settings' kernels keep GGUF's layout
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "float")
    assert not run()[0]


@formats
@pytest.mark.parametrize("threads", ["1", "2"])
def test_generated_kernels_read_the_packed_layout(threads, qtype, monkeypatch):
    """Any generated kernel loading the bytes reads them through `packed_index`: a sum of all
    of them, rows of them, and a tied embedding (luminal-nn's row gather of a
    QuantizedParameter, then x @ W.T of the same table), each exact against the bytes."""
    monkeypatch.setenv("LUMINAL_CPU_THREADS", threads)
    rows, cols = 48, length(qtype, 608)
    raw, w = weight(qtype, rows, cols)
    g = lm.Graph()
    xt = g.tensor((1, cols))
    wt = g.tensor(raw.shape, dtype=lm.uint8).set(raw)
    y = (xt @ dequantize(wt, qtype, (rows, cols)).T).retrieve()
    total = wt.to(lm.float32).sum().retrieve()
    picked = wt[3:21].to(lm.float32).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    x = rng.standard_normal((1, cols)).astype(np.float32)
    xt.set(x)
    g.execute()
    assert is_packed(g, wt)
    check(y.numpy(), x, w, qtype)
    assert total.numpy() == raw.astype(np.float64).sum()
    assert np.array_equal(picked.numpy(), raw[3:21])

    raw_table = random_blocks(qtype, rows, cols, rng)
    w = gguf.dequantize(raw_table, gguf.GGMLQuantizationType[qtype.upper()]).astype(np.float64)
    for tokens in ([5], [17, 47, 0, 16, 31]):  # decode's matvec, prefill's GEMM
        table, own = Embedding(rows, cols), raw_table.copy()
        address = own.__array_interface__["data"][0]
        table.weight = QuantizedParameter((rows, cols), qtype, own)
        del own
        g = lm.Graph()
        ids = g.tensor((len(tokens),), dtype=lm.int32).set(np.array(tokens, np.int32))
        h = table(ids)
        logits = table.attend(h).retrieve()
        h.retrieve()
        g.compile((lm.GenericCompiler(), CpuBackend()))
        table.release_to(g)  # as luminal-models' Generator does: repacked in place
        g.execute()
        (kept,) = [a for a in g.data.values() if isinstance(a, DeviceArray)]
        assert kept.buffer.__array_interface__["data"][0] == address
        assert np.array_equal(table.weight.data, raw_table)
        assert np.array_equal(h.numpy(), w[tokens].astype(np.float32))
        if len(tokens) == 1:
            check(logits.numpy(), h.numpy(), w, qtype)
        else:
            prefill_check(logits.numpy(), h.numpy(), w, qtype)


def test_a_generated_kernel_shared_with_a_gguf_buffer_keeps_both_in_ggufs_layout():
    """Two tables gathered by one generated kernel (rendered once for both calls), only one
    of them also a packable weight: its layout would differ between the kernel's calls, so
    both keep GGUF's, and every result is exact."""
    rows, cols = 32, 64
    (r1, w1), (r2, w2) = weight("q8_0", rows, cols), weight("q8_0", rows, cols)
    g = lm.Graph()
    ids = g.tensor((1,), dtype=lm.int32).set(np.array([7], np.int32))
    tied, other = (g.tensor(r.shape, dtype=lm.uint8).set(r) for r in (r1, r2))

    def row(t):
        picked = F.embedding(ids, t.to(lm.float32)).to(lm.uint8)
        return dequantize(picked, "q8_0", (1, cols)).retrieve()

    h1, h2 = row(tied), row(other)
    y = (h1 @ dequantize(tied, "q8_0", (rows, cols)).T).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    g.execute()
    assert not g.runtime._packed
    assert np.array_equal(h1.numpy()[0], w1[7]) and np.array_equal(h2.numpy()[0], w2[7])
    exact = w1[7] @ w1.T
    assert np.all(np.abs(y.numpy()[0] - exact) <= 1e-5 * (np.abs(w1[7]) @ np.abs(w1.T)))
