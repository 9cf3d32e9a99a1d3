"""Window functions (opset 17): HannWindow, HammingWindow, BlackmanWindow."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .ops_elementwise import cast_to
from .registry import converter

if TYPE_CHECKING:
    from .importer import NodeContext

# a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
_COEFFICIENTS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


@converter(*_COEFFICIENTS)
def _window(ctx: NodeContext):
    size = int(ctx.static(0).item())
    periodic = ctx.attr("periodic", 1)
    a0, a1, a2 = _COEFFICIENTS[ctx.op_type]
    n = ctx.graph.arange(size).float()
    period = size if periodic else size - 1
    phase = n * (2 * math.pi / period)
    window = a0 - (phase.cos() * a1)
    if a2:
        window = window + (phase * 2.0).cos() * a2
    return cast_to(ctx, window, ctx.attr("output_datatype", 1))
