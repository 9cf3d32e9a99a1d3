"""A Llama-style decoder end to end: correct at two sequence lengths, repeated layers share
their kernels, and compiling 30 layers is fast (and faster from the cache)."""

from __future__ import annotations

import cpu_transformer as T
import luminal as lm
import numpy as np
from luminal.reference import ReferenceBackend
from luminal_cpu import CpuBackend

SMALL = T.Config(hidden=64, heads=4, kv_heads=2, ffn=96, layers=2)


def bind(cfg, x, cos, sin, weights, seq, seed=0):
    rng = np.random.default_rng(seed)
    x.set(rng.standard_normal((seq, cfg.hidden)).astype(np.float32))
    c, s = T.rope_tables(seq, cfg.head_dim)
    cos.set(c)
    sin.set(s)
    for w in weights:
        for name, arr in T.random_weights(cfg, rng).items():
            w[name].set(arr)


def test_decoder_matches_reference_at_two_lengths():
    g, x, cos, sin, weights, out = T.build(SMALL)
    g.compile((lm.GenericCompiler(), CpuBackend()))
    results = []
    for seq in (7, 1):
        bind(SMALL, x, cos, sin, weights, seq)
        g.execute()
        results.append(out.numpy().copy())
    g.compile(ReferenceBackend())
    for seq, got in zip((7, 1), results):
        bind(SMALL, x, cos, sin, weights, seq)
        g.execute()
        np.testing.assert_allclose(got, out.numpy(), atol=1e-4, rtol=1e-4)


def program_size(layers: int) -> tuple[int, int]:
    g, *_ = T.build(T.Config(layers=layers))
    g.compile((lm.GenericCompiler(), CpuBackend()))
    return g.runtime.stats["kernels"], g.runtime.stats["calls"]


def test_identical_layers_share_kernels():
    k1, c1 = program_size(1)
    k3, c3 = program_size(3)
    k8, _ = program_size(8)
    # the residual stream's input differs for the first layer only: at most one kernel more
    assert k1 <= k3 <= k1 + 1 and k8 <= k1 + 1
    assert c3 > 2 * c1


def test_thirty_layers_compile_once_then_load_from_cache(fresh_cache):
    """The second compile of the same graph loads the shared library from the cache (how long
    either takes is measured in benchmarks/compile_bench.py, not here: timings in a shared
    test run are noise)."""
    cached = []
    for _ in range(2):
        g, *_ = T.build(T.Config(layers=30))
        lm.GenericCompiler().compile(g)
        g.compile(CpuBackend())
        cached.append(g.runtime.stats["cached"])
    assert cached == [False, True]
