"""The module system: parameters as graph inputs, composition, state dicts.

A `Module` describes part of a network. Calling it on a `GraphTensor` adds ops to that tensor's
graph; it never touches data. Each `Parameter` holds its host value (a NumPy array) and becomes
an input of every graph the module is used in, bound with `set()` the first time it is used
there. Loading a state dict later re-binds those inputs, so a compiled graph picks up new
weights on its next `execute()` without recompiling. `Module.release_to(graph)` lets one graph
hold the values instead (a backend may then keep weights in a form of its own without a
second copy staying alive).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from math import prod
from typing import Any

import luminal as lm
import numpy as np
from luminal import Graph, GraphTensor, View, quant
from luminal.dtypes import DType, dtype_of

from . import functional as F

__all__ = ["Buffer", "Module", "ModuleList", "Parameter", "QuantizedParameter", "Sequential"]

Initializer = Callable[[tuple[int, ...], np.random.Generator], np.ndarray]


class Parameter:
    """A named weight: a host array that becomes a graph input wherever the module is used.

    Args:
        shape: the logical shape of the weight.
        dtype: its luminal dtype (float32 by default).
        data: the initial value; when None, `init` draws one the first time it is needed, so a
            model whose weights are about to be loaded never allocates random ones.
        init: `init(shape, rng) -> array`, used when `data` is None.
    """

    def __init__(self, shape: Iterable[int], dtype: DType | str = lm.float32,
                 data: np.ndarray | None = None, init: Initializer | None = None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype_of(dtype)
        self.name = ""  # the dotted path, kept up to date by the owning module
        self._owner: Module | None = None
        self.init = init
        self._data: np.ndarray | None = None
        self._holder: tuple[Graph, int] | None = None  # where the value is instead (release_to)
        # graph -> id of this parameter's input node there; ids rather than tensors, since a
        # tensor refers to its graph and would keep every graph ever built alive
        self._inputs: weakref.WeakKeyDictionary[Graph, int] = weakref.WeakKeyDictionary()
        if data is not None:
            self.data = data

    # ----- host value -----------------------------------------------------------------------
    @property
    def data(self) -> np.ndarray | None:
        """The host value (initialised on first access if the parameter has an `init`; read
        from the graph holding it after `release_to`)."""
        if self._holder is not None:
            graph, node_id = self._holder
            value = graph.data.get(graph.resolve(node_id))
            if value is None:
                raise RuntimeError(f"{self.name or 'parameter'}: its value was handed over to "
                                   "a graph that no longer holds it (a compiler dropped the "
                                   "input): set `data` again")
            return np.asarray(value)
        if self._data is None and self.init is not None:
            self.data = self.init(self.shape, np.random.default_rng())
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = self._check(value)
        self._holder = None
        for graph, node_id in list(self._inputs.items()):
            if graph.resolve(node_id) in graph.nodes:  # unless a compiler dropped the input
                self.stored(graph).set(self._data)

    def _check(self, value: Any) -> np.ndarray:
        """`value` as an array of this parameter's dtype, or a ValueError/TypeError saying why
        it does not fit."""
        arr = np.asarray(value)
        label = self.name or "parameter"
        if arr.shape != self.storage_shape:
            raise ValueError(
                f"{label}: expected an array of shape {self.storage_shape}, got {arr.shape}"
            )
        want = self.dtype.numpy
        if not (arr.dtype == want or (self.dtype.is_float and _is_float(arr.dtype))):
            raise TypeError(f"{label}: expected {want} data, got {arr.dtype}")
        return np.ascontiguousarray(arr, dtype=want)

    @property
    def storage_shape(self) -> tuple[int, ...]:
        """Shape of the host array (differs from `shape` for quantized weights)."""
        return self.shape

    @property
    def numel(self) -> int:
        return prod(self.shape)

    # ----- graph side -----------------------------------------------------------------------
    def tensor(self, graph: Graph) -> GraphTensor:
        """This parameter's value as a tensor of `graph`."""
        return self.value(self.stored(graph))

    def stored(self, graph: Graph) -> GraphTensor:
        """The input of `graph` holding this parameter's host array (created on first use)."""
        node_id = self._inputs.get(graph)
        if node_id is not None:
            node = graph.nodes[graph.resolve(node_id)]
            return GraphTensor(graph, node.id, View.contiguous(node.shape), self.dtype)
        t = graph.tensor(self.storage_shape, name=self.name or None, dtype=self.dtype)
        data = self.data
        if data is not None:
            t.set(data)
        self._inputs[graph] = t.id
        return t

    def release_to(self, graph: Graph) -> None:
        """Let `graph`, where this parameter is an input with its value set, hold the value
        from now on: the parameter drops its own reference to the array and reads `data`
        back from that input (keeping `graph` alive). A backend may then replace the array in
        `graph.data` with a form of its own that reads back as the same value (luminal-cpu
        repacks the GGUF weights of every format in `luminal_cpu.repack.FORMATS`, in place
        when nothing else holds the array) and the original is freed or reused, not kept as
        a second copy. Reading
        `data` may then download a copy; setting it gives the parameter its own array again."""
        node_id = self._inputs.get(graph)
        if node_id is None or graph.resolve(node_id) not in graph.data:
            raise ValueError(f"{self.name or 'parameter'}: not an input of this graph with its "
                             "value set")
        self._holder = (graph, node_id)
        self._data = None

    def value(self, stored: GraphTensor) -> GraphTensor:
        """The weight computed from its stored input (identity here; quantized weights
        dequantize)."""
        return stored

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, shape={self.shape}, {self.dtype!r})"


