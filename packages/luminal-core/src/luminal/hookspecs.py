"""Hook specifications: what a luminal plugin can contribute.

A plugin is a module (or any object) with functions marked `@luminal.hookimpl` whose names
match the specs below. It is found through the entry-point group `luminal.plugins`:

    [project.entry-points."luminal.plugins"]
    luminal-foo = "luminal_foo.plugin"

Every hook receives a callback instead of returning values (the pattern of simonw's `llm`):
the host validates each registration on the spot and can say which two plugins collide on a
name. Implementations may take a subset of a spec's arguments, so arguments are only ever added.
Hook implementations must stay cheap: import device SDKs inside factories, `probe()` and
`compile()`, never at module import or registration time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

import pluggy

if TYPE_CHECKING:
    from .backend import Backend

PROJECT = "luminal"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

_Spec = TypeVar("_Spec", bound=Callable[..., None])


def _registers(kind: str) -> Callable[[_Spec], _Spec]:
    """Mark a registration hook spec; `kind` is what its registrations are called in messages
    ("backend name 'x' is registered by both plugin 'a' and plugin 'b'")."""

    def mark(spec: _Spec) -> _Spec:
        spec.registers = kind  # type: ignore[attr-defined]
        return hookspec(spec)

    return mark


class CommandRegistrar(Protocol):
    """What `luminal_register_commands` receives as `cli`."""

    def register(
        self,
        name: str,
        help: str,
        configure: Callable[[argparse.ArgumentParser], None] | None,
        run: Callable[[argparse.Namespace], int | None],
    ) -> None:
        """Add the subcommand `luminal NAME`.

        `configure(parser)` adds its arguments to the subcommand's own `ArgumentParser`;
        `run(args)` executes it and returns the exit status (`None` means 0).
        """


@_registers("backend")
def luminal_register_backends(register: Callable[[Backend], None]) -> None:
    """Register backends: call `register(backend)` with a `luminal.Backend` instance.

    The backend's `name` and each of its `aliases` must be unique across all plugins.
    Construction must not import the device SDK; `probe()` decides availability later.
    """


@_registers("compiler")
def luminal_register_compilers(register: Callable[..., None]) -> None:
    """Register named compilers: `register(name, factory, description="")`.

    `factory(**kwargs)` returns a compiler (an object with `compile(graph)`, or a tuple of
    them); `luminal.plugins.compiler(name, **kwargs)` calls it. Names are unique across plugins.
    """


@_registers("model")
def luminal_register_models(register: Callable[..., None]) -> None:
    """Register model architectures: `register(name, factory, description="")`.

    `factory(**kwargs)` builds the model; names are unique across plugins.
    """


@_registers("command")
def luminal_register_commands(cli: CommandRegistrar) -> None:
    """Add `luminal` CLI subcommands: `cli.register(name, help, configure, run)`.

    See `CommandRegistrar.register`. Names are unique, and `plugins` and `backends` are taken
    by luminal-core.
    """


@_registers("rule set")
def luminal_register_rulesets(register: Callable[..., None]) -> None:
    """Register egglog rule sets for the search compiler: `register(name, program,
    description="")`.

    `program` is egglog text (rules tagged `:ruleset NAME`, with `NAME` the registered name)
    over the term language that luminal-search declares; luminal-search runs every registered
    set when it saturates a region. Names are unique across plugins.
    """


# Every hook above, by name, with what it registers: the registry code (`luminal.plugins`)
# builds one registry per entry, and the docs' table is checked against it.
REGISTRATION_HOOKS: Mapping[str, str] = {
    name: spec.registers for name, spec in list(globals().items())
    if name.startswith("luminal_register_") and hasattr(spec, "registers")
}

__all__ = [
    "PROJECT",
    "REGISTRATION_HOOKS",
    "CommandRegistrar",
    "hookimpl",
    "hookspec",
    "luminal_register_backends",
    "luminal_register_commands",
    "luminal_register_compilers",
    "luminal_register_models",
    "luminal_register_rulesets",
]
