"""A fingerprint of a graph's structure, compared across ranks before the first step.

Ranks that built different graphs would reach their collectives in a different order or with
different shapes, and deadlock or mix unrelated data. The fingerprint covers each node's op
type, dtype and inputs (in a canonical order), plus every collective's full signature and
shape; it leaves out other shapes and constants on purpose, so that tensor-parallel ranks
holding unequal shards (9 heads over 2 ranks) still agree.
"""

from __future__ import annotations

import hashlib

from luminal.ir import Graph

from .comm import Communicator, DistributedError
from .ops import Collective


def graph_fingerprint(graph: Graph) -> str:
    """A hex digest of `graph`'s structure (see the module docstring)."""
    digest = hashlib.sha256()
    position: dict[int, int] = {}
    for k, node in enumerate(graph.toposort()):
        position[node.id] = k
        srcs = ",".join(str(position[e.src]) for e in node.inputs)
        line = f"{type(node.op).__name__}:{node.dtype.name}:{srcs}"
        if isinstance(node.op, Collective):
            line += f":{node.op!r}:{node.shape}"
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def check_same_graph(graph: Graph, comm: Communicator) -> None:
    """Raise `DistributedError` on every rank unless every rank built the same graph."""
    prints = comm.allgather_object(graph_fingerprint(graph))
    differ = [r for r, p in enumerate(prints) if p != prints[0]]
    if differ:
        raise DistributedError(
            f"rank {comm.rank}: the graphs of ranks {differ} differ from rank 0's "
            f"(fingerprints {prints[0][:12]} vs {prints[differ[0]][:12]}): every rank must "
            "build the same graph (same model, options and collectives in the same order)")
