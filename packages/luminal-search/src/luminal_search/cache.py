"""Chosen plans on disk: one JSON file per (graph structure, dims, backend, device, version).

Files live under `$LUMINAL_CACHE/search` (default `~/.cache/luminal/search`). A file that does
not parse, was written by another search version, or belongs to another key is ignored (and
rewritten by the next search); writes are atomic (temp file, then rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from luminal import ops
from luminal.graph import Graph

from .version import SEARCH_VERSION


def cache_dir() -> Path:
    root = os.environ.get("LUMINAL_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "luminal"
    return base / "search"


def structure_digest(graph: Graph) -> str:
    """A digest of the graph's structure: ops, dtypes, shapes and views in topological order,
    node ids renumbered, and which nodes are outputs."""
    order = graph.toposort()
    local = {n.id: k for k, n in enumerate(order)}
    h = hashlib.sha256()
    # a model has a few hundred distinct views, shapes and ops: render each once
    texts: dict = {}

    def text(thing) -> str:
        got = texts.get(thing)
        if got is None:
            got = texts[thing] = repr(thing)
        return got

    for node in order:
        op = node.op
        # equal constants may print differently (0.0 and -0.0): those are never looked up
        op = f"in {op.label_name}" if isinstance(op, ops.Input) else (
            repr(op) if isinstance(op, ops.Constant) else text(op))
        edges = " ".join(f"{local[e.src]}@{text(e.view)}" for e in node.inputs)
        h.update(f"{op} {node.dtype.name} {text(node.shape)} <- {edges}\n".encode())
    outputs = sorted(local[n] for n in graph.outputs() if n in local)
    assigned = sorted((local[k], local[v]) for k, v in graph.assignments.items()
                      if k in local and v in local)
    h.update(f"out {outputs} {assigned}".encode())
    return h.hexdigest()


def dim_buckets(dims: dict[str, int]) -> dict[str, int]:
    """Each bound dim rounded up to a power of two: one plan serves a bucket of sizes."""
    return {k: 1 << max(0, int(v) - 1).bit_length() for k, v in sorted(dims.items())}


def plan_key(graph: Graph, backend: str, device: str, options: str) -> str:
    parts = (SEARCH_VERSION, backend, device, options, structure_digest(graph),
             json.dumps(dim_buckets({k: v for k, v in graph.dims.items()
                                     if k in graph.free_dims()})))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def load(key: str) -> dict[str, Any] | None:
    """The plan stored for `key`, or None when absent, corrupt or stale."""
    path = cache_dir() / f"{key}.json"
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return None
    if not isinstance(plan, dict) or plan.get("version") != SEARCH_VERSION or plan.get(
            "key") != key or not isinstance(plan.get("regions"), dict):
        return None
    return plan


def store(key: str, plan: dict[str, Any]) -> Path:
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.json"
    text = json.dumps({**plan, "version": SEARCH_VERSION, "key": key})
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
