"""The OpenCL dialect's two half-precision modes. Without `cl_khr_fp16` (PoCL) every float16
test of this suite runs the vload/vstore path for real; the native path needs a device with
the extension, so here its source is checked, and compiled offline for an AMD GPU by clang."""

from __future__ import annotations

import shutil
import subprocess

import luminal as lm
import pytest
from luminal_codegen import lower, render_kernel
from luminal_rocm.dialect import DeviceDialect
from luminal_rocm.kernels import render_program


def test_rocm_dialect_without_fp16_never_declares_half_values():
    d = DeviceDialect(fp16=False)
    assert "cl_khr_fp16" not in d.prelude()
    assert d.load(lm.float16, "p1", "i") == "vload_half(i, p1)"
    assert d.store_statement(lm.float16, "p0", "i", "v") == "vstore_half_rte(v, i, p0);"
    assert "half h" not in d.prelude()  # a private half needs the extension


def test_rocm_dialect_renders_a_kernel_in_opencl_c():
    g = lm.Graph()
    a = g.tensor(("n", 8), dtype=lm.float16)
    (a * a).sum(-1).sqrt().retrieve()
    (kernel,) = lower(g).kernels
    source = render_kernel(kernel, "k", DeviceDialect(fp16=False))
    for text in ("__kernel void k(", "__global const half", "vload_half(", "vstore_half_rte(",
                 "get_global_id(0)", "sqrt("):
        assert text in source, (text, source)
    assert "inline long lm_floordiv" in DeviceDialect(fp16=False).prelude()
    attributed = DeviceDialect(fp16=True).signature(
        "mm", [("float", "p0", True)], [], "__attribute__((reqd_work_group_size(16, 16, 1)))")
    assert attributed == ("__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void "
                          "mm(__global float *restrict p0)")


def test_rocm_dialect_with_fp16_uses_half_conversions():
    d = DeviceDialect(fp16=True)
    assert d.prelude().startswith("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    assert d.load(lm.float16, "p1", "i") == "((float)p1[i])"
    assert d.store_statement(lm.float16, "p0", "i", "v") == "p0[i] = (half)(v);"
    assert d.round(lm.float16, "x") == "lm_round_half(x)"
    assert "(float)(half)x" in d.prelude()


# ----- the cl_khr_fp16 path, compiled offline ----------------------------------------------
def _clang() -> str | None:
    for name in ("clang", *(f"clang-{v}" for v in range(20, 13, -1))):
        if path := shutil.which(name):
            return path
    return None


def _half_sources(fp16: bool, cpu: bool) -> list[str]:
    """Every kernel of a half-precision graph (elementwise, reductions, softmax, a matmul)."""
    g = lm.Graph()
    x = g.tensor(("s", 32), name="x", dtype="float16")
    w = g.tensor((32, 16), name="w", dtype="float16")
    h = (x @ w).softmax(-1)
    for o in (h, (x * 2).sqrt().sum(-1), x.to("float32").exp(), h.to("float16")):
        o.retrieve()
    g.compile((lm.GenericCompiler(),))
    return [s.source for s in render_program(lower(g), DeviceDialect(fp16), cpu, 256)]


def _compile_amdgcn(clang: str, source: str, tmp_path, extra=()) -> subprocess.CompletedProcess:
    path = tmp_path / "k.cl"
    path.write_text(source)
    return subprocess.run(
        [clang, "-x", "cl", "-cl-std=CL1.2", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx90a",
         "-nogpulib", "-Xclang", "-finclude-default-header", *extra, "-fsyntax-only",
         str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu_matmul", "cpu_matmul"])
def test_rocm_dialect_fp16_sources_compile_for_amdgcn(tmp_path, cpu):
    """PoCL has no cl_khr_fp16, so the native-half sources never run in this suite; clang (a
    PoCL dependency) at least checks them as OpenCL C for an AMD GPU, which has the extension.
    The same sources with the extension switched off must fail, or the check proves nothing."""
    clang = _clang()
    if clang is None:
        pytest.skip("no clang to compile OpenCL C offline")
    sources = _half_sources(fp16=True, cpu=cpu)
    assert sources and all("cl_khr_fp16" in s for s in sources)
    for source in sources:
        out = _compile_amdgcn(clang, source, tmp_path)
        assert out.returncode == 0, out.stderr
    off = _compile_amdgcn(clang, sources[0], tmp_path, ("-Xclang", "-cl-ext=-cl_khr_fp16"))
    assert off.returncode != 0
