"""The OpenCL C dialect for one device: core's `OpenCLDialect` plus half-precision handling.

Half-precision values are always computed in float32 and rounded to half at node outputs
(luminal's semantics). Where the device has `cl_khr_fp16`, half buffers are read and written
with plain conversions. Without it (PoCL on a CPU, older drivers) the `half` type may only
point to memory: buffers go through `vload_half`/`vstore_half_rte`, and rounding a float to
half precision stores into a private `ushort` seen as a `half *`, which needs no extension.
"""

from __future__ import annotations

from luminal.codegen import Dialect, OpenCLDialect
from luminal.dtypes import DType

_ROUND_HALF = (
    "inline float lm_round_half(float x) { ushort h; vstore_half_rte(x, 0, (__private half *)&h);"
    " return vload_half(0, (const __private half *)&h); }\n"
)
_ROUND_HALF_FP16 = "inline float lm_round_half(float x) { return (float)(half)x; }\n"


class DeviceDialect(OpenCLDialect):
    """OpenCL C for a device with (`fp16=True`) or without the `cl_khr_fp16` extension."""

    def __init__(self, fp16: bool):
        self.fp16 = fp16

    def load(self, dt: DType, ref: str) -> str:
        if dt.name == "float16" and self.fp16:
            return f"((float){ref})"
        return super().load(dt, ref)

    def store_statement(self, dt: DType, buf: str, index: str, value: str) -> str:
        if dt.name == "float16":
            if self.fp16:
                return f"{buf}[{index}] = (half)({value});"
            return f"vstore_half_rte({value}, {index}, {buf});"
        return super().store_statement(dt, buf, index, value)

    def prelude(self) -> str:
        # the shared helpers without OpenCLDialect's lm_round_half: its private `half`
        # variable needs cl_khr_fp16, so this dialect defines its own
        base = Dialect.prelude(self)
        if self.fp16:
            return "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + base + _ROUND_HALF_FP16
        return base + _ROUND_HALF
