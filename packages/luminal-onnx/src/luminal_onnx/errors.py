"""Errors raised while reading or importing an ONNX model."""

from __future__ import annotations


class OnnxImportError(ValueError):
    """The file is not a usable ONNX model, or a node cannot be imported."""


class UnsupportedError(OnnxImportError):
    """A node uses an operator, attribute, dtype or dynamic behaviour luminal does not support.

    Raised while importing, never at run time; the message names the node, op type and opset.
    """

    def __init__(self, node_name: str, op_type: str, opset: int, detail: str) -> None:
        self.node_name, self.op_type, self.opset, self.detail = node_name, op_type, opset, detail
        super().__init__(f"node {node_name!r} ({op_type}, opset {opset}): {detail}")


class NeedsStaticInputError(UnsupportedError):
    """A node needs the value of a graph input at import time (a shape, axes, pads, ...).

    luminal graphs have static structure: pass that input's value to `load(...,
    static_inputs={name: array})` so it becomes a constant.
    """

    def __init__(self, node_name: str, op_type: str, opset: int, input_name: str) -> None:
        self.input_name = input_name
        super().__init__(
            node_name, op_type, opset,
            f"input {input_name!r} must be known at import time (it sets a shape, axes or "
            f"sizes); pass it in static_inputs={{{input_name!r}: array}}",
        )


__all__ = ["NeedsStaticInputError", "OnnxImportError", "UnsupportedError"]
