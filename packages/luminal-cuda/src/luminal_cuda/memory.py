"""Device memory of a compiled graph: one allocation per input and output, one arena for the
intermediates (slots from core's liveness plan), one scratch for dequantized weights.

Allocations only grow. Symbolic sizes (a KV cache, a sequence) grow geometrically so a
decode loop reallocates O(log n) times, not every step. Any reallocation moves pointers that
recorded launches and captured CUDA graphs hold, so `ensure` reports it and the runtime drops
them all. An input whose bytes live only on the device (an assigned KV cache) keeps its
contents across a reallocation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Allocation:
    """A device allocation (CuPy `MemoryPointer`) and its size in bytes."""

    mem: Any = None
    capacity: int = 0

    @property
    def ptr(self) -> int:
        return int(self.mem.ptr) if self.mem is not None else 0


@dataclass
class DeviceMemory:
    """Every allocation of one runtime, by key (a node id, "arena" or "scratch")."""

    cupy: Any
    stream: Any  # copies of preserved contents are ordered after the work already queued
    allocations: dict[object, Allocation] = field(default_factory=dict)

    def ensure(self, key: object, nbytes: int, preserve: bool = False, grow: bool = True) -> bool:
        """Make allocation `key` hold at least `nbytes`; True when its pointer changed. With
        `preserve` the old contents are copied over; `grow` over-allocates (2x) for sizes that
        are expected to keep growing."""
        alloc = self.allocations.setdefault(key, Allocation())
        if alloc.mem is not None and alloc.capacity >= nbytes:
            return False
        capacity = max(nbytes, 2 * alloc.capacity if grow else 0, 1)
        mem = self.cupy.cuda.alloc(capacity)
        if preserve and alloc.mem is not None and alloc.capacity:
            mem.copy_from_device_async(alloc.mem, alloc.capacity, self.stream)
        alloc.mem, alloc.capacity = mem, capacity
        return True

    def ptr(self, key: object) -> int:
        return self.allocations[key].ptr
