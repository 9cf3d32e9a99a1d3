"""`MetalRuntime`: runs a lowered graph on the Metal device, on core's `Runtime` contract.

- The library of the whole program is compiled once (`Device.pipelines`, through the disk
  cache) and each kernel function gets its compute pipeline.
- Buffers live in shared (unified) memory: an upload writes where the GPU reads, and a
  page-aligned host array (a memory-mapped weight) is wrapped without a copy.
- Temporaries share one arena laid out by core's memory plan for the current dims.
- One execution is one command buffer: every kernel is encoded into one compute encoder
  (dims are passed with `setBytes`), committed, and waited for once.
- Outputs get fresh buffers each run, so an assigned value (a KV cache) handed back to its
  input as a `DeviceArray` stays on the device and is never overwritten by the run reading it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from luminal import Runtime
from luminal.symbolic import evaluator
from luminal_codegen import plan_memory

from .device import view

if TYPE_CHECKING:
    from luminal import Graph
    from luminal.dtypes import DType
    from luminal_codegen import Program

    from .device import Device
    from .kernels import KernelSource


@dataclass(frozen=True)
class DeviceBuffer:
    """A Metal buffer and how many bytes of it hold the value."""

    mtl: Any
    nbytes: int


@dataclass(frozen=True)
class _Step:
    pipeline: Any
    args: tuple[int, ...]  # program buffer per kernel argument
    dims: tuple[str, ...]
    size: int  # index of its size among the evaluated expressions
    when: int
    threads: int
    per_thread: bool


class MetalRuntime(Runtime):
    """The compiled form of one graph on the Metal device (see the module docstring)."""

    def __init__(self, graph: Graph, device: Device, program: Program, source: str,
                 kernels: list[KernelSource]):
        super().__init__(graph)
        self.device = device
        self.metal = device.metal
        functions = [launch.function for k in kernels for launch in k.launches]
        pipelines = device.pipelines(source, functions)
        self.buffers = program.buffers
        self.plan = plan_memory(program)
        self.slot_of = self.plan.slot_of
        exprs, self.steps = [], []
        for call in program.calls:
            for launch in kernels[call.kernel].launches:
                pipeline = pipelines[launch.function]
                limit = int(pipeline.maxTotalThreadsPerThreadgroup())
                if not launch.per_thread and launch.threads > limit:
                    raise RuntimeError(f"kernel {launch.function} needs {launch.threads} threads "
                                       f"per threadgroup; this device allows {limit}")
                exprs += [launch.size, launch.when]
                self.steps.append(_Step(pipeline, call.args, launch.dims, len(exprs) - 2,
                                        len(exprs) - 1, min(launch.threads, limit),
                                        launch.per_thread))
        self.sizes_at = len(exprs)
        exprs += [b.numel * b.dtype.itemsize for b in program.buffers]
        self.evaluate = evaluator(exprs)
        self._arena: DeviceBuffer | None = None

    # ----- the Runtime contract -----------------------------------------------------------
    def upload(self, host: np.ndarray) -> DeviceBuffer:
        return DeviceBuffer(self.device.upload(host), host.nbytes)

    def download(self, buffer: DeviceBuffer, dtype: DType) -> np.ndarray:
        return view(buffer.mtl, buffer.nbytes).view(dtype.numpy).copy()

    def launch(self, inputs: dict[int, DeviceBuffer], dims: dict[str, int]
               ) -> dict[int, DeviceBuffer]:
        values = self.evaluate(dims)
        nbytes = values[self.sizes_at:]
        offsets, total = self.plan.layout(dims)
        if self._arena is None or self._arena.nbytes < total:
            self._arena = DeviceBuffer(self.device.buffer(total), total)
        bound: list[tuple[Any, int]] = []
        outputs: dict[int, DeviceBuffer] = {}
        for b, spec in enumerate(self.buffers):
            if spec.role == "input":
                bound.append((inputs[spec.node].mtl, 0))
            elif spec.role == "temp":
                bound.append((self._arena.mtl, offsets[self.slot_of[b]]))
            else:
                out = outputs[spec.node] = DeviceBuffer(self.device.buffer(nbytes[b]), nbytes[b])
                bound.append((out.mtl, 0))
        self._encode(bound, values, dims)
        return outputs

    # ----- one command buffer -------------------------------------------------------------
    def _encode(self, bound: list[tuple[Any, int]], values: tuple[int, ...],
                dims: dict[str, int]) -> None:
        mtl = self.metal
        packed = {name: struct.pack("<q", value) for name, value in dims.items()}
        commands = self.device.queue.commandBuffer()
        encoder = commands.computeCommandEncoder()
        for step in self.steps:
            size = values[step.size]
            if not values[step.when] or size <= 0:
                continue
            encoder.setComputePipelineState_(step.pipeline)
            for pos, b in enumerate(step.args):
                buf, offset = bound[b]
                encoder.setBuffer_offset_atIndex_(buf, offset, pos)
            for j, name in enumerate(step.dims):
                encoder.setBytes_length_atIndex_(packed[name], 8, len(step.args) + j)
            group = mtl.MTLSizeMake(step.threads, 1, 1)
            if step.per_thread:
                encoder.dispatchThreads_threadsPerThreadgroup_(mtl.MTLSizeMake(size, 1, 1), group)
            else:
                encoder.dispatchThreadgroups_threadsPerThreadgroup_(
                    mtl.MTLSizeMake(size, 1, 1), group)
        encoder.endEncoding()
        commands.commit()
        commands.waitUntilCompleted()
        error = commands.error()
        if error is not None:
            raise RuntimeError(f"Metal command buffer failed: {error}")
