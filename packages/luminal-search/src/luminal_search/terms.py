"""The term language of the search: a region of the graph as an egglog term, and back.

    (datatype Term
      (Leaf i64)            ; a value the region reads whole: a stored node, a constant, or an op
                            ; the language does not model (looked up in the region's leaf table)
      (Read Term i64)       ; a term read through a view (index into the region's view table);
                            ; a term used without Read is read whole (the identity view)
      (Log2 Term) (Exp2 Term) (Sin Term) (Sqrt Term) (Recip Term)
      (Add Term Term) (Mul Term Term) (Mod Term Term) (Lt Term Term)
      (Sum i64 i64 Term) (Max i64 i64 Term)   ; axis, reduced extent (index into the region's
                                              ; extent table), operand
      (Cont Term))

Rule sets (egglog text tagged `:ruleset NAME`) are written over these constructors; a term's
shape is never in the e-graph, so a rule must keep every binary op's operands equal in shape
(reuse matched operands; match reductions on both axis and extent).

An extracted term becomes `Steps`: a JSON-friendly list the cache stores and `rebuild` turns
back into graph nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from luminal import ops
from luminal.graph import Edge, Graph
from luminal.shape import View

UNARY = {"Log2": ops.Log2, "Exp2": ops.Exp2, "Sin": ops.Sin, "Sqrt": ops.Sqrt,
         "Recip": ops.Recip, "Cont": ops.Contiguous}
BINARY = {"Add": ops.Add, "Mul": ops.Mul, "Mod": ops.Mod, "Lt": ops.LessThan}
REDUCE = {"Sum": ops.SumReduce, "Max": ops.MaxReduce}
NAME_OF = {cls: name for table in (UNARY, BINARY, REDUCE) for name, cls in table.items()}


def language(costs: Callable[[str], int]) -> str:
    """The datatype declaration, with each constructor's extraction cost from `costs(name)`."""
    def ctor(name: str, args: str) -> str:
        return f"  ({name} {args} :cost {costs(name)})"

    lines = ["(datatype Term", "  (Leaf i64 :cost 0)", "  (Read Term i64 :cost 0)"]
    lines += [ctor(n, "Term") for n in UNARY]
    lines += [ctor(n, "Term Term") for n in BINARY]
    lines += [ctor(n, "i64 i64 Term") for n in REDUCE]
    return "\n".join(lines) + ")"


# One step of a rebuilt region: ["leaf", k] | ["read", step, view] | ["op", name, axis, [steps]]
Step = list
Steps = list[Step]


@dataclass
class Encoded:
    """A region as egglog `let`s: `text` binds `$t<k>` for each term, `root` names the root."""

    text: str
    root: str


def is_identity(view: View, src_shape) -> bool:
    return view.is_contiguous and tuple(view.shape) == tuple(src_shape)


def encode(graph: Graph, root: int, leaves: Sequence[int], views: Sequence[View],
           extents: Sequence, prefix: str = "t") -> Encoded:
    """The region under `root` as egglog text: nodes in `leaves` become `(Leaf k)`; the lets
    are named `$<prefix><k>`."""
    leaf_of = {n: k for k, n in enumerate(leaves)}
    view_of = {v: k for k, v in enumerate(views)}
    extent_of = {e: k for k, e in enumerate(extents)}
    names: dict[int, str] = {}
    lines: list[str] = []
    stack = [(root, False)]
    while stack:  # iterative post-order: regions can be deep chains
        nid, ready = stack.pop()
        if nid in names:
            continue
        node = graph.nodes[nid]
        if nid in leaf_of:
            names[nid] = f"${prefix}{len(lines)}"
            lines.append(f"(let {names[nid]} (Leaf {leaf_of[nid]}))")
            continue
        if not ready:
            stack.append((nid, True))
            stack.extend((e.src, False) for e in node.inputs)
            continue
        args = []
        for e in node.inputs:
            src = graph.nodes[e.src]
            ref = names[e.src]
            identity = is_identity(e.view, src.shape)
            args.append(ref if identity else f"(Read {ref} {view_of[e.view]})")
        name = NAME_OF[type(node.op)]
        if name in REDUCE:
            extent = node.inputs[0].view.shape[node.op.axis]
            args = [str(node.op.axis), str(extent_of[extent]), *args]
        names[nid] = f"${prefix}{len(lines)}"
        lines.append(f"(let {names[nid]} ({name} {' '.join(args)}))")
    return Encoded("\n".join(lines), names[root])


def steps_from_termdag(termdag, term: int) -> Steps:
    """The extracted term `term` as `Steps`, children before parents."""
    steps: Steps = []
    index: dict[int, int] = {}
    stack = [(term, False)]
    while stack:
        tid, ready = stack.pop()
        if tid in index:
            continue
        app = termdag.get(tid)
        children = [a for a in app.args if type(termdag.get(a)).__name__ == "TermApp"]
        if not ready:
            stack.append((tid, True))
            stack.extend((c, False) for c in children)
            continue
        lits = [termdag.get(a).value.value for a in app.args
                if type(termdag.get(a)).__name__ == "TermLit"]
        if app.name == "Leaf":
            step = ["leaf", lits[0]]
        elif app.name == "Read":
            step = ["read", index[children[0]], lits[0]]
        else:
            axis = lits[0] if app.name in REDUCE else None
            step = ["op", app.name, axis, [index[c] for c in children]]
        index[tid] = len(steps)
        steps.append(step)
    return steps


def rebuild(graph: Graph, steps: Steps, leaves: Sequence[int], views: Sequence[View]) -> int:
    """Add the nodes of `steps` to `graph` (leaf k is node `leaves[k]`); returns the root's id."""
    made: list[int | Edge] = []

    def edge(ref: int) -> Edge:
        got = made[ref]
        if isinstance(got, Edge):
            return got
        return Edge(got, View.contiguous(graph.nodes[got].shape))

    for step in steps:
        kind = step[0]
        if kind == "leaf":
            made.append(leaves[step[1]])
        elif kind == "read":
            made.append(Edge(edge(step[1]).src, views[step[2]]))
        else:
            _, name, axis, args = step
            cls = UNARY.get(name) or BINARY.get(name)
            op = cls() if cls is not None else REDUCE[name](axis)
            inputs = [edge(a) for a in args]
            shape = op.output_shape([e.view.shape for e in inputs])
            dtype = op.output_dtype([graph.nodes[e.src].dtype for e in inputs])
            made.append(graph.add_node(op, inputs, shape, dtype).id)
    root = made[-1]
    if isinstance(root, Edge):  # the whole region is a view of a leaf: materialise it
        return graph.add_node(ops.Contiguous(), [root], root.view.shape,
                              graph.nodes[root.src].dtype).id
    return root
