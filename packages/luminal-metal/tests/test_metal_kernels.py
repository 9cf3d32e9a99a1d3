"""Model-shaped graphs on the Metal kernels: quantized matmuls against gguf's own
dequantization, a KV cache kept across runs, bfloat16, SmolLM2's logits.

Each test runs four times: on MSL run as C++ on the CPU (`msl_cpu.CpuMetalBackend`; see
test_metal_cpu_conformance.py for what that does and does not check), rendered one thread per
point and exactly as the Metal backend renders it (threadgroup reductions, SIMD GEMVs and
simdgroup-matrix GEMMs on emulated threadgroups); through `MetalBackend` and its runtime on
`fake_metal`'s emulated device; and on a real Metal device (marked `metal`: skipped, with the
reason, elsewhere than on Apple silicon).
"""

from __future__ import annotations

import luminal as lm
import numpy as np
import pytest
from luminal import quant
from luminal.device_array import DeviceArray
from luminal.testing import run_case
from luminal_codegen import Matmul, QuantOperand, lower
from luminal_metal import MetalBackend
from luminal_metal.matmul import QUANT_KERNELS
from luminal_metal_tests_msl_cpu import CpuMetalBackend

rng = np.random.default_rng(0)


@pytest.fixture(params=["thread", "metal", "emulated-device",
                        pytest.param("device", marks=pytest.mark.metal)])
def backend(request: pytest.FixtureRequest) -> lm.Backend:
    if request.param == "device":
        return MetalBackend()
    if request.param == "emulated-device":  # MetalRuntime itself, on fake_metal's device
        request.getfixturevalue("emulated_metal")
        return MetalBackend()
    request.getfixturevalue("msl")  # skips without clang++
    return CpuMetalBackend(request.param)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1"])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_metal_quantized_matmul_matches_gguf(backend, qtype, layout):
    gguf = pytest.importorskip("gguf")
    shape = (64, 96) if layout == "x@W.T" else (96, 64)  # (n, k) or (k, n)
    kind = getattr(gguf.GGMLQuantizationType, qtype.upper())
    raw = gguf.quants.quantize(rng.standard_normal(shape).astype(np.float32), kind)
    weight = gguf.quants.dequantize(raw, kind)  # the independent decoding
    g = lm.Graph()
    x = g.tensor(("m", 96), name="x")
    w = quant.dequantize(g.tensor(raw.shape, name="w", dtype="uint8").set(raw), qtype, shape)
    out = (x @ w.T if layout == "x@W.T" else x @ w).retrieve()
    g.compile(lm.GenericCompiler())
    kernels = lower(g, quant_kernels=QUANT_KERNELS).kernels
    assert any(isinstance(k, Matmul) and isinstance(k.b, QuantOperand) for k in kernels)
    g.compile(backend)
    for m in (1, 6):  # decode and prefill through one compiled graph
        xs = rng.standard_normal((m, 96)).astype(np.float32)
        x.set(xs)
        g.execute()
        want = xs @ (weight.T if layout == "x@W.T" else weight)
        np.testing.assert_allclose(out.numpy(), want, atol=1e-4, rtol=1e-4)


def test_metal_kv_cache_stays_with_the_runtime(backend):
    """An assigned value (a KV cache) is handed back to its input between runs."""
    g = lm.Graph()
    cache = g.tensor((1, "past", 4), name="cache").set(np.zeros((1, 0, 4), np.float32))
    new = g.tensor((1, "seq", 4), name="new")
    full = lm.cat([cache, new * 2], dim=1)
    g.assign(cache, full)
    total = full.sum(1).retrieve()
    g.compile((lm.GenericCompiler(), backend))
    seen = np.zeros((1, 0, 4), np.float32)
    for n in (3, 1, 1):
        step = rng.standard_normal((1, n, 4)).astype(np.float32)
        new.set(step)
        g.execute()
        g.set_dim("past", g.dims["past"] + n)
        seen = np.concatenate([seen, step * 2], axis=1)
        np.testing.assert_allclose(total.numpy(), seen.sum(1), atol=1e-5)
        assert isinstance(g.data[cache.id], DeviceArray)  # never copied to the host
    np.testing.assert_allclose(np.asarray(g.data[cache.id]), seen, atol=1e-6)


