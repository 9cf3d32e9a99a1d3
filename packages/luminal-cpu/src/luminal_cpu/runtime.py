"""Executing a compiled graph: one native call per `execute()`.

Per run, Python only binds pointers: inputs are passed zero-copy from the arrays in
`graph.data`, intermediates live in one arena laid out by the memory plan (recomputed, and
the arena grown, only when the dim values change), and outputs get arrays of their own.
Retrieved and assigned outputs get a fresh array per run (arrays handed out earlier never
change under the user); assignments then swap the new array into the input. An output's
arrays that no one references any more are recycled instead of reallocated, so a loop that
keeps only the latest result alternates between two arrays (no allocation, no page faults).

Assignments, `fetch` and the evaluation of shapes are core's `luminal.Runtime` steps; this
module binds pointers and lays out the arena.
"""

from __future__ import annotations

import ctypes
import sys
import time

import numpy as np
from luminal import ops
from luminal.codegen import MemoryPlan, Program
from luminal.graph import Graph
from luminal.runtime import Runtime, Shape
from luminal.symbolic import evaluator

from .source import ENTRY_POINT
from .threads import governor
from .toolchain import Library

_ALIGN = 64


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class _Recycler:
    """The arrays of one output (with their addresses), reused once nothing outside holds
    them. An output that grows a little every run (a KV cache, one token longer per decode
    step) would need a new array every time, page-faulted in from the kernel; so arrays get a
    quarter more room than asked for, and a run is handed a view of the first `n` elements
    of a free array that is large enough."""

    KEEP = 3
    HEADROOM = 1.25

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self._owned: list[tuple[np.ndarray, int]] = []

    def get(self, n: int) -> tuple[np.ndarray, int]:
        """A free array of at least `n` elements, and its address; `view` trims it to `n`."""
        for k in range(len(self._owned)):
            a = self._owned[k][0]
            # 3 references when no one else holds it (views of it hold one each): the tuple,
            # `a` and getrefcount's argument
            if n <= a.size <= n * self.HEADROOM * self.HEADROOM and sys.getrefcount(a) <= 3:
                return self._owned.pop(k)
        a = np.empty(int(n * self.HEADROOM) + 1, self.dtype)
        return a, _address(a)

    @staticmethod
    def view(entry: tuple[np.ndarray, int], n: int) -> np.ndarray:
        return entry[0][:n]

    def give(self, entry: tuple[np.ndarray, int]) -> None:
        self._owned.append(entry)
        del self._owned[: -self.KEEP]


