"""The luminal plugin of luminal-cpu: registers the "cpu" backend (entry point
`luminal.plugins` -> `luminal-cpu`). Registration is cheap: nothing is compiled or probed."""

from __future__ import annotations

from collections.abc import Callable

from luminal.hookspecs import hookimpl


@hookimpl
def luminal_register_backends(register: Callable[..., None]) -> None:
    from .backend import CpuBackend

    register(CpuBackend())
