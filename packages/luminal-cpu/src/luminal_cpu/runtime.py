"""Executing a compiled graph: one native call per `execute()`.

Per run, Python only binds pointers: inputs are passed zero-copy from the arrays in
`graph.data`, intermediates live in one arena laid out by the memory plan (recomputed, and
the arena grown, only when the dim values change), and outputs get arrays of their own.
Retrieved and assigned outputs get a fresh array per run (arrays handed out earlier never
change under the user); assignments then swap the new array into the input. An output's
arrays that no one references any more are recycled instead of reallocated, so a loop that
keeps only the latest result alternates between two arrays (no allocation, no page faults).

Assignments, `fetch` and the evaluation of shapes are core's `luminal.Runtime` steps; this
module binds pointers and lays out the arena. What changes every decode step stays out of
Python: the compiled entry point itself checks that the arena's slots still fit the new dims
and points the values written straight into an input (a KV cache's new rows) at their rows
(source.py), so a step binds one new token and the dims, and runs.
"""

from __future__ import annotations

import ctypes
import math
import mmap
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from luminal import ops
from luminal.device_array import DeviceArray
from luminal.graph import Graph
from luminal.runtime import Runtime, Shape
from luminal.symbolic import evaluator, logical_and, lt, prod
from luminal_codegen import Call, Kernel, MemoryPlan, Program
from luminal_codegen.indexing import flat_index
from luminal_codegen.ir import Binary, Load

from .repack import repack_native, unpack
from .source import ENTRY_POINT, DirectWrite
from .threads import governor
from .toolchain import Library

_ALIGN = 64


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def direct_writes(graph: Graph, program: Program) -> list[DirectWrite]:
    """The writes (`Graph.write`) whose rows form one contiguous block of the input (every
    axis before the written one has size 1) and whose value is an output of the program that
    nothing retrieves nor writes elsewhere too: the program computes those values straight
    into the input. In the order of `graph.writes`."""
    bufs = program.buffers
    index = {(b.node, b.role): k for k, b in enumerate(bufs)}
    fresh = graph.retrieved | set(graph.assignments.values())
    sources = [w.src for w in graph.writes.values()]
    direct = []
    for target, write in graph.writes.items():
        shape = graph.nodes[target].shape
        k, into = index.get((write.src, "output")), index.get((target, "input"))
        if (k is None or into is None or write.src in fresh or sources.count(write.src) > 1
                or not write.offset.free_vars <= set(program.dims)
                or not all(d.is_const and d.value == 1 for d in shape[:write.dim])
                or not all(d.is_const for d in shape[write.dim + 1:])):
            continue
        row = int(np.prod([d.value for d in shape[write.dim + 1:]], dtype=np.int64))
        direct.append(DirectWrite(target, k, into, write.offset,
                                  row * bufs[k].dtype.itemsize))
    return direct


def read_written_rows(program: Program, direct: Sequence[DirectWrite]) -> Program:
    """`program` without the kernels that concatenate an input's rows before a direct
    write's offset with the rows that write stores (`cat([cache[:, :past], new], 1)`, what an
    in-place KV cache's attention reads): the program computes the new rows straight into
    the input, so that concatenation is the input's first rows, and its readers read the
    input itself (same values, up to the sign of a zero) instead of a copy of the whole cache
    made every step. Their calls run after the call storing the new rows, which the
    concatenation read."""
    writes = {w.buffer: w for w in direct}
    alias: dict[int, int] = {}  # the concatenation's buffer -> the input it copies
    for call in program.calls:
        into = _written_prefix(program, call, writes)
        if into is not None:
            alias[call.args[program.kernels[call.kernel].out.buf]] = into
    if not alias:
        return program
    calls = [Call(call.kernel, tuple(alias.get(b, b) for b in call.args))
             for call in program.calls
             if not (isinstance(k := program.kernels[call.kernel], Kernel)
                     and call.args[k.out.buf] in alias)]
    return replace(program, calls=calls)


