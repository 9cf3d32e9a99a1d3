"""The table of ONNX operator converters: `@converter("Relu")` adds one."""

from __future__ import annotations

from collections.abc import Callable

CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str) -> Callable[[Callable], Callable]:
    """Register `fn(ctx) -> output or [outputs]` for the ONNX operators `op_types`."""

    def add(fn: Callable) -> Callable:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn

    return add


def supported_operators() -> list[str]:
    """Every ONNX operator (default domain) the importer can convert, sorted."""
    from . import importer  # noqa: F401  (it imports the converter modules)

    return sorted(CONVERTERS)
