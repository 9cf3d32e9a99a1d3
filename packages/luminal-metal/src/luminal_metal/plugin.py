"""The luminal plugin entry point (`luminal.plugins` group, name `luminal-metal`).

Importing this module stays cheap: PyObjC's Metal bindings are imported only when the backend
is probed on macOS or compiles a graph.
"""

from __future__ import annotations

from collections.abc import Callable

from luminal import Backend, hookimpl

from .backend import MetalBackend


@hookimpl
def luminal_register_backends(register: Callable[[Backend], None]) -> None:
    register(MetalBackend())
