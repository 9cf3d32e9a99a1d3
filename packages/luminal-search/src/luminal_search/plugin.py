"""The luminal plugin of luminal-search: the compiler "search" and its own rule sets "algebra",
"factoring" and "schedule" (registered through `luminal_register_rulesets` like any third-party
rule set)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from typing import Any

from luminal.hookspecs import hookimpl


def _search(backend: Any = None, **options: Any) -> Any:
    from .search import Search

    return Search(backend, **options)


@hookimpl
def luminal_register_compilers(register: Callable[..., None]) -> None:
    register("search", _search, "egglog search over rewrites and schedules, timed on the "
             "device and cached (luminal-search)")


def _rules(name: str) -> str:
    return files("luminal_search").joinpath(f"rules/{name}.egg").read_text()


@hookimpl
def luminal_register_rulesets(register: Callable[..., None]) -> None:
    register("algebra", _rules("algebra"), "commutativity, associativity, exp2 and reciprocal "
             "products, sum reassociation")
    register("factoring", _rules("factoring"), "distributivity (factoring and expanding)")
    register("schedule", _rules("schedule"), "kernel choices, composable: matmul as generated "
             "loops, store a recomputed node, inline a cheap stored one, the backend's tunable "
             "settings")
