"""The IR: a static graph of nodes, edges carrying views, inputs and dims, and the hand-off to a
backend's runtime.

This module knows nothing of tensors, high-level ops or backends: the user-facing
`luminal.Graph` (graph.py) adds tensor creation and the reference fallback on top of it.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops
from .dtypes import DType
from .shape import Shape, View, show_shape
from .symbolic import MAX_DIM, Expr, UnboundDimError, check_dim_name, evaluator

if TYPE_CHECKING:
    from .runtime import Runtime


@dataclass(slots=True)  # slots: a compiled model keeps tens of thousands of edges and nodes
class Edge:
    """An input of a node: the producer's id and the view through which it is read."""

    src: int
    view: View


@dataclass(frozen=True)
class Dequantized:
    """Tags a node as the dequantized `rows` x `cols` weight of the quantized input node `raw`
    (`luminal.quant.dequantize`): backends may read `raw`'s blocks of `qtype` directly."""

    qtype: str
    raw: int
    rows: int | Expr
    cols: int


@dataclass(frozen=True)
class Write:
    """`Graph.write`: each run stores node `src`'s value into an input, starting at `offset`
    along axis `dim` (the input's other positions keep their data)."""

    src: int
    dim: int
    offset: Expr


@dataclass(slots=True)
class Node:
    id: int
    op: ops.Op
    inputs: list[Edge]
    shape: Shape
    dtype: DType
    meta: dict[str, Any] = field(default_factory=dict)
    dequantized: Dequantized | None = None

    def __repr__(self) -> str:
        srcs = ", ".join(str(e.src) for e in self.inputs)
        return f"%{self.id} = {self.op.label()}({srcs}) : {self.dtype.name}{show_shape(self.shape)}"


class GraphModifiedError(RuntimeError):
    pass


