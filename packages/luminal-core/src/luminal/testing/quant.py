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
