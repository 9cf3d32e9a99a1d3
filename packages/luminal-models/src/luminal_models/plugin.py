"""luminal plugin entry point for luminal-models: adds the `generate`, `chat`, `serve`,
`models`, `embed` and `transcribe` commands.

Hooks stay cheap: each command's module imports only the standard library until it runs.
"""

from __future__ import annotations

from luminal.hookspecs import CommandRegistrar, hookimpl


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from . import chat_cli, embed_cli, models_cli, serve_cli, transcribe_cli
    from . import cli as generate_cli

    for name, module in (("generate", generate_cli), ("chat", chat_cli), ("serve", serve_cli),
                         ("models", models_cli), ("embed", embed_cli),
                         ("transcribe", transcribe_cli)):
        cli.register(name, module.HELP, module.configure, module.run)
