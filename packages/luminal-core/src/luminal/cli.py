"""The `luminal` command line: `luminal plugins`, `luminal backends` and plugin commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from . import plugins
from .plugins import CORE_PLUGIN, CommandInfo, PluginError

_EPILOG = f"""\
Plugins are found through the entry-point group '{plugins.ENTRY_POINT_GROUP}'.
Environment: {plugins.ENV_ALLOW}=a,b loads only those plugins (unset or empty: all);
{plugins.ENV_BLOCK}=a,b skips them. Core's own plugin (luminal-core) always loads.
"""


def _add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in (header, *rows))


def _short(hook: str) -> str:
    return hook.removeprefix("luminal_register_").removeprefix("luminal_")


def run_plugins(args: argparse.Namespace) -> int:
    """`luminal plugins`: every plugin, its version, hooks, registrations and load error."""
    infos = plugins.plugin_infos()
    if args.json:
        print(json.dumps([dataclasses.asdict(i) for i in infos], indent=2))
        return 0
    rows = [[i.name, i.version or "-", ", ".join(_short(h) for h in i.hooks) or "-",
             "; ".join(f"{_short(h)}: {', '.join(names)}" for h, names in i.registered.items())
             or "-",
             f"error: {i.error}" if i.error else "ok"] for i in infos]
    print(_table(["NAME", "VERSION", "HOOKS", "REGISTERS", "STATUS"], rows))
    return 0


def run_backends(args: argparse.Namespace) -> int:
    """`luminal backends`: every backend, best first, whether it can run here and why not."""
    infos = plugins.backends()
    if args.json:
        print(json.dumps([dataclasses.asdict(i) for i in infos], indent=2))
        return 0
    rows = [[i.name, "yes" if i.available else "no", f"{i.priority:g}", i.plugin,
             i.device if i.available else i.reason] for i in infos]
    print(_table(["NAME", "AVAILABLE", "PRIORITY", "PLUGIN", "DEVICE / REASON"], rows))
    if not rows:
        print("no backends are registered; `luminal plugins` shows load errors", file=sys.stderr)
    return 0


# name, help, configure, run: registered by luminal.builtin_plugin through the commands hook,
# so that a plugin reusing one of these names is reported like any other name clash.
BUILTIN_COMMANDS = (
    ("plugins", "list installed plugins: version, hooks, what each registers, load errors",
     _add_json_flag, run_plugins),
    ("backends", "list backends: available here or not (and why), device, priority",
     _add_json_flag, run_backends),
)


def _commands() -> list[CommandInfo]:
    try:
        found = plugins.commands()
    except PluginError as exc:
        # Keep `luminal plugins` usable: it is the tool for diagnosing this very problem.
        print(f"luminal: warning: plugin commands are disabled: {exc}", file=sys.stderr)
        found = [CommandInfo(name, CORE_PLUGIN, help, configure, run)
                 for name, help, configure, run in BUILTIN_COMMANDS]
    return sorted(found, key=lambda c: (c.plugin != CORE_PLUGIN, c.name))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with the subcommands of every loaded plugin."""
    parser = argparse.ArgumentParser(
        prog="luminal",
        description="luminal: a deep-learning compiler. Inspect installed plugins and "
                    "backends, and run commands that plugins add.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for cmd in _commands():
        sub_parser = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        if cmd.configure is not None:
            cmd.configure(sub_parser)
        sub_parser.set_defaults(_luminal_run=cmd.run, _luminal_parser=sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (argparse exits with 2 on usage errors)."""
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # reported with the command's usage, not the top-level one
        args._luminal_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args._luminal_run(args) or 0
    except PluginError as exc:
        print(f"luminal: error: {exc}", file=sys.stderr)
        return 1
