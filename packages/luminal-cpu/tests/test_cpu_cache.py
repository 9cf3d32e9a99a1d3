"""The on-disk library cache: hits load without compiling; corrupt entries are rebuilt."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import luminal as lm
import numpy as np
import pytest
from luminal_cpu import CpuBackend, toolchain


@pytest.fixture
def cache(fresh_cache):
    return fresh_cache / "cpu"


def compile_and_run():
    g = lm.Graph()
    a = g.tensor((4, 5))
    out = ((a * 3).exp2().sum(-1)).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    x = np.arange(20, dtype=np.float32).reshape(4, 5) / 10
    a.set(x)
    g.execute()
    np.testing.assert_allclose(out.numpy(), np.exp2(x * 3).sum(-1), rtol=1e-6)
    return g.runtime


def test_second_compile_loads_from_cache(cache):
    first = compile_and_run()
    second = compile_and_run()
    assert not first.stats["cached"] and second.stats["cached"]
    assert first.library.path == second.library.path
    assert sorted(p.suffix for p in cache.iterdir() if p.name.startswith(first.library.path.stem)) \
        == [".c", ".sha256", ".so"]


def _replace(path: Path, data: bytes) -> None:
    # a new file, as another process or a disk error would leave it: truncating a library
    # this process has mapped would crash it, which is not the scenario under test
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


FRESH_PROCESS = """
import sys
sys.path.insert(0, {here!r})
from test_cpu_cache import compile_and_run
print(compile_and_run().stats["cached"])
"""


@pytest.mark.parametrize("damage", ["truncated", "garbage with a valid checksum"])
def test_corrupt_entry_is_rebuilt(cache, damage):
    path = compile_and_run().library.path
    if damage == "truncated":
        _replace(path, path.read_bytes()[:1000])
    else:
        garbage = b"\x7fELF but not a library"
        _replace(path, garbage)
        _replace(path.with_suffix(".sha256"), hashlib.sha256(garbage).hexdigest().encode())
    # a fresh process: this one keeps the library it loaded (dlopen matches by name)
    script = FRESH_PROCESS.format(here=str(Path(__file__).parent))
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, env=os.environ) for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [["False"], ["True"]]


def test_cache_key_depends_on_source_and_compiler():
    cc = toolchain.compiler()
    other = toolchain.Compiler(cc.argv, cc.version + " (patched)", cc.openmp)
    assert toolchain.cache_key("int x;", cc) != toolchain.cache_key("int y;", cc)
    assert toolchain.cache_key("int x;", cc) != toolchain.cache_key("int x;", other)
    flagged = toolchain.Compiler((*cc.argv, "-mno-avx512f"), cc.version, cc.openmp)
    assert toolchain.cache_key("int x;", cc) != toolchain.cache_key("int x;", flagged)


def _fresh_process_cached() -> list[str]:
    script = FRESH_PROCESS.format(here=str(Path(__file__).parent))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=False, env=os.environ)
    assert run.returncode == 0, run.stderr  # a signal (SIGBUS) would show as a negative code
    return run.stdout.split()


def test_library_cut_short_with_a_matching_checksum_is_rebuilt_not_mapped(cache):
    path = compile_and_run().library.path
    short = path.read_bytes()[: path.stat().st_size // 2]
    _replace(path, short)
    _replace(path.with_suffix(".sha256"), hashlib.sha256(short).hexdigest().encode())
    assert _fresh_process_cached() == ["False"]
    assert _fresh_process_cached() == ["True"]


def test_library_of_another_graph_under_this_key_is_not_trusted(cache):
    path = compile_and_run().library.path
    g = lm.Graph()
    a = g.tensor((4, 5))
    (a + 1).retrieve()
    g.compile((lm.GenericCompiler(), CpuBackend()))
    other = g.runtime.library.path
    assert other != path
    _replace(path, other.read_bytes())
    _replace(path.with_suffix(".sha256"), other.with_suffix(".sha256").read_bytes())
    # the fresh process checks its result against NumPy, so a trusted wrong entry fails it
    assert _fresh_process_cached() == ["False"]


def test_entry_path_taken_by_a_directory_builds_uncached(cache):
    path = compile_and_run().library.path
    path.unlink()
    path.mkdir()
    with pytest.warns(RuntimeWarning, match="cannot store a compiled library"):
        runtime = compile_and_run()
    assert not runtime.stats["cached"] and runtime.library.path != path


def test_elf_check_rejects_cut_libraries(cache):
    data = compile_and_run().library.path.read_bytes()
    assert toolchain._elf_complete(data)
    assert not any(toolchain._elf_complete(data[:n]) for n in (0, 63, 64, len(data) // 2,
                                                                len(data) - 1))


# a library of two translation units, as the runtime's (`build_units`): the second defines a
# hidden function the first calls (linked across units, not exported)
UNITS = [
    ("entry.c", '__attribute__((visibility("hidden"))) int lm_t_twice(int x);\n'
                "int lm_t_entry(int x) { return lm_t_twice(x) + 1; }\n"),
    ("twice.c", '__attribute__((visibility("hidden"))) int lm_t_twice(int x) { return 2 * x; }\n'),
]


def test_units_build_once_into_one_cached_library(cache, capsys):
    cc = toolchain.compiler()
    first = toolchain.build_units(UNITS, cc, announce="building the units")
    assert capsys.readouterr().err == "building the units\n"
    assert not first.cached and first.handle.lm_t_entry(20) == 41
    assert not hasattr(first.handle, "lm_t_twice")  # hidden: linked, not exported
    second = toolchain.build_units(UNITS, cc, announce="building the units")
    assert second.cached and second.path == first.path
    assert capsys.readouterr().err == ""  # nothing compiled, nothing said
    # the entry's files are a single unit's; its source holds every unit, each by name
    assert sorted(p.suffix for p in cache.iterdir() if p.name.startswith(first.path.stem)) \
        == [".c", ".sha256", ".so"]
    source = first.path.with_suffix(".c").read_text()
    assert all(name in source and text in source for name, text in UNITS)
    # every unit is part of the key
    changed = [UNITS[0], ("twice.c", UNITS[1][1].replace("2 * x", "3 * x"))]
    third = toolchain.build_units(changed, cc)
    assert not third.cached and third.path != first.path and third.handle.lm_t_entry(20) == 61


@pytest.mark.parametrize("damage", ["truncated", "garbage with a valid checksum",
                                    "another build's library and checksum"])
def test_corrupt_units_entry_is_rebuilt(cache, damage):
    cc = toolchain.compiler()
    path = toolchain.build_units(UNITS, cc).path
    if damage == "truncated":
        _replace(path, path.read_bytes()[:1000])
    elif damage == "garbage with a valid checksum":
        garbage = b"\x7fELF but not a library"
        _replace(path, garbage)
        _replace(path.with_suffix(".sha256"), hashlib.sha256(garbage).hexdigest().encode())
    else:  # the key compiled into the first unit tells them apart
        other = toolchain.build_units([UNITS[0], (UNITS[1][0], UNITS[1][1] + "int x;\n")], cc)
        _replace(path, other.path.read_bytes())
        _replace(path.with_suffix(".sha256"), other.path.with_suffix(".sha256").read_bytes())
    # the damage is found before the library is loaded: this process may check it
    rebuilt = toolchain.build_units(UNITS, cc)
    assert not rebuilt.cached and rebuilt.path == path
    assert toolchain.build_units(UNITS, cc).cached


def test_compile_error_names_its_unit(cache):
    before = set(cache.iterdir())
    broken = [*UNITS, ("broken.c", "int lm_t_broken(int x) { return x +; }\n")]
    with pytest.raises(toolchain.CompileError, match=r"C compiler failed on broken\.c") as err:
        toolchain.build_units(broken, toolchain.compiler())
    assert "entry.c" not in str(err.value) and set(cache.iterdir()) == before


# a compiler that crashes on a source holding CRASH unless the ICE retry's flags are given, and
# logs each command it runs
CRASHING_CC = """#!{python}
import subprocess, sys
source = sys.stdin.read() if "-" in sys.argv else None
with open({log!r}, "a") as log:
    print(" ".join(sys.argv[1:]), file=log)
if source and "CRASH" in source and "-fno-tree-slp-vectorize" not in sys.argv:
    sys.exit("<stdin>:1: internal compiler error: in vectorizable_live_operation")
sys.exit(subprocess.run([{cc!r}, *sys.argv[1:]], input=source, text=True).returncode)
"""


def test_ice_retry_applies_per_unit(cache, tmp_path):
    cc = toolchain.compiler()
    script, log = tmp_path / "crashing-cc", tmp_path / "log"
    script.write_text(CRASHING_CC.format(python=sys.executable, log=str(log), cc=cc.argv[0]))
    script.chmod(0o755)
    crashing = toolchain.Compiler((str(script), *cc.argv[1:]), cc.version, cc.openmp,
                                  cc.vector_math)
    units = [UNITS[0], (UNITS[1][0], UNITS[1][1] + "/* CRASH */\n")]
    lib = toolchain.build_units(units, crashing)
    assert lib.handle.lm_t_entry(1) == 3
    retried = [line for line in log.read_text().splitlines() if "-fno-tree-slp-vectorize" in line]
    assert len(retried) == 1  # the crashing unit only, once
