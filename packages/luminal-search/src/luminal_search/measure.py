"""Checking a candidate against the reference backend, and timing it on the device."""

from __future__ import annotations

import statistics
import time
from collections.abc import Collection

import numpy as np
from luminal.graph import Graph
from luminal.ir import Dequantized
from luminal.symbolic import Expr
from luminal.testing.quant import random_blocks

SPECIALS = (np.nan, np.inf, -np.inf)


def packed_weights(graph: Graph) -> dict[int, Dequantized]:
    """The inputs of `graph` that hold a quantized matrix's packed blocks (the raw input of a
    `luminal.quant.dequantize`), with the tag saying their format and shape."""
    tags = (node.dequantized for node in graph.nodes.values())
    return {tag.raw: tag for tag in tags if tag is not None}


def extent(d: Expr | int, dims: dict[str, int]) -> int:
    """A dimension's size at `dims`."""
    return d.evaluate(dims) if isinstance(d, Expr) else int(d)


def random_inputs(graph: Graph, rng: np.random.Generator, specials: bool = False,
                  skip: Collection[int] = ()) -> dict:
    """Random data for every input of `graph` but those in `skip` (dims must be bound):
    normal floats, small ints, random bools, random valid blocks of its format for a quantized
    matrix (`luminal.testing.quant.random_blocks`: finite scales); with `specials`, a few
    floats are NaN, +inf and -inf."""
    data = {}
    packed = packed_weights(graph)
    for node in graph.input_nodes():
        if node.id in skip:
            continue
        shape = tuple(d.evaluate(graph.dims) for d in node.shape)
        dt = node.dtype
        if node.id in packed:
            tag = packed[node.id]
            data[node.id] = random_blocks(tag.qtype, extent(tag.rows, graph.dims),
                                          extent(tag.cols, graph.dims), rng)
        elif dt.is_float:
            x = rng.standard_normal(shape).astype(np.float32)
            if specials and x.size:
                picks = rng.choice(x.size, size=min(x.size, 3), replace=False)
                x.reshape(-1)[picks] = SPECIALS[: len(picks)]
            data[node.id] = x.astype(dt.numpy)
        elif dt.name == "bool":
            data[node.id] = rng.random(shape) < 0.5
        else:
            data[node.id] = rng.integers(0, 8, size=shape).astype(np.int32)
    return data


def bind(graph: Graph, data: dict) -> None:
    for nid, x in data.items():
        graph.set_data(nid, x)


def run(graph: Graph, data: dict, output: int) -> np.ndarray:
    bind(graph, data)
    with np.errstate(all="ignore"):  # NaN and infinities are inputs on purpose
        graph.execute()
    return np.array(graph.fetch(output), dtype=np.float64)


def agrees(got: np.ndarray, want: np.ndarray) -> bool:
    """Same shape, NaN exactly where `want` is NaN, equal infinities, close finite values."""
    if got.shape != want.shape:
        return False
    if np.isfinite(want).all():  # the usual case, in fewer passes over large outputs
        return bool(np.isfinite(got).all()) and _close(got, want)
    nan = np.isnan(want)
    if not np.array_equal(nan, np.isnan(got)):
        return False
    inf = np.isinf(want)
    if not np.array_equal(got[inf], want[inf]):
        return False
    finite = ~(nan | inf)
    if not np.isfinite(got[finite]).all():
        return False
    return _close(got[finite], want[finite])


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    """Finite values equal within rtol 2e-3 and an atol scaled by `want`'s mean magnitude."""
    if not want.size:
        return True
    scale = max(1.0, float(np.abs(want).mean()))
    return bool(np.allclose(got, want, rtol=2e-3, atol=2e-3 * scale))


def program_identity(graph: Graph) -> object | None:
    """What identifies the program `graph` was compiled to, where the backend tells (the cpu
    backend's library, keyed by its source), else None: two candidates with the same identity
    run the same code, and need not both be timed."""
    return getattr(getattr(graph.runtime, "library", None), "path", None)


def time_interleaved(graphs: list[Graph], data: dict, budget_s: float = 0.3,
                     rounds: int = 9, warmup: int = 3, sample_s: float = 0.002) -> list[float]:
    """Median seconds of `execute()` for each graph, timed in interleaved rounds (one sample of
    each per round, the order alternating between rounds) so that a machine-wide slowdown hits
    every candidate alike. A sample is a batch of calls lasting about `sample_s` (the same
    count for every graph), so that kernels of a few microseconds are not timed one call at a
    time; a graph that assigns or writes its inputs (a KV cache, which would otherwise grow)
    is timed one call per sample, its inputs bound before every run. Each graph runs `warmup`
    times first (thread pools, caches)."""
    single = [0.0]
    for g in graphs:
        for _ in range(max(1, warmup)):
            bind(g, data)
            t0 = time.perf_counter()
            g.execute()
        single.append(time.perf_counter() - t0)  # the last warm-up run
    stateless = not any(g.assignments or g.writes for g in graphs)
    calls = max(1, min(1000, int(sample_s / max(max(single), 1e-7)))) if stateless else 1
    times: list[list[float]] = [[] for _ in graphs]
    deadline = time.perf_counter() + budget_s
    for r in range(rounds):
        if r >= 3 and time.perf_counter() > deadline:
            break
        order = range(len(graphs)) if r % 2 == 0 else reversed(range(len(graphs)))
        for k in order:
            g = graphs[k]
            bind(g, data)
            t0 = time.perf_counter()
            for _ in range(calls):
                g.execute()
            times[k].append((time.perf_counter() - t0) / calls)
    return [statistics.median(ts) for ts in times]
