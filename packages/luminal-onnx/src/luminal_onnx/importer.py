"""Turn an ONNX graph into a luminal graph, node by node.

Each value is either a luminal `GraphTensor` (computed at run time) or a NumPy array known at
import time (initializers, `Constant` nodes, shape arithmetic folded by `folding`). Converters
(in `ops_*` modules, registered in `registry`) receive a `NodeContext` and return the node's
outputs; anything they cannot express raises `UnsupportedError` here, at import time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import luminal as lm
import numpy as np
import onnx
from onnx import numpy_helper

from . import (  # noqa: F401  (each registers its converters)
    dtypes,
    folding,
    ops_elementwise,
    ops_loss,
    ops_nn,
    ops_quant,
    ops_reduce,
    ops_rnn,
    ops_select,
    ops_shape,
    ops_signal,
    ops_training,
)
from .errors import NeedsStaticInputError, OnnxImportError, UnsupportedError
from .registry import CONVERTERS  # filled by the ops_* modules imported above

Value = lm.GraphTensor | np.ndarray
_REQUIRED = object()


@dataclass
class GraphInput:
    """A graph input as luminal sees it: its tensor and the ONNX type to check feeds against."""

    name: str
    tensor: lm.GraphTensor
    numpy_dtype: np.dtype


@dataclass
class ImportedGraph:
    graph: lm.Graph
    inputs: dict[str, GraphInput]
    outputs: dict[str, Value]  # a NumPy array when the output is known at import time
    output_dtypes: dict[str, np.dtype] = field(default_factory=dict)
    ignored_inputs: set[str] = field(default_factory=set)  # declared but never read


class NodeContext:
    """What a converter sees of one node: its inputs, attributes, opset and graph."""

    def __init__(self, importer: Importer, node: onnx.NodeProto, opset: int,
                 inputs: list[Value | None]) -> None:
        self.importer = importer
        self.node = node
        self.name = node.name or f"{node.op_type}#{importer.node_index}"
        self.op_type = node.op_type
        self.opset = opset
        self.inputs = inputs
        self.attrs = {a.name: a for a in node.attribute}
        self.used_attrs: set[str] = set()

    @property
    def graph(self) -> lm.Graph:
        return self.importer.graph

    def fail(self, detail: str) -> UnsupportedError:
        return UnsupportedError(self.name, self.op_type, self.opset, detail)

    def attr(self, name: str, default=_REQUIRED):
        """Attribute `name` as a Python value (ints, floats, strings, lists, arrays)."""
        self.used_attrs.add(name)
        proto = self.attrs.get(name)
        if proto is None:
            if default is _REQUIRED:
                raise self.fail(f"missing required attribute {name!r}")
            return default
        if proto.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise self.fail(f"attribute {name!r} holds a subgraph; control flow is not supported")
        value = onnx.helper.get_attribute_value(proto)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, onnx.TensorProto):
            return self.importer.array_of(value, f"attribute {name!r} of node {self.name!r}")
        if isinstance(value, list) and value and isinstance(value[0], bytes):
            return [v.decode("utf-8", "replace") for v in value]
        return value

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def is_static(self, i: int) -> bool:
        return self.has(i) and isinstance(self.inputs[i], np.ndarray)

    def tensor(self, i: int) -> lm.GraphTensor:
        """Input `i` as a graph tensor (an import-time array becomes a constant input)."""
        if not self.has(i):
            raise self.fail(f"input {i} is required")
        value = self.inputs[i]
        if isinstance(value, np.ndarray):
            return self.importer.constant(value, self.node.input[i])
        return value

    def static(self, i: int, default=_REQUIRED) -> np.ndarray:
        """Input `i`'s value at import time (shapes, axes, pads, scales...)."""
        if not self.has(i):
            if default is _REQUIRED:
                raise self.fail(f"input {i} is required")
            return default
        value = self.inputs[i]
        if isinstance(value, np.ndarray):
            return value
        name = self.node.input[i]
        source = self.importer.graph_input_behind(name)
        if source is not None:
            raise NeedsStaticInputError(self.name, self.op_type, self.opset, source)
        raise self.fail(f"input {name!r} is computed at run time, but luminal needs its value "
                        "at import time (data-dependent shapes are not supported)")

    def static_ints(self, i: int, default=_REQUIRED) -> list:
        value = self.static(i, default)
        return value if value is default else [_as_dim(v) for v in np.asarray(value).reshape(-1)]


