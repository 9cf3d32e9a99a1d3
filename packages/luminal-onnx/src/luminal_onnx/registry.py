"""The table of ONNX operator converters: `@converter("Relu")` adds one."""

from __future__ import annotations

from collections.abc import Callable

DEFAULT_DOMAIN = "ai.onnx"
TRAINING_DOMAIN = "ai.onnx.preview.training"

# (domain, op_type) -> fn(ctx) returning the node's output or list of outputs
CONVERTERS: dict[tuple[str, str], Callable] = {}


def converter(*op_types: str, domain: str = DEFAULT_DOMAIN) -> Callable[[Callable], Callable]:
    """Register `fn(ctx) -> output or [outputs]` for the ONNX operators `op_types`."""

    def add(fn: Callable) -> Callable:
        for op_type in op_types:
            CONVERTERS[domain, op_type] = fn
        return fn

    return add


def supported_operators(domain: str = DEFAULT_DOMAIN) -> list[str]:
    """Every ONNX operator of `domain` the importer can convert, sorted."""
    from . import importer  # noqa: F401  (it imports the converter modules)

    return sorted(op for d, op in CONVERTERS if d == domain)
