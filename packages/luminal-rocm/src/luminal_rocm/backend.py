"""`OpenCLBackend`: the luminal backend registered as "rocm" (alias "opencl")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from luminal import Backend, BackendStatus

from .device import NoDeviceError, choose_device, import_pyopencl, open_device

if TYPE_CHECKING:
    from luminal import Graph


class OpenCLBackend(Backend):
    """Generated OpenCL C kernels on an AMD GPU (ROCm's OpenCL) or any OpenCL device.

    `device` is a `LUMINAL_OPENCL_DEVICE`-style spec ("P:D" or a name substring); None defers
    to the environment variable, then to the first GPU, then to any device.
    """

    name = "rocm"
    aliases = ("opencl",)
    # Above luminal-cpu on a GPU; the probe ranks an OpenCL CPU device (PoCL) below it.
    priority = 150
    schedulable = True
    cpu_device_priority = 50
    dtypes = ("float32", "float16", "bfloat16", "int32", "bool", "uint8")
    # DeviceDialect's settings (README "Schedule space"): work-items per group, points per
    # work-item, and which axis consecutive work-items walk
    schedule_space = {"group_size": (64, 1024), "points": (4,), "loop_order": (1,)}

    def __init__(self, device: str | None = None):
        self.device_spec = device

    def probe(self) -> BackendStatus:
        try:
            cl = import_pyopencl()
            choice = choose_device(cl, self.device_spec)
        except NoDeviceError as e:
            return BackendStatus(False, reason=str(e))
        on_cpu = bool(choice.device.type & cl.device_type.CPU)
        return BackendStatus(True, device=choice.describe(),
                             priority=self.cpu_device_priority if on_cpu else None)

    def compile(self, graph: Graph) -> None:
        from .runtime import OpenCLRuntime

        graph.set_runtime(OpenCLRuntime(graph, open_device(self.device_spec),
                                        self.schedule))