class CpuRuntime(Runtime):
    """Runs a `Program` compiled into `library` (see the module docstring)."""

    host_buffers = True

    def __init__(self, graph: Graph, program: Program, plan: MemoryPlan, library: Library):
        super().__init__(graph)
        self.program, self.plan, self.library = program, plan, library
        self._run = getattr(library.handle, ENTRY_POINT)
        self._run.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        self._run.restype = None
        bufs = program.buffers
        self._ptrs = (ctypes.c_void_p * max(len(bufs), 1))()
        self._dim_args = (ctypes.c_long * max(len(program.dims), 1))()
        self._inputs = [(k, b.node) for k, b in enumerate(bufs) if b.role == "input"]
        self._bound: dict[int, np.ndarray] = {}  # the input arrays the pointers point into
        fresh = graph.retrieved | set(graph.assignments.values())
        self._fresh = [k for k, b in enumerate(bufs) if b.role == "output" and b.node in fresh]
        self._kept = [k for k, b in enumerate(bufs) if b.role == "output" and b.node not in fresh]
        self._numel: tuple[int, ...] = (0,) * len(bufs)
        self._evaluate_numel = evaluator(b.numel for b in bufs)
        self._dims_key: tuple[int, ...] | None = None
        self._from_input = {src for src in graph.assignments.values()
                            if isinstance(graph.nodes[src].op, ops.Input)}
        # input node -> (the array last run's assignment bound to it, its address)
        self._assigned: dict[int, tuple[np.ndarray, int]] = {}
        self._addresses: dict[int, int] = {}  # this run's fresh outputs' addresses
        self._arena = np.empty(0, np.uint8)
        self._kept_arrays: dict[int, np.ndarray] = {}
        self._recyclers = {k: _Recycler(bufs[k].dtype.numpy) for k in self._fresh}
        self.stats: dict[str, object] = {}  # compile-time facts, filled in by the backend
        # seconds spent inside the compiled program over all runs: the rest of a run's wall
        # time is host overhead (binding, Python), which benchmarks report
        self.native_s = 0.0

    def _bind_dims(self, dims: dict[str, int]) -> None:
        key = tuple(dims[d] for d in self.program.dims)
        if key == self._dims_key:
            return
        self._dims_key = key
        for k, v in enumerate(key):
            self._dim_args[k] = v
        bufs = self.program.buffers
        self._numel = self._evaluate_numel(dims)
        offsets, total = self.plan.layout(dims)
        if total + _ALIGN > self._arena.size:
            # with room to grow: a sequence one token longer each run would otherwise get
            # (and page-fault in) a new arena every run
            self._arena = np.empty(int(total * _Recycler.HEADROOM) + _ALIGN, np.uint8)
        base = -_address(self._arena) % _ALIGN + _address(self._arena)
        for slot, members in enumerate(self.plan.slots):
            for b in members:
                self._ptrs[b] = base + offsets[slot]
        for k in self._kept:
            spec = bufs[k]
            old = self._kept_arrays.get(k)
            if old is None or old.size != self._numel[k]:
                self._kept_arrays[k] = np.empty(self._numel[k], spec.dtype.numpy)
            self._ptrs[k] = _address(self._kept_arrays[k])

    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        self._bind_dims(dims)
        bufs = self.program.buffers
        bound = self._bound
        assigned = self._assigned
        for k, node in self._inputs:
            a = graph.data[node]
            if a is bound.get(k):
                continue  # same array object: the pointer is still right
            hint = assigned.get(node)
            if hint is not None and hint[0] is a:
                # last run's output, fed back: a fresh contiguous array of ours, of the
                # input's dtype (Graph.assign checks it), whose address is known
                address = hint[1]
            else:
                if a.dtype != bufs[k].dtype.numpy or not a.flags.c_contiguous:
                    a = np.ascontiguousarray(a, dtype=bufs[k].dtype.numpy)
                    graph.set_data(node, a)
                address = _address(a)
            bound[k] = a
            self._ptrs[k] = address
        self.release_outputs()  # drop last run's references so its arrays can be recycled
        values = {bufs[k].node: a for k, a in self._kept_arrays.items()}
        addresses: dict[int, int] = {}
        for k in self._fresh:
            recycler = self._recyclers[k]
            entry = recycler.get(self._numel[k])
            recycler.give(entry)
            a, self._ptrs[k] = recycler.view(entry, self._numel[k]), entry[1]
            values[bufs[k].node] = a
            addresses[bufs[k].node] = entry[1]
        threads = governor().threads()
        start = time.perf_counter()
        self._run(self._ptrs, self._dim_args, threads)
        self.native_s += time.perf_counter() - start
        self._addresses = addresses
        assigned.clear()
        self.finish_run(graph, values, dims)

    def download(self, buffer: np.ndarray, dtype: object) -> np.ndarray:
        return buffer

    def hand_over(self, graph: Graph, target: int, src: int, buffer: np.ndarray | None,
                  shape: Shape) -> np.ndarray:
        """This run's own array (no copy: the next run writes a fresh one), remembered with
        its address so the next run binds it without looking it up."""
        if src in self._from_input:
            return graph.data[src].reshape(shape)
        a = buffer.reshape(shape)
        self._assigned[target] = (a, self._addresses[src])
        return a
