"""Every kernel the Metal backend renders compiles as C++ against the stand-in header
`shim/metal_stdlib` (clang++ -fsyntax-only): a syntax and type check of the generated MSL, not
Metal verification (Apple's compiler may still disagree; see the header).

Covered: every case and variant of the conformance kit (plus each base case with bfloat16
inputs), the SmolLM2-135M graph that serves prefill and decode (quantized Q4_1/Q8_0 weights
and float weights), and quantized matmuls of every format and layout. Kernels are rendered as
the backend renders them: threadgroup reductions, simdgroup-matrix GEMMs and SIMD GEMVs
included. The shim itself must reject what MSL forbids.
"""

from __future__ import annotations

import subprocess

import luminal as lm
import numpy as np
import pytest
from luminal import Backend
from luminal.dtypes import bfloat16, float16, float32, uint8
from luminal.symbolic import Expr
from luminal.testing import CASES
from luminal_codegen import Kernel, Matmul, QuantOperand, kernel_arguments, lower
from luminal_codegen.ir import MatOperand, Param
from luminal_metal import MetalBackend
from luminal_metal.dialect import METAL
from luminal_metal.kernels import lower_for_metal, render_kernel_source, render_program
from luminal_metal_tests_msl_cpu import CLANG, FLAGS, kit_kernels, syntax_check, unique


class _Collector(Backend):
    """Records the IR kernels of the graphs compiled with it; runs nothing."""

    name = "metal-kernel-collector"

    def __init__(self):
        self.kernels: list[Kernel | Matmul] = []

    def compile(self, graph) -> None:
        self.kernels += lower_for_metal(graph).kernels


def _functions(kernels) -> list[str]:
    return [render_kernel_source(k, "k").body for k in kernels]


def test_metal_conformance_kernels_compile(msl):
    kernels = unique(k for case in CASES for variant in case.variants()
                     for k in kit_kernels(case, variant))
    bf16 = unique(k for case in CASES for k in kit_kernels(case, "base", "bfloat16"))
    every = unique([*kernels, *bf16])
    checked = syntax_check(every)
    bodies = _functions(every)
    print(f"\nconformance kit: {len(kernels)} distinct kernels (+{len(every) - len(kernels)} "
          f"with bfloat16 inputs), {checked} Metal kernel functions compiled")
    assert checked >= len(every) > 1500
    assert max(kernel_arguments(k) for k in every) <= METAL.max_kernel_args
    # the cooperative paths were among them
    assert any("lm_tg_sum(" in b for b in bodies) and any("lm_tg_max(" in b for b in bodies)
    assert any("simdgroup_multiply_accumulate" in b for b in bodies)
    assert any("simd_sum(acc[m])" in b for b in bodies)
    assert any("lm_bf16_to_f32" in b for b in bodies) and any("half *" in b for b in bodies)


@pytest.fixture(scope="module")
def smollm2_kernels() -> dict[str, list[Kernel | Matmul]]:
    """The kernels of SmolLM2-135M's generation graph (one graph: prefill and decode), with
    its quantized GGUF weights and with float32 weights."""
    hub = pytest.importorskip("luminal_models.hub", reason="luminal-models is not installed")
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama

    try:
        path = hub.smollm2_path(progress=False)
    except hub.DownloadError as e:
        pytest.skip(f"SmolLM2 weights unavailable (scripts/setup.sh installs them): {e}")
    out = {}
    for quantized in (True, False):
        collector = _Collector()
        Generator(Llama.from_gguf(path, quantized=quantized, progress=False), None, collector)
        out["quantized" if quantized else "float"] = collector.kernels
    return out


def test_metal_smollm2_kernels_compile(msl, smollm2_kernels):
    every = unique(k for ks in smollm2_kernels.values() for k in ks)
    checked = syntax_check(every)
    quant = {k.b.qtype for k in smollm2_kernels["quantized"]
             if isinstance(k, Matmul) and isinstance(k.b, QuantOperand)}
    bodies = _functions(every)
    print(f"\nSmolLM2-135M: {len(every)} distinct kernels, {checked} Metal kernel functions "
          f"compiled (quantized formats {sorted(quant)})")
    assert quant == {"q4_1", "q8_0"}
    # `seq` is symbolic: each matmul has a GEMV (decode) and a GEMM (prefill) variant
    assert any("_v(" in b and "simdgroup_float8x8" in b for b in bodies)
    assert any("lm_deq_q4_1" in b for b in bodies) and any("lm_tg_" in b for b in bodies)
    assert checked > len(every)


