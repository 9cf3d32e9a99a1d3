"""Memory planning: intermediate buffers share arena slots when their lifetimes do not overlap.

Sizes are symbolic, so the plan is made at compile time in terms of slots (which buffers share
memory) and the layout (how big each slot is, where it starts) is computed at run time from the
dim values: `MemoryPlan.layout(dims)`. A buffer's lifetime runs from the call that writes it to
the last call that reads it; a call's output never shares a slot with any of its inputs, so
kernels may assume their arguments do not alias. A backend that runs several calls at once
(a GPU launching independent kernels together) passes their *steps*: a buffer read in a step
is then not reused until the step is over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

from luminal.symbolic import Expr, evaluator

from .ir import Program

ALIGN = 64  # bytes: a cache line, and the widest vector load


@dataclass(frozen=True)
class MemoryPlan:
    """`slots[s]` lists the temp buffers (indices into `Program.buffers`) that share slot `s`."""

    slots: tuple[tuple[int, ...], ...]
    sizes: tuple[tuple[Expr, ...], ...]  # bytes of each member, per slot

    @property
    def slot_of(self) -> dict[int, int]:
        return {b: s for s, members in enumerate(self.slots) for b in members}

    def layout(self, dims: dict[str, int], headroom: float = 1.0) -> tuple[list[int], int]:
        """Byte offset of every slot in the arena, and the arena's size, for these dims; with
        `headroom`, every slot gets that factor more room (see `slot_bytes`)."""
        offsets, total = [], 0
        for need in self.slot_bytes(dims):
            offsets.append(total)
            total += (int(need * headroom) + ALIGN - 1) // ALIGN * ALIGN
        return offsets, total

    def slot_bytes(self, dims: dict[str, int]) -> list[int]:
        """The bytes each slot needs at these dims (its largest member). A runtime whose dims
        change every run (a decode step's cache length) keeps a layout made with headroom for
        as long as every slot still fits, instead of laying out the arena anew."""
        values = iter(self.member_bytes(dims))
        return [max((next(values) for _ in sizes), default=0) for sizes in self.sizes]

    def member_bytes(self, dims: dict[str, int]) -> tuple[int, ...]:
        """The bytes of every slot's every member at these dims, flat, slot by slot."""
        return self._evaluate_sizes(dims)

    @cached_property
    def _evaluate_sizes(self) -> Callable[[dict[str, int]], tuple[int, ...]]:
        # a decode step binds a new sequence length every run: one call evaluates every size
        return evaluator(s for sizes in self.sizes for s in sizes)


def plan_memory(program: Program, steps: Sequence[int] | None = None) -> MemoryPlan:
    """Assign every "temp" buffer of `program` to a slot (greedy, in call order). `steps[c]`
    (nondecreasing) is the step of call c, the calls of one step running at once; by default
    every call is its own step."""
    step = list(range(len(program.calls))) if steps is None else list(steps)
    if len(step) != len(program.calls) or any(a > b for a, b in pairwise(step)):
        raise ValueError("plan_memory: steps must give every call a nondecreasing step")
    last_read: dict[int, int] = {}
    writes: dict[int, list[int]] = {}
    for c, call in enumerate(program.calls):
        params = program.kernels[call.kernel].params
        for p, b in zip(params, call.args):
            if p.output:
                writes.setdefault(c, []).append(b)
            else:
                last_read[b] = c
    temp = {k for k, spec in enumerate(program.buffers) if spec.role == "temp"}
    nbytes = {b: program.buffers[b].numel * program.buffers[b].dtype.itemsize for b in temp}
    members: list[list[int]] = []
    free: list[int] = []
    dying: dict[int, list[int]] = {}
    for c in range(len(program.calls)):
        for b in writes.get(c, []):
            if b not in temp:
                continue
            # prefer a slot that already held a buffer of exactly this size
            same = [s for s in free if any(nbytes[m] is nbytes[b] for m in members[s])]
            if same or free:
                slot = (same or free)[-1]
                free.remove(slot)
            else:
                slot = len(members)
                members.append([])
            members[slot].append(b)
            dying.setdefault(step[last_read.get(b, c)], []).append(slot)
        if c + 1 == len(step) or step[c + 1] != step[c]:
            free.extend(dying.pop(step[c], []))
    sizes = tuple(tuple(nbytes[b] for b in m) for m in members)
    return MemoryPlan(tuple(tuple(m) for m in members), sizes)
