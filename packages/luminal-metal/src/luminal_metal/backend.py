"""`MetalBackend`: the luminal backend registered as "metal"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal import Backend, BackendStatus

from .device import NoDeviceError, check_platform, import_metal, open_device

if TYPE_CHECKING:
    from luminal import Graph
    from luminal_codegen import Program

    from .kernels import KernelSource


class MetalBackend(Backend):
    """Generated Metal Shading Language kernels on an Apple-silicon GPU, through PyObjC.

    `build(graph)` lowers and renders without a device (what the tests check on Linux);
    `compile(graph)` also builds the library and installs the runtime (macOS only).
    """

    name = "metal"
    priority = 200
    schedulable = True
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool", "uint8")

    def probe(self) -> BackendStatus:
        try:
            check_platform()
            import_metal()
            device = open_device()
        except NoDeviceError as e:
            return BackendStatus(False, reason=str(e))
        return BackendStatus(True, device=device.describe())

    def build(self, graph: Graph) -> tuple[Program, str, list[KernelSource]]:
        """Lower `graph`; return the program, its MSL library source and each kernel's
        functions and launches. Needs no Metal device."""
        from .kernels import lower_for_metal, render_program

        program = lower_for_metal(graph, self.schedule)
        source, kernels = render_program(program)
        return program, source, kernels

    def compile(self, graph: Graph) -> None:
        from .runtime import MetalRuntime

        device = open_device()
        program, source, kernels = self.build(graph)
        graph.set_runtime(MetalRuntime(graph, device, program, source, kernels))