class RemovedTensorError(KeyError):
    """A tensor's node is gone: compilation removed it (dead code, folded, fused away)."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return self.args[0]


_compiles_running = 0  # Graph.compile calls in progress, nested ones and other threads' included
_compiles_lock = threading.Lock()


@contextlib.contextmanager
def _collector_skips_old_objects():
    """While compiling, Python's cycle collector ignores the objects that existed before.

    Compilers allocate hundreds of thousands of small objects, which triggers full collections,
    and each of those walks every object of the process (a loaded model's graph, its
    expressions and views): they took about a third of a warm compile of SmolLM2. Freezing the
    existing objects keeps collections to what compilation itself allocates. Only the
    outermost compile freezes (search compiles hundreds of subgraphs inside its own, and
    `gc.get_freeze_count()` walks every frozen object), and callers that froze objects
    themselves (`gc.freeze()` before forking) are left as they are.
    """
    global _compiles_running
    with _compiles_lock:
        froze = _compiles_running == 0 and gc.isenabled() and gc.get_freeze_count() == 0
        _compiles_running += 1
        if froze:
            gc.freeze()
    try:
        yield
    finally:
        with _compiles_lock:
            _compiles_running -= 1
            if froze:
                gc.unfreeze()


class Graph:
    """A lazy static graph. Build tensors, `compile()` once, `execute()` many times."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self._next_id = 0
        self._forward: dict[int, int] = {}  # node ids replaced by compilers -> their successor
        self.retrieved: set[int] = set()
        self.kept: set[int] = set()
        self.assignments: dict[int, int] = {}  # input id -> node whose value it takes next run
        self.writes: dict[int, Write] = {}  # input id -> the rows each run writes into it
        self.dims: dict[str, int] = {}
        self._constants: dict[tuple, int] = {}  # (dtype, value) -> its node (Graph.constant)
        self._shared: dict[Any, Any] = {}  # Graph.shared's results
        self.data: dict[int, np.ndarray] = {}  # host values of inputs
        self.data_version: dict[int, int] = {}  # bumped on every set(), lets runtimes skip uploads
        self._data_clock = 0
        # (graph version, data clock, the symbolic inputs' dims) when every input last
        # passed check_inputs() (see _expected_input_shapes)
        self._inputs_checked: tuple[int, int, tuple] = (-1, -1, ())
        self._expected_cache: tuple[int, tuple, dict[int, tuple[int, ...]]] = (-1, (), {})
        self.runtime: Runtime | None = None
        self._version = 0  # bumped when nodes change
        self._free_dims_cache: tuple[int, frozenset[str]] = (-1, frozenset())
        self._toposort_cache: tuple[int, list[Node]] = (-1, [])
        self._input_shapes_cache: tuple[int, Any] = (-1, None)
        self._writes_cache: tuple[int, Any] = (-1, (None, []))
        self._input_kinds_cache: tuple[int, Any] = (-1, None)
        self._runtime_version = -1  # the graph version the installed runtime was built from
        self._zero_dims_checked: tuple | None = None  # (version, dims) last checked
        self._symbolic_shapes_cache: tuple[int, Any] = (-1, None)
        self._executed = False  # whether execute() ran since the last compile()
        self._fetchable: frozenset[int] = frozenset()  # see set_runtime
        # input id -> sizes of the axes its values index (gather, embedding, one_hot): the
        # reference backend checks the ids are in range; other backends give zeros for them
        self.index_bounds: dict[int, list[Expr]] = {}

    # ----- building -----------------------------------------------------------------------
    def add_node(self, op: ops.Op, inputs: Sequence[Edge], shape: Shape, dtype: DType) -> Node:
        node = Node(self._next_id, op, list(inputs), shape, dtype)
        self.nodes[node.id] = node
        self._next_id += 1
        self._version += 1
        return node

    def set_dim(self, name: str, value: int) -> Graph:
        """Bind symbolic dim `name` for the next executions (an int in [0, MAX_DIM])."""
        if type(value) is int and 0 <= value <= MAX_DIM and name in self.dims:
            self.dims[name] = value  # a decode step's rebinding: the name was checked before
            return self
        check_dim_name(name)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"symbolic dim {name!r} must be bound to an int, got {value!r}")
        if not 0 <= value <= MAX_DIM:
            raise ValueError(f"symbolic dim {name!r} must be in [0, {MAX_DIM}], got {value}")
        self.dims[name] = int(value)
        return self

    @property
    def version(self) -> int:
        """A counter that grows whenever the graph changes (nodes, outputs, assignments)."""
        return self._version

    def changed(self) -> None:
        """Record a change made in place (a compiler rewriting `node.op`, `node.dtype` or a
        node's input edges), so that `Looped` sees it, cached structure (`toposort`) is
        rebuilt, and a runtime built before it is not used."""
        self._version += 1

    def mark_retrieved(self, node_id: int) -> None:
        """Keep node `node_id`'s value readable after `execute()`."""
        self.retrieved.add(self.resolve(node_id))
        self._version += 1

    def mark_kept(self, node_id: int) -> None:
        """Keep node `node_id`'s value alive on the device across executions."""
        self.kept.add(self.resolve(node_id))
        self._version += 1

    def add_assignment(self, target: int, value: int) -> None:
        """After each `execute()`, input node `target` takes the value node `value` had."""
        self.assignments[target] = value
        self.kept.add(value)
        self._version += 1

    def add_write(self, target: int, value: int, dim: int, offset: Expr) -> None:
        """Each `execute()` stores node `value` into input node `target` at `offset` along
        axis `dim`, in place (see `luminal.Graph.write`)."""
        self.writes[target] = Write(value, dim, offset)
        self.kept.add(value)
        self._version += 1

    # ----- structure ----------------------------------------------------------------------
    def resolve(self, node_id: int) -> int:
        """The live node holding what `node_id` computed (compilers may have replaced it)."""
        while node_id in self._forward:
            node_id = self._forward[node_id]
        return node_id

    def consumers(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {n: [] for n in self.nodes}
        for n in self.nodes.values():
            for e in n.inputs:
                out[e.src].append(n.id)
        return out

    def toposort(self) -> list[Node]:
        """The nodes, each after its inputs (a fresh list; cached until the graph changes: the
        compilers of one pipeline ask for it many times, often of an unchanged graph)."""
        return list(self._per_version("_toposort_cache", self._toposort))

    def _per_version(self, slot: str, build: Callable[[], Any]) -> Any:
        """What `build()` returned for the graph's current version, kept in attribute `slot`."""
        version, value = getattr(self, slot)
        if version != self._version:
            value = build()
            setattr(self, slot, (self._version, value))
        return value

    def _toposort(self) -> list[Node]:
        nodes = self.nodes
        users: dict[int, list[int]] = {n: [] for n in nodes}
        indeg: dict[int, int] = {}
        for n in nodes.values():
            srcs = dict.fromkeys(e.src for e in n.inputs)
            indeg[n.id] = len(srcs)
            for src in srcs:
                users[src].append(n.id)
        ready = sorted(n for n, d in indeg.items() if d == 0)
        order: list[Node] = []
        while ready:
            nid = ready.pop()
            order.append(nodes[nid])
            for u in users[nid]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(order) != len(nodes):
            raise RuntimeError("graph has a cycle")
        return order

    def outputs(self) -> set[int]:
        """Nodes whose values must survive execution: retrieved, kept, assigned."""
        return self.retrieved | self.kept | set(self.assignments.values())

    def replace(self, old: int, new: int) -> None:
        """Route every consumer of `old` to `new` (same logical output) and drop `old`."""
        self.replace_many({old: new})

    def replace_many(self, mapping: dict[int, int]) -> None:
        """`replace(old, new)` for every pair of `mapping` in one pass over the graph.

        A target may itself be replaced (chains are followed). Passes that merge many nodes
        (CSE) call this once: replacing one node at a time scans the graph per node, which is
        quadratic on graphs of tens of thousands of nodes.
        """
        def final(node_id: int) -> int:
            while node_id in mapping and mapping[node_id] != node_id:
                node_id = mapping[node_id]
            return node_id

        moved = {old: final(old) for old in mapping}
        moved = {old: new for old, new in moved.items() if old != new}
        if not moved:
            return
        for n in self.nodes.values():
            for e in n.inputs:
                if e.src in moved:
                    e.src = moved[e.src]
        for s in (self.retrieved, self.kept):
            for old in s & moved.keys():
                s.discard(old)
                s.add(moved[old])
        for k, v in self.assignments.items():
            if v in moved:
                self.assignments[k] = moved[v]
        for k, w in self.writes.items():
            if w.src in moved:
                self.writes[k] = Write(moved[w.src], w.dim, w.offset)
        for old, new in moved.items():
            self._forward[old] = new
            self.remove(old)

    def remove(self, node_id: int) -> None:
        self.nodes.pop(node_id, None)
        self.data.pop(node_id, None)
        self._version += 1

    def input_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if isinstance(n.op, ops.Input)]

    def free_dims(self) -> set[str]:
        """Names of the symbolic dims the graph uses (cached until the graph changes: it is
        consulted on every `execute()`, and walking every view costs milliseconds)."""
        return set(self._per_version("_free_dims_cache", self._collect_free_dims))

    def _collect_free_dims(self) -> frozenset[str]:
        names: set[str] = set()
        for n in self.nodes.values():
            for d in n.shape:
                names |= d.free_vars
            for e in n.inputs:
                for d in (*e.view.shape, *e.view.strides, e.view.offset):
                    names |= d.free_vars
            if isinstance(n.op, ops.Constant) and isinstance(n.op.value, Expr):
                names |= n.op.value.free_vars
        return frozenset(names)

    def _input_shapes(self) -> tuple[list[Node], Callable[[dict[str, int]], tuple[int, ...]]]:
        """Every input, and one compiled function giving each one's rank and dims, flat, for
        the bound dim values (`execute()` checks every input on every run); cached until the graph
        changes."""
        def build() -> tuple[list[Node], Callable[[dict[str, int]], tuple[int, ...]]]:
            nodes = self.input_nodes()
            # each input's rank, then its dims: equal flat tuples mean equal shapes
            return nodes, evaluator(d for n in nodes for d in (len(n.shape), *n.shape))

        return self._per_version("_input_shapes_cache", build)

    # ----- compile & execute --------------------------------------------------------------
    def compile(self, compilers: Any = ()) -> Graph:
        """Run a compiler, or a tuple/list of compilers left to right, over this graph.

        A backend in the chain lowers the graph onto its device, so it comes last. Tensor
        handles stay valid: compilers remap them internally.
        """
        from .pipeline import run_compiler

        self.runtime = None
        self._executed = False
        with _collector_skips_old_objects():
            run_compiler(compilers, self)
        if self.runtime is not None and self._version != self._runtime_version:
            self.runtime = None
            raise ValueError(
                "compile(): a compiler that ran after the backend changed the graph the backend "
                "had already lowered; put the backend last, e.g. "
                "g.compile((lm.GenericCompiler(), lm.backend()))"
            )
        return self

    def set_runtime(self, runtime: Runtime) -> None:
        """Called by a backend's `compile()` to install what `execute()` runs."""
        self.runtime = runtime
        self._runtime_version = self._version
        # the live computed nodes `fetch` hands to the runtime as they are
        self._fetchable = frozenset(
            nid for nid in (*self.retrieved, *self.kept, *self.assignments.values())
            if nid in self.nodes and nid not in self._forward
            and not isinstance(self.nodes[nid].op, ops.Input))

    def prepare(self) -> Graph:
        """Do now what the first `execute()` would otherwise do once before running: build
        the tables its checks of the inputs and dims use, and let the runtime bind the inputs
        set already in the form it reads them (`Runtime.prepare`: luminal-cpu repacks GGUF
        weights). Optional, as `execute()` does whatever is left; a model loader calls it
        after compiling so that the first prompt runs as fast as the later ones."""
        if self.runtime is None:
            self._install_default_runtime()
        if self._version != self._runtime_version:
            raise GraphModifiedError(
                "the graph changed after compile(): call g.compile(...) again before prepare()"
            )
        self._input_shapes()
        self._input_kinds()
        if self.free_dims():  # a dim that may be bound to 0 (`_check_zero_dims`)
            self._per_version("_symbolic_shapes_cache", self._symbolic_shapes)
        self.runtime.prepare(self)
        return self

    def execute(self) -> Graph:
        """Run the installed runtime with the current inputs and dims. A `luminal.Graph`
        compiled without a backend runs on the reference backend (NumPy, one op at a time),
        with a warning."""
        if self.runtime is None:
            self._install_default_runtime()
        if self._version != self._runtime_version:
            raise GraphModifiedError(
                "the graph changed after compile(): call g.compile(...) again before execute()"
            )
        dims = self.check_inputs()
        if self.writes:
            self._check_writes(dims)
        self.runtime.execute(self, dims)
        self._executed = True
        return self

    def _install_default_runtime(self) -> None:
        """What `execute()` does without a runtime: here, refuse (`luminal.Graph` falls back
        to the reference backend)."""
        raise RuntimeError(
            "execute(): no backend was compiled into this graph: call "
            "g.compile((lm.GenericCompiler(), lm.backend())) first"
        )

    def check_inputs(self) -> dict[str, int]:
        """Verify every input is set and agrees with the bound dims; return the dim values."""
        if self._recheck_changed_inputs():  # every dim was bound then, and stays bound
            if 0 in self.dims.values():
                self._check_zero_dims()
            return dict(self.dims)
        missing = sorted(self.free_dims() - self.dims.keys())
        if missing:
            raise UnboundDimError(missing)
        if 0 in self.dims.values():
            self._check_zero_dims()
        nodes, evaluate_dims = self._input_shapes()
        flat, data = evaluate_dims(self.dims), self.data
        try:  # the common case in one pass: every input set, every shape right
            shapes = ((len(s := data[n.id].shape), *s) for n in nodes)
            if tuple(chain.from_iterable(shapes)) == flat:
                self._inputs_checked = (self._version, self._data_clock,
                                        self._expected_input_shapes()[1])
                return dict(self.dims)
        except KeyError:
            pass
        start = 0
        for n in nodes:
            if n.id not in self.data:
                raise ValueError(
                    f"input {n.op.label_name!r} {show_shape(n.shape)} was never set(): "
                    f"bind data with tensor.set(array) before execute()"
                )
            want, start = flat[start + 1:start + 1 + len(n.shape)], start + 1 + len(n.shape)
            have = self.data[n.id].shape
            if have != want:
                bound = ", ".join(f"{k}={self.dims[k]}" for k in sorted(
                    set().union(*(d.free_vars for d in n.shape))))
                raise ValueError(
                    f"input {n.op.label_name!r} holds data of shape {have} but its shape is "
                    + (f"{show_shape(n.shape)} with {bound}, so {want}" if bound else f"{want}")
                )
        self._inputs_checked = (self._version, self._data_clock,
                                self._expected_input_shapes()[1])
        return dict(self.dims)

    def _recheck_changed_inputs(self) -> bool:
        """True when every input still agrees with the dims, judged by the inputs set since
        the last full check and, if the dims their shapes use changed, the inputs with
        symbolic shapes: the other inputs (weights, caches of fixed size) cannot have
        changed. False: do the full check (it names what is wrong)."""
        version, clock, key = self._inputs_checked
        if version != self._version:
            return False
        expected, key_now = self._expected_input_shapes()
        data = self.data
        if key_now != key and any(data[n].shape != expected[n] for n in self._input_kinds()[1]):
            return False
        for nid in self.changed_since(clock):
            want = expected.get(nid)
            if want is not None and data[nid].shape != want:
                return False
        self._inputs_checked = (version, self._data_clock, key_now)
        return True

    def _expected_input_shapes(self) -> tuple[dict[int, tuple[int, ...]], tuple]:
        """Every input's shape at the bound dims (id -> shape), and the values of the dims
        the symbolic inputs' shapes use: the shapes are evaluated again only when those
        change (a decode step that only moves the cache length leaves them as they were)."""
        static, symbolic, evaluate, used = self._input_kinds()
        key = tuple(map(self.dims.get, used))
        version, cached_key, expected = self._expected_cache
        if version != self._version or cached_key != key:
            flat, start, expected = evaluate(self.dims), 0, dict(static)
            for nid in symbolic:
                rank = flat[start]
                expected[nid] = flat[start + 1:start + 1 + rank]
                start += 1 + rank
            self._expected_cache = (self._version, key, expected)
        return expected, key

    def _input_kinds(self) -> tuple[dict[int, tuple[int, ...]], list[int], Callable,
                                    tuple[str, ...]]:
        """The inputs of constant shape (id -> shape), those with symbolic dims, one function
        giving the latter's ranks and dims, flat, and the dims it uses; cached until the graph
        changes."""
        version, kinds = self._input_kinds_cache
        if version != self._version:
            nodes = self.input_nodes()
            static = {n.id: tuple(d.value for d in n.shape) for n in nodes
                      if all(d.is_const for d in n.shape)}
            symbolic = [n for n in nodes if n.id not in static]
            used = sorted(set().union(*(d.free_vars for n in symbolic for d in n.shape)))
            kinds = (static, [n.id for n in symbolic],
                     evaluator(d for n in symbolic for d in (len(n.shape), *n.shape)),
                     tuple(used))
            self._input_kinds_cache = (self._version, kinds)
        return kinds

    def _check_writes(self, dims: dict[str, int]) -> None:
        """Every `write` must land inside its input: a runtime stores the rows in place, so a
        write past the end would corrupt memory instead of failing."""
        version, (evaluate, targets) = self._writes_cache
        if version != self._version:
            # per write: the offset, the rows written and the room the input has; writes alike
            # in all three (a KV cache's layers) are checked once, as the first of them
            alike = {}
            for target, w in self.writes.items():
                alike.setdefault((w.offset, self.nodes[w.src].shape[w.dim],
                                  self.nodes[target].shape[w.dim]), target)
            evaluate = evaluator(e for triple in alike for e in triple)
            targets = list(alike.values())
            self._writes_cache = (self._version, (evaluate, targets))
        flat = evaluate(dims)
        for k, target in enumerate(targets):
            start, rows, room = flat[3 * k:3 * k + 3]
            if start < 0 or start + rows > room:
                name = self.nodes[target].op.label_name
                raise ValueError(
                    f"write into input {name!r}: rows {start}..{start + rows - 1} along axis "
                    f"{self.writes[target].dim} do not fit its {room} positions"
                )

    def _check_zero_dims(self) -> None:
        """A dim bound to 0 is fine where the graph only uses it as a size (an empty KV cache
        that `cat` extends, a sum over no elements), but shapes are simplified assuming every
        named dim is >= 1, so slicing or indexing such a dim can give a negative size.
        Raise a clear error for that instead of a crash inside a backend."""
        key = (self._version, tuple(sorted(self.dims.items())))
        if self._zero_dims_checked == key:
            return
        shapes, evaluate = self._per_version("_symbolic_shapes_cache", self._symbolic_shapes)
        try:  # every symbolic shape at once: none negative is the common case
            negative = min(evaluate(self.dims), default=0) < 0
        except ZeroDivisionError:  # perhaps in a shape without the zero dim: look at each
            negative = True
        if negative:  # the first shape with a zero dim that is negative, if any
            zero = {k for k, v in self.dims.items() if v == 0}
            for what, n, shape in shapes:
                if not any(d.free_vars & zero for d in shape):
                    continue
                values = tuple(d.evaluate(self.dims) for d in shape)
                if min(values) < 0:
                    names = ", ".join(repr(z) for z in sorted(zero))
                    raise ValueError(
                        f"symbolic dim {names} is bound to 0, but shapes are simplified "
                        f"assuming named dims are >= 1: the {what} of {n.op.name} (node {n.id}) "
                        f"has shape {show_shape(shape)} = {values}. Bind it to a value >= 1, "
                        f"or do not slice or index a dim that can be 0"
                    )
        self._zero_dims_checked = key

    def _symbolic_shapes(self) -> tuple[list[tuple[str, Node, Shape]], Callable]:
        """The distinct shapes with a named dim among the nodes' outputs and input views,
        each with the first (what, node) in node order that has it, and one function giving
        all their dims, flat, for the bound dims (`_check_zero_dims`: a transformer's
        thousands of nodes share a few hundred shapes)."""
        # expressions are hash-consed: equal shapes hold the same objects. Shape -> None
        # (constant) or (position: 0 the output, k + 1 input k, node)
        first: dict[tuple[int, ...], tuple[int, Node] | None] = {}
        for n in self.nodes.values():
            for pos, shape in enumerate((n.shape, *[e.view.shape for e in n.inputs])):
                key = tuple(map(id, shape))
                if key not in first:
                    first[key] = None if all(d.is_const for d in shape) else (pos, n)
        shapes = [("output" if pos == 0 else f"input {pos - 1}", n,
                   n.shape if pos == 0 else n.inputs[pos - 1].view.shape)
                  for pos, n in filter(None, first.values())]
        return shapes, evaluator(d for _, _, shape in shapes for d in shape)

    def set_data(self, node_id: int, array: np.ndarray) -> None:
        self.data[node_id] = array
        # versions come from one clock, and the latest set moves to the end of the dict, so
        # `changed_since` visits only what changed
        self._data_clock += 1
        self.data_version.pop(node_id, None)
        self.data_version[node_id] = self._data_clock

    @property
    def data_clock(self) -> int:
        """A counter that grows on every `set_data` (see `changed_since`)."""
        return self._data_clock

    def changed_since(self, clock: int) -> list[int]:
        """The inputs whose data was set after `data_clock` was `clock`, latest first: a
        runtime that remembers the clock of its last run looks at these instead of at every
        input (a decode step changes one input of hundreds)."""
        changed = []
        for nid in reversed(self.data_version):
            if self.data_version[nid] <= clock:
                break
            changed.append(nid)
        return changed

    def fetch(self, node_id: int) -> np.ndarray:
        """The value of a node after `execute()` (host array in the node's shape)."""
        if (node_id in self._fetchable and self._executed
                and self._version == self._runtime_version):
            return self.runtime.fetch(node_id)  # a decode step's logits: nothing to resolve
        nid = self.resolve(node_id)
        node = self.nodes.get(nid)
        if node is None:
            raise RemovedTensorError(
                f"this tensor (node {node_id}) was removed by compilation: call .retrieve() on "
                f"it before compile() to read it after execute()"
            )
        if isinstance(node.op, ops.Input):
            if nid not in self.data:
                raise ValueError(f"input {node.op.label_name!r} was never set()")
            return self.data[nid]
        if self.runtime is None or not self._executed:
            raise RuntimeError("the graph has not been executed yet: call g.execute() first")
        # (not `outputs()`: a decode step fetches its logits every run, and that builds a set)
        if not (nid in self.retrieved or nid in self.kept or nid in self.assignments.values()):
            raise ValueError(
                "this tensor was not retrieved: call .retrieve() on it before compile()"
            )
        return self.runtime.fetch(nid)

    # ----- printing -----------------------------------------------------------------------
    def to_dot(self) -> str:
        """The graph as Graphviz DOT text: one box per node (op, dtype, shape)."""
        from .printer import to_dot

        return to_dot(self)

    def display(self, path: str | None = None, fmt: str = "svg") -> str:
        """Render with graphviz to `path` (default: a temp file); returns the file path."""
        from .printer import display

        return display(self, path, fmt)

    def __repr__(self) -> str:
        lines = [repr(n) for n in self.toposort()]
        return "Graph(\n  " + "\n  ".join(lines) + "\n)"
