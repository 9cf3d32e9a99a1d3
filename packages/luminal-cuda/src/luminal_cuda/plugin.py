"""luminal-cuda's plugin: the "cuda" backend and the "half-precision" compiler.

Registered through the `luminal.plugins` entry point. Nothing here imports CuPy: that happens
when the backend is probed or compiles a graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal import hookimpl


@hookimpl
def luminal_register_backends(register: Callable[..., None]) -> None:
    from .backend import CudaBackend

    register(CudaBackend())


@hookimpl
def luminal_register_compilers(register: Callable[..., Any]) -> None:
    from .half import HalfPrecision

    register("half-precision", HalfPrecision, "float32 compute in float16 or bfloat16 "
             "(float32 accumulation; results keep their declared dtypes)")
