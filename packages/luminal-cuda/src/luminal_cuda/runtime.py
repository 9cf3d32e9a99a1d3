"""`CudaRuntime`: executes a compiled graph, replaying CUDA graphs after the first run.

Per execution:

1. The dim values form a key (exact values of the dims cuBLAS calls depend on, buckets of the
   others: `dims.py`). Its *binding* (buffer sizes, grids, cuBLAS calls, prepared for the top
   of each bucket) is built once and kept in a bounded LRU (`graph_cache` entries); building
   it may grow allocations, which drops every other binding because their pointers are stale.
2. The real dim values go to the device array kernels read them from, and inputs whose host
   data changed since their last upload (`graph.data_version`) are copied into their device
   buffers, on the stream, before anything runs: a replay reads the same buffers with the new
   contents.
3. A binding's first run launches its steps eagerly (this also lets cuBLAS set up its
   workspace outside any capture); the second captures them into a CUDA graph, and every later
   run with the same key is a single `cudaGraphLaunch`. A key never reuses a graph captured
   for another one: at worst it runs eagerly, never wrongly.
4. Launches follow the module's levels of independent calls, each level one fused launch
   where it can be (`fusion.py`). Assignments (KV caches) are device-to-device copies at the
   end of the run, all in one launch, captured with it; the input then holds a `DeviceArray`
   on the host side.

Input versions, assignments and `fetch` are core's `luminal.Runtime` steps; this module adds
the allocations, the bindings and the CUDA graphs.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from luminal.device_array import DeviceArray
from luminal.dtypes import DType
from luminal.graph import Graph
from luminal.runtime import Runtime, Shape
from luminal_codegen.ir import Program, QuantOperand, kernel_dims

from .codegen import NVRTC_OPTIONS, Gemm, Generated, Module, QuantGemm, fusible_function
from .cublas import gemm_function
from .dims import DimPolicy
from .memory import DeviceMemory
from .quant import scratch_dtype
from .steps import Launcher, Step


@dataclass
class Binding:
    """The prepared launches for one set of dim values, and their CUDA graph once captured."""

    steps: list[Step]
    labels: list[str]  # what each step launches ("gemm lm_k3", "qmatvec lm_k5_qmv", ...)
    graph: Any = None
    runs: int = 0
    capture_error: str | None = None  # why this binding could not be captured


@dataclass
class RuntimeOptions:
    """`graph_cache`: how many dim bindings (each with its captured CUDA graph) are kept;
    0 disables CUDA graphs. `tf32`: float32 GEMMs may use TF32 tensor cores."""

    graph_cache: int = 8
    tf32: bool = False


class CudaRuntime(Runtime):
    """Runs a `Program` on one GPU (see the module docstring)."""

    def __init__(self, graph: Graph, program: Program, module: Module, cupy: Any, ordinal: int,
                 options: RuntimeOptions):
        super().__init__(graph)
        self.cupy = cupy
        self.device = cupy.cuda.Device(ordinal)
        self.program = program
        self.module = module
        self.options = options
        # runs launched kernel by kernel, captures into CUDA graphs, replays of captured graphs
        self.stats = {"eager": 0, "captured": 0, "replayed": 0}
        self.capture_warned = False
        self.plan = module.plan
        self.slot_of = self.plan.slot_of
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.memory = DeviceMemory(cupy, self.stream)
        self.memory.ensure("dims", 8 * max(len(program.dims), 1), grow=False)
        self.bindings: OrderedDict[tuple[int, ...], Binding] = OrderedDict()
        self.resident: set[int] = set()  # inputs whose allocation holds their assigned value
        self.generation = 0  # bumped per run: DeviceArrays of older runs are stale
        self.nodes = {n.id: n for n in graph.nodes.values()}
        self.inputs = [n.id for n in graph.input_nodes()
                       if n.id in {b.node for b in program.buffers} or n.id in self.assignments
                       or n.id in self.assignments.values()]
        self.input_set = frozenset(self.inputs)
        # what the next upload must look at: the graph's data clock at the last upload (None:
        # every input), and the inputs whose device copy was lost since (`forget_upload`)
        self.upload_clock: int | None = None
        self.lost: set[int] = set()
        self.outputs = {spec.node: spec.node for spec in program.buffers if spec.role == "output"}
        self.quant = [k for k, c in enumerate(module.codes) if isinstance(c, QuantGemm)]
        self.policy = self._dim_policy(graph)
        self.cublas = cupy.cuda.cublas
        raw = cupy.RawModule(code=module.source, options=NVRTC_OPTIONS)
        self.launcher = Launcher(cupy, raw, gemm_function(cupy), cupy.cuda.get_cublas_handle(),
                                 self.stream, self.memory.ptr("dims"), options.tf32)

    def _dim_policy(self, graph: Graph) -> DimPolicy:
        """cuBLAS calls need exact dims; sizes of buffers and grids must grow with the rest."""
        exact: set[str] = set()
        sizes = [b.numel for b in self.program.buffers]
        for kernel, code in zip(self.program.kernels, self.module.codes):
            if isinstance(code, (Gemm, QuantGemm)):
                exact |= set(kernel_dims(kernel))
            elif isinstance(code, Generated):
                sizes.append(code.kernel.points)
        for node in self.inputs:
            sizes.extend(self.nodes[node].shape)
        return DimPolicy.of(graph.free_dims(), exact, sizes)

    # ----- sizes and pointers ---------------------------------------------------------------
    def _nbytes(self, node: int, dims: dict[str, int]) -> int:
        n = self.nodes[node]
        count = 1
        for d in n.shape:
            count *= d.evaluate(dims)
        return count * n.dtype.itemsize

    def _allocate(self, dims: dict[str, int]) -> bool:
        """Grow every allocation to what `dims` needs; True when any pointer moved."""
        moved = False
        for node in self.inputs:
            need = self._nbytes(node, dims)
            src = self.assignments.get(node)
            if src is not None:
                need = max(need, self._nbytes(src, dims))
            resident = node in self.resident
            if self.memory.ensure(node, need, preserve=resident):
                moved = True
                if not resident:
                    self.forget_upload(node)
        for spec in self.program.buffers:
            if spec.role == "output":
                moved |= self.memory.ensure(spec.node, self._nbytes(spec.node, dims))
        _, arena = self.plan.layout(dims)
        moved |= self.memory.ensure("arena", arena)
        moved |= self.memory.ensure("scratch", self._scratch_bytes(dims))
        return moved

    def _scratch_bytes(self, dims: dict[str, int]) -> int:
        need = 0
        for k in self.quant:
            mm = self.program.kernels[k]
            q = mm.b
            assert isinstance(q, QuantOperand)
            size = q.rows.evaluate(dims) * q.cols.evaluate(dims)
            need = max(need, size * scratch_dtype(mm).itemsize)
        return need

    def _pointers(self, dims: dict[str, int]) -> list[int]:
        offsets, _ = self.plan.layout(dims)
        arena = self.memory.ptr("arena")
        out = []
        for k, spec in enumerate(self.program.buffers):
            if spec.role == "temp":
                out.append(arena + offsets[self.slot_of[k]])
            else:
                out.append(self.memory.ptr(spec.node))
        return out

    # ----- bindings -------------------------------------------------------------------------
    def _binding(self, key: tuple[int, ...], dims: dict[str, int]) -> Binding:
        binding = self.bindings.get(key)
        if binding is not None:
            self.bindings.move_to_end(key)
            return binding
        if self._allocate(dims):
            self.bindings.clear()
        ptrs = self._pointers(dims)
        scratch = self.memory.ptr("scratch")
        steps: list[Step] = []
        labels: list[str] = []
        for level in self.module.levels:
            launched, what = self._level(level.calls, ptrs, scratch, dims)
            steps += launched
            labels += what
        if self.assignments:
            self.memory.ensure(("copies", key), 24 * len(self.assignments), grow=False)
            copies = self.launcher.copies(self.memory.ptr(("copies", key)), [
                (self.memory.ptr(target), self.memory.ptr(src), self._nbytes(src, dims))
                for target, src in self.assignments.items()])
            steps += copies
            labels += [f"copy {len(self.assignments)} assignments"] * len(copies)
        binding = self.bindings[key] = Binding(steps, labels)
        while len(self.bindings) > max(self.options.graph_cache, 1):
            self.bindings.popitem(last=False)
        return binding

    def _level(self, calls: tuple[int, ...], ptrs: list[int], scratch: int,
                dims: dict[str, int]) -> tuple[list[Step], list[str]]:
        """The launches of one level of independent calls (`fusion.py`) and their labels: the
        level's kernels in one fused launch when each is one kernel at `dims`."""
        codes, program = self.module.codes, self.program
        args = {c: [ptrs[a] for a in program.calls[c].args] for c in calls}
        fusible = [c for c in calls if fusible_function(codes[program.calls[c].kernel])]
        members = [self.launcher.member(codes[program.calls[c].kernel], args[c], dims)
                   for c in fusible]
        name = self.module.fused.get(tuple(program.calls[c].kernel for c in fusible))
        steps: list[Step] = []
        labels: list[str] = []
        alone = list(calls)
        if name is not None and all(m is not None for m in members):
            launched = self.launcher.fused(name, [m for m in members if m is not None])
            steps += launched
            labels += [f"fused {name} ({len(members)} kernels)"] * len(launched)
            alone = [c for c in calls if c not in fusible]
        for c in alone:
            code = codes[program.calls[c].kernel]
            launched = self.launcher.steps(code, args[c], scratch, dims)
            steps += launched
            labels += self.launcher.labels(code, len(launched), dims)
        return steps, labels

    # ----- execution ------------------------------------------------------------------------
    def forget_upload(self, nid: int) -> None:
        super().forget_upload(nid)
        self.lost.add(nid)

    def _upload(self, graph: Graph) -> None:
        rt = self.cupy.cuda.runtime
        changed_input = self.changed_input
        # only the inputs set since the last upload and those whose device copy was lost: a
        # decode step sets the token and hands the caches over, of hundreds of inputs
        if self.upload_clock is None:
            candidates: Iterable[int] = self.inputs
        else:
            candidates = [n for n in (*graph.changed_since(self.upload_clock), *self.lost)
                          if n in self.input_set]
        self.upload_clock = graph.data_clock
        self.lost.clear()
        for node in candidates:
            host = changed_input(graph, node)
            if host is None:
                continue
            self.resident.discard(node)  # replaced by set(): its allocation needs no keeping
            if host.nbytes:
                rt.memcpyAsync(self.memory.ptr(node), host.ctypes.data, host.nbytes,
                               rt.memcpyHostToDevice, self.stream.ptr)

    def _upload_dims(self, dims: dict[str, int]) -> None:
        """The real dim values, where every kernel reads them."""
        if not self.program.dims:
            return
        host = np.array([dims[d] for d in self.program.dims], np.int64)
        rt = self.cupy.cuda.runtime
        rt.memcpyAsync(self.memory.ptr("dims"), host.ctypes.data, host.nbytes,
                       rt.memcpyHostToDevice, self.stream.ptr)

    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        key = self.policy.key(dims)
        with self.device, self.stream:
            binding = self._binding(key, self.policy.bound(dims))
            self._upload_dims(dims)
            self._upload(graph)
            self.cublas.setStream(self.launcher.handle, self.stream.ptr)
            self._run(binding)
        self.generation += 1
        self.finish_run(graph, self.outputs, dict(dims))

    def _run(self, binding: Binding) -> None:
        stats = self.stats
        if binding.graph is not None:
            binding.graph.launch(self.stream)
            stats["replayed"] += 1
        elif binding.runs and binding.capture_error is None and self.options.graph_cache:
            self._capture(binding)
        else:
            for step in binding.steps:
                step()
            stats["eager"] += 1
        binding.runs += 1

    def _capture(self, binding: Binding) -> None:
        stream = self.stream
        stream.begin_capture()
        try:
            for step in binding.steps:
                step()
        except Exception as e:
            # not capturable here (an old driver, a library call that refuses capture): this
            # binding keeps running eagerly, and the user learns why once
            with contextlib.suppress(Exception):  # the capture may already be invalidated
                stream.end_capture()
            binding.capture_error = f"{type(e).__name__}: {e}"
            if not self.capture_warned:
                self.capture_warned = True
                warnings.warn(f"luminal-cuda: CUDA graph capture failed ({binding.capture_error});"
                              " these dims run launch by launch", RuntimeWarning, stacklevel=4)
            self._run(binding)
            return
        binding.graph = stream.end_capture()
        binding.graph.launch(stream)
        self.stats["captured"] += 1

    def profile(self) -> list[tuple[str, float]]:
        """Launch the last run's steps one by one between CUDA events: (label, milliseconds)
        per launch, to see where a run's time goes. Launches do not overlap here, and the
        assignments copy again (the cache then holds what the last run stored: harmless)."""
        binding = next(reversed(self.bindings.values()))
        cuda = self.cupy.cuda
        with self.device, self.stream:
            self.cublas.setStream(self.launcher.handle, self.stream.ptr)
            events = [cuda.Event() for _ in range(len(binding.steps) + 1)]
            events[0].record(self.stream)
            for step, event in zip(binding.steps, events[1:]):
                step()
                event.record(self.stream)
            events[-1].synchronize()
        return [(label, cuda.get_elapsed_time(a, b))
                for label, a, b in zip(binding.labels, events, events[1:])]

    def replay_ms(self, times: int = 32) -> float | None:
        """GPU milliseconds per replay of the last run's CUDA graph, timed between CUDA events
        over `times` back-to-back replays (no host work in between, unlike a real step, so
        comparing it with a step's wall time splits GPU time from host overhead). None when
        that binding was not captured."""
        binding = next(reversed(self.bindings.values()))
        if binding.graph is None:
            return None
        cuda = self.cupy.cuda
        with self.device, self.stream:
            start, end = cuda.Event(), cuda.Event()
            start.record(self.stream)
            for _ in range(times):
                binding.graph.launch(self.stream)
            end.record(self.stream)
            end.synchronize()
        return cuda.get_elapsed_time(start, end) / times

    def hand_over(self, graph: Graph, target: int, src: int, buffer: Any,
                  shape: Shape) -> DeviceArray:
        """The run copied `src` into `target`'s allocation: a `DeviceArray` over it, stale
        after the next run."""
        self.resident.add(target)
        dtype = self.nodes[src].dtype
        generation = self.generation
        return DeviceArray(lambda: self.read(target, shape, dtype), shape, dtype.numpy,
                           buffer=self.memory.allocations[target], owner=self.owner,
                           is_current=lambda: self.generation == generation)

    # ----- reading results ------------------------------------------------------------------
    def read(self, key: object, shape: Shape, dtype: DType) -> np.ndarray:
        """The value of `shape` at the start of allocation `key` (a node id)."""
        host = np.empty(shape, dtype.numpy)
        with self.device:
            self.stream.synchronize()
            if host.nbytes:
                rt = self.cupy.cuda.runtime
                rt.memcpy(host.ctypes.data, self.memory.ptr(key), host.nbytes,
                          rt.memcpyDeviceToHost)
        return host