def _written_prefix(program: Program, call: Call,
                    writes: dict[int, DirectWrite]) -> int | None:
    """The input whose first rows `call` copies (see `read_written_rows`), if it does: its
    kernel stores, at every point of a row-major domain (rows, ...) of rows whole rows of
    the input, the input's element where the row is before the write's offset and the
    written value's element at the same place less the offset's rows where it is not."""
    kernel = program.kernels[call.kernel]
    if type(kernel) is not Kernel or not kernel.domain:
        return None
    value, bufs = kernel.out.value, program.buffers
    if not (isinstance(value, Binary) and value.op == "add"
            and isinstance(value.a, Load) and isinstance(value.b, Load)):
        return None
    out = call.args[kernel.out.buf]
    for cached, new in ((value.a, value.b), (value.b, value.a)):
        w = writes.get(call.args[new.buf])
        if w is None or call.args[cached.buf] != w.into:
            continue
        dtype = bufs[out].dtype
        if (bufs[out].role != "temp" or w.row_bytes % dtype.itemsize
                or {bufs[w.into].dtype, value.dtype, cached.dtype, new.dtype} != {dtype}):
            continue
        row = w.row_bytes // dtype.itemsize
        rows, off, i = kernel.domain[0], w.offset, kernel.loop_vars
        flat = flat_index(kernel.domain, i)
        if (prod(kernel.domain[1:]) == row and bufs[out].numel == rows * row
                and bufs[w.buffer].numel == (rows - off) * row
                and kernel.out.index == flat and cached.index == flat
                and new.index == flat - off * row and cached.valid == lt(i[0], off)
                and new.valid == logical_and(lt(off - 1, i[0]), lt(i[0], rows))):
            return w.into
    return None


def _fresh_pages(nbytes: int) -> np.ndarray:
    """`nbytes` of zeroed memory in a mapping of its own: unmapped, so given back to the
    system, as soon as the array is dropped (a `malloc`ed block may stay in the heap)."""
    return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)


class _Recycler:
    """The arrays of one output (with their addresses), reused once nothing outside holds
    them. An output that grows a little every run (a KV cache, one token longer per decode
    step) would need a new array every time, page-faulted in from the kernel; so arrays get a
    quarter more room than asked for, and a run is handed a view of the first `n` elements
    of a free array that is large enough. An output of constant `shape` (a decode step's
    logits) gets arrays of exactly that shape, handed out as they are: no view to make, nor
    to reshape when read."""

    KEEP = 3
    HEADROOM = 1.25

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...] | None = None) -> None:
        self.dtype, self.shape = dtype, shape
        self._owned: list[tuple[np.ndarray, int]] = []

    def take(self, n: int) -> tuple[np.ndarray, int]:
        """This run's array of `n` elements (a free array of ours, reused or new, or a view of
        its first `n`) and its address. It stays ours: a later run reuses it once no one
        holds it."""
        owned = self._owned
        for k in range(len(owned)):
            a = owned[k][0]
            # 3 references when no one else holds it (or a view of it): the tuple, `a` and
            # getrefcount's argument
            if n <= a.size <= n * self.HEADROOM * self.HEADROOM and sys.getrefcount(a) <= 3:
                entry = owned.pop(k)
                break
        else:
            a = np.empty(self.shape or int(n * self.HEADROOM) + 1, self.dtype)
            entry = (a, _address(a))
        owned.append(entry)
        del owned[: -self.KEEP]
        a = entry[0]
        return (a if a.size == n else a[:n]), entry[1]


def _unshared(a: object) -> np.ndarray | None:
    """`a` (an input's array in `graph.data`, which the caller holds in one variable) made
    writable when nothing else holds it: a C-contiguous uint8 array owning its memory, or
    viewing an array that owns it and that nothing else holds (GGUF readers' reshaped rows,
    which start on a 64-byte boundary of a slightly larger allocation); else None. CPython's
    reference counts, as `_Recycler.take` uses them."""
    if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.flags.c_contiguous):
        return None
    base = a.base
    # `a`'s reference to its base, `base` and getrefcount's argument
    if base is not None and not (isinstance(base, np.ndarray) and base.flags.owndata
                                 and sys.getrefcount(base) <= 3):
        return None
    # graph.data, the caller's variable, `a` and getrefcount's argument
    if sys.getrefcount(a) > 4 or (base is None and not a.flags.owndata):
        return None
    if base is not None:
        base.flags.writeable = True
    a.flags.writeable = True
    return a