def test_metal_bfloat16_matches_reference(backend):
    def run(compilers):
        g = lm.Graph()
        x = g.tensor((3, 40), name="x", dtype="bfloat16").set(data)
        w = g.tensor((40, 8), name="w", dtype="bfloat16").set(weight)
        y = ((x @ w).softmax(-1) + x.sum(-1, keepdim=True)[:, :1]).retrieve()
        g.compile(compilers)
        g.execute()
        return y.numpy().astype(np.float32)

    import ml_dtypes

    data = rng.standard_normal((3, 40)).astype(ml_dtypes.bfloat16)
    weight = rng.standard_normal((40, 8)).astype(ml_dtypes.bfloat16)
    got = run((lm.GenericCompiler(), backend))
    want = run(lm.backend("reference"))
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_metal_half_precision_compiler_matches_reference(backend, half):
    """luminal-codegen's "half-precision" compiler in front of Metal: float32 graph, half
    storage and float32 compute, results back in float32 (as on the reference backend)."""
    data = rng.standard_normal((5, 48)).astype(np.float32)
    weight = (rng.standard_normal((48, 16)) / 7).astype(np.float32)

    def run(target):
        g = lm.Graph()
        x = g.tensor((5, 48), name="x").set(data)
        w = g.tensor((48, 16), name="w").set(weight)
        rms = (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()
        y = ((x * rms) @ w).softmax(-1).retrieve()
        g.compile((lm.GenericCompiler(), lm.compiler("half-precision", dtype=half), target))
        assert any(n.dtype.name == half for n in g.nodes.values())
        g.execute()
        assert y.numpy().dtype == np.float32
        return y.numpy()

    np.testing.assert_allclose(run(backend), run(lm.backend("reference")), atol=2e-3, rtol=2e-2)


@pytest.mark.parametrize("where", ["thread", pytest.param("device", marks=pytest.mark.metal)])
def test_metal_smollm2_logits_match_luminal_cpu(request, where, monkeypatch):
    """SmolLM2-135M with its quantized GGUF weights: a prefill and two decode steps through the
    Metal kernels give luminal-cpu's logits (the NumPy
    reference backend takes 15 s a step on this model; luminal-cpu is tested against it and
    against transformers in luminal-models). Not in the emulated-threadgroup mode: its real
    threads and barriers would take minutes on this model; the quantized GEMV/GEMM tests above
    cover those kernels."""
    hub = pytest.importorskip("luminal_models.hub", reason="luminal-models is not installed")
    pytest.importorskip("luminal_cpu", reason="luminal-cpu is not installed")
    from luminal_models.generate import Generator
    from luminal_models.llama import Llama

    try:
        path = hub.smollm2_path(progress=False)
    except hub.DownloadError as e:
        pytest.skip(f"SmolLM2 weights unavailable (scripts/setup.sh installs them): {e}")
    model = Llama.from_gguf(path, quantized=True, progress=False)
    backend = request.getfixturevalue("msl").CpuMetalBackend() if where == "thread" else (
        MetalBackend())
    # luminal-cpu's float-like setting: its default rounds a prompt's x to 16 bits
    monkeypatch.setenv("LUMINAL_CPU_QUANT_ACTIVATIONS", "int24")
    runs = {}
    for name, b in (("metal", backend), ("cpu", lm.backend("cpu"))):
        gen = Generator(model, None, b, max_context=64)
        runs[name] = [gen.forward([1, 504, 3287, 282, 4]), gen.forward([28]), gen.forward([9])]
    for step, (got, want) in enumerate(zip(runs["metal"], runs["cpu"])):
        np.testing.assert_allclose(got, want, atol=2e-3, rtol=0, err_msg=f"step {step}")


@pytest.mark.parametrize(("case", "variant"), [
    ("softmax", "symbolic"), ("sdpa_causal", "base"), ("sdpa", "float16"), ("rms_norm", "base"),
    ("matmul_batched", "permuted"), ("matmul_2d_sym_k", "symbolic"), ("embedding", "base"),
    ("conv2d_groups", "strided"), ("cumsum_int", "base"), ("argmax_dim0", "symbolic"),
])
def test_metal_runtime_runs_kit_cases_on_the_emulated_device(emulated_metal, case, variant):
    """`MetalBackend.compile` with its real runtime (one library, one command buffer per run,
    dims by setBytes, the temporaries' arena) on fake_metal's device, against the reference."""
    device = emulated_metal.MTLCreateSystemDefaultDevice()
    run_case(case, MetalBackend(), variant)
    assert device.libraries == 1  # the whole program is one library
