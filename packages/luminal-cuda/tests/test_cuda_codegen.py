"""The generated CUDA C compiles, for every graph of the conformance kit and for model-shaped
graphs (attention with a KV cache, quantized matvec, half precision, symbolic dims).

No GPU is needed: `nvcc` checks the source (`--ptx` for the whole suite, full `-c` builds with
ptxas for the model-shaped graphs), for sm_80 (A100) and sm_90 (H100). Identical kernels are
compiled once and everything goes into few translation units, so this stays around a minute.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

import luminal as lm
import luminal_nn.functional as F
import numpy as np
import pytest
from luminal.dtypes import dtype_of, float16, float32, uint8
from luminal.symbolic import Expr
from luminal_codegen.ir import Matmul, MatOperand, Param, QuantOperand
from luminal_cuda import CudaBackend
from luminal_cuda.codegen import build_module
from luminal_cuda.dialect import CUDA
from luminal_cuda.lowering import lower
from luminal_cuda.prelude import COPY_KERNEL

ARCHS = ("sm_80", "sm_90")


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc") if p.exists()), None)


needs_nvcc = pytest.mark.skipif(_nvcc() is None, reason="nvcc (the CUDA toolkit) is not installed")
# a kernel's body and entry, or a fused entry (which calls bodies of its own module)
_UNIT = re.compile(
    r'(?=static __device__ void \w+_body\()|(?=extern "C" __global__ void \w+_fused)')
_NAME = re.compile(r"void (\w+)\(")
_UNIT_NAME = re.compile(r"void (\w+?)(?:_body)?\(")
PRELUDE = CUDA.prelude() + "\n" + COPY_KERNEL


def _kernels(module_source: str) -> str:
    assert module_source.startswith(PRELUDE)
    return module_source[len(PRELUDE):]


def translation_unit(sources: list[str]) -> str:
    """The prelude once, then every distinct kernel (body and entry) under a unique name;
    fused entries are left out (`whole_modules` keeps them)."""
    unique: dict[str, str] = {}
    for source in sources:
        for unit in _UNIT.split(_kernels(source)):
            if not unit.strip() or "_fused" in unit.split("(", 1)[0]:
                continue
            name = re.escape(_UNIT_NAME.search(unit).group(1))
            unique.setdefault(re.sub(rf"\b{name}(?=_body\(|\()", "K", unit), unit)
    renamed = (re.sub(r"\bK(?=_body\(|\()", f"f{i}", fn) for i, fn in enumerate(unique))
    return PRELUDE + "\n".join(renamed)


def whole_modules(sources: list[str]) -> str:
    """The prelude once, then every module whole (fused entries included), each module's
    functions renamed apart."""
    return PRELUDE + "\n".join(re.sub(r"\blm_k(?=\d|_fused)", f"m{j}_k", _kernels(s))
                                for j, s in enumerate(sources))


def compile_cuda(source: str, tmp: Path, flags: dict[str, list[str]]) -> None:
    """Run nvcc once per arch (concurrently); fail with its diagnostics."""
    path = tmp / "kernels.cu"
    path.write_text(source)
    procs = {
        arch: subprocess.Popen(
            [_nvcc(), f"-arch={arch}", "-diag-suppress", "177", *extra, str(path), "-o",
             str(tmp / f"out_{arch}")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for arch, extra in flags.items()
    }
    for arch, proc in procs.items():
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"nvcc {arch} failed:\n{out[-6000:]}"


# ----- graphs ---------------------------------------------------------------------------------
@functools.cache
def conformance_sources() -> tuple[str, ...]:
    """Module sources of every conformance case and variant (plus bfloat16 compute of each
    base case), built the way the kit builds them."""
    from luminal.testing import CASES
    from luminal.testing.adapters import LuminalF
    from luminal.testing.kit import _flatten, dim_values, plan_inputs

    out = []
    for case in CASES:
        for variant in case.variants():
            plans = plan_inputs(case, variant)
            rng = np.random.default_rng(0)
            datas = [p.host_data(rng, dim_values(case, variant)[0]) for p in plans]
            for half in (None, "bfloat16") if variant == "base" else (None,):
                g = lm.Graph()
                fns = LuminalF(g)
                ins = [g.tensor(p.shape, name=f"in{k}", dtype=dtype_of(datas[k].dtype))
                       for k, p in enumerate(plans)]
                seen = [p.transform(fns, t) if p.transform else t for p, t in zip(plans, ins)]
                for o in _flatten(case.fn(fns, *seen)):
                    o.contiguous().retrieve()
                g.compile(lm.GenericCompiler())
                out.append(CudaBackend(dtype=half).build(g)[1].source)
    return tuple(out)


def attention_sources() -> list[str]:
    out = []
    for causal, half in ((True, None), (False, "float16"), (True, "bfloat16")):
        g = lm.Graph()
        q, k, v = (g.tensor((1, 3, "seq", 64), name=n) for n in "qkv")
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).retrieve()
        g.compile(lm.GenericCompiler())
        out.append(CudaBackend(dtype=half).build(g)[1].source)
    return out


def kv_cache_sources(decoder_graph) -> list[str]:
    return [CudaBackend(dtype=half).build(decoder_graph()[0])[1].source
            for half in (None, "float16")]


def quant_matmul(qtype: str, k_contiguous: bool, a_dtype=float32, m: Expr | int = 1) -> Matmul:
    """x (m, 256) @ W.T with W (96, 256) quantized (or x @ W with W (256, 96)); 256 is one
    block of the K-quants."""
    n, k = Expr.const(96), Expr.const(256)
    rows, cols = (n, k) if k_contiguous else (k, n)
    m = Expr.const(m) if isinstance(m, int) else m
    params = (Param(a_dtype, True), Param(a_dtype), Param(uint8))
    a = MatOperand(1, Expr.const(0), k, Expr.const(1))
    return Matmul(params, (), m, n, k, a, QuantOperand(2, qtype, rows, cols, k_contiguous), 0,
                  Expr.const(0), n)


def quant_sources() -> list[str]:
    from luminal_codegen.ir import Call, Program

    kernels = [
        quant_matmul(qt, kc, dt, m)
        for qt in ("q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k")
        for kc in (True, False)
        for dt, m in ((float32, 1), (float16, Expr.var("seq")))
    ]
    program = Program(kernels, [Call(i, (0, 1, 2)) for i in range(len(kernels))], [], ("seq",))
    return [build_module(program).source]


# ----- tests ----------------------------------------------------------------------------------
@needs_nvcc
def test_cuda_conformance_kernels_compile(tmp_path):
    source = translation_unit(list(conformance_sources()))
    compile_cuda(source, tmp_path, {arch: ["-c"] for arch in ARCHS})


@needs_nvcc
def test_cuda_model_kernels_build_with_ptxas(tmp_path, decoder_graph):
    sources = attention_sources() + kv_cache_sources(decoder_graph) + quant_sources()
    source = whole_modules(sources)
    assert "lm_block_reduce" in source and "lm_warp_sum" in source and "_fused" in source
    compile_cuda(source, tmp_path, {arch: ["-c"] for arch in ARCHS})


def test_cuda_module_is_one_translation_unit_without_headers():
    g = lm.Graph()
    x = g.tensor(("n", 8), name="x", dtype="float16")
    (x.float().softmax(-1) @ g.tensor((8, 8), name="w")).retrieve()
    g.compile(lm.GenericCompiler())
    source = build_module(lower(g)).source
    assert "#include" not in source  # NVRTC from a pip-installed CuPy has no CUDA headers
    names = _NAME.findall(source)
    assert len(names) == len(set(names))


def test_cuda_symbolic_dims_are_read_from_the_dims_array():
    g = lm.Graph()
    x = g.tensor(("batch", "seq", 4), name="x")
    x.sum(1).retrieve()
    g.compile(lm.GenericCompiler())
    program = lower(g)
    source = build_module(program).source
    assert program.dims == ("batch", "seq")
    lines = _kernels(source).splitlines()
    assert lines[1].endswith("const long long *__restrict__ lm_dims, const long lm_block) {")
    assert lines[2:4] == ["  const long d0 = (long)lm_dims[0];",
                          "  const long d1 = (long)lm_dims[1];"]
