"""The luminal plugin entry point (`luminal.plugins` group, name `luminal-rocm`).

Importing this module must stay cheap: pyopencl is imported only when the backend is probed
or compiles a graph.
"""

from __future__ import annotations

from collections.abc import Callable

from luminal import Backend, hookimpl

from .backend import OpenCLBackend


@hookimpl
def luminal_register_backends(register: Callable[[Backend], None]) -> None:
    register(OpenCLBackend())
