"""The backend as users meet it: plugin registration, probing, fallback without a compiler."""

from __future__ import annotations

import luminal as lm
import pytest
from luminal import plugins
from luminal.cli import main
from luminal_cpu import CpuBackend, device, plugin, toolchain


@pytest.fixture
def registered():
    """luminal-cpu registered as a plugin (through its entry point when installed)."""
    pm = plugins.get_plugin_manager()
    added = pm.get_plugin("luminal-cpu") is None
    if added:
        pm.register(plugin, name="luminal-cpu")
    yield
    if added:
        pm.unregister(name="luminal-cpu")


@pytest.fixture
def no_compiler(monkeypatch):
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)


def test_backend_is_registered_with_priority_and_device(registered):
    info = {b.name: b for b in lm.backends()}["cpu"]
    assert info.available and info.priority == 100 and info.plugin == "luminal-cpu"
    assert f"{device.cores()} cores" in info.device and device.isa() in info.device
    assert isinstance(lm.backend(), CpuBackend)


def test_probe_without_compiler_says_so(no_compiler):
    status = CpuBackend().probe()
    assert not status.available and "no C compiler" in status.reason


@pytest.fixture
def core_and_cpu_only(monkeypatch):
    """Plugins as `pip install luminal-core luminal-cpu` leaves them (no other backend)."""
    monkeypatch.setenv(plugins.ENV_ALLOW, "luminal-cpu")
    plugins.reset_plugins()
    pm = plugins.get_plugin_manager()
    if pm.get_plugin("luminal-cpu") is None:  # not installed through its entry point
        pm.register(plugin, name="luminal-cpu")
    yield
    monkeypatch.undo()
    plugins.reset_plugins()


def test_without_compiler_best_backend_falls_back_to_reference(core_and_cpu_only, no_compiler,
                                                               capsys):
    assert lm.backend().name == "reference"
    with pytest.raises(RuntimeError, match="no C compiler"):
        lm.backend("cpu")
    assert main(["backends"]) == 0
    assert "no C compiler" in capsys.readouterr().out


def test_compile_without_compiler_raises(no_compiler):
    g = lm.Graph()
    (g.tensor((2,)) * 2).retrieve()
    with pytest.raises(RuntimeError, match="no C compiler"):
        g.compile(CpuBackend())


def test_cc_environment_variable_is_honoured(monkeypatch):
    monkeypatch.setenv("CC", "definitely-not-a-compiler-xyz")
    assert toolchain.find_compiler() is not None  # falls through to gcc / clang / cc
    monkeypatch.setenv("CC", "cc -O0")
    assert toolchain.find_compiler()[1:] == ("-O0",)


def test_compiler_that_cannot_link_is_reported(monkeypatch, tmp_path):
    broken = tmp_path / "brokencc"
    broken.write_text("#!/bin/sh\necho 'fatal: no linker here' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    status = CpuBackend().probe()
    assert not status.available and "no linker here" in status.reason
