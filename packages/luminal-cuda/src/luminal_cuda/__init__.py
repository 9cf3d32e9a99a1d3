"""luminal-cuda: the luminal backend for NVIDIA GPUs, through CuPy.

    import luminal as lm
    from luminal_cuda import CudaBackend, HalfPrecision
    g.compile((lm.GenericCompiler(), CudaBackend()))                  # or lm.backend("cuda")
    g.compile((lm.GenericCompiler(), CudaBackend(dtype="float16")))   # half compute

CuPy is imported only when the backend is probed or compiles a graph.
"""

from luminal.device_array import DeviceArray, StaleDeviceArrayError
from luminal_codegen.half import HalfPrecision

from .backend import CudaBackend
from .device import CudaUnavailableError, probe

__version__ = "0.1.0"

__all__ = [
    "CudaBackend",
    "CudaUnavailableError",
    "DeviceArray",
    "HalfPrecision",
    "StaleDeviceArrayError",
    "probe",
]
