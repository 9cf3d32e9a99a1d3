"""luminal-metal as an installed plugin: discovery through its entry point, an unavailable
backend that says why on Linux, no PyObjC import when plugins load, and the dialect now living
here rather than in core."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

import luminal as lm
import luminal_codegen
import pytest
from luminal_metal import MetalBackend
from luminal_metal.device import APPLE_SILICON_REQUIRED, NoDeviceError, check_platform

LUMINAL = str(Path(sys.executable).with_name("luminal"))
ON_APPLE_SILICON = sys.platform == "darwin" and __import__("platform").machine() == "arm64"


def test_metal_plugin_registers_the_backend_through_its_entry_point():
    out = subprocess.run([LUMINAL, "plugins", "--json"], capture_output=True, text=True,
                         check=True).stdout
    (plugin,) = [p for p in json.loads(out) if p["name"] == "luminal-metal"]
    assert plugin["error"] is None
    assert plugin["module"] == "luminal_metal.plugin"
    assert plugin["registered"] == {"luminal_register_backends": ["metal"]}


@pytest.mark.skipif(ON_APPLE_SILICON, reason="this machine can run Metal")
def test_metal_backends_cli_says_why_metal_is_unavailable():
    proc = subprocess.run([LUMINAL, "backends"], capture_output=True, text=True, check=True)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("metal ")]
    assert APPLE_SILICON_REQUIRED in line and " no " in line
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.skipif(ON_APPLE_SILICON, reason="this machine can run Metal")
def test_metal_backend_lookup_fails_with_the_reason():
    info = {b.name: b for b in lm.backends()}["metal"]
    assert not info.available and APPLE_SILICON_REQUIRED in info.reason
    with pytest.raises(RuntimeError, match=APPLE_SILICON_REQUIRED):
        lm.backend("metal")


@pytest.mark.parametrize(("system", "machine"), [("linux", "x86_64"), ("darwin", "x86_64"),
                                                 ("win32", "AMD64"), ("linux", "aarch64")])
def test_metal_needs_macos_on_apple_silicon(system, machine):
    with pytest.raises(NoDeviceError, match=f"{APPLE_SILICON_REQUIRED}.*{system}, {machine}"):
        check_platform(system, machine)
    check_platform("darwin", "arm64")  # no error


def test_metal_plugin_loads_without_pyobjc():
    """Loading the plugin and probing on a non-Mac must not import PyObjC (it is macOS-only)."""
    code = ("import sys, luminal_metal.plugin, luminal_metal; "
            "luminal_metal.MetalBackend().probe(); "
            "print([m for m in ('objc', 'Metal', 'Foundation') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]" or ON_APPLE_SILICON


def test_metal_depends_on_pyobjc_only_on_macos():
    (pyobjc,) = [r for r in requires("luminal-metal") if r.startswith("pyobjc-framework-Metal")]
    assert "sys_platform == \"darwin\"" in pyobjc.replace("'", '"')


def test_metal_dialect_left_core():
    assert not hasattr(luminal_codegen, "METAL") and not hasattr(luminal_codegen, "MetalDialect")
    with pytest.raises(ImportError):
        __import__("luminal_codegen.metal")
    assert MetalBackend.name == "metal" and MetalBackend.priority == 200
