"""A stand-in for PyObjC's `Metal` module that runs `MetalRuntime` on the CPU.

It offers the calls luminal-metal's device and runtime make, with the argument conventions of
PyObjC (out-parameters returned as tuples, selectors as method names with underscores), and
executes what they encode: `newLibraryWithSource` compiles the MSL with clang++ and the shim
(`msl_cpu.cpu_source`), buffers are NumPy byte arrays, and a committed command buffer runs its
dispatches in order through the kernels' CPU drivers, checking that each kernel is dispatched
the way its kind needs (threads for one-thread-per-point kernels, threadgroups for the
cooperative ones) with every argument bound.

What it tests: the runtime's own logic (arena offsets, dims bound with `setBytes`, GEMV/GEMM
selection, output buffers, KV caches handed back as device arrays). What it cannot: that
PyObjC's real bindings take these calls (method names and signatures are written from
Apple's and PyObjC's documentation, unverified here), and anything about a real GPU.
"""

from __future__ import annotations

import ctypes
import struct
import types
from typing import Any

import numpy as np


class _Alloc:
    """`Cls.alloc().init()`, as Objective-C classes are instantiated through PyObjC."""

    @classmethod
    def alloc(cls):
        return cls()

    def init(self):
        return self


class CompileOptions(_Alloc):
    fast_math = True

    def setFastMathEnabled_(self, value: bool) -> None:
        self.fast_math = value


class PipelineDescriptor(_Alloc):
    function = None

    def setComputeFunction_(self, function) -> None:
        self.function = function


class Buffer:
    def __init__(self, array: np.ndarray):
        self.array = array

    def length(self) -> int:
        return self.array.nbytes

    def contents(self):
        array = self.array
        return types.SimpleNamespace(as_buffer=lambda n: memoryview(array)[:n])


class Library:
    def __init__(self, lib: Any, signatures: dict):
        self.lib, self.signatures = lib, signatures

    def newFunctionWithName_(self, name: str):
        return (self, name) if name in self.signatures else None


class Pipeline:
    def __init__(self, library: Library, name: str, driver: Any):
        self.name, self.driver = name, driver
        self.buffers, self.dims, self.per_thread = library.signatures[name]

    def maxTotalThreadsPerThreadgroup(self) -> int:
        return 1024


class Encoder:
    def __init__(self, log: list):
        self.log = log
        self.pipeline: Pipeline | None = None
        self.bound: dict[int, Any] = {}

    def setComputePipelineState_(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def setBuffer_offset_atIndex_(self, buffer: Buffer, offset: int, index: int) -> None:
        self.bound[index] = (buffer, offset)

    def setBytes_length_atIndex_(self, data: bytes, length: int, index: int) -> None:
        self.bound[index] = bytes(data[:length])

    def dispatchThreads_threadsPerThreadgroup_(self, grid, group) -> None:
        self._dispatch(True, grid, group)

    def dispatchThreadgroups_threadsPerThreadgroup_(self, groups, group) -> None:
        self._dispatch(False, groups, group)

    def _dispatch(self, per_thread: bool, size, group) -> None:
        p = self.pipeline
        if p.per_thread != per_thread:
            raise AssertionError(f"{p.name}: dispatched as {'threads' if per_thread else 'groups'}"
                                 " but written for the other kind")
        buffers = [self.bound[k] for k, _ in p.buffers]
        dims = [struct.unpack("<q", self.bound[k])[0] for k in p.dims]
        self.log.append((p, buffers, dims, size[0], group[0]))

    def endEncoding(self) -> None:
        pass


class CommandBuffer:
    def __init__(self):
        self.log: list = []

    def computeCommandEncoder(self) -> Encoder:
        return Encoder(self.log)

    def commit(self) -> None:
        for pipeline, buffers, dims, size, threads in self.log:
            pointers = (ctypes.c_void_p * max(len(buffers), 1))(
                *(buf.array.ctypes.data + offset for buf, offset in buffers))
            values = (ctypes.c_long * max(len(dims), 1))(*dims)
            pipeline.driver(pointers, values, size, threads)

    def waitUntilCompleted(self) -> None:
        pass

    def error(self):
        return None


class Device:
    def __init__(self, msl: Any):
        self.msl = msl
        self.libraries = 0  # how many times a library was compiled

    def name(self) -> str:
        return "emulated Apple GPU (CPU)"

    def hasUnifiedMemory(self) -> bool:
        return True

    def newCommandQueue(self):
        return types.SimpleNamespace(commandBuffer=CommandBuffer)

    def newLibraryWithSource_options_error_(self, source: str, options, error):
        assert options.fast_math is False
        self.libraries += 1
        lib = self.msl.KernelLibrary().compile(self.msl.cpu_source(source))
        return Library(lib, self.msl.signatures(source)), None

    def newComputePipelineStateWithDescriptor_options_reflection_error_(self, desc, options,
                                                                      reflection, error):
        library, name = desc.function
        return Pipeline(library, name, self.msl.driver(library.lib, name)), None, None

    def newBufferWithLength_options_(self, length: int, options: int) -> Buffer:
        return Buffer(np.zeros(length, np.uint8))

    def newBufferWithBytesNoCopy_length_options_deallocator_(self, host, length, options,
                                                             deallocator) -> Buffer:
        return Buffer(host.view(np.uint8).reshape(-1)[:length])


def module(msl: Any) -> types.ModuleType:
    """A `Metal` module whose default device is a new emulated one."""
    metal = types.ModuleType("Metal")
    device = Device(msl)
    metal.MTLCreateSystemDefaultDevice = lambda: device
    metal.MTLCompileOptions = CompileOptions
    metal.MTLComputePipelineDescriptor = PipelineDescriptor
    metal.MTLSizeMake = lambda x, y, z: (x, y, z)
    return metal
