"""GGUF block formats: our NumPy codecs against the gguf package's reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as ref
from luminal_models import quants
from luminal_models.quants import BF16, F16, F32, Q4_0, Q4_1, Q8_0, QuantType

BLOCK_TYPES = [Q8_0, Q4_0, Q4_1]
ALL_TYPES = [F32, F16, BF16, *BLOCK_TYPES]


def _ref_type(q: QuantType) -> GGMLQuantizationType:
    return GGMLQuantizationType(q.ggml_type)


def _byte_shape(q: QuantType, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-1], shape[-1] // q.block_size * q.type_size)


def _ref_dequantize(raw: np.ndarray, q: QuantType, shape: tuple[int, ...]) -> np.ndarray:
    data = raw.reshape(_byte_shape(q, shape))
    if q is F32:
        data = raw.view(np.float32).reshape(shape)
    elif q is F16:
        data = raw.view(np.float16).reshape(shape)
    return np.asarray(ref.dequantize(data, _ref_type(q)), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("q", ALL_TYPES, ids=str)
def test_layout_constants_match_ggml(q: QuantType) -> None:
    from gguf.constants import GGML_QUANT_SIZES

    assert GGML_QUANT_SIZES[_ref_type(q)] == (q.block_size, q.type_size)
    assert _ref_type(q).name == q.name


@pytest.mark.parametrize("q", BLOCK_TYPES, ids=str)
def test_dequantize_random_bytes_matches_gguf(q: QuantType) -> None:
    rng = np.random.default_rng(q.ggml_type)
    shape = (5, 3, 4 * q.block_size)
    raw = rng.integers(0, 256, size=quants.nbytes(q, shape), dtype=np.uint8)
    # Keep the f16 scales finite so the comparison is about the decoding, not NaN arithmetic.
    blocks = raw.reshape(-1, q.type_size)
    scale_bytes = 4 if q is Q4_1 else 2
    scales = rng.normal(0, 0.05, size=(blocks.shape[0], scale_bytes // 2)).astype("<f2")
    blocks[:, :scale_bytes] = scales.view(np.uint8)
    ours = quants.dequantize(raw, q, shape)
    assert ours.dtype == np.float32 and ours.shape == shape
    np.testing.assert_array_equal(ours, _ref_dequantize(raw, q, shape))


@pytest.mark.parametrize("q", ALL_TYPES, ids=str)
def test_quantize_is_bit_identical_to_gguf(q: QuantType) -> None:
    rng = np.random.default_rng(100 + q.ggml_type)
    x = rng.normal(0, 1, size=(6, 8 * 32)).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block takes the d == 0 path
    x[1, :32] *= 1e-3
    ours = quants.quantize(x, q)
    assert ours.dtype == np.uint8 and ours.size == quants.nbytes(q, x.shape)
    expected = np.ascontiguousarray(ref.quantize(x, _ref_type(q))).view(np.uint8).reshape(-1)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(
        quants.dequantize(ours, q, x.shape), _ref_dequantize(ours, q, x.shape)
    )


@pytest.mark.parametrize("q", BLOCK_TYPES, ids=str)
def test_round_trip_error_is_within_half_a_step(q: QuantType) -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(-3, 3, size=(16, 64)).astype(np.float32)
    y = quants.dequantize(quants.quantize(x, q), q, x.shape)
    blocks = x.reshape(-1, 32)
    if q is Q8_0:
        step = np.abs(blocks).max(axis=1) / 127
    elif q is Q4_0:
        step = np.abs(blocks).max(axis=1) / 8
    else:
        step = (blocks.max(axis=1) - blocks.min(axis=1)) / 15
    err = np.abs(y - x).reshape(-1, 32).max(axis=1)
    # Half a step from rounding, plus the f16 rounding of the stored scale (and of m). Q4_0
    # spans -8..7 steps, so values near the far extreme clamp and may lose a whole step.
    steps = 1.0 if q is Q4_0 else 0.5
    assert np.all(err <= step * steps + np.abs(blocks).max(axis=1) * 2e-3 + 1e-6)


def test_q8_0_halves_round_away_from_zero() -> None:
    # amax 127 gives d = 1 exactly, so x*id is x: halves show C roundf, not banker's rounding.
    x = np.zeros((1, 32), np.float32)
    x[0, :6] = [127.0, 2.5, -2.5, 0.5, -0.5, 0.49999997]
    raw = quants.quantize_q8_0(x)
    qs = quants.split_blocks(raw, Q8_0)["qs"][0]
    assert qs[:6].tolist() == [127, 3, -3, 1, -1, 0]
    np.testing.assert_array_equal(raw, ref.quantize(x, GGMLQuantizationType.Q8_0).reshape(-1))


def test_q4_nibble_order_low_then_high() -> None:
    # Q4_1 with d=1, m=0: element i is its nibble, so the layout is visible directly.
    block = np.zeros(20, np.uint8)
    block[:2] = np.array([1.0], "<f2").view(np.uint8)
    block[4:] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)
    y = quants.dequantize(block, Q4_1, (32,))
    assert y[:16].tolist() == list(range(16))
    assert y[16:].tolist() == [15.0] * 16
    q40 = block[np.r_[0:2, 4:20]]  # same nibbles as Q4_0: value = nibble - 8
    assert quants.dequantize(q40, Q4_0, (32,))[:16].tolist() == [i - 8 for i in range(16)]


@pytest.mark.parametrize("q", BLOCK_TYPES, ids=str)
def test_split_blocks_reconstructs_dequantize(q: QuantType) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 96)).astype(np.float32)
    raw = quants.quantize(x, q)
    parts = quants.split_blocks(raw, q)
    n = x.size // 32
    d = parts["d"].astype(np.float32)[:, None]
    assert parts["d"].dtype == np.float16 and parts["d"].shape == (n,)
    if q is Q8_0:
        assert parts["qs"].dtype == np.int8 and parts["qs"].shape == (n, 32)
        y = parts["qs"].astype(np.float32) * d
    else:
        qs = parts["qs"]
        assert qs.dtype == np.uint8 and qs.shape == (n, 16)
        nib = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32)
        y = (nib - 8) * d if q is Q4_0 else nib * d + parts["m"].astype(np.float32)[:, None]
    np.testing.assert_array_equal(y.reshape(x.shape), quants.dequantize(raw, q, x.shape))


def test_dequantize_reads_memory_maps(tmp_path) -> None:
    x = np.random.default_rng(0).normal(size=(3, 64)).astype(np.float32)
    path = tmp_path / "w.bin"
    quants.quantize_q4_1(x).tofile(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    y = quants.dequantize(mm, "Q4_1", x.shape)
    assert type(y) is np.ndarray and y.flags.writeable
    np.testing.assert_array_equal(y, quants.dequantize(np.fromfile(path, np.uint8), Q4_1, x.shape))


def test_bf16_and_f16_pass_through_exactly() -> None:
    x = np.array([1.0, -2.5, 65504.0, 1e-3, np.inf], np.float32)
    np.testing.assert_array_equal(
        quants.dequantize(quants.quantize(x, F16), F16, x.shape),
        x.astype(np.float16).astype(np.float32),
    )
    bf = quants.dequantize(quants.quantize(x, BF16), "BF16", x.shape)
    assert bf[0] == 1.0 and bf[1] == -2.5 and np.isinf(bf[4])


def test_lookup_by_name_and_number() -> None:
    assert quants.quant_type("q4_1") is Q4_1
    assert quants.quant_type(8) is Q8_0
    assert quants.quant_type(GGMLQuantizationType.BF16) is BF16
    assert quants.quant_type("Q4_K").ggml_type == 12  # core's table: K-quants included
    with pytest.raises(KeyError, match="Q2_K"):
        quants.quant_type("Q2_K")
    with pytest.raises(KeyError, match="unsupported"):
        quants.dequantize(np.zeros(84, np.uint8), QuantType("Q2_K", 10, 256, 84), (256,))


def test_size_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        quants.nbytes(Q8_0, (4, 33))
    with pytest.raises(ValueError, match="needs 34 bytes, got 33"):
        quants.dequantize(np.zeros(33, np.uint8), Q8_0, (32,))
    with pytest.raises(TypeError, match="uint8"):
        quants.dequantize(np.zeros(8, np.float32), Q8_0, (32,))
    with pytest.raises(ValueError, match="multiple of 32"):
        quants.quantize_q4_0(np.zeros((2, 40), np.float32))
    with pytest.raises(ValueError, match="not a block"):
        quants.split_blocks(np.zeros(8, np.uint8), F32)