def _quant_matmul(qtype: str, k_contiguous: bool, a_dtype, m) -> Matmul:
    """x (m, 256) @ W.T with W (96, 256) quantized (or x @ W with W (256, 96))."""
    n, k = Expr.const(96), Expr.const(256)
    rows, cols = (n, k) if k_contiguous else (k, n)
    params = (Param(a_dtype, True), Param(a_dtype), Param(uint8))
    a = MatOperand(1, Expr.const(0), k, Expr.const(1))
    return Matmul(params, (), m, n, k, a, QuantOperand(2, qtype, rows, cols, k_contiguous), 0,
                  Expr.const(0), n)


def test_metal_matmul_variants_compile(msl):
    seq = Expr.var("seq")
    kernels = [_quant_matmul(qt, kc, dt, m) for qt in ("q8_0", "q4_0", "q4_1")
               for kc in (True, False) for dt in (float32, float16, bfloat16)
               for m in (Expr.const(1), Expr.const(64), seq)]
    launches = [render_kernel_source(k, "k").launches for k in kernels]
    assert [len(ls) for ls in launches].count(2) == 18  # the symbolic-m ones: GEMV and GEMM
    assert syntax_check(kernels) == sum(len(ls) for ls in launches)


@pytest.mark.parametrize(("bad", "complaint"), [
    ("double x = p1[0]; p0[0] = (float)x;", "double"),
    ("p1[0] = 1.0f; p0[0] = 0.0f;", "read-only"),
    ("p0[0] = undefined_builtin(p1[0]);", "undeclared"),
])
def test_metal_shim_rejects_what_msl_forbids(msl, tmp_path, bad, complaint):
    source = ("#include <metal_stdlib>\nusing namespace metal;\n"
              "kernel void k(device float *p0 [[buffer(0)]], device const float *p1 "
              f"[[buffer(1)]], uint lm_tid [[thread_position_in_grid]]) {{ {bad} }}\n")
    path = tmp_path / "bad.metal"
    path.write_text(source)
    proc = subprocess.run([CLANG, *FLAGS, "-fsyntax-only", str(path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and complaint in proc.stderr, proc.stderr


def test_metal_splits_kernels_with_more_arguments_than_metal_binds(msl):
    """40 inputs summed would be one kernel of 41 buffers; Metal binds 31 per kernel, so the
    lowering stores partial sums and every kernel fits. The split graph still adds up."""
    g = lm.Graph()
    xs = [g.tensor(("n", 4), name=f"x{i}") for i in range(40)]
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    out = total.retrieve()
    g.compile(lm.GenericCompiler())
    with pytest.raises(ValueError, match="more than the 31 arguments Metal binds"):
        render_program(lower(g))
    program, _, _ = MetalBackend().build(g)
    assert len(program.kernels) > 1
    assert all(kernel_arguments(k) <= METAL.max_kernel_args for k in program.kernels)
    g.compile(msl.CpuMetalBackend())
    data = np.random.default_rng(0).standard_normal((40, 3, 4)).astype(np.float32)
    for x, d in zip(xs, data):
        x.set(d)
    g.execute()
    np.testing.assert_allclose(out.numpy(), data.sum(0), rtol=1e-5, atol=1e-5)


def test_metal_graph_kernels_render_from_the_backend():
    """`MetalBackend.build` needs no device: the library source holds every launch."""
    g = lm.Graph()
    x = g.tensor(("n", 4096), name="x", dtype="float16")
    w = g.tensor((4096, 64), name="w", dtype="float16")
    ((x @ w).softmax(-1) * x.float().pow(2).mean(-1, keepdim=True).sqrt()).retrieve()
    g.compile(lm.GenericCompiler())
    program, source, kernels = MetalBackend().build(g)
    assert len(kernels) == len(program.kernels)
    for ks in kernels:
        for launch in ks.launches:
            assert f"kernel void {launch.function}(" in source
