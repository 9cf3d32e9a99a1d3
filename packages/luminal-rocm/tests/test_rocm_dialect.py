"""The OpenCL dialect's two half-precision modes. Without `cl_khr_fp16` (PoCL) every float16
test of this suite runs the vload/vstore path for real; the native path needs a device with
the extension, so here its source is checked."""

from __future__ import annotations

import luminal as lm
from luminal_rocm.dialect import DeviceDialect


def test_rocm_dialect_without_fp16_never_declares_half_values():
    d = DeviceDialect(fp16=False)
    assert "cl_khr_fp16" not in d.prelude()
    assert d.load(lm.float16, "p1[i]") == "vload_half(i, p1)"
    assert d.store_statement(lm.float16, "p0", "i", "v") == "vstore_half_rte(v, i, p0);"
    assert "half h" not in d.prelude()  # a private half needs the extension


def test_rocm_dialect_with_fp16_uses_half_conversions():
    d = DeviceDialect(fp16=True)
    assert d.prelude().startswith("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    assert d.load(lm.float16, "p1[i]") == "((float)p1[i])"
    assert d.store_statement(lm.float16, "p0", "i", "v") == "p0[i] = (half)(v);"
    assert d.round(lm.float16, "x") == "lm_round_half(x)"
    assert "(float)(half)x" in d.prelude()
