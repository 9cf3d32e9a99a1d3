"""The conformance kit itself: it catches a wrong backend, and its pytest one-liner and
hardware markers work in a third-party test suite (run here in a fresh pytest process)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import luminal
import pytest
from luminal import ops
from luminal.reference import ReferenceBackend
from luminal.testing import CASES, case_variants, get_case, run_case
from luminal.testing.adapters import LuminalF
from luminal.testing.hardware import PROBES, required_hardware


class MulIsAdd(ReferenceBackend):
    """A broken backend: every Mul runs as an Add."""

    name = "mul-is-add"
    dtypes = ("float32", "int32", "bool")

    def compile(self, graph):
        for node in graph.nodes.values():
            if isinstance(node.op, ops.Mul):
                node.op = ops.Add()
        super().compile(graph)


def test_a_wrong_backend_fails_with_the_case_and_variant_named():
    with pytest.raises(AssertionError, match=r"mul\[permuted\] output 0 vs reference"):
        run_case("mul", MulIsAdd(), "permuted")
    run_case("add", MulIsAdd(), "strided")  # no Mul in this graph: it passes


def test_symbolic_variant_runs_two_sizes_on_one_compiled_graph():
    seen = []

    class Counting(ReferenceBackend):
        def compile(self, graph):
            seen.append(dict(graph.dims))
            super().compile(graph)

    run_case("cumsum", Counting(), "symbolic", compare_to="torch")
    assert len(seen) == 1  # compiled once, executed for n=3 and n=5


def test_float16_variants_only_for_backends_that_declare_it():
    case = get_case("exp")
    assert "float16" in case_variants(case, ReferenceBackend())
    assert "float16" not in case_variants(case, MulIsAdd())


def test_run_case_rejects_unknown_variants_and_targets():
    with pytest.raises(ValueError, match="does not apply"):
        run_case("arange", ReferenceBackend(), "permuted")
    with pytest.raises(ValueError, match="compare_to"):
        run_case("add", ReferenceBackend(), compare_to="numpy")
    with pytest.raises(KeyError, match="no conformance case named 'nope'"):
        run_case("nope")


def test_adapter_refuses_names_outside_the_contract():
    with pytest.raises(AttributeError, match="not part of the conformance adapter"):
        LuminalF(luminal.Graph()).cumprod  # noqa: B018


def test_every_case_runs_on_the_reference_in_every_variant():
    total = sum(len(case_variants(c, ReferenceBackend())) for c in CASES)
    assert total > 900


def test_required_hardware_parsing(monkeypatch):
    monkeypatch.setenv("LUMINAL_REQUIRE_HW", " cuda, mybackend ,")
    assert required_hardware() == {"cuda", "mybackend"}
    monkeypatch.setenv("LUMINAL_REQUIRE_HW", "all")
    assert required_hardware() >= set(PROBES)
    monkeypatch.delenv("LUMINAL_REQUIRE_HW")
    assert required_hardware() == set()
    assert all(isinstance(probe(), bool) for probe in PROBES.values())


THIRD_PARTY_SUITE = '''
import pytest
from luminal import BackendStatus, ops
from luminal.reference import ReferenceBackend
from luminal.testing import conformance_tests


class MulIsAdd(ReferenceBackend):
    name = "mul-is-add"
    dtypes = ("float32", "int32", "bool")

    def compile(self, graph):
        for node in graph.nodes.values():
            if isinstance(node.op, ops.Mul):
                node.op = ops.Add()
        super().compile(graph)


class Absent(ReferenceBackend):
    name = "absent"

    def probe(self):
        return BackendStatus(False, reason="no absent device here")


test_reference = conformance_tests("reference", cases=["add", "conv2d", "sum_dim"])
test_broken = conformance_tests(MulIsAdd(), cases=["mul", "add"], variants=["base"],
                                xfail={"mul-*": "Mul runs as Add"})
test_absent = conformance_tests(Absent(), cases=["add"], variants=["base"])


@pytest.mark.metal
def test_needs_metal():
    pass
'''


def _run_suite(tmp_path: Path, require: str) -> str:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["luminal.testing.pytest_plugin"]\n')
    (tmp_path / "test_mybackend.py").write_text(textwrap.dedent(THIRD_PARTY_SUITE))
    src = Path(luminal.__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": str(src), "LUMINAL_REQUIRE_HW": require}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsx", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    return proc.stdout + proc.stderr


def _counts(output: str) -> dict[str, int]:
    summary = output.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


@pytest.mark.skipif(PROBES["metal"](), reason="this machine has Metal")
def test_one_line_suite_in_a_third_party_repo(tmp_path):
    out = _run_suite(tmp_path, require="")
    # reference: add 7 variants, conv2d 5, sum_dim 6; broken: add passes, mul is an xfail
    assert _counts(out) == {"passed": 19, "skipped": 2, "xfailed": 1}, out
    assert "no metal device" in out and "no absent device here" in out


@pytest.mark.skipif(PROBES["metal"](), reason="this machine has Metal")
def test_required_hardware_turns_skips_into_failures(tmp_path):
    out = _run_suite(tmp_path, require="metal,absent")  # setup failures count as errors
    assert _counts(out) == {"failed": 1, "error": 1, "passed": 19, "xfailed": 1}, out
    assert "required by LUMINAL_REQUIRE_HW" in out
