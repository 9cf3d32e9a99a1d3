"""Random GGUF blocks for testing quantized kernels (`luminal.quant`) against a reference
decoder: every byte random except the f16 scales, which are finite (with subnormals, both
signs and a wide range of magnitudes), as in any real file."""

from __future__ import annotations

import numpy as np

from ..quant import block_format

# byte offsets of each format's f16 scales within a block
HALF_OFFSETS = {"q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,), "q4_k": (0, 2),
                "q5_k": (0, 2), "q6_k": (208,)}


def random_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 (rows, row_bytes) holding a random `qtype` matrix of `cols` columns."""
    fmt = block_format(qtype)
    blocks = cols // fmt.block_size
    raw = rng.integers(0, 256, (rows, blocks, fmt.type_size), dtype=np.uint8)
    for at in HALF_OFFSETS[fmt.key]:
        magnitude = 10.0 ** rng.integers(-7, 2, (rows, blocks))
        scales = (rng.standard_normal((rows, blocks)) * magnitude).astype("<f2")
        raw[..., at:at + 2] = scales[..., None].view(np.uint8).reshape(rows, blocks, 2)
    return raw.reshape(rows, -1)


def _scaled_blocks(x: np.ndarray, block: int, top: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (float32) cut into blocks of `block` along its last axis, each block's max|x| and
    the float32 factor `top / max|x|` (0 for an all-zero block) that scales it to +-top."""
    x = np.asarray(x, np.float32)
    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = np.abs(blocks).max(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(top) / amax, np.float32(0)).astype(np.float32)
    return blocks, amax, inv


def int8_activations(x: np.ndarray, block: int) -> np.ndarray:
    """x (float32, last axis a multiple of `block`) rounded to int8 blocks as a backend's
    quantized matvec with int8 activations does (llama.cpp's Q8_0 / Q8_K for x): per block,
    `d = max|x| / 127` and `q = rint(x * (127 / max|x|))`, in float32; returns `d * q` in
    float64, the activations whose exact product with the dequantized weights such a kernel
    computes up to float32 rounding."""
    blocks, amax, inv = _scaled_blocks(x, block, 127)
    q = np.rint(blocks * inv)
    d = (amax / np.float32(127)).astype(np.float32)
    return (d.astype(np.float64) * q.astype(np.float64)).reshape(np.shape(x))


def int16_activations(x: np.ndarray, block: int) -> np.ndarray:
    """x (float32, last axis a multiple of `block`) as luminal-cpu's int16 activations hold it:
    per block `d = max|x| / 32767` (float32) and two int16 digits per value, `q1 = rint(s)` and
    `q2 = rint((s - q1) * 32768)` with `s = x * (32767 / max|x|)` (that factor in float32, the
    product in float64); returns `d * (q1 + q2 / 32768)` in float64: x within about 1e-7
    relative (d's rounding) and 4.7e-10 max|x|."""
    blocks, amax, inv = _scaled_blocks(x, block, 32767)
    scaled = blocks.astype(np.float64) * inv.astype(np.float64)
    q1 = np.rint(scaled)
    q2 = np.rint((scaled - q1) * 32768)
    d = (amax / np.float32(32767)).astype(np.float32)
    return (d.astype(np.float64) * (q1 + q2 / 32768)).reshape(np.shape(x))


def int8_triple_activations(x: np.ndarray, block: int) -> np.ndarray:
    """x (float32, last axis a multiple of `block`) as luminal-cpu's decode matvec holds it for
    the 32-value formats under the default (int16) setting (csrc/qgemv16.c): per block
    `T = rint(x * (127 / max|x|) * 65536)` (that factor in float32, the product in float64),
    kept as three signed byte digits, and `d = max|x| / 127` (float32); returns `d * T / 65536`
    in float64: x within about 1e-7 relative (d's rounding) and 6.0e-8 max|x|."""
    blocks, amax, inv = _scaled_blocks(x, block, 127)
    t = np.rint(blocks.astype(np.float64) * inv.astype(np.float64) * 65536)
    d = (amax / np.float32(127)).astype(np.float32)
    return (d.astype(np.float64) * t / 65536).reshape(np.shape(x))


def decode_activations(x: np.ndarray, qtype: str) -> np.ndarray:
    """x as luminal-cpu's decode matvec holds it under the default (int16) setting for `qtype`
    weights in GGUF's layout (Q8_0 only in the packed layout: in GGUF's its kernel takes
    float32 x): three byte digits per value for the 32-value formats, two int16 digits for the
    K-quants. In the packed layout every format takes three byte digits per block of its own
    size: `int8_triple_activations(x, block)` (K-quants: 256)."""
    from luminal.quant import BLOCK_FORMATS

    block = BLOCK_FORMATS[qtype].block_size
    return int8_triple_activations(x, block) if block == 32 else int16_activations(x, block)


def int8_digit_activations(x: np.ndarray, block: int, digits: int = 3) -> np.ndarray:
    """x (float32, last axis a multiple of `block`) as luminal-cpu's prefill GEMM holds it
    (csrc/qgemm8.c), in float64: per block `t = x * (127 / max|x|)` (float32) and
    `d = max|x| / 127 / 256` (float32).

    `digits=2` (the default `int16` setting): `T = rint(256 t)` (two byte digits, `T >> 8` and
    `T & 255`); returns `d * T`, x within 1.5e-5 max|x|. `digits=3` (the float-like `int24`
    setting): `q1 = floor(t)`, `u2 = min(floor(256 (t - q1)), 255)` and
    `u3 = min(rint(256 (256 (t - q1) - u2)), 255)`; returns `d * (256 q1 + u2 + u3 / 256)`, x
    within about 1.8e-7 max|x|."""
    if digits not in (2, 3):
        raise ValueError(f"digits must be 2 or 3, not {digits!r}")
    blocks, amax, inv = _scaled_blocks(x, block, 127)
    t = (blocks * inv).astype(np.float32)
    d = (amax / np.float32(127) / np.float32(256)).astype(np.float32)
    if digits == 2:
        kept = np.rint(t * np.float32(256)).astype(np.float64)
    else:
        q1 = np.floor(t)
        f1 = ((t - q1) * np.float32(256)).astype(np.float32)
        u2 = np.minimum(np.floor(f1), np.float32(255))
        u3 = np.minimum(np.rint((f1 - u2) * np.float32(256)), np.float32(255))
        kept = q1.astype(np.float64) * 256 + u2 + u3.astype(np.float64) / 256
    return (d.astype(np.float64) * kept).reshape(np.shape(x))
