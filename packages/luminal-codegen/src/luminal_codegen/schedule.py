"""`Schedule`: the lowering choices a search compiler may override, as data.

`lower(graph)` decides fusion by heuristic (see `lower.py`): which nodes get a buffer and which
are recomputed inside the kernels that read them, and which matmul-shaped reductions become
`Matmul` micro-kernels. A `Schedule` names the nodes for which a searcher wants the other
answer; the lowering honours it and keeps its heuristic everywhere else. Every choice is legal
(any node may be stored or recomputed, any matmul may run as generated loops), so a schedule
changes speed, never results. Node ids are those of the graph being lowered.

    from luminal_codegen import Schedule, lower
    program = lower(graph, Schedule(store=frozenset({node_id})))

Backends that lower through `lower()` accept a schedule with `Backend.with_schedule()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .ir import Kernel


@dataclass(frozen=True)
class Schedule:
    """Per-node overrides of the lowering's heuristics (node ids of the lowered graph).

    - `store`: give these nodes a buffer (fusion stops there) even where the heuristic would
      recompute them in their readers;
    - `inline`: recompute these nodes in every reader instead of storing them, where the
      heuristic would store them (inputs, outputs and matmul operands are always stored);
    - `loop_matmuls`: generate these matmul-shaped reductions as fused loops instead of the
      `Matmul` micro-kernel;
    - `tuning`: for the kernel a node roots, settings of the rendering dialect to override
      (`Kernel.tuning`), or of the backend's call for a matmul (`Matmul.tuning`); names from
      the backend's `Backend.schedule_space`;
    - `kernels`: a kernel computing a node outright (a fusion search derived, e.g. an online
      softmax), with the nodes bound to its parameters (that node first, then what it reads,
      which are stored); nodes only that kernel would have read are never built.
    """

    store: frozenset[int] = frozenset()
    inline: frozenset[int] = frozenset()
    loop_matmuls: frozenset[int] = frozenset()
    tuning: Mapping[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    kernels: Mapping[int, tuple[Kernel, tuple[int, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        both = self.store & self.inline
        if both:
            raise ValueError(f"Schedule: nodes {sorted(both)} are both stored and inlined")
        for node, (kernel, params) in self.kernels.items():
            if not params or params[0] != node or len(params) != len(kernel.params):
                raise ValueError(f"Schedule: the kernel for node {node} has "
                                 f"{len(kernel.params)} parameters but binds {list(params)} "
                                 f"(the node itself first)")
            if self.inline & set(params):
                raise ValueError(f"Schedule: nodes {sorted(self.inline & set(params))} are read "
                                 f"by a scheduled kernel and inlined")

    @classmethod
    def uniform(cls, nodes: Iterable[int], settings: tuple[tuple[str, int], ...],
                loop_matmuls: bool = False) -> Schedule:
        """The kernel of every node in `nodes` rendered with the same `settings` (and, with
        `loop_matmuls`, every matmul as generated loops, so that it takes them too): how a
        backend's schedule space is tested and measured one setting at a time."""
        ids = frozenset(nodes)
        return cls(loop_matmuls=ids if loop_matmuls else frozenset(),
                   tuning=dict.fromkeys(ids, settings))

    @property
    def is_default(self) -> bool:
        return not (self.store or self.inline or self.loop_matmuls or self.tuning
                    or self.kernels)


DEFAULT = Schedule()
