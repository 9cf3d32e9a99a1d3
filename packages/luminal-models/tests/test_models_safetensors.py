"""safetensors loader: round trips, BF16, and corrupt headers that must not allocate."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from luminal_models.safetensors_file import SafetensorsError, SafetensorsFile
from safetensors.numpy import save_file


def _raw_file(path: Path, header: dict, data: bytes) -> Path:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def test_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.normal(size=(3, 5)).astype(np.float32),
        "h": rng.normal(size=(4,)).astype(np.float16),
        "i": np.arange(6, dtype=np.int64).reshape(2, 3),
    }
    path = tmp_path / "m.safetensors"
    save_file(arrays, str(path), metadata={"format": "np"})
    f = SafetensorsFile(path)
    assert f.metadata == {"format": "np"}
    assert set(f.tensors) == set(arrays)
    for name, a in arrays.items():
        info = f.tensors[name]
        assert info.shape == a.shape and info.nbytes == a.nbytes
        got = f.tensor(name)
        assert got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)
    assert f.tensors["w"].dtype == "F32"
    with pytest.raises(SafetensorsError, match=r"no tensor named 'x'"):
        f.tensor("x")


def test_bf16_is_widened_to_float32(tmp_path: Path) -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    path = _raw_file(
        tmp_path / "b.safetensors",
        {"b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}},
        bits.tobytes(),
    )
    got = SafetensorsFile(path).tensor("b")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, values.reshape(2, 2))


def test_missing_and_short_files(tmp_path: Path) -> None:
    with pytest.raises(SafetensorsError, match=r"nope\.safetensors: no such file"):
        SafetensorsFile(tmp_path / "nope.safetensors")
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError, match="truncated file"):
        SafetensorsFile(short)


def test_huge_header_length_is_rejected_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 60) + b"{}")
    with pytest.raises(SafetensorsError, match=r"header length field says 1152921504606846976"):
        SafetensorsFile(path)


def test_garbage_header(tmp_path: Path) -> None:
    path = tmp_path / "g.safetensors"
    path.write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[")
    with pytest.raises(SafetensorsError, match="not valid JSON"):
        SafetensorsFile(path)
    _raw_file(path, {"t": {"dtype": "F32", "shape": [2]}}, b"")
    with pytest.raises(SafetensorsError, match="tensor 't': malformed header entry"):
        SafetensorsFile(path)
    _raw_file(path, {"t": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(SafetensorsError, match="unknown dtype 'Q9'"):
        SafetensorsFile(path)
    _raw_file(path, {"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(SafetensorsError, match=r"F32 shape \(3,\) needs 12 bytes but .* span 8"):
        SafetensorsFile(path)


def test_truncated_data(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    save_file({"a": np.ones(4, np.float32), "b": np.ones(1000, np.float32)}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(
        SafetensorsError,
        match=r"tensor 'b': truncated file: its data spans bytes \d+\.\.\d+ but the file has only",
    ):
        SafetensorsFile(path)


def test_tensors_are_read_only_copies(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    save_file({"w": w, "empty": np.zeros((0, 4), np.float16)}, str(path))
    with SafetensorsFile(path) as f:
        got = f.tensor("w")
        again = f.tensor("w")
        empty = f.tensor("empty")
    path.write_bytes(b"")  # the copies do not depend on the file any more
    np.testing.assert_array_equal(got, w)
    assert not np.shares_memory(got, again) and not got.flags.writeable
    assert empty.shape == (0, 4) and empty.dtype == np.float16
    with pytest.raises(SafetensorsError, match=r"tensor 'w': the file has been closed"):
        f.tensor("w")


def test_file_truncated_after_open_fails_naming_file_and_tensor(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    save_file({"a": np.ones(4, np.float32), "b": np.ones(1000, np.float32)}, str(path))
    f = SafetensorsFile(path)
    np.testing.assert_array_equal(f.tensor("a"), np.ones(4, np.float32))
    with open(path, "r+b") as out:
        out.truncate(path.stat().st_size - 100)
    with pytest.raises(
        SafetensorsError,
        match=rf"^{re.escape(str(path))}: tensor 'b': truncated file: its data spans bytes "
        r"\d+\.\.\d+ but the file has only \d+ bytes",
    ):
        f.tensor("b")
    np.testing.assert_array_equal(f.tensor("a"), np.ones(4, np.float32))