class QuantizedParameter(Parameter):
    """A weight matrix kept in a GGUF block format (`luminal.quant.BLOCK_FORMATS`: Q8_0, Q4_0,
    Q4_1, Q5_0, Q4_K, Q5_K, Q6_K) as raw bytes.

    The host array is uint8 of shape (rows, row_bytes); in a graph the weight is
    `luminal.quant.dequantize` of that input, which backends with quantized kernels fuse into
    the matmul that reads it, so the float matrix is never materialised.

    Args:
        shape: the logical (rows, cols) float shape.
        qtype: a block format's name, any case ("q8_0", "Q4_K", ...).
        data: the raw blocks.
    """

    def __init__(self, shape: Iterable[int], qtype: str, data: np.ndarray | None = None):
        self.qtype = qtype.lower()
        if self.qtype not in quant.BLOCK_BYTES:
            raise ValueError(f"unsupported quantized format {qtype!r} "
                             f"(supported: {', '.join(quant.BLOCK_BYTES)})")
        rows, cols = (int(d) for d in shape)
        self._storage = (rows, quant.row_bytes(self.qtype, cols))
        super().__init__((rows, cols), lm.uint8, data=data)

    @property
    def storage_shape(self) -> tuple[int, ...]:
        return self._storage

    def value(self, stored: GraphTensor) -> GraphTensor:
        return quant.dequantize(stored, self.qtype, self.shape)

    def rows(self, index: GraphTensor) -> GraphTensor:
        """Rows `index` (int tensor of any shape) of the weight, dequantizing only those:
        the raw byte rows are gathered first (an embedding lookup of the bytes), so a lookup
        never decodes the whole table."""
        raw = self.stored(index.graph)
        picked = F.embedding(index.reshape(-1), raw.to(lm.float32)).to(lm.uint8)
        count = picked.shape[0]
        values = quant.dequantize(picked, self.qtype, (count, self.shape[1]))
        return values.reshape((*index.shape, self.shape[1]))

    def __repr__(self) -> str:
        return f"QuantizedParameter({self.name!r}, shape={self.shape}, {self.qtype})"


def _is_float(dtype: np.dtype) -> bool:
    """NumPy floats and the ml_dtypes half types luminal knows (bfloat16)."""
    try:
        return dtype_of(dtype).is_float
    except TypeError:
        return dtype.kind == "f"


class Buffer(Parameter):
    """A non-trainable constant of a module (RoPE frequencies, running statistics).

    `persistent=False` leaves it out of `state_dict()`, for values derived from the config.
    """

    def __init__(self, data: np.ndarray, dtype: DType | str | None = None, persistent: bool = True):
        arr = np.asarray(data)
        super().__init__(arr.shape, dtype or arr.dtype, data=arr)
        self.persistent = persistent


