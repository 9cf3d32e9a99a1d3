"""A GGUF file's skeleton: its header alone, and a stand-in file with the same header and
random (valid) weights in the same tensor types.

    python scripts/gguf_skeleton.py strip MODEL.gguf SKELETON.gguf.gz  # header, data zeroed
    python scripts/gguf_skeleton.py fill SKELETON.gguf.gz OUT.gguf     # same shapes, random data

Speed does not depend on the weights' values, so a GPU session can benchmark and profile a
model of exactly the real one's shapes, quant types, vocabulary and metadata without carrying
its weights to a machine with a small transfer limit. Such a file serves speed figures and
comparisons of one backend with another on the same weights (`test_gemma3_cuda.py`): its
tokens mean nothing.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

import numpy as np
from luminal.quant import quant_format
from luminal.testing.quant import HALF_OFFSETS
from luminal_models.gguf_header import parse_header

# the f16 scales of random blocks: small and of both signs, as in a real model's weights
SCALES = (0.002, -0.015)
KNOWN = ("F32", "F16", *(k.upper() for k in HALF_OFFSETS))


def _header(path: Path):
    with path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        return parse_header(f, size, path)


def strip(src: Path, dst: Path) -> None:
    """`src` with its data zeroed, gzipped (the zeros compress to almost nothing)."""
    header = _header(src)
    size = src.stat().st_size
    with src.open("rb") as f, gzip.open(dst, "wb") as out:
        out.write(f.read(header.data_start))
        zeros = bytes(1 << 20)
        for start in range(header.data_start, size, len(zeros)):
            out.write(zeros[: min(len(zeros), size - start)])
    print(f"{dst}: {dst.stat().st_size} bytes ({header.data_start} header bytes of {src.name})")


def _random_tensor(ggml_type: int, nbytes: int, rng: np.random.Generator) -> bytes:
    """`nbytes` of random values of a GGUF tensor type: F32 near 1 (norm weights), F16 near 0,
    and blocks of any `luminal.quant` format with random quants and f16 scales `SCALES`
    (values up to 0.26 in the 32-value formats; the K-quants' sub-scales multiply them, to
    at most 2.8 in Q4_K, 4.9 in Q5_K and 8.2 in Q6_K)."""
    fmt = quant_format(int(ggml_type))
    if fmt.key == "f32":
        return (1.0 + 0.02 * rng.standard_normal(nbytes // 4)).astype(np.float32).tobytes()
    if fmt.key == "f16":
        return (0.02 * rng.standard_normal(nbytes // 2)).astype(np.float16).tobytes()
    blocks = rng.integers(0, 256, (nbytes // fmt.type_size, fmt.type_size), dtype=np.uint8)
    for at, scale in zip(HALF_OFFSETS[fmt.key], SCALES):
        blocks[:, at:at + 2] = np.array([scale], np.float16).view(np.uint8)
    return blocks.tobytes()


def fill(skeleton: Path, dst: Path, seed: int = 0) -> None:
    with gzip.open(skeleton, "rb") as f, dst.open("wb") as out:
        shutil.copyfileobj(f, out, 1 << 20)
    header = _header(dst)
    rng = np.random.default_rng(seed)
    with dst.open("r+b") as out:
        for t in header.tensors:
            try:
                data = _random_tensor(t.ggml_type, t.nbytes, rng)
            except (KeyError, ValueError):
                sys.exit(f"{skeleton}: tensor {t.name} has ggml type {t.ggml_type.name}, which "
                         f"this script cannot fill (it knows {', '.join(KNOWN)})")
            out.seek(t.offset)
            out.write(data)
    print(f"{dst}: {dst.stat().st_size} bytes, {len(header.tensors)} random tensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["strip", "fill"])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    args = parser.parse_args()
    (strip if args.action == "strip" else fill)(args.src, args.dst)


if __name__ == "__main__":
    main()
