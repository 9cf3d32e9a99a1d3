"""A GGUF file's skeleton: its header alone, and a stand-in file with the same header and
random (valid) weights in the same tensor types.

    python scripts/gguf_skeleton.py strip MODEL.gguf SKELETON.gguf.gz  # header, data zeroed
    python scripts/gguf_skeleton.py fill SKELETON.gguf.gz OUT.gguf     # same shapes, random data

Speed does not depend on the weights' values, so a GPU session can benchmark and profile a
model of exactly the real one's shapes, quant types, vocabulary and metadata without carrying
its weights to a machine with a small transfer limit. Results on such a file are speed only:
its tokens mean nothing.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

import numpy as np
from luminal_models.gguf_header import parse_header

# bytes per 32-value block of the block types, and where the f16 scale fields end
BLOCKS = {"Q8_0": (34, 2), "Q4_0": (18, 2), "Q4_1": (20, 4)}
GGML_TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0"}


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


def _random_tensor(type_name: str, nbytes: int, rng: np.random.Generator) -> bytes:
    if type_name == "F32":
        return (1.0 + 0.02 * rng.standard_normal(nbytes // 4)).astype(np.float32).tobytes()
    if type_name == "F16":
        return (0.02 * rng.standard_normal(nbytes // 2)).astype(np.float16).tobytes()
    block, scales = BLOCKS[type_name]
    data = rng.integers(0, 256, (nbytes // block, block), dtype=np.uint8)
    fields = np.array([0.002, -0.015][: scales // 2], np.float16).view(np.uint8)
    data[:, :scales] = fields
    return data.tobytes()


def fill(skeleton: Path, dst: Path, seed: int = 0) -> None:
    with gzip.open(skeleton, "rb") as f, dst.open("wb") as out:
        shutil.copyfileobj(f, out, 1 << 20)
    header = _header(dst)
    rng = np.random.default_rng(seed)
    with dst.open("r+b") as out:
        for t in header.tensors:
            name = GGML_TYPE_NAMES.get(t.ggml_type)
            if name is None:
                sys.exit(f"{skeleton}: tensor {t.name} has ggml type {t.ggml_type}, which "
                         f"this script cannot fill (it knows {sorted(GGML_TYPE_NAMES.values())})")
            out.seek(t.offset)
            out.write(_random_tensor(name, t.nbytes, rng))
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
