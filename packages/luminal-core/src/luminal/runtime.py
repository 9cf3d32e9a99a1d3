"""`Runtime`: what a backend's `compile()` installs on the graph, and the host side of running it.

`Graph.execute()` calls `runtime.execute(graph, dims)`; `GraphTensor.numpy()` calls
`runtime.fetch(node_id)`. `Runtime` implements both over four methods a backend supplies for
its own buffer type:

    upload(host)                 -> Buffer   a device copy of a flat host array
    launch(inputs, dims)         -> {node: Buffer}  run every kernel; the retrieved, kept and
                                              assigned nodes' buffers
    download(buffer, dtype)      -> np.ndarray  a flat host copy

(allocating the buffers `launch` writes is the backend's own business).

The base owns the rest of the contract: an input is uploaded only when `graph.data_version`
says it changed, an assigned value stays on the device (the input then holds a `DeviceArray`
whose buffer the next run reads directly), and `fetch` downloads each output once per run.
`launch` must not write into its input buffers: they may be last run's outputs.

Backends with their own memory plan (luminal-cpu's single native call, luminal-cuda's CUDA
graphs, luminal-rocm's kernel arguments bound once) implement `execute` and `fetch` directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .device_array import DeviceArray

if TYPE_CHECKING:
    from .dtypes import DType
    from .ir import Graph

Buffer = Any


class Runtime:
    """Base class of a compiled graph's runtime (see the module docstring)."""

    # True where buffers are NumPy arrays already: assigned values are handed over as they are
    host_buffers = False

    def __init__(self, graph: Graph):
        self.node_info = {n.id: (n.shape, n.dtype) for n in graph.nodes.values()}
        self.input_ids = [n.id for n in graph.input_nodes()]
        self.assignments = dict(graph.assignments)
        self._uploaded: dict[int, tuple[int | None, Buffer]] = {}  # input -> (version, buffer)
        self._outputs: dict[int, Buffer] = {}
        self._host: dict[int, np.ndarray] = {}
        self._dims: dict[str, int] = {}

    # ----- what a backend supplies --------------------------------------------------------
    def upload(self, host: np.ndarray) -> Buffer:
        """A device buffer holding the flat, C-contiguous host array `host`."""
        raise NotImplementedError

    def launch(self, inputs: dict[int, Buffer], dims: dict[str, int]) -> dict[int, Buffer]:
        """Run the graph on `inputs` (input node -> buffer); return the output nodes' buffers."""
        raise NotImplementedError

    def download(self, buffer: Buffer, dtype: DType) -> np.ndarray:
        """A flat host copy of `buffer`, of `dtype`'s host type."""
        raise NotImplementedError

    # ----- the contract -------------------------------------------------------------------
    def execute(self, graph: Graph, dims: dict[str, int]) -> None:
        """Run once with the graph's current inputs; carry out the assignments."""
        inputs = {nid: self._input_buffer(graph, nid) for nid in self.input_ids}
        outputs = self.launch(inputs, dims)
        self._outputs = {**inputs, **outputs}
        self._host = {}
        self._dims = dims
        for target, src in self.assignments.items():
            graph.set_data(target, self._hand_over(src))

    def fetch(self, node_id: int) -> np.ndarray:
        """Host copy of a retrieved, kept or assigned node's last value (the node's shape)."""
        host = self._host.get(node_id)
        if host is None:
            shape, dtype = self._shape(node_id)
            host = self.download(self._outputs[node_id], dtype).reshape(shape)
            self._host[node_id] = host
        return host

    # ----- steps --------------------------------------------------------------------------
    def _input_buffer(self, graph: Graph, nid: int) -> Buffer:
        data = graph.data[nid]
        if isinstance(data, DeviceArray) and data.owner is self:
            return data.buffer
        version = graph.data_version.get(nid)
        seen = self._uploaded.get(nid)
        if seen is not None and seen[0] == version:
            return seen[1]
        dtype = self.node_info[nid][1]
        buffer = self.upload(np.ascontiguousarray(data, dtype=dtype.numpy).reshape(-1))
        self._uploaded[nid] = (version, buffer)
        return buffer

    def _shape(self, nid: int) -> tuple[tuple[int, ...], DType]:
        shape, dtype = self.node_info[nid]
        return tuple(d.evaluate(self._dims) for d in shape), dtype

    def _hand_over(self, src: int) -> np.ndarray | DeviceArray:
        shape, dtype = self._shape(src)
        buffer = self._outputs[src]
        if self.host_buffers:  # a copy: the next run may read its inputs as views
            return buffer.reshape(shape).copy()
        return DeviceArray(lambda: self.download(buffer, dtype), shape, dtype.numpy,
                           buffer=buffer, owner=self)

