"""The Metal Shading Language dialect.

Kept in core only until the luminal-metal distribution exists (see DESIGN.md's layout): it then
moves there, like C (luminal-cpu), CUDA C (luminal-cuda) and OpenCL C (luminal-rocm).
"""

from __future__ import annotations

from .gpu import GpuDialect


class MetalDialect(GpuDialect):
    """Metal Shading Language; the thread position arrives as a kernel argument."""

    name = "metal"
    helper_qualifier = "static inline"
    restrict = ""
    half_storage = "half"
    global_id = "(long)lm_tid"
    kernel_qualifier = "kernel"
    buffer_qualifier = "device "

    def signature(self, name, params, dims, attributes=""):
        args = [
            f"device {'' if out else 'const '}{t} *{n} [[buffer({k})]]"
            for k, (t, n, out) in enumerate(params)
        ]
        args += [f"constant long &{d} [[buffer({len(params) + k})]]" for k, d in enumerate(dims)]
        args.append("uint lm_tid [[thread_position_in_grid]]")
        return f"{self.qualifiers(attributes)} void {name}({', '.join(args)})"

    # precise:: keeps IEEE results under Metal's default fast-math
    math_functions = {op: f"precise::{op}" for op in ("log2", "exp2", "sin", "sqrt", "fmod")}

    def prelude(self) -> str:
        return "#include <metal_stdlib>\nusing namespace metal;\n" + super().prelude()


METAL = MetalDialect()
