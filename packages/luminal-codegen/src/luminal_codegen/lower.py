"""Lowering a primitive graph to a `Program` of kernels.

Fusion policy (decided once per node, in topological order):

- a node gets a buffer ("materialises") when it is an input, an output (retrieved, kept or
  assigned), read by several nodes (unless it is cheap elementwise work that each of a few
  readers recomputes: `SHARED_INLINE_LIMIT`), an operand of a matmul, or read through a
  broadcast when recomputing it per read would be costly (a reduction or transcendental math);
- everything else is inlined into the kernel of the node that reads it: elementwise chains
  fuse with each other and into the reductions that consume them, and a reduction fuses into
  the elementwise ops after it as long as they read each result once;
- views never copy: a read through a permute, broadcast, slice or pad becomes index and
  validity expressions; `Contiguous` is the identity, so it copies only when it materialises;
- constants and iotas are always inlined; matmuls, quantized matmuls and one-hot gathers are
  recognised (`patterns`) and become `Matmul` kernels or `Bind` gathers;
- a backend that binds a bounded number of arguments per kernel (Metal: 31 buffers and dims
  together; `Dialect.max_kernel_args`) passes that bound as `max_args`: a kernel that would
  take more stores part of its fused region to a buffer (the inlined node taking the most
  arguments that still fit one kernel) until it fits. Kernels within the bound are unchanged.

A `Schedule` (`schedule.py`) overrides these decisions node by node: that is how a search
compiler tries the other answers.

Kernels compare structurally, so the program keeps one copy of each distinct kernel: the 30
identical layers of a transformer share their kernels and differ only in their calls. Building
a kernel is memoized on the structure of the region it fuses (`_signature`), so the repeated
layers are also built only once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from luminal import ops
from luminal.dtypes import float32
from luminal.ir import Edge, Graph, Node
from luminal.symbolic import Expr, logical_and, prod

from . import patterns
from .indexing import flat_index, source_axes
from .ir import (
    Binary,
    BufferSpec,
    Call,
    Cast,
    Const,
    Index,
    Kernel,
    KernelLike,
    Load,
    Matmul,
    MatOperand,
    Param,
    Program,
    QuantOperand,
    Reduce,
    Select,
    Store,
    Unary,
    Value,
    Where,
    kernel_arguments,
    kernel_dims,
    loop_var,
    reduce_var,
)
from .schedule import DEFAULT, Schedule
from .simplify import merge_axes

_OP_COST = {ops.Log2: 8, ops.Exp2: 8, ops.Sin: 8, ops.Sqrt: 2, ops.Recip: 2}
_REDUCE_COST = 1000
# Most arithmetic a node may cost and still be recomputed at every broadcast read.
BROADCAST_INLINE_LIMIT = 4
# A node read by several nodes is recomputed by each of them (no buffer, no extra kernel)
# when it is elementwise, costs at most this much arithmetic (its inlined inputs included)
# and has at most this many readers: a mask, a comparison, a bias add or a concatenation
# is cheaper to recompute from its inputs than to write out and read back. Its inlined
# region may not hold another such node, so recomputation never compounds (a chain of
# residual adds alternates between recomputed and stored, the same in every layer).
SHARED_INLINE_LIMIT = 8
SHARED_INLINE_READERS = 3
# ... and none of its readers is a reduction over more elements than this (recomputing inside
# a long reduction loop, a softmax's max over the keys, measured slower than storing it).
SHARED_INLINE_REDUCE = 16


def _zero(dtype) -> Const:
    return Const(False if dtype.name == "bool" else 0.0 if dtype.is_float else 0, dtype)


def _one_hot_operands(pick: Node) -> list[Edge]:
    """The inputs of a gather's Mul or Select that may be its one-hot: either factor of a
    one-hot product; the condition of `where(one_hot, row, 0)`."""
    if isinstance(pick.op, ops.Mul):
        return list(pick.inputs)
    if isinstance(pick.op, ops.Select):
        return pick.inputs[:1]
    return []


class ValueBuilder:
    """Builds the value tree of a node at a symbolic index, inlining every node that has no
    buffer. `params` lists the nodes whose buffers the tree loads (parameter order)."""

    def __init__(self, graph: Graph, has_buffer: Callable[[Node], bool], params: list[int]):
        self.graph = graph
        self.has_buffer = has_buffer
        self.params = params
        self._param_index = {n: k for k, n in enumerate(params)}
        self._memo: dict[tuple, Value] = {}
        self._reductions = 0

    def param(self, node_id: int) -> int:
        k = self._param_index.get(node_id)
        if k is None:
            k = self._param_index[node_id] = len(self.params)
            self.params.append(node_id)
        return k

    def read(self, edge: Edge, axes: tuple[Expr, ...], ctx: Expr) -> Value:
        """The value an edge delivers at `axes` of its view; `ctx` is the validity of the
        enclosing reads, so that no load happens where an outer pad reads zero."""
        src = self.graph.nodes[edge.src]
        view = edge.view
        valid = view.valid(axes)
        if valid == 0:
            return _zero(src.dtype)
        inner = logical_and(ctx, valid)
        if self.has_buffer(src):
            return Load(self.param(src.id), view.index(axes), inner, src.dtype)
        value = self.value(src, tuple(source_axes(view, src.shape, axes)), inner)
        return value if valid == 1 else Where(valid, value, value.dtype)

    def value(self, node: Node, axes: tuple[Expr, ...], ctx: Expr) -> Value:
        """`compute`, memoized: a node read twice at one index is one subtree."""
        key = (node.id, axes, ctx)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self.compute(node, axes, ctx)
        return got

    def compute(self, node: Node, axes: tuple[Expr, ...], ctx: Expr) -> Value:
        """The value of `node` itself (even if it has a buffer) at per-axis index `axes`."""
        op, dt = node.op, node.dtype
        if isinstance(op, ops.Constant):
            if isinstance(op.value, Expr):
                return Index(op.value, dt)
            return Const(op.value, dt)
        if isinstance(op, ops.Iota):
            return Index(op.expr.substitute({ops.IOTA_VAR: flat_index(op.shape, axes)}), dt)
        if isinstance(op, ops.Input):
            return Load(self.param(node.id), flat_index(node.shape, axes), ctx, dt)
        if isinstance(op, ops.Contiguous):
            return self.read(node.inputs[0], axes, ctx)
        if isinstance(op, ops.Cast):
            x = self.read(node.inputs[0], axes, ctx)
            return x if x.dtype == dt else Cast(x, dt)
        if type(op) in ops.MATH:
            return Unary(op.code, self.read(node.inputs[0], axes, ctx), dt)
        if type(op) in ops.BINARY:
            a, b = (self.read(e, axes, ctx) for e in node.inputs)
            return Binary(op.code, a, b, dt)
        if isinstance(op, ops.Select):
            return Select(*(self.read(e, axes, ctx) for e in node.inputs), dt)
        if isinstance(op, (ops.SumReduce, ops.MaxReduce)):
            return self._reduce(node, axes, ctx)
        raise NotImplementedError(
            f"cannot generate code for op {op.name}: only the primitive ops (and Cast, "
            f"Select, Constant, Iota) are supported; run device compilers of other backends "
            f"elsewhere"
        )

    def _reduce(self, node: Node, axes: tuple[Expr, ...], ctx: Expr) -> Value:
        op, edge = node.op, node.inputs[0]
        size = edge.view.shape[op.axis]
        var = reduce_var(self._reductions, size)
        self._reductions += 1
        body = self.read(edge, (*axes[: op.axis], var, *axes[op.axis :]), ctx)
        kind = "sum" if isinstance(op, ops.SumReduce) else "max"
        if kind == "sum" and isinstance(body, Binary) and body.op == "mul" and (
            body.dtype.is_float and body.dtype != float32
        ):
            # the reference sums half-precision products unrounded (in float32)
            body = Binary("mul", body.a, body.b, float32)
        reduced = Reduce(kind, var, size, body, node.dtype)
        return patterns.as_gather(reduced) or reduced


class Lowering:
    """Decides fusion for one graph and builds its `Program` (see the module docstring)."""

    def __init__(self, graph: Graph, schedule: Schedule | None = None,
                 quant_kernels: Collection[str] = frozenset(), max_args: int | None = None):
        if max_args is not None and max_args < 4:
            raise ValueError(f"lower: max_args must be at least 4 (a primitive op with three "
                             f"operands and its output, no dims), got {max_args}")
        self.graph = graph
        self.schedule = schedule or DEFAULT
        self.quant_kernels = frozenset(quant_kernels)
        self.max_args = max_args
        self.order = graph.toposort()
        self.pos = {n.id: k for k, n in enumerate(self.order)}
        self.users = graph.consumers()
        self.outputs = {n for n in graph.outputs() if n in graph.nodes}
        self.matmuls: dict[int, patterns.MatmulMatch] = {}
        self.gather_muls: set[int] = set()  # the Mul of each one-hot gather
        self.one_hot: set[int] = set()  # nodes of those one-hots: inlined, never computed
        self.materialised: set[int] = set()
        self._built: dict[tuple, KernelLike] = {}
        self._find_matmuls()
        self._decide_buffers()

    # ----- decisions ----------------------------------------------------------------------
    def _is_gather(self, node: Node) -> bool:
        pick = self.graph.nodes[node.inputs[0].src]
        if not any(patterns.might_be_one_hot(self.graph, self.graph.nodes[e.src])
                   for e in _one_hot_operands(pick)):
            return False
        # probe with every non-reduction inlined: a one-hot is made of elementwise ops only
        probe = ValueBuilder(
            self.graph,
            lambda n: isinstance(n.op, (ops.Input, ops.SumReduce, ops.MaxReduce)) and n is not node,
            [],
        )
        axes = tuple(loop_var(k, d) for k, d in enumerate(node.shape))
        return not isinstance(probe.compute(node, axes, Expr.const(1)), Reduce)

    def _one_hot_region(self, pick: Node) -> set[int]:
        """The comparison nodes building the one-hot operand of a gather's Mul or Select."""
        region: set[int] = set()
        stack = [e.src for e in _one_hot_operands(pick)]
        while stack:
            node = self.graph.nodes[stack.pop()]
            if node.id not in region and isinstance(node.op, (ops.Cast, ops.LessThan, ops.Add)):
                region.add(node.id)
                stack.extend(e.src for e in node.inputs)
        return region

    def _find_matmuls(self) -> None:
        for node in self.order:
            if not isinstance(node.op, ops.SumReduce):
                continue
            if self._is_gather(node):
                mul = self.graph.nodes[node.inputs[0].src]
                self.gather_muls.add(mul.id)
                self.one_hot |= self._one_hot_region(mul)
                continue
            if node.id in self.schedule.loop_matmuls:
                continue
            match = patterns.match_matmul(self.graph, node, self.users, self.quant_kernels)
            if match is not None:
                self.matmuls[match.out] = match

    def _decide_buffers(self) -> None:
        forced = set(self.outputs) | set(self.matmuls)
        for _, params in self.schedule.kernels.values():
            forced.update(params)
        for m in self.matmuls.values():
            forced.add(m.a.node)
            forced.add(m.b.node)
        cost: dict[int, int] = {}
        shared: set[int] = set()  # inlined nodes with several readers, and what inlines them
        mat = self.materialised
        nodes = self.graph.nodes
        for node in self.order:
            op = node.op
            if isinstance(op, ops.Input) or node.id in forced:
                mat.add(node.id)
                continue
            if isinstance(op, (ops.Constant, ops.Iota)):
                cost[node.id] = 0
                continue
            own = _REDUCE_COST if isinstance(op, (ops.SumReduce, ops.MaxReduce)) else (
                _OP_COST.get(type(op), 1))
            cost[node.id] = own + sum(cost.get(e.src, 0) for e in node.inputs)
            readers = set(self.users[node.id])
            # whether the inlined region of this node already holds a shared node
            holds_shared = any(e.src in shared for e in node.inputs)
            if node.id in self.one_hot:
                pass  # shared by several gathers perhaps, but each gather reads indices only
            elif (len(readers) > 1 and (
                len(readers) > SHARED_INLINE_READERS or cost[node.id] > SHARED_INLINE_LIMIT
                or holds_shared or any(self._long_reduction(nodes[r]) for r in readers)
            )) or (cost[node.id] > BROADCAST_INLINE_LIMIT and self._broadcast(node, readers)):
                mat.add(node.id)
            if node.id in self.schedule.store and node.id not in self.one_hot:
                mat.add(node.id)
            elif node.id in self.schedule.inline:
                mat.discard(node.id)
            if node.id in mat:
                cost[node.id] = 0
            elif len(readers) > 1 or holds_shared:
                shared.add(node.id)

    def _broadcast(self, node: Node, readers: set[int]) -> bool:
        """Whether a reader reads `node` through a view that repeats elements (the one-hot of
        a gather is never computed: it must stay inline to be seen)."""
        nodes = self.graph.nodes
        return any(
            reader not in self.gather_muls and any(
                e.src == node.id and patterns.expands(e.view) for e in nodes[reader].inputs)
            for reader in readers
        )

    @staticmethod
    def _long_reduction(node: Node) -> bool:
        """A reduction over more than `SHARED_INLINE_REDUCE` elements (a softmax's max over
        the keys): a shared node is stored rather than recomputed inside its loop."""
        if not isinstance(node.op, (ops.SumReduce, ops.MaxReduce)):
            return False
        size = node.inputs[0].view.shape[node.op.axis]
        return not (size.is_const and size.value <= SHARED_INLINE_REDUCE)

    # ----- building -----------------------------------------------------------------------
    def _has_buffer(self, node: Node) -> bool:
        return node.id in self.materialised

    def _signature(self, root: Node) -> tuple[tuple, list[int]]:
        """What the kernel of `root` depends on: the ops, dtypes, shapes and views of the region
        it inlines, and which buffers it reads (in the order the builder binds them)."""
        nodes, mat = self.graph.nodes, self.materialised
        params, index = [root.id], {root.id: 0}
        seen: dict[int, int] = {}

        def edge(e: Edge) -> tuple:
            src = nodes[e.src]
            if src.id in mat:
                k = index.get(src.id)
                if k is None:
                    k = index[src.id] = len(params)
                    params.append(src.id)
                return (e.view, k, src.dtype, src.shape)
            return (e.view, inlined(src))

        def inlined(n: Node) -> tuple:
            ref = seen.get(n.id)
            if ref is not None:
                return (ref,)
            out = (n.op, n.dtype, n.shape, tuple(edge(e) for e in n.inputs))
            seen[n.id] = len(seen)
            return out

        sig = (root.op, root.dtype, root.shape, tuple(edge(e) for e in root.inputs))
        return sig, params

    def build_kernel(self, node: Node) -> tuple[KernelLike, list[int]]:
        """The kernel computing `node` and the nodes bound to its parameters, in order."""
        scheduled = self.schedule.kernels.get(node.id)
        if scheduled is not None:
            return scheduled[0], list(scheduled[1])
        tuning = self.schedule.tuning.get(node.id)
        match = self.matmuls.get(node.id)
        if match is not None:
            kernel, params = self._build_matmul(node, match)
            return (replace(kernel, tuning=tuning) if tuning else kernel), params
        sig, sig_params = self._signature(node)
        kernel = self._built.get(sig)
        if kernel is None:
            kernel, params = self._build_kernel(node)
            if params == sig_params:
                self._built[sig] = kernel
        else:
            params = sig_params
        return (replace(kernel, tuning=tuning) if tuning else kernel), params

    def fitting_kernel(self, node: Node) -> tuple[KernelLike, list[int]]:
        """`build_kernel`, storing parts of the fused region to buffers until the kernel takes
        at most `max_args` buffers and dims."""
        kernel, params = self.build_kernel(node)
        while self.max_args is not None and kernel_arguments(kernel) > self.max_args:
            self._store_part_of(node, kernel_arguments(kernel))
            kernel, params = self.build_kernel(node)
        return kernel, params

    def _store_part_of(self, root: Node, taken: int) -> None:
        """Materialise one inlined node of `root`'s region so that its kernel takes fewer than
        `taken` arguments: the candidate whose own kernel takes the most arguments within
        `max_args` (it then fits, and replaces the most loads), else the next one."""
        nodes, mat = self.graph.nodes, self.materialised
        region, stack = [], [e.src for e in root.inputs]
        seen: set[int] = set()
        while stack:
            nid = stack.pop()
            if nid in seen or nid in mat:
                continue
            seen.add(nid)
            node = nodes[nid]
            stack.extend(e.src for e in node.inputs)
            # a one-hot must stay inline to be seen as a gather; a constant reads nothing
            if not (nid in self.one_hot or nid in self.gather_muls
                    or isinstance(node.op, (ops.Constant, ops.Iota))):
                region.append(node)
        own = {n.id: kernel_arguments(self.build_kernel(n)[0]) for n in region}
        fitting = sorted((n for n in region if own[n.id] <= self.max_args),
                         key=lambda n: (-own[n.id], self.pos[n.id]))
        for node in fitting:
            mat.add(node.id)
            if kernel_arguments(self.build_kernel(root)[0]) < taken:
                return
            mat.discard(node.id)
        raise ValueError(
            f"lower: the kernel of node {root.id} ({root.op.name}) takes {taken} buffers and "
            f"dims, more than the backend's limit of {self.max_args}, and storing no part of "
            f"it to a buffer brings that down")

    def _build_kernel(self, node: Node) -> tuple[Kernel, list[int]]:
        params = [node.id]
        builder = ValueBuilder(self.graph, self._has_buffer, params)
        domain = tuple(node.shape)
        axes = tuple(loop_var(k, d) for k, d in enumerate(domain))
        value = builder.compute(node, axes, Expr.const(1))
        graph = self.graph
        kparams = tuple(
            Param(graph.nodes[n].dtype, output=(k == 0)) for k, n in enumerate(params)
        )
        kernel = Kernel(kparams, domain, Store(0, flat_index(node.shape, axes), value))
        return merge_axes(kernel), params

    def _build_matmul(self, node: Node, match: patterns.MatmulMatch) -> tuple[Matmul, list[int]]:
        nodes = self.graph.nodes
        match = patterns.fold_batch(match)
        a, b = match.a, match.b
        params = [node.id, a.node, b.node]
        kparams = (Param(node.dtype, True), Param(nodes[a.node].dtype), Param(nodes[b.node].dtype))
        if isinstance(b, patterns.QuantWeight):
            right = QuantOperand(2, b.qtype, b.rows, b.cols, b.k_contiguous)
        else:
            right = MatOperand(2, b.offset, b.stride_row, b.stride_k)
        left = MatOperand(1, a.offset, a.stride_row, a.stride_k)
        kernel = Matmul(kparams, match.batch, match.m, match.n, match.k, left, right, 0,
                        match.out_offset, match.out_stride)
        return kernel, params

    def program(self) -> Program:
        """Every kernel needed for the outputs, in a valid order, deduplicated."""
        nodes = self.graph.nodes
        built: dict[int, tuple[KernelLike, list[int]]] = {}
        todo = [n for n in self.outputs if not isinstance(nodes[n].op, ops.Input)]
        while todo:
            nid = todo.pop()
            if nid in built:
                continue
            kernel, params = self.fitting_kernel(nodes[nid])
            built[nid] = (kernel, params)
            todo.extend(p for p in params[1:] if p not in built and not isinstance(
                nodes[p].op, ops.Input))
        kernels: dict[KernelLike, int] = {}
        buffers: dict[int, int] = {}
        specs: list[BufferSpec] = []

        def buffer(nid: int) -> int:
            k = buffers.get(nid)
            if k is None:
                node = nodes[nid]
                role = "input" if isinstance(node.op, ops.Input) else (
                    "output" if nid in self.outputs else "temp")
                k = buffers[nid] = len(specs)
                specs.append(BufferSpec(nid, node.dtype, prod(node.shape), role))
            return k

        calls = []
        for nid in sorted(built, key=self.pos.__getitem__):
            kernel, params = built[nid]
            kid = kernels.setdefault(kernel, len(kernels))
            calls.append(Call(kid, tuple(buffer(p) for p in params)))
        names: set[str] = set()
        for kernel in kernels:
            names.update(kernel_dims(kernel))
        for spec in specs:
            names |= spec.numel.free_vars
        return Program(list(kernels), calls, specs, tuple(sorted(names)))


def lower(graph: Graph, schedule: Schedule | None = None,
          quant_kernels: Collection[str] = frozenset(), max_args: int | None = None) -> Program:
    """Lower a graph of primitive ops to a `Program` (see the module docstring); `schedule`
    overrides the fusion and matmul heuristics node by node. `quant_kernels` names the
    `luminal.quant` formats (lower case) the backend has quantized matmul kernels for: products
    with weights dequantized from those become `Matmul`s with a `QuantOperand`; other formats
    run their primitive decomposition. `max_args` bounds the buffers plus dims of every kernel
    (a backend passes its dialect's `max_kernel_args`): larger fused regions are split by
    storing intermediates; None leaves them whole."""
    return Lowering(graph, schedule, quant_kernels, max_args).program()
