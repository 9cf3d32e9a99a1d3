"""`OpenCLRuntime`: runs a lowered graph on one OpenCL device.

Compile time: the graph is lowered (`luminal_codegen.lower`: fusion, views folded into
indexing), temporaries are assigned to shared slots by liveness (`plan_memory`), every kernel is
rendered, those the device has not built yet are built together (`Device.build_all`: few
driver invocations, through the disk cache), and each call gets its own `cl.Kernel` whose
arguments are set once, so a run is one `enqueue_nd_range_kernel` per call.

Run time, all on one in-order queue with no host wait inside a run:

- buffers are (re)allocated only when the dims grow past what they hold; kernel arguments are
  re-set only for buffers that changed and dims that changed value;
- inputs are uploaded only when `graph.data_version` says they changed (weights: once);
- every kernel is enqueued; nothing is read back until `fetch()`;
- `graph.assignments` stay on the device: the assigned value's buffer is handed to the input
  as a `DeviceArray` (no copy), and the node gets a fresh buffer for the next run.

Input versions, assignments and `fetch` are core's `luminal.Runtime` steps; this module adds
the buffers, their kernel arguments and the launches.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np
from luminal.runtime import Runtime, Shape
from luminal.symbolic import Expr
from luminal_codegen import Schedule, lower, plan_memory

from .dialect import DeviceDialect
from .kernels import KernelSource, render_program
from .launch import ExprTable
from .matmul import QUANT_KERNELS

if TYPE_CHECKING:
    from luminal import Graph
    from luminal.dtypes import DType
    from luminal_codegen import Program

    from .device import Device

# Inputs up to this size are copied on the host and uploaded without waiting, so the caller may
# reuse its array at once; larger ones (weights, uploaded once) are uploaded blocking instead
# of doubling their host memory.
ASYNC_UPLOAD_LIMIT = 1 << 20
_MIN_BYTES = 4  # OpenCL buffers cannot be empty


def kernel_sources(program: Program, device: Device) -> list[KernelSource]:
    """The OpenCL C of every kernel of a lowered program, for `device` (what the runtime
    builds; also lets a caller build the kernels of many graphs at once, see
    `Device.build_all`)."""
    return render_program(program, DeviceDialect(device.has_fp16), device.matmul_cpu,
                          device.max_work_group)


class OpenCLRuntime(Runtime):
    """The compiled form of one graph on one device (see the module docstring)."""

    def __init__(self, graph: Graph, device: Device, schedule: Schedule | None = None):
        super().__init__(graph)
        self.owner = device.context  # every runtime on the context binds the others' values
        self.device = device
        self.cl = device.cl
        self.queue = device.queue
        program = lower(graph, schedule, QUANT_KERNELS, device.max_kernel_args)
        plan = plan_memory(program)
        self.dims = program.dims
        sources = kernel_sources(program, device)
        built = device.build_all(sources)

        # storages: one per non-temporary buffer, then one per memory-plan slot
        slot_of = plan.slot_of
        own = [b for b, spec in enumerate(program.buffers) if spec.role != "temp"]
        self._store_of: dict[int, int] = {b: k for k, b in enumerate(own)}
        self._store_of.update({b: len(own) + s for b, s in slot_of.items()})
        sizes: list[tuple[Expr, ...]] = [
            (program.buffers[b].numel * program.buffers[b].dtype.itemsize,) for b in own
        ]
        self._sizes = sizes + list(plan.sizes)
        n = len(self._sizes)
        self._own: list[Any] = [None] * n  # buffers this runtime allocated
        self._bound: list[Any] = [None] * n  # what the kernels read and write
        self._users: list[list[tuple[Any, int]]] = [[] for _ in range(n)]
        self._spares: list[list[Any]] = [[] for _ in range(n)]

        # launch sizes and buffer sizes as slots of one expression table (see ExprTable)
        self._exprs = ExprTable()
        self._size_slots = [[self._exprs.slot(e) for e in sizes] for sizes in self._sizes]
        self._geometry = []
        self._dim_args: dict[str, list[tuple[Any, int]]] = {d: [] for d in self.dims}
        for call in program.calls:
            nparams = len(program.kernels[call.kernel].params)
            for spec in sources[call.kernel].launches:
                kobj = built[call.kernel].kernel(self.cl, spec.name)
                for pos, b in enumerate(call.args):
                    self._users[self._store_of[b]].append((kobj, pos))
                for j, name in enumerate(spec.dims):
                    self._dim_args[name].append((kobj, nparams + j))
                sizes = tuple(self._exprs.slot(e) for e in spec.global_size)
                self._geometry.append((kobj, self._exprs.slot(spec.when), sizes,
                                       spec.local_size))

        self._inputs = [(self._store_of[b], s.node)
                        for b, s in enumerate(program.buffers) if s.role == "input"]
        inputs = {store for store, _ in self._inputs}
        self._written = [store for store in range(n) if store not in inputs]
        self._node_store = {s.node: self._store_of[b] for b, s in enumerate(program.buffers)}
        self._input_nodes = {s.node for s in program.buffers if s.role == "input"}
        self._output_nodes = [s.node for s in program.buffers if s.role == "output"]

        self._dims_key: tuple[int, ...] | None = None
        self._dim_values: dict[str, int] = {}
        self._need: list[int] = [0] * n
        self._launches: list[tuple[Any, tuple[int, ...], tuple[int, ...]]] = []
        self._inflight: list[Any] = []  # events of asynchronous uploads (they pin host data)
        self._handed: dict[int, Any] = {}  # this run's assigned values, by source node

    # ----- one run ------------------------------------------------------------------------
    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        kernel_dims = {d: dims[d] for d in self.dims}
        key = tuple(kernel_dims.values())
        if key != self._dims_key:
            self._plan_run(kernel_dims)
            self._dims_key = key
        pending = self._bind_inputs(graph)
        self._allocate()
        enqueue, queue = self.cl.enqueue_nd_range_kernel, self.queue
        for kobj, global_size, local_size in self._launches:
            enqueue(queue, kobj, global_size, local_size)
        self._inflight = pending
        self._handed = {}
        self.finish_run(graph, {nid: self._bound[self._node_store[nid]]
                                for nid in self._output_nodes}, dims)

    def read(self, buffer: Any, shape: Shape, dtype: DType) -> np.ndarray:
        host = np.empty(shape, dtype.numpy)
        if host.size:
            self.cl.enqueue_copy(self.queue, host, buffer, is_blocking=True)
        return host

    @property
    def allocated_bytes(self) -> int:
        """Device memory this runtime holds for inputs, outputs and temporaries."""
        return sum(b.size for b in {id(b): b for b in self._own if b is not None}.values())

    # ----- steps --------------------------------------------------------------------------
    def _plan_run(self, dims: dict[str, int]) -> None:
        """Buffer sizes, launch sizes and dim arguments for new dim values."""
        values = self._exprs.evaluate(dims)
        self._need = [max((values[k] for k in slots), default=0) for slots in self._size_slots]
        launches = []
        for kobj, when, sizes, local in self._geometry:
            global_size = tuple(values[k] for k in sizes)
            if values[when] and min(global_size) > 0:
                launches.append((kobj, global_size, local))
        self._launches = launches
        for name, value in dims.items():
            if self._dim_values.get(name) != value:
                arg = np.int64(value)
                for kobj, pos in self._dim_args[name]:
                    kobj.set_arg(pos, arg)
        self._dim_values = dims

    def _bind(self, store: int, buf: Any) -> None:
        if self._bound[store] is not buf:
            self._bound[store] = buf
            for kobj, pos in self._users[store]:
                kobj.set_arg(pos, buf)

    def _new_buffer(self, store: int, nbytes: int) -> Any:
        """A buffer of at least `nbytes` for `store`: a spare one if big enough, else a new
        one with headroom when growing (a KV cache grows by a little every run)."""
        spares = self._spares[store]
        while spares:
            buf = spares.pop()
            if buf.size >= nbytes:
                return buf
        old = self._bound[store]
        size = max(nbytes, _MIN_BYTES, 0 if old is None else old.size * 3 // 2)
        return self.cl.Buffer(self.device.context, self.cl.mem_flags.READ_WRITE, size)

    def _ensure(self, store: int, nbytes: int) -> Any:
        buf = self._own[store]
        if buf is None or buf.size < nbytes:
            buf = self._own[store] = self._new_buffer(store, nbytes)
        return buf

    def _bind_inputs(self, graph: Graph) -> list[Any]:
        """Bind every input's data; returns the events of asynchronous uploads."""
        events = []
        for store, nid in self._inputs:
            resident = self.device_buffer(graph.data[nid])
            if resident is not None:
                self._bind(store, resident)
                continue
            host = self.changed_input(graph, nid)
            if host is None:  # its last upload is current
                self._bind(store, self._own[store])
                continue
            small = host.nbytes <= ASYNC_UPLOAD_LIMIT
            if small:  # snapshotted, so the caller may change its array at once
                host = host.copy()
            buf = self._ensure(store, host.nbytes)
            self._bind(store, buf)
            if host.nbytes:
                event = self.cl.enqueue_copy(self.queue, buf, host, is_blocking=not small)
                events.append(event)
        return events

    def _allocate(self) -> None:
        """Give every kernel-written storage a buffer big enough for the current dims."""
        for store in self._written:
            self._bind(store, self._ensure(store, self._need[store]))

    def hand_over(self, graph: Graph, target: int, src: int, buffer: Any,
                  shape: Shape) -> object:
        """`src`'s value as a `DeviceArray` that keeps its buffer (see DeviceArray)."""
        value = self._handed.get(src)
        if value is None:
            value = self._handed[src] = self._device_value(graph, src, shape)
        return value

    def _device_value(self, graph: Graph, src: int, shape: Shape) -> object:
        store = self._node_store.get(src)
        if store is None:  # an input no kernel reads: its value is on the host already
            return np.array(graph.data[src])
        dtype = self.node_info[src][1]
        buf = self._bound[store]
        if src in self._input_nodes:
            # an input's own buffer is overwritten by later uploads: copy it out
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            copy = self.cl.Buffer(self.device.context, self.cl.mem_flags.READ_WRITE,
                                  max(nbytes, _MIN_BYTES))
            if nbytes:
                self.cl.enqueue_copy(self.queue, copy, buf, byte_count=nbytes)
            return self.device_array(copy, shape, dtype)
        self._own[store] = None  # the next run writes `src` into another buffer
        value = self.device_array(buf, shape, dtype)
        weakref.finalize(value, self._spares[store].append, buf)
        return value
