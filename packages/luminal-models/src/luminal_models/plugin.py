"""luminal plugin entry point for luminal-models: adds the `luminal generate`, `luminal embed`
and `luminal transcribe` commands.

Hooks stay cheap: the commands' modules import only the standard library until they run.
"""

from __future__ import annotations

from luminal.hookspecs import CommandRegistrar, hookimpl


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from . import cli as generate
    from . import embed_cli, transcribe_cli

    cli.register("generate", generate.HELP, generate.configure, generate.run)
    cli.register("embed", embed_cli.HELP, embed_cli.configure, embed_cli.run)
    cli.register("transcribe", transcribe_cli.HELP, transcribe_cli.configure, transcribe_cli.run)
