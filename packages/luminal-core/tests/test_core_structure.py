"""Core's shape as a library: no import cycles, plugins only use public names, and the traps a
new user met (names that are modules, escaped labels, silent fallbacks) stay fixed."""

from __future__ import annotations

import ast
import inspect
import pydoc
import shutil
import subprocess
from pathlib import Path

import luminal as lm
import numpy as np
import pytest

CORE = Path(lm.__file__).parent
PACKAGES = Path(__file__).resolve().parents[2]
# luminal-codegen: the layer above core that generated-code backends share
CODEGEN = PACKAGES / "luminal-codegen" / "src" / "luminal_codegen"
LOWER_LAYERS = ("luminal", "luminal_codegen")


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(root: Path, path: Path, modules: set[str]) -> set[str]:
    """Modules of `root`'s package that `path` imports when it runs (at module level or inside
    functions); imports under `if TYPE_CHECKING:` never run and are skipped."""
    tree = ast.parse(path.read_text(), str(path))
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    me = _module_name(root, path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from . import ops` imports the submodule `ops`
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in modules else module)
    return {m for m in found if m in modules and m != me}


def import_cycles(root: Path) -> list[list[str]]:
    """Every set of modules of the package at `root` that import each other in a circle."""
    files = {_module_name(root, p): p for p in root.rglob("*.py")}
    edges = {m: _imported_modules(root, p, set(files)) for m, p in files.items()}
    cycles: list[list[str]] = []
    for start in sorted(edges):
        seen, stack = {start}, [start]
        while stack:  # everything `start` reaches; a cycle when it reaches itself
            for nxt in edges[stack.pop()]:
                if nxt == start:
                    cycles.append(start)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
    return [sorted(set(cycles))] if cycles else []


@pytest.mark.parametrize("root", [CORE, CODEGEN], ids=lambda r: r.name)
def test_core_and_codegen_have_no_import_cycles(root: Path):
    assert import_cycles(root) == []


def test_core_never_imports_codegen():
    """Core is the lower layer: luminal-codegen depends on it, never the other way round."""
    imports = [(p, ast.unparse(n)) for p in CORE.rglob("*.py")
               for n in ast.walk(ast.parse(p.read_text()))
               if isinstance(n, ast.Import | ast.ImportFrom)]
    found = [f"{p}: {line}" for p, line in imports if "luminal_codegen" in line]
    assert found == []


def test_import_cycle_check_catches_a_cycle(tmp_path: Path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")  # lazy counts too
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "d.py").write_text("from . import c\n")
    assert import_cycles(pkg) == [["pkg.a", "pkg.sub.b"]]


def private_core_imports(path: Path) -> list[str]:
    """`from luminal... import _name` and `import luminal._module` in a file (and the same for
    `luminal_codegen`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] in LOWER_LAYERS:
                names = [a.name for a in node.names] + parts[1:]
                found += [f"{node.module}: {n}" for n in names if n.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in LOWER_LAYERS
                      and any(p.startswith("_") for p in a.name.split(".")[1:])]
    return [f"{path}:{f}" for f in found]


def test_no_plugin_imports_a_private_name_of_core():
    sources = [p for pkg in PACKAGES.glob("luminal-*") if pkg.name != "luminal-core"
               for p in (pkg / "src").rglob("*.py")]
    assert sources, f"no plugin sources under {PACKAGES}"
    assert [f for p in sources for f in private_core_imports(p)] == []


def test_private_import_check_catches_one(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("from luminal_codegen.render import Dialect, _Hidden\nimport luminal._x\n"
                   "from luminal.ir import _Node\nfrom luminal_cpu import _fine\n")
    assert private_core_imports(bad) == [
        f"{bad}:luminal_codegen.render: _Hidden", f"{bad}:luminal._x", f"{bad}:luminal.ir: _Node"]


# --------------------------------------------------------------------------- new-user traps


def test_registry_lookups_are_functions_not_modules():
    for lookup in (lm.backend, lm.backends, lm.compiler, lm.compilers):
        assert inspect.isfunction(lookup), lookup
    assert isinstance(lm.compiler("generic"), lm.GenericCompiler)
    assert "generic" in [c.name for c in lm.compilers()]
    assert "reference" in [b.name for b in lm.backends()]


def test_to_dot_labels_break_lines_instead_of_printing_backslash_n():
    g = lm.Graph()
    x = g.tensor((2, 3), name='say "hi"')
    (x * 2).retrieve()
    dot = g.to_dot()
    assert '[label="Input say \\"hi\\"\\nfloat32(2, 3)"]' in dot
    assert "\\\\n" not in dot
    if shutil.which("dot"):  # as graphviz draws it: one text line each, no backslash
        svg = subprocess.run(["dot", "-Tsvg"], input=dot, text=True, check=True,
                             capture_output=True).stdout
        assert ">Mul</text>" in svg and ">float32(2, 3)</text>" in svg
        assert "\\" not in svg


def test_help_of_graph_methods_shows_docstrings():
    for name in ("to_dot", "display", "compile", "execute", "tensor", "arange", "full", "eye"):
        text = pydoc.render_doc(getattr(lm.Graph, name), renderer=pydoc.plaintext)
        assert "-----" not in text, (name, text)
        assert getattr(lm.Graph, name).__doc__, name


def test_execute_without_a_backend_warns_and_runs_the_reference():
    g = lm.Graph()
    y = (g.tensor((2,), name="x").set([1.0, 2.0]) * 3).retrieve()
    with pytest.warns(UserWarning, match="no backend was compiled.*reference backend"):
        g.execute()
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])


def test_execute_with_an_explicit_reference_backend_is_silent(recwarn):
    g = lm.Graph()
    y = (g.tensor((2,), name="x").set([1.0, 2.0]) * 3).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    g.execute()
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])
    assert not [w for w in recwarn if "no backend" in str(w.message)]


def test_backend_before_a_compiler_that_changes_the_graph_is_refused():
    g = lm.Graph()
    x = g.tensor((2,), name="x").set([1.0, 2.0])
    y = ((x + 0) * 1 + x * 1).retrieve()  # GenericCompiler simplifies and merges these
    with pytest.raises(ValueError, match=r"after the backend changed the graph.*backend last"):
        g.compile((lm.backend("reference"), lm.GenericCompiler()))
    g.compile((lm.GenericCompiler(), lm.backend("reference")))
    g.execute()
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])


def test_functional_says_where_it_moved():
    with pytest.raises(AttributeError, match=r"luminal_nn\.functional.*pip install luminal-nn"):
        lm.functional  # noqa: B018
    with pytest.raises(ImportError, match=r"luminal_nn\.functional.*pip install luminal-nn"):
        import luminal.functional  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        lm.nonsense  # noqa: B018


def test_ir_graph_without_runtime_says_to_compile():
    from luminal.ir import Graph as IRGraph

    with pytest.raises(RuntimeError, match="no backend was compiled"):
        IRGraph().execute()