class CpuRuntime(Runtime):
    """Runs a `Program` compiled into `library` (see the module docstring), whose entry
    point binds `direct` (`direct_writes(graph, program)`) and reads the input buffers
    `packed` (buffer -> (format, rows), `repack.packed_inputs`) in the repacked layout."""

    host_buffers = True

    def __init__(self, graph: Graph, program: Program, plan: MemoryPlan, library: Library,
                 direct: list[DirectWrite], packed: dict[int, tuple[str, int]] | None = None):
        super().__init__(graph)
        self._packed = dict(packed or {})
        self.program, self.plan, self.library = program, plan, library
        # no argtypes: its arguments are ctypes arrays, which ctypes passes as pointers, and
        # the thread count, an int; converting them through argtypes cost a decode step
        # about 10 us (caches cold after the weights streamed)
        self._run = library.handle[ENTRY_POINT]  # a function object of this runtime's own
        self._run.restype = ctypes.c_int
        bufs = program.buffers
        self._ptrs = (ctypes.c_void_p * max(len(bufs), 1))()
        self._dim_args = (ctypes.c_long * max(len(program.dims), 1))()
        self._inputs = [(k, b.node) for k, b in enumerate(bufs) if b.role == "input"]
        self._bound: dict[int, np.ndarray] = {}  # the input arrays the pointers point into
        self._input_index = {node: k for k, node in self._inputs}
        self._bound_clock = -1  # graph.data_clock when the inputs were last bound
        fresh = graph.retrieved | set(graph.assignments.values())
        self._fresh = [k for k, b in enumerate(bufs) if b.role == "output" and b.node in fresh]
        # value node -> (the write, its position in `writes`); the program stores them itself
        positions = {target: pos for pos, target in enumerate(self.writes)}
        self._direct_of = {bufs[w.buffer].node: (w, positions[w.target]) for w in direct}
        for w in direct:
            del self.host_writes[w.target]
        direct_bufs = {w.buffer for w in direct}
        self._kept = [k for k, b in enumerate(bufs)
                      if b.role == "output" and b.node not in fresh and k not in direct_bufs]
        # the buffers whose element counts a run needs (arrays of their own): evaluated
        # whenever the dims change, so not the arena's hundreds nor the written values
        self._sized = sorted({*self._kept, *self._fresh})
        self._numel: dict[int, int] = {}
        self._evaluate_numel = evaluator(bufs[k].numel for k in self._sized)
        self._dims_key: tuple[int, ...] | None = None
        # the dims those counts use, and their values when last evaluated: a decode step
        # moves the cache length, which no output's size depends on
        self._sized_dims = tuple(sorted(set().union(*(bufs[k].numel.free_vars
                                                      for k in self._sized))))
        self._sized_key: tuple[int, ...] | None = None
        self._from_input = {src for src in graph.assignments.values()
                            if isinstance(graph.nodes[src].op, ops.Input)}
        # input node -> (the array last run's assignment bound to it, its address)
        self._assigned: dict[int, tuple[np.ndarray, int]] = {}
        self._addresses: dict[int, int] = {}  # this run's fresh outputs' addresses
        self._arena = np.empty(0, np.uint8)
        self._layout_dims: dict[str, int] | None = None  # the dims of the arena's layout
        self._room = (ctypes.c_long * max(len(plan.slots), 1))()  # bytes each slot may take
        self._kept_arrays: dict[int, np.ndarray] = {}
        self._kept_values: dict[int, np.ndarray] = {}  # the same arrays by node
        # (buffer, node, recycler) of each fresh output
        self._recyclers = [(k, bufs[k].node, _Recycler(bufs[k].dtype.numpy, self._shape_of(k)))
                           for k in self._fresh]
        self._shaped = {node for _, node, recycler in self._recyclers if recycler.shape}
        self.stats: dict[str, object] = {}  # compile-time facts, filled in by the backend
        # seconds spent inside the compiled program over all runs: the rest of a run's wall
        # time is host overhead (binding, Python), which benchmarks report
        self.native_s = 0.0
        self.last_threads = 0  # the thread count the governor gave the last run
        self._governor = governor()

    def _shape_of(self, buffer: int) -> tuple[int, ...] | None:
        """The constant shape of `buffer`'s node when the buffer holds exactly its elements."""
        spec = self.program.buffers[buffer]
        shape = self._static_shapes.get(spec.node)
        if shape is None or not spec.numel.is_const or spec.numel.value != math.prod(shape):
            return None
        return shape

    def _lay_out_arena(self, dims: dict[str, int]) -> None:
        """Give every arena slot room for these dims and a quarter more: a decode step's
        temporaries grow by a row per step, and are only laid out anew (pointers rebound,
        the arena perhaps reallocated) when one no longer fits (the entry point says so), or
        when a dim fell below half its value at the last layout (see `_arena_shrinks`)."""
        offsets, total = self.plan.layout(dims, _Recycler.HEADROOM)
        self._layout_dims = dict(dims)
        if not total + _ALIGN <= self._arena.size <= 2 * (total + _ALIGN):
            self._arena = _fresh_pages(total + _ALIGN)
        base = -_address(self._arena) % _ALIGN + _address(self._arena)
        for slot, members in enumerate(self.plan.slots):
            for b in members:
                self._ptrs[b] = base + offsets[slot]
        for slot, (start, end) in enumerate(zip(offsets, [*offsets[1:], total])):
            self._room[slot] = end - start

    def _arena_shrinks(self, dims: dict[str, int]) -> bool:
        """Whether a dim fell below half its value at the last layout: the first decode step
        after a prefill, whose temporaries (megabytes for a 128-token prompt) the decode
        steps no longer need. Laying out again then gives the arena back, so it does not add
        to the peak memory while the KV cache grows."""
        if self._layout_dims is None:
            return True
        for d, v in self._layout_dims.items():  # noqa: SIM110 (no generator to run per step)
            if 2 * dims.get(d, 0) < v:
                return True
        return False

    def _bind_dims(self, dims: dict[str, int]) -> None:
        key = tuple(map(dims.__getitem__, self.program.dims))
        if key == self._dims_key:
            return
        self._dims_key = key
        for k, v in enumerate(key):
            self._dim_args[k] = v
        if self._arena_shrinks(dims):
            self._lay_out_arena(dims)
        sized_key = tuple(map(dims.__getitem__, self._sized_dims))
        if sized_key == self._sized_key:
            return
        self._sized_key = sized_key
        bufs = self.program.buffers
        self._numel = dict(zip(self._sized, self._evaluate_numel(dims)))
        for k in self._kept:
            spec = bufs[k]
            old = self._kept_arrays.get(k)
            if old is None or old.size != self._numel[k]:
                self._kept_arrays[k] = np.empty(self._numel[k], spec.dtype.numpy)
            self._ptrs[k] = _address(self._kept_arrays[k])
        self._kept_values = {bufs[k].node: a for k, a in self._kept_arrays.items()}

    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        self._bind_dims(dims)
        if self._bound_clock < 0:
            changed = self._inputs
        else:  # only the inputs set since the last run can need another pointer
            index = self._input_index
            changed = [(index[n], n) for n in graph.changed_since(self._bound_clock)
                       if n in index]
        self._bind_inputs(graph, changed)
        self._bound_clock = graph.data_clock
        self.release_outputs()  # drop last run's references so its arrays can be recycled
        values = dict(self._kept_values)
        addresses: dict[int, int] = {}
        ptrs, numel = self._ptrs, self._numel
        for k, node, recycler in self._recyclers:
            values[node], address = recycler.take(numel[k])
            ptrs[k] = addresses[node] = address
        threads = self.last_threads = self._governor.threads()
        if self._run_native(threads):
            self._lay_out_arena(dims)  # a slot outgrew its room: nothing ran
            if self._run_native(threads):
                raise RuntimeError("cpu runtime: the arena laid out for dims "
                                   f"{self._layout_dims} does not fit them")
        self._addresses = addresses
        self._assigned.clear()
        self.finish_run(graph, values, dims)

    def _run_native(self, threads: int) -> int:
        """One call of the entry point (timed into `native_s`); nonzero: it did not run."""
        start = time.perf_counter()
        misfit = self._run(self._ptrs, self._dim_args, threads, self._room)
        self.native_s += time.perf_counter() - start
        return misfit

    def fetch(self, node_id: int) -> np.ndarray:
        if node_id in self._shaped:
            return self._outputs[node_id]  # this run's array, in the node's shape already
        direct = self._direct_of.get(node_id)
        if direct is None:
            return super().fetch(node_id)
        write, pos = direct  # the value is its rows in the input's array
        target = self._bound[write.into]
        start = self.write_offsets(self._dims)[pos] * write.row_bytes // target.itemsize
        (shape,) = self.shapes((node_id,), self._dims)
        return target.reshape(-1)[start:start + int(np.prod(shape))].reshape(shape)

    def _bind_inputs(self, graph: Graph, inputs: list[tuple[int, int]]) -> None:
        """Point the program's input buffers `inputs` (buffer, node) at their arrays."""
        bufs, bound, assigned = self.program.buffers, self._bound, self._assigned
        for k, node in inputs:
            a = graph.data[node]
            if a is bound.get(k):
                continue  # same array object: the pointer is still right
            hint = assigned.get(node)
            if hint is not None and hint[0] is a:
                # last run's output, fed back: a fresh contiguous array of ours, of the
                # input's dtype (Graph.assign checks it), whose address is known
                address = hint[1]
            elif k in self._packed:
                sole = _unshared(a)
                a, address = self._bind_packed(graph, node, a, sole, *self._packed[k])
            else:
                if (isinstance(a, DeviceArray) or a.dtype != bufs[k].dtype.numpy
                        or not a.flags.c_contiguous):
                    a = np.ascontiguousarray(a, dtype=bufs[k].dtype.numpy)
                    graph.set_data(node, a)
                address = _address(a)
            bound[k] = a
            self._ptrs[k] = address

    def prepare(self, graph: Graph) -> None:
        """Repack the weights set already (`_bind_packed`), which a run then binds as they
        are: a model's first prompt does not wait for its repack."""
        self._bind_inputs(graph, [(k, node) for k, node in self._inputs
                                  if k in self._packed and node in graph.data])

    def _bind_packed(self, graph: Graph, node: int, a: object, sole: np.ndarray | None,
                     qtype: str, rows: int) -> tuple[object, int]:
        """A weight the program reads repacked (repack.py), and the address of its packed
        bytes: repacked once when the caller set a new array, which `graph.data` then holds
        as a `DeviceArray` that reads back as GGUF's bytes. The array is repacked in place
        when nothing but the graph holds it or its memory (`sole`, `_unshared`: a model's
        weight after `Module.release_to`; no one can see the write, and no second copy is
        ever made), else into an array of ours (the caller's is never written, and the graph
        does not keep it alive)."""
        packed = self.device_buffer(a)
        if packed is None:
            raw = sole if sole is not None else np.ascontiguousarray(a, dtype=np.uint8)
            nbytes = self.program.buffers[self._input_index[node]].numel.value
            if raw.size != nbytes:  # check_inputs checked the shape: a runtime's own guard
                raise ValueError(f"input node {node} holds {raw.size} bytes of {qtype} weights; "
                                 f"its program reads {nbytes}")
            packed = repack_native(raw, qtype, rows, self.library.handle,
                                   self._governor.threads(), in_place=sole is not None)
            shape = raw.shape
            a = DeviceArray(lambda: unpack(packed, qtype, rows).reshape(shape), shape, np.uint8,
                            buffer=packed, owner=self.owner)
            graph.set_data(node, a)
        return a, _address(packed)

    def download(self, buffer: np.ndarray, dtype: object) -> np.ndarray:
        return buffer

    def read(self, buffer: np.ndarray, shape: Shape, dtype: object) -> np.ndarray:
        """`buffer` in `shape`: itself when it has that shape already (see `_Recycler`)."""
        return buffer if buffer.shape == shape else buffer.reshape(shape)

    def hand_over(self, graph: Graph, target: int, src: int, buffer: np.ndarray | None,
                  shape: Shape) -> np.ndarray:
        """This run's own array (no copy: the next run writes a fresh one), remembered with
        its address so the next run binds it without looking it up."""
        if src in self._from_input:
            return graph.data[src].reshape(shape)
        a = buffer.reshape(shape)
        self._assigned[target] = (a, self._addresses[src])
        return a
