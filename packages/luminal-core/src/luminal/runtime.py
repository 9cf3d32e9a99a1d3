"""`Runtime`: what a backend's `compile()` installs on the graph, and the host side of running it.

`Graph.execute()` calls `runtime.execute(graph, dims)`; `GraphTensor.numpy()` calls
`runtime.fetch(node_id)`. A backend supplies three methods for its own buffer type:

    upload(host)                 -> Buffer   a device copy of a flat host array
    launch(inputs, dims)         -> {node: Buffer}  run every kernel; the retrieved, kept and
                                              assigned nodes' buffers
    download(buffer, dtype)      -> np.ndarray  a flat host copy

(allocating the buffers `launch` writes is the backend's own business; one whose buffers can
be larger than the value they hold overrides `read(buffer, shape, dtype)` instead of
`download`).

The base owns the rest of the contract, in steps that a backend with its own memory plan
(luminal-cpu's single native call, luminal-rocm's kernel arguments bound once, luminal-cuda's
CUDA graphs) calls from its own `execute` instead of reimplementing them:

- `device_buffer(data)` / `changed_input(graph, node)` / `forget_upload(node)`: an input is
  bound directly when it holds a `DeviceArray` of this device (`owner`), and uploaded only
  when `graph.data_version` says it changed since its last upload (an assigned value handed
  over as such a `DeviceArray` counts as uploaded);
- `finish_run(graph, outputs, dims)`: records where this run's outputs are and carries out
  the assignments (`Graph.assign`), each value made by `hand_over`: by default a
  `DeviceArray` over the output's buffer (the next run reads it with no host round trip);
- `finish_run` also carries out the writes (`Graph.write`) of `host_writes` through
  `write_into`: by default on the host copy of the input, which is uploaded again; a runtime
  that computes a written value straight into the input's buffer drops it from `host_writes`;
- `fetch(node)`: downloads each output once per run;
- `shapes(nodes, dims)`: node shapes at the bound dims, evaluated by one compiled function.

`launch` must not write into its input buffers: they may be last run's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .device_array import DeviceArray
from .symbolic import evaluator

if TYPE_CHECKING:
    from .dtypes import DType
    from .ir import Graph, Write

Buffer = Any
Shape = tuple[int, ...]
_NEVER = object()  # the upload record of an input never uploaded


class Runtime:
    """Base class of a compiled graph's runtime (see the module docstring)."""

    # True where buffers are NumPy arrays already: assigned values are handed over as they are
    host_buffers = False

    def __init__(self, graph: Graph):
        self.node_info = {n.id: (n.shape, n.dtype) for n in graph.nodes.values()}
        self.input_ids = [n.id for n in graph.input_nodes()]
        self.assignments = dict(graph.assignments)
        self.writes = dict(graph.writes)
        # the writes finish_run carries out (write_into); a runtime removes those it performs
        self.host_writes = dict(self.writes)
        self._write_offsets = evaluator(w.offset for w in self.writes.values())
        # what the DeviceArrays this runtime binds directly belong to: itself by default, a
        # device context where every runtime on it can read another's buffers
        self.owner: object = self
        self._uploaded: dict[int, int | None] = {}  # input -> data_version on the device
        self._input_buffers: dict[int, Buffer] = {}  # the default binding's uploads
        self._outputs: dict[int, Buffer] = {}
        self._host: dict[int, np.ndarray] = {}
        self._dims: dict[str, int] = {}
        self._evaluators: dict[tuple[int, ...], Callable[..., tuple[int, ...]]] = {}
        self._assigned_shapes: tuple[tuple[Any, ...], list[Shape]] | None = None
        # the outputs whose shape no dim changes (a decode step's logits): `fetch` needs no
        # evaluation for them
        outputs = {*graph.retrieved, *graph.kept, *graph.assignments.values()}
        self._static_shapes = {
            nid: tuple(d.value for d in self.node_info[nid][0]) for nid in outputs
            if nid in self.node_info and all(d.is_const for d in self.node_info[nid][0])}

    # ----- what a backend supplies --------------------------------------------------------
    def upload(self, host: np.ndarray) -> Buffer:
        """A device buffer holding the flat, C-contiguous host array `host`."""
        raise NotImplementedError

    def launch(self, inputs: dict[int, Buffer], dims: dict[str, int]) -> dict[int, Buffer]:
        """Run the graph on `inputs` (input node -> buffer); return the output nodes' buffers."""
        raise NotImplementedError

    def download(self, buffer: Buffer, dtype: DType) -> np.ndarray:
        """A flat host copy of `buffer`, of `dtype`'s host type. Buffers that are host arrays
        already (`host_buffers`) are returned as they are."""
        if self.host_buffers:
            return buffer
        raise NotImplementedError

    def read(self, buffer: Buffer, shape: Shape, dtype: DType) -> np.ndarray:
        """The value of `shape` at the start of `buffer`, on the host (`download` reshaped)."""
        return self.download(buffer, dtype).reshape(shape)

    # ----- the contract -------------------------------------------------------------------
    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        """Run once with the graph's current inputs; carry out the assignments."""
        inputs = {nid: self._input_buffer(graph, nid) for nid in self.input_ids}
        self.finish_run(graph, {**inputs, **self.launch(inputs, dims)}, dims)

    def prepare(self, graph: Graph) -> None:
        """Bind, ahead of the first run, the inputs set already, where binding one costs
        more than a run (`Graph.prepare`; luminal-cpu repacks GGUF weights). By default
        nothing: the runs bind what they need."""

    def fetch(self, node_id: int) -> np.ndarray:
        """Host copy of a retrieved, kept or assigned node's last value (the node's shape)."""
        host = self._host.get(node_id)
        if host is None:
            shape = self._static_shapes.get(node_id)
            if shape is None:
                (shape,) = self.shapes((node_id,), self._dims)
            dtype = self.node_info[node_id][1]
            host = self.read(self._outputs[node_id], shape, dtype)
            self._host[node_id] = host
        return host

    # ----- steps for a backend's own execute() --------------------------------------------
    def device_buffer(self, data: object) -> Buffer | None:
        """The device buffer behind `data` when it is a `DeviceArray` this runtime may bind
        directly (same `owner`), else None."""
        if isinstance(data, DeviceArray) and data.owner is self.owner:
            return data.buffer
        return None

    def changed_input(self, graph: Graph, nid: int) -> np.ndarray | None:
        """Input `nid`'s data to upload, flat, C-contiguous and of the node's dtype (possibly
        the caller's own array); None when the device holds its current version already.
        Records the version as uploaded."""
        version = graph.data_version.get(nid)
        if self._uploaded.get(nid, _NEVER) == version:  # every input, every run: kept cheap
            return None
        self._uploaded[nid] = version
        dtype = self.node_info[nid][1]
        return np.ascontiguousarray(graph.data[nid], dtype=dtype.numpy).reshape(-1)

    def forget_upload(self, nid: int) -> None:
        """The device copy of input `nid` is gone (its buffer moved): upload it again."""
        self._uploaded.pop(nid, None)

    def finish_run(self, graph: Graph, outputs: dict[int, Buffer], dims: dict[str, int]) -> None:
        """Record this run's output buffers (`fetch` reads them) and hand every assigned value
        to its input (`hand_over`)."""
        self._outputs = outputs
        self._host = {}
        self._dims = dims
        if self.host_writes:
            offsets = dict(zip(self.writes, self.write_offsets(dims)))
            shapes = self.shapes((w.src for w in self.host_writes.values()), dims)
            for (target, w), shape in zip(self.host_writes.items(), shapes):
                self.write_into(graph, target, w, outputs.get(w.src), shape, offsets[target])
        if not self.assignments:
            return
        key = tuple(dims.items())
        if self._assigned_shapes is None or self._assigned_shapes[0] != key:
            self._assigned_shapes = (key, self.shapes(self.assignments.values(), dims))
        for (target, src), shape in zip(self.assignments.items(), self._assigned_shapes[1]):
            value = self.hand_over(graph, target, src, outputs.get(src), shape)
            graph.set_data(target, value)
            if isinstance(value, DeviceArray) and value.owner is self.owner:
                # the device holds this version: the next run's changed_input() is None
                self._uploaded[target] = graph.data_version[target]

    def write_offsets(self, dims: dict[str, int]) -> tuple[int, ...]:
        """Where each of `writes` (in order) starts along its axis, at `dims`."""
        return self._write_offsets(dims)

    def write_into(self, graph: Graph, target: int, write: Write, buffer: Buffer,
                   shape: Shape, offset: int) -> None:
        """Store `write.src`'s value (this run's `buffer`, of `shape`) into input `target` at
        `offset` along `write.dim` (`Graph.write`). This default writes into the host array
        in `graph.data` (a copy of it if it is not a writable NumPy array) and bumps its
        version, so a device runtime uploads the whole input again before the next run."""
        data = graph.data[target]
        if not isinstance(data, np.ndarray) or not data.flags.writeable:
            data = np.array(data)
        rows = (slice(None),) * write.dim + (slice(offset, offset + shape[write.dim]),)
        data[rows] = self.read(buffer, shape, self.node_info[write.src][1])
        graph.set_data(target, data)

    def release_outputs(self) -> None:
        """Drop every reference to the last run's outputs (before reusing their buffers)."""
        self._outputs = {}
        self._host = {}

    def hand_over(self, graph: Graph, target: int, src: int, buffer: Buffer,
                  shape: Shape) -> object:
        """The value input `target` takes after a run from node `src`, whose buffer this run
        is `buffer` (`Graph.assign`)."""
        if self.host_buffers:  # a copy: the next run may read its inputs as views
            return buffer.reshape(shape).copy()
        return self.device_array(buffer, shape, self.node_info[src][1])

    def device_array(self, buffer: Buffer, shape: Shape, dtype: DType) -> DeviceArray:
        """A value that stays in `buffer`, downloaded only when read, and that a runtime of
        the same `owner` binds directly as an input."""
        return DeviceArray(lambda: self.read(buffer, shape, dtype), shape, dtype.numpy,
                           buffer=buffer, owner=self.owner)

    def shapes(self, nodes: Iterable[int], dims: dict[str, int]) -> list[Shape]:
        """The shapes of `nodes` at `dims` (one compiled evaluation per set of nodes)."""
        nodes = tuple(nodes)
        evaluate = self._evaluators.get(nodes)
        if evaluate is None:
            evaluate = self._evaluators[nodes] = evaluator(
                d for nid in nodes for d in self.node_info[nid][0])
        flat, out, start = evaluate(dims), [], 0
        for nid in nodes:
            rank = len(self.node_info[nid][0])
            out.append(flat[start:start + rank])
            start += rank
        return out

    # ----- the default input binding ------------------------------------------------------
    def _input_buffer(self, graph: Graph, nid: int) -> Buffer:
        resident = self.device_buffer(graph.data[nid])
        if resident is not None:
            return resident
        host = self.changed_input(graph, nid)
        if host is not None:
            self._input_buffers[nid] = self.upload(host)
        return self._input_buffers[nid]