class Module:
    """Base class of every layer: holds parameters, buffers and child modules by attribute.

    Subclasses call `super().__init__()` first, assign `Parameter`s and `Module`s as
    attributes, and implement `forward`. `module(x)` calls `forward(x)`.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_prefix", "")

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__(): call super().__init__() "
                f"first in {type(self).__name__}.__init__"
            )
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
            if value._owner is None:  # a tied weight keeps the name of its first owner
                value._owner = self
                value.name = self._prefix + name
        elif isinstance(value, Module):
            self._modules[name] = value
            value._rename(f"{self._prefix}{name}.")
        object.__setattr__(self, name, value)

    def _rename(self, prefix: str) -> None:
        """Keep every parameter's `name` equal to its dotted path from the outermost module."""
        object.__setattr__(self, "_prefix", prefix)
        for name, p in self._parameters.items():
            if p._owner is self:
                p.name = prefix + name
        for name, m in self._modules.items():
            m._rename(f"{prefix}{name}.")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ----- traversal ------------------------------------------------------------------------
    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """Every module of the tree (self first), each once even if shared."""
        seen: set[int] = set()

        def walk(mod: Module, path: str) -> Iterator[tuple[str, Module]]:
            if id(mod) in seen:
                return
            seen.add(id(mod))
            yield path, mod
            for name, child in mod._modules.items():
                yield from walk(child, f"{path}.{name}" if path else name)

        yield from walk(self, prefix)

    def get_submodule(self, path: str) -> Module:
        """The module at dotted `path` ("" is self), as in PyTorch."""
        mod: Module = self
        for part in path.split(".") if path else ():
            child = mod._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule {part!r} "
                                     f"(looking up {path!r})")
            mod = child
        return mod

    def _named_leaves(self) -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for path, mod in self.named_modules():
            for name, p in mod._parameters.items():
                if id(p) not in seen:  # tied weights appear once, under their first name
                    seen.add(id(p))
                    yield (f"{path}.{name}" if path else name), p

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) for every trainable parameter, shared ones once."""
        return ((n, p) for n, p in self._named_leaves() if not isinstance(p, Buffer))

    def parameters(self) -> Iterator[Parameter]:
        return (p for _, p in self.named_parameters())

    def named_buffers(self) -> Iterator[tuple[str, Buffer]]:
        return ((n, p) for n, p in self._named_leaves() if isinstance(p, Buffer))

    def num_parameters(self) -> int:
        return sum(p.numel for p in self.parameters())

    def release_to(self, graph: Graph) -> None:
        """`Parameter.release_to(graph)` for every parameter and buffer that is an input of
        `graph` with its value set (a model whose weights only one graph uses, as a
        generator's: the weights are then held once, in the form the graph's backend binds)."""
        for _, p in self._named_leaves():
            node_id = p._inputs.get(graph)
            if node_id is not None and graph.resolve(node_id) in graph.data:
                p.release_to(graph)

    # ----- state --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Host arrays of every parameter and persistent buffer, by dotted name."""
        out: dict[str, np.ndarray] = {}
        for name, p in self._named_leaves():
            if isinstance(p, Buffer) and not p.persistent:
                continue
            if p.data is None:
                raise ValueError(f"{name}: the parameter has no value yet (nothing loaded)")
            out[name] = p.data
        return out

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> list[str]:
        """Set parameters from host arrays by dotted name; returns the names it did not find.

        Shapes must match exactly and dtypes must be of the same kind (floats are converted to
        the parameter's float type). With `strict`, missing or unexpected names raise a
        `KeyError` that lists them.
        """
        wanted = {n: p for n, p in self._named_leaves()
                  if not (isinstance(p, Buffer) and not p.persistent)}
        missing = sorted(set(wanted) - set(state))
        unexpected = sorted(set(state) - set(wanted))
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing: {', '.join(missing)}")
            if unexpected:
                parts.append(f"unexpected: {', '.join(unexpected)}")
            raise KeyError(f"load_state_dict: {'; '.join(parts)}")
        for name, p in wanted.items():
            if name in state:
                p.data = state[name]
        return missing

    def __repr__(self) -> str:
        lines = [f"({name}): {child!r}".replace("\n", "\n  ")
                 for name, child in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        head = f"{type(self).__name__}({extra}" if extra else f"{type(self).__name__}("
        return head + "\n  " + "\n  ".join(lines) + "\n)"

    def extra_repr(self) -> str:
        return ""


class ModuleList(Module):
    """A list of modules, registered under "0", "1", ... (no forward of its own)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        self._items: list[Module] = []
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        setattr(self, str(len(self._items)), module)
        self._items.append(module)
        return self

    def __getitem__(self, index: int) -> Module:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)


class Sequential(ModuleList):
    """Modules applied in order: `Sequential(a, b)(x) == b(a(x))`."""

    def __init__(self, *modules: Module) -> None:
        super().__init__(modules)

    def forward(self, x: GraphTensor) -> GraphTensor:
        for m in self:
            x = m(x)
        return x
