"""luminal plugin entry point for luminal-models: adds the `luminal generate` command.

Hooks stay cheap: the command's module imports only the standard library until it runs.
"""

from __future__ import annotations

from luminal.hookspecs import CommandRegistrar, hookimpl


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from .cli import HELP, configure, run

    cli.register("generate", HELP, configure, run)
