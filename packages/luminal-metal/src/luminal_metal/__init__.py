"""luminal-metal: the luminal backend for Apple silicon (Metal Shading Language via PyObjC).

Graphs lower to fused MSL kernels rendered by luminal-core's C-family renderer with a Metal
dialect (threadgroup reductions with SIMD-group operations, simdgroup-matrix GEMMs, quantized
matvecs); the runtime encodes a whole execution into one command buffer. It needs macOS on
Apple silicon; elsewhere the backend is listed as unavailable with the reason.
"""

from .backend import MetalBackend
from .device import NoDeviceError
from .dialect import METAL, MetalDialect

__all__ = ["METAL", "MetalBackend", "MetalDialect", "NoDeviceError"]
