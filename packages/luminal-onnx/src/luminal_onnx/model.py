"""`load(path)` -> `OnnxModel`: an ONNX file as a luminal graph you can run on any backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import luminal as lm
import numpy as np
import onnx
from google.protobuf.message import DecodeError

from . import dtypes
from .errors import OnnxImportError
from .importer import ImportedGraph, Importer

# post-processing added to a model's outputs before compiling (see `OnnxModel.compiled`)
Head = Callable[[dict[str, lm.GraphTensor]], dict[str, lm.GraphTensor]]

# a protobuf message cannot exceed 2 GiB; larger models keep their weights in external files
_MAX_FILE = 2**31


def read_model(path: str | os.PathLike, what: str | None = None) -> onnx.ModelProto:
    """Parse and check an ONNX file; every problem becomes an `OnnxImportError` naming it."""
    path = Path(path)
    what = what or str(path)
    if not path.is_file():
        raise OnnxImportError(f"{what}: no such ONNX file")
    size = path.stat().st_size
    if size > _MAX_FILE:
        raise OnnxImportError(f"{what}: {size} bytes is more than a protobuf can hold; "
                              "models with external data are not supported")
    try:
        model = onnx.load_model_from_string(path.read_bytes())
    except (DecodeError, ValueError, RuntimeError) as e:
        raise OnnxImportError(f"{what}: not a valid ONNX protobuf ({e})") from e
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise OnnxImportError(f"{what}: the file parses but holds no ONNX graph")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # the checker raises C++ validation errors of several types
        first = str(e).strip().splitlines()[0] if str(e).strip() else "invalid model"
        raise OnnxImportError(f"{what}: the ONNX checker rejects the model: {first}") from e
    return model


class OnnxModel:
    """An imported ONNX model.

    `graph` is the luminal graph (inputs named as in ONNX, dynamic axes as symbolic dims);
    `run(feeds, backend=None)` compiles it once per backend and returns the outputs by name.
    """

    def __init__(self, proto: onnx.ModelProto, static_inputs: Mapping[str, np.ndarray] = (),
                 source: str = "model") -> None:
        self.proto = proto
        self.source = source
        self.static_inputs = dict(static_inputs)
        self._imported = self._import()  # fails here, at load time, on anything unsupported
        self._compiled: dict[tuple[str, Head | None], ImportedGraph] = {}

    def _import(self) -> ImportedGraph:
        return Importer(self.proto, self.static_inputs, self.source).run()

    @property
    def graph(self) -> lm.Graph:
        """The luminal graph as imported (never compiled by `run`)."""
        return self._imported.graph

    @property
    def input_names(self) -> list[str]:
        return list(self._imported.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self._imported.outputs)

    @property
    def metadata(self) -> dict[str, str]:
        """The model's `metadata_props` (e.g. class names of exported detectors)."""
        return {p.key: p.value for p in self.proto.metadata_props}

    def input_shapes(self) -> dict[str, tuple]:
        """Each graph input's shape: ints, or symbolic dims as `luminal.Expr`."""
        return {n: gi.tensor.shape for n, gi in self._imported.inputs.items()}

    def compiled(self, backend: str | lm.Backend | None = None, head: Head | None = None
                 ) -> ImportedGraph:
        """The graph imported afresh and compiled for `backend` (cached per backend and head).

        `head(outputs) -> outputs` may replace the model's outputs (graph tensors by name)
        with post-processing built on them before compilation (a detector's box decoding).
        """
        be = backend if isinstance(backend, lm.Backend) else lm.backend(backend)
        key = (be.name, head)
        cached = self._compiled.get(key)
        if cached is None:
            cached = self._import()
            if head is not None:
                cached.outputs = {name: t.retrieve() for name, t in head(cached.outputs).items()}
                cached.output_dtypes = {name: t.dtype.numpy for name, t in cached.outputs.items()}
            cached.graph.compile((lm.GenericCompiler(), be))
            self._compiled[key] = cached
        return cached

    def run(self, feeds: Mapping[str, np.ndarray], backend: str | lm.Backend | None = None,
            head: Head | None = None) -> dict[str, np.ndarray]:
        """Run the model: `feeds` maps every input name to an array; returns every output.

        `backend` is a backend name or instance (default: the best installed one). Outputs
        have the dtypes the model declares. `head`: see `compiled`.
        """
        compiled = self.compiled(backend, head)
        missing = sorted(set(compiled.inputs) - set(feeds))
        extra = sorted(set(feeds) - set(compiled.inputs) - compiled.ignored_inputs)
        if missing or extra:
            raise ValueError(f"{self.source}: feeds must be exactly the inputs "
                             f"{sorted(compiled.inputs)}; missing {missing}, unexpected {extra}")
        for name, gi in compiled.inputs.items():
            arr = np.asarray(feeds[name])
            if _kind(arr.dtype) != _kind(gi.numpy_dtype):
                raise ValueError(f"{self.source}: input {name!r} expects {gi.numpy_dtype}, got "
                                 f"{arr.dtype}")
            gi.tensor.set(dtypes.to_graph_array(arr.astype(gi.numpy_dtype, copy=False),
                                                f"input {name!r}"))
        compiled.graph.execute()
        out = {}
        for name, value in compiled.outputs.items():
            arr = value if isinstance(value, np.ndarray) else value.numpy()
            out[name] = np.asarray(arr).astype(compiled.output_dtypes[name], copy=False)
        return out


def _kind(dtype: np.dtype) -> str:
    """Feeds may differ in width from the declared type, not in kind (ints stay ints)."""
    if dtype.kind in "iu":
        return "i"
    return "f" if dtype.kind == "f" or dtype.name == "bfloat16" else dtype.kind


def load(path: str | os.PathLike, static_inputs: Mapping[str, np.ndarray] | None = None
         ) -> OnnxModel:
    """Import the ONNX model at `path`.

    `static_inputs` gives values for graph inputs that decide shapes (a Reshape target fed as
    an input, say): they become constants. Raises `OnnxImportError` (or its subclass
    `UnsupportedError`, naming node, op type and opset) for anything luminal cannot run.
    """
    return OnnxModel(read_model(path), static_inputs or {}, source=str(path))


def run(path: str | os.PathLike, feeds: Mapping[str, np.ndarray],
        backend: str | lm.Backend | None = None) -> dict[str, np.ndarray]:
    """Load the model at `path` and run it once on `feeds`."""
    return load(path).run(feeds, backend)
