"""Writing small CTranslate2 `model.bin` files for the reader and loader tests."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

DTYPE_CODES = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2,
               np.dtype("int32"): 3, np.dtype("float16"): 4}


def ct2_string(text: str) -> bytes:
    raw = text.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(path: Path, variables: dict[str, np.ndarray], aliases: dict[str, str] | None = None,
              spec: str = "WhisperSpec", version: int = 6, revision: int = 3) -> Path:
    """A model.bin holding `variables` (in order) and `aliases`."""
    out = [struct.pack("<I", version), ct2_string(spec), struct.pack("<II", revision,
                                                                      len(variables))]
    for name, value in variables.items():
        value = np.array(value, order="C")  # ascontiguousarray would make a scalar 1-D
        out += [ct2_string(name), struct.pack(f"<B{value.ndim}I", value.ndim, *value.shape),
                struct.pack("<BI", DTYPE_CODES[value.dtype], value.nbytes), value.tobytes()]
    aliases = aliases or {}
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [ct2_string(alias), ct2_string(target)]
    path.write_bytes(b"".join(out))
    return path


def tiny_whisper_variables(d: int = 8, heads: int = 2, n_mels: int = 4, vocab: int = 16,
                           seed: int = 0) -> dict[str, np.ndarray]:
    """Every variable of a one-layer encoder and decoder Whisper, random float16, named as
    CTranslate2's WhisperSpec (fused QKV and cross-attention KV)."""
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float16)

    def block(prefix: str, cross: bool) -> dict[str, np.ndarray]:
        out = {f"{prefix}/self_attention/layer_norm/gamma": w(d),
               f"{prefix}/self_attention/layer_norm/beta": w(d),
               f"{prefix}/self_attention/linear_0/weight": w(3 * d, d),
               f"{prefix}/self_attention/linear_0/bias": w(3 * d),
               f"{prefix}/self_attention/linear_1/weight": w(d, d),
               f"{prefix}/self_attention/linear_1/bias": w(d)}
        if cross:
            out |= {f"{prefix}/attention/layer_norm/gamma": w(d),
                    f"{prefix}/attention/layer_norm/beta": w(d),
                    f"{prefix}/attention/linear_0/weight": w(d, d),
                    f"{prefix}/attention/linear_0/bias": w(d),
                    f"{prefix}/attention/linear_1/weight": w(2 * d, d),
                    f"{prefix}/attention/linear_1/bias": w(2 * d),
                    f"{prefix}/attention/linear_2/weight": w(d, d),
                    f"{prefix}/attention/linear_2/bias": w(d)}
        return out | {f"{prefix}/ffn/layer_norm/gamma": w(d), f"{prefix}/ffn/layer_norm/beta": w(d),
                      f"{prefix}/ffn/linear_0/weight": w(4 * d, d),
                      f"{prefix}/ffn/linear_0/bias": w(4 * d),
                      f"{prefix}/ffn/linear_1/weight": w(d, 4 * d),
                      f"{prefix}/ffn/linear_1/bias": w(d)}

    return {
        "decoder/embeddings/weight": w(vocab, d),
        **block("decoder/layer_0", cross=True),
        "decoder/layer_norm/gamma": w(d), "decoder/layer_norm/beta": w(d),
        "decoder/num_heads": np.array(heads, np.int16),
        "decoder/position_encodings/encodings": w(16, d),
        "encoder/conv1/weight": w(d, n_mels, 3), "encoder/conv1/bias": w(d),
        "encoder/conv2/weight": w(d, d, 3), "encoder/conv2/bias": w(d),
        **block("encoder/layer_0", cross=False),
        "encoder/layer_norm/gamma": w(d), "encoder/layer_norm/beta": w(d),
        "encoder/num_heads": np.array(heads, np.int16),
        "encoder/position_encodings/encodings": w(1500, d),
    }


TIED = {"decoder/projection/weight": "decoder/embeddings/weight"}
