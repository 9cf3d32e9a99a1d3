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
