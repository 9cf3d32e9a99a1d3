"""`CudaBackend`: the luminal backend registered as "cuda"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal.backend import Backend, BackendStatus
from luminal.dtypes import DType, dtype_of
from luminal_codegen.half import HalfPrecision

from .device import import_cupy, open_device, probe

if TYPE_CHECKING:
    from luminal.graph import Graph
    from luminal_codegen.ir import Program

    from .codegen import Module


class CudaBackend(Backend):
    """Generated CUDA C (NVRTC), cuBLAS matmuls, fused attention and quantized matvec, and
    CUDA-graph replay, on an NVIDIA GPU through CuPy.

    Args:
        dtype: None runs the graph's own dtypes; "float16" or "bfloat16" first applies
            `HalfPrecision(dtype)` (float32 compute in half, results still float32).
        graph_cache: dim bindings kept, each with its captured CUDA graph (0: no CUDA graphs).
        tf32: let float32 matmuls use TF32 tensor cores (faster, ~1e-3 relative error).
        fuse_attention: recognise attention and run it as one fused kernel.
    """

    name = "cuda"
    priority = 200
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool")

    def __init__(self, dtype: DType | str | None = None, graph_cache: int = 8,
                 tf32: bool = False, fuse_attention: bool = True):
        self.half = HalfPrecision(dtype_of(dtype)) if dtype is not None and dtype_of(
            dtype).name != "float32" else None
        if graph_cache < 0:
            raise ValueError(f"graph_cache must be >= 0, got {graph_cache}")
        self.graph_cache = graph_cache
        self.tf32 = tf32
        self.fuse_attention = fuse_attention

    def probe(self) -> BackendStatus:
        return probe()

    def build(self, graph: Graph) -> tuple[Program, Module]:
        """Lower `graph` and generate its CUDA source; needs no GPU (nor CuPy)."""
        from .codegen import build_module
        from .lowering import lower

        if self.half is not None:
            self.half.compile(graph)
        module = build_module(lower(graph, self.fuse_attention))
        return module.program, module

    def compile(self, graph: Graph) -> None:
        from .runtime import CudaRuntime, RuntimeOptions

        cupy = import_cupy()
        info = open_device(cupy)
        program, module = self.build(graph)
        with cupy.cuda.Device(info.ordinal):
            runtime = CudaRuntime(graph, program, module, cupy, info.ordinal,
                                  RuntimeOptions(self.graph_cache, self.tf32))
        graph.set_runtime(runtime)

    def __repr__(self) -> str:
        half = f", dtype={self.half.dtype.name!r}" if self.half is not None else ""
        return f"CudaBackend(graph_cache={self.graph_cache}{half})"
