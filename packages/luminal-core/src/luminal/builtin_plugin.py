"""luminal-core's own plugin: the reference backend, the generic compiler and the core commands.

It is registered by `luminal.plugins` under the name "luminal-core" (not through an entry
point). Its imports happen inside the hooks so that a broken core module shows up as a load
error in `luminal plugins` instead of breaking discovery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .hookspecs import CommandRegistrar, hookimpl


@hookimpl
def luminal_register_backends(register: Callable[..., None]) -> None:
    from .reference import ReferenceBackend

    register(ReferenceBackend())


@hookimpl
def luminal_register_compilers(register: Callable[..., Any]) -> None:
    from .passes import GenericCompiler

    register("generic", GenericCompiler, "dead-code elimination, common subexpression "
             "elimination, arithmetic simplification and constant folding")


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from .cli import BUILTIN_COMMANDS

    for name, help, configure, run in BUILTIN_COMMANDS:
        cli.register(name, help, configure, run)
