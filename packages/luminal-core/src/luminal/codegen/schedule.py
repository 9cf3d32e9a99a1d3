"""`Schedule`: the lowering choices a search compiler may override, as data.

`lower(graph)` decides fusion by heuristic (see `lower.py`): which nodes get a buffer and which
are recomputed inside the kernels that read them, and which matmul-shaped reductions become
`Matmul` micro-kernels. A `Schedule` names the nodes for which a searcher wants the other
answer; the lowering honours it and keeps its heuristic everywhere else. Every choice is legal
(any node may be stored or recomputed, any matmul may run as generated loops), so a schedule
changes speed, never results. Node ids are those of the graph being lowered.

    from luminal.codegen import Schedule, lower
    program = lower(graph, Schedule(store=frozenset({node_id})))

Backends that lower through `lower()` accept a schedule with `Backend.with_schedule()`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """Per-node overrides of the lowering's heuristics (node ids of the lowered graph).

    - `store`: give these nodes a buffer (fusion stops there) even where the heuristic would
      recompute them in their readers;
    - `inline`: recompute these nodes in every reader instead of storing them, where the
      heuristic would store them (inputs, outputs and matmul operands are always stored);
    - `loop_matmuls`: generate these matmul-shaped reductions as fused loops instead of the
      `Matmul` micro-kernel.
    """

    store: frozenset[int] = frozenset()
    inline: frozenset[int] = frozenset()
    loop_matmuls: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        both = self.store & self.inline
        if both:
            raise ValueError(f"Schedule: nodes {sorted(both)} are both stored and inlined")

    @property
    def is_default(self) -> bool:
        return not (self.store or self.inline or self.loop_matmuls)


DEFAULT = Schedule()