def _as_dim(v):
    return v if isinstance(v, lm.Expr) else int(v)


class Importer:
    """Builds one luminal graph from a checked `onnx.ModelProto`."""

    def __init__(self, model: onnx.ModelProto, static_inputs: Mapping[str, np.ndarray] = (),
                 source: str = "model") -> None:
        self.model = model
        self.source = source
        self.opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
        self.static_inputs = dict(static_inputs)
        self.graph = lm.Graph()
        self.graph_inputs: dict[str, GraphInput] = {}
        self.values: dict[str, Value | None] = {"": None}
        self._constants: dict[int, tuple[lm.GraphTensor, np.ndarray]] = {}
        self._producer_inputs: dict[str, list[str]] = {}  # value -> its node's input names
        self.node_index = 0

    # ----- values -------------------------------------------------------------------------
    def array_of(self, proto: onnx.TensorProto, what: str) -> np.ndarray:
        if proto.data_location == onnx.TensorProto.EXTERNAL:
            raise OnnxImportError(f"{self.source}: {what} ({proto.name!r}) is stored in an "
                                  "external data file, which is not supported")
        if not dtypes.is_supported(proto.data_type):
            raise OnnxImportError(f"{self.source}: {what} ({proto.name!r}) has type "
                                  f"{dtypes.type_name(proto.data_type)}, which luminal does not "
                                  "support")
        try:
            arr = numpy_helper.to_array(proto)
        except Exception as e:  # onnx raises many types for malformed tensors
            raise OnnxImportError(f"{self.source}: cannot read {what} ({proto.name!r}): {e}") from e
        want = dtypes.onnx_numpy_dtype(proto.data_type)
        return np.asarray(arr).astype(want, copy=False)

    def constant(self, arr: np.ndarray, name: str) -> lm.GraphTensor:
        """An import-time array as a graph input holding its data (one per array)."""
        key = id(arr)
        cached = self._constants.get(key)
        if cached is not None:
            return cached[0]
        host = dtypes.to_graph_array(arr, f"{self.source}: constant {name!r}")
        dtype = lm.dtype_of(host.dtype)
        if host.ndim == 0 and host.dtype.kind != "O":
            t = self.graph.constant(host.item(), dtype)
        else:
            t = self.graph.tensor(host.shape, name=_safe_name(name), dtype=dtype).set(host)
        self._constants[key] = (t, arr)  # keeps arr alive so its id stays unique
        return t

    def graph_input_behind(self, name: str) -> str | None:
        """A graph input that value `name` is computed from (None if there is none)."""
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in self.graph_inputs:
                return current
            if current not in seen:
                seen.add(current)
                todo.extend(self._producer_inputs.get(current, ()))
        return None

    # ----- building -----------------------------------------------------------------------
    def run(self) -> ImportedGraph:
        g = self.model.graph
        initializers = {}
        for init in g.initializer:
            initializers[init.name] = self.array_of(init, "initializer")
        for vi in g.input:
            if vi.name in initializers:
                continue
            if vi.name in self.static_inputs:
                self.values[vi.name] = self._static_input(vi)
                continue
            self.graph_inputs[vi.name] = self._graph_input(vi)
            self.values[vi.name] = self.graph_inputs[vi.name].tensor
        self.values.update(initializers)
        for self.node_index, node in enumerate(g.node):
            self._convert(node)
        outputs, output_dtypes = {}, {}
        for vi in g.output:
            if vi.name not in self.values or self.values[vi.name] is None:
                raise OnnxImportError(f"{self.source}: graph output {vi.name!r} is not produced "
                                      "by any node")
            value = self.values[vi.name]
            elem = vi.type.tensor_type.elem_type
            output_dtypes[vi.name] = dtypes.onnx_numpy_dtype(elem) or (
                value.dtype if isinstance(value, np.ndarray) else value.dtype.numpy)
            if isinstance(value, lm.GraphTensor):
                value = value.contiguous() if value.id in self._input_ids() else value
                value.retrieve()
            outputs[vi.name] = value
        return ImportedGraph(self.graph, self.graph_inputs, outputs, output_dtypes,
                             self._drop_unused_inputs())

    def _drop_unused_inputs(self) -> set[str]:
        """Remove inputs nothing reads (CastLike's `like` is only a dtype), so that running
        needs no data for them; their names are still accepted as feeds."""
        consumers = self.graph.consumers()
        unused = {name for name, gi in self.graph_inputs.items()
                  if not consumers[gi.tensor.id] and gi.tensor.id not in self.graph.retrieved}
        for name in unused:
            self.graph.remove(self.graph_inputs.pop(name).tensor.id)
        return unused

    def _input_ids(self) -> set[int]:
        return {gi.tensor.id for gi in self.graph_inputs.values()} | {
            t.id for t, _ in self._constants.values()}

    def _static_input(self, vi: onnx.ValueInfoProto) -> np.ndarray:
        arr = np.asarray(self.static_inputs[vi.name])
        want = dtypes.onnx_numpy_dtype(vi.type.tensor_type.elem_type)
        return arr.astype(want) if want is not None else arr

    def _graph_input(self, vi: onnx.ValueInfoProto) -> GraphInput:
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"{self.source}: input {vi.name!r} is not a tensor (sequences, "
                                  "maps and optionals are not supported)")
        tt = vi.type.tensor_type
        dtype = dtypes.luminal_dtype(tt.elem_type)
        if dtype is None:
            raise OnnxImportError(f"{self.source}: input {vi.name!r} has type "
                                  f"{dtypes.type_name(tt.elem_type)}, which luminal does not "
                                  "support")
        if not tt.HasField("shape"):
            raise OnnxImportError(f"{self.source}: input {vi.name!r} has no shape (its rank "
                                  "must be known)")
        shape = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(d.dim_value)
            elif d.HasField("dim_value") and d.dim_value == 0:
                shape.append(0)
            else:
                shape.append(_dim_name(d.dim_param or f"{vi.name}_{k}"))
        t = self.graph.tensor(shape, name=_safe_name(vi.name), dtype=dtype)
        return GraphInput(vi.name, t, dtypes.onnx_numpy_dtype(tt.elem_type))

    def _convert(self, node: onnx.NodeProto) -> None:
        domain = node.domain or "ai.onnx"
        opset = self.opsets.get(domain)
        name = node.name or f"{node.op_type}#{self.node_index}"
        if opset is None:
            raise UnsupportedError(name, node.op_type, 0, f"domain {domain!r} is not imported "
                                   "by the model")
        converter = CONVERTERS.get((domain, node.op_type))
        if converter is None:
            known = any(d == domain for d, _ in CONVERTERS)
            raise UnsupportedError(name, node.op_type, opset, "operator not supported" if known
                                   else f"operators of domain {domain!r} are not supported")
        inputs = []
        for input_name in node.input:
            if input_name not in self.values:
                raise OnnxImportError(f"{self.source}: node {name!r} reads {input_name!r}, "
                                      "which no earlier node, input or initializer produces")
            inputs.append(self.values[input_name])
        ctx = NodeContext(self, node, opset, inputs)
        outputs = folding.fold(ctx)
        if outputs is None:
            outputs = converter(ctx)
        unknown = sorted(set(ctx.attrs) - ctx.used_attrs)
        if unknown:
            raise ctx.fail(f"attribute(s) {', '.join(unknown)} not supported")
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        for out_name, value in zip(node.output, outputs):
            if out_name:
                self.values[out_name] = value
                self._producer_inputs[out_name] = [i for i in node.input if i]
        missing = [o for o in node.output[len(outputs):] if o]
        if missing:
            raise ctx.fail(f"optional output(s) {', '.join(missing)} are not supported")


def _safe_name(name: str) -> str:
    return re.sub(r"\W", "_", name)[:64] or "input"


def _dim_name(name: str) -> str:
    """A symbolic dim name from an ONNX dim_param (kept to identifier characters)."""
    safe = re.sub(r"\W", "_", name)
    return safe if safe and not safe[0].isdigit() else f"d_{safe}"
