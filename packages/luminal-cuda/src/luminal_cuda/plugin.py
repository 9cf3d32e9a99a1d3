"""luminal-cuda's plugin: the "cuda" backend (the "half-precision" compiler it runs comes
from luminal-codegen).

Registered through the `luminal.plugins` entry point. Nothing here imports CuPy: that happens
when the backend is probed or compiles a graph.
"""

from __future__ import annotations

from collections.abc import Callable

from luminal import hookimpl


@hookimpl
def luminal_register_backends(register: Callable[..., None]) -> None:
    from .backend import CudaBackend

    register(CudaBackend())

