"""The OpenCL C dialect of luminal's C-family renderer, for one device.

Half-precision values are always computed in float32 and rounded to half at node outputs
(luminal's semantics). Where the device has `cl_khr_fp16`, half buffers are read and written
with plain conversions. Without it (PoCL on a CPU, older drivers) the `half` type may only
point to memory: buffers go through `vload_half`/`vstore_half_rte`, and rounding a float to
half precision stores into a private `ushort` seen as a `half *`, which needs no extension.
"""

from __future__ import annotations

from luminal.dtypes import DType
from luminal_codegen import Dialect, GpuDialect

from .launch import ELEMENTWISE_GROUP

_ROUND_HALF = (
    "inline float lm_round_half(float x) { ushort h; vstore_half_rte(x, 0, (__private half *)&h);"
    " return vload_half(0, (const __private half *)&h); }\n"
)
_ROUND_HALF_FP16 = "inline float lm_round_half(float x) { return (float)(half)x; }\n"


class DeviceDialect(GpuDialect):
    """OpenCL C 1.2 for a device with (`fp16=True`) or without the `cl_khr_fp16` extension."""

    name = "opencl"
    helper_qualifier = "inline"
    global_id = "(long)get_global_id(0)"
    kernel_qualifier = "__kernel"
    buffer_qualifier = "__global "
    half_storage = "half"
    math_functions = {"log2": "log2", "exp2": "exp2", "sin": "sin", "sqrt": "sqrt", "fmod": "fmod"}
    global_count = "(long)get_global_size(0)"
    # work-items per work-group of a generated kernel (the launch caps it at the device's
    # limit); the other settings are `GpuDialect`'s (`points`) and `Dialect`'s (`loop_order`)
    group_size = ELEMENTWISE_GROUP
    tunable = {"group_size": (1, 1 << 16), "points": (1, 64), "loop_order": (0, 8)}

    def __init__(self, fp16: bool):
        self.fp16 = fp16

    def load(self, dt: DType, buf: str, index: str) -> str:
        if dt.name == "float16":
            return f"((float){buf}[{index}])" if self.fp16 else f"vload_half({index}, {buf})"
        return super().load(dt, buf, index)

    def store_statement(self, dt: DType, buf: str, index: str, value: str) -> str:
        if dt.name == "float16":
            if self.fp16:
                return f"{buf}[{index}] = (half)({value});"
            return f"vstore_half_rte({value}, {index}, {buf});"
        return super().store_statement(dt, buf, index, value)

    def round(self, dt: DType, value: str) -> str:
        return f"lm_round_half({value})" if dt.name == "float16" else super().round(dt, value)

    def prelude(self) -> str:
        base = Dialect.prelude(self)
        if self.fp16:
            return "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + base + _ROUND_HALF_FP16
        return base + _ROUND_HALF
