"""`HalfPrecision`: a compiler that runs float32 compute in float16 or bfloat16.

In Luminal a dtype is a compiler, not a type parameter of the whole program. Placed before a
backend, `HalfPrecision("float16")` turns every float32 node of the graph into the half type,
except the ones the user reads back (retrieved), float constants (a log2(e) rounded to half
would skew every softmax) and the *index cone*: values computed from iotas and dims, possibly
with 1-D float tables (RoPE angles `position * inv_freq`, masks), where half precision would
round position 3001 to 3000. Also kept are the *statistics*: sums that are not matrix products
(a norm's sum of squares, a softmax denominator, a mean) and what is computed from them alone,
because a sum of 576 squared activations near 100 already overflows float16's 65504 (PyTorch
models upcast their norms for the same reason); they are one value per row, so float32 costs
nothing there. And the *vectors*: 1-D float inputs (norm scales, biases) are tiny, and a norm
scale near 1 in bfloat16 keeps only steps of 1/128 (a GGUF stores Gemma's scales as 1 + w,
where PyTorch's model stores w in bfloat16 and adds the 1 in float32): on a 4-layer Gemma 3,
bfloat16 logits erred by 1.48% with its scales in bfloat16 and by 1.13% with them in float32,
as PyTorch's bfloat16 does (`tests/test_half_precision_vs_torch.py`). Half nodes keep the
semantics the reference backend gives them:
computed in float32, accumulated in float32, rounded to half when stored. So intermediates and
weights take half the memory and bandwidth, matmuls run on half-precision tensor cores with
float32 accumulation, and results come back in the dtypes the graph declared.

Float32 inputs become half inputs: `set()` keeps accepting float32 arrays (they are converted
on upload, once per new value); a KV cache (an assigned input) is stored in half together with
the value assigned to it.
"""

from __future__ import annotations

from luminal import ops
from luminal.dtypes import DType, bfloat16, dtype_of, float16, float32
from luminal.graph import Graph

HALF_TYPES = (float16, bfloat16)


class HalfPrecision:
    """Compiler: float32 -> `dtype` ("float16" or "bfloat16") for everything not read back."""

    def __init__(self, dtype: DType | str = "float16"):
        dt = dtype_of(dtype)
        if dt not in HALF_TYPES:
            raise ValueError(f"HalfPrecision: dtype must be float16 or bfloat16, got {dt.name}")
        self.dtype = dt

    def compile(self, graph: Graph) -> None:
        cone = index_cone(graph)
        keep = ({graph.resolve(n) for n in graph.retrieved} | cone | statistics(graph, cone)
                | {n.id for n in graph.nodes.values() if _table(n)})
        for target, src in graph.assignments.items():
            if src in keep:
                keep.add(target)  # an assignment copies bytes: both sides share one dtype
        changed = False
        for node in graph.nodes.values():
            if node.dtype != float32 or node.id in keep or isinstance(node.op, ops.Constant):
                continue
            if isinstance(node.op, ops.Cast):
                node.op = ops.Cast(self.dtype)
            node.dtype = self.dtype
            changed = True
        if changed:
            graph.changed()

    def __repr__(self) -> str:
        return f"HalfPrecision({self.dtype.name!r})"


def _table(node) -> bool:
    """A float input of at most one dim (inverse frequencies, a norm scale, a bias): kept in
    float32, and it may join the index cone."""
    return isinstance(node.op, ops.Input) and node.dtype.is_float and len(node.shape) <= 1


def index_cone(graph: Graph) -> set[int]:
    """Nodes computed from iotas and constants (and 1-D float tables), plus the tables that
    only they read: positions, angles and masks, which must stay float32."""
    cone: set[int] = set()
    order = graph.toposort()
    for node in order:
        if isinstance(node.op, (ops.Iota, ops.Constant)):
            cone.add(node.id)
            continue
        srcs = [graph.nodes[e.src] for e in node.inputs]
        if srcs and any(s.id in cone for s in srcs) and all(
            s.id in cone or _table(s) for s in srcs
        ):
            cone.add(node.id)
    users = graph.consumers()
    for node in order:
        if _table(node) and users[node.id] and set(users[node.id]) <= cone:
            cone.add(node.id)
    return cone


def _is_product(graph: Graph, node) -> bool:
    """A SumReduce over a product of broadcast operands: a matmul (its output is a full
    activation and is stored in half, with float32 accumulation)."""
    src = graph.nodes[node.inputs[0].src]
    return isinstance(src.op, ops.Mul) and any(
        any(s == 0 and d != 1 for s, d in zip(e.view.strides, e.view.shape))
        for e in src.inputs)


def statistics(graph: Graph, cone: set[int]) -> set[int]:
    """Float sums that are not matmuls, and the nodes computed from them, constants and the
    index cone alone (mean, +eps, rsqrt): the per-row statistics kept in float32."""
    stats: set[int] = set()
    for node in graph.toposort():
        if not node.dtype.is_float:
            continue
        if isinstance(node.op, ops.SumReduce):
            if not _is_product(graph, node):
                stats.add(node.id)
            continue
        srcs = [e.src for e in node.inputs]
        if srcs and any(s in stats for s in srcs) and all(s in stats or s in cone for s in srcs):
            stats.add(node.id)
    return stats

