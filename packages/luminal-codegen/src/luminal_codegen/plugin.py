"""luminal-codegen's plugin: the "half-precision" compiler, shared by every generated-code
backend (cuda, metal, rocm, cpu) that depends on this distribution.

Registered through the `luminal.plugins` entry point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal import hookimpl


@hookimpl
def luminal_register_compilers(register: Callable[..., Any]) -> None:
    from .half import HalfPrecision

    register("half-precision", HalfPrecision, "float32 compute in float16 or bfloat16 "
             "(float32 accumulation; results keep their declared dtypes)")
