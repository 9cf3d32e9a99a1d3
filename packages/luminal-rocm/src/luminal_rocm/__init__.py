"""luminal-rocm: the luminal backend for AMD GPUs through OpenCL (PyOpenCL).

Graphs lower to fused OpenCL C kernels rendered by luminal-core's C-family renderer with an
OpenCL dialect; the runtime enqueues a whole execution on one in-order queue. It runs on
ROCm's OpenCL and on any other OpenCL 1.2+ device, including PoCL on a CPU (how CI tests it).
"""

from .backend import OpenCLBackend
from .device import ENV_DEVICE, NoDeviceError

__all__ = ["ENV_DEVICE", "NoDeviceError", "OpenCLBackend"]
