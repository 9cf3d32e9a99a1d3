"""Graph printouts: Graphviz DOT text, and rendering to SVG/PNG when graphviz is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import TYPE_CHECKING

from .shape import show_shape

if TYPE_CHECKING:
    from .graph import Graph


def _esc(s: str) -> str:
    """`s` inside a DOT string: quotes and backslashes escaped, control characters (a NUL
    ends the text for Graphviz) and invalid code points shown as visible escapes."""
    s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(f"\\\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c for c in s)


def to_dot(graph: Graph) -> str:
    """The graph as Graphviz DOT: one box per node (op, dtype, shape); edges that read through
    a non-trivial view are dashed and labelled with the view's shape."""
    outputs = graph.outputs()
    lines = ["digraph luminal {", "  node [shape=box, fontname=monospace];"]
    for node in graph.toposort():
        label = f"{_esc(node.op.label())}\\n{_esc(node.dtype.name + show_shape(node.shape))}"
        style = ', style=filled, fillcolor="#d8ecff"' if node.id in outputs else ""
        lines.append(f'  n{node.id} [label="{label}"{style}];')
        for k, e in enumerate(node.inputs):
            attrs = [f'taillabel="{k}"'] if len(node.inputs) > 1 else []
            if not e.view.is_contiguous or tuple(e.view.shape) != tuple(graph.nodes[e.src].shape):
                attrs += ["style=dashed", f'label="{_esc(show_shape(e.view.shape))}"']
            lines.append(f"  n{e.src} -> n{node.id} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def display(graph: Graph, path: str | None = None, fmt: str = "svg") -> str:
    """Render the graph with Graphviz `dot` into `path` (a temp file by default)."""
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(
            "display() needs Graphviz's `dot` program (e.g. apt-get install graphviz); "
            "g.to_dot() returns the DOT text without it"
        )
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"display(): format must be svg, png or pdf, got {fmt!r}")
    if path is None:
        fd, path = tempfile.mkstemp(suffix=f".{fmt}", prefix="luminal-graph-")
        os.close(fd)
    subprocess.run([dot, f"-T{fmt}", "-o", path], input=to_dot(graph).encode(), check=True)
    return path
