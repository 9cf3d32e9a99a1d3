"""The backend contract: a backend is a compiler that lowers a graph onto its device.

A backend plugin registers a `Backend` instance through the `luminal_register_backends` hook.
Constructing it must be cheap and must not import the device SDK (cupy, pyopencl, ...): that
happens in `probe()` and `compile()`, so `luminal plugins` stays fast everywhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .ir import Graph


@dataclass(frozen=True)
class BackendStatus:
    """Whether a backend can run here: `device` names it when available, `reason` says why not.

    `priority`, when set, lowers the backend's static `priority` on this machine: a backend
    whose speed depends on the device it found (OpenCL on a CPU rather than a GPU) ranks itself
    down after probing. It may not raise it, so `lm.backend()` can stop probing as soon as no
    remaining backend can outrank the best available one.
    """

    available: bool
    device: str = ""
    reason: str = ""
    priority: float | None = None


class Backend:
    """Base class for backends. Subclasses set `name` and implement `probe` and `compile`.

    `priority` orders backends for `lm.backend()` with no name: the highest available wins
    (reference 0, OpenCL on a CPU 50, cpu 100, OpenCL on a GPU 150, Metal/CUDA 200). A probe
    may lower it for the device it found (`BackendStatus.priority`).
    """

    name: str = ""
    priority: int = 0
    aliases: tuple[str, ...] = ()
    # Backends that lower through `luminal_codegen.lower` set this and pass `self.schedule` to
    # it: a search compiler can then choose their fusion and matmul lowering (`with_schedule`).
    # The schedule is a `luminal_codegen.Schedule`; core, the lower layer, never imports it.
    schedulable: bool = False
    schedule: object | None = None
    # per-kernel settings a schedule may choose (`Schedule.tuning`), each with the values worth
    # trying besides the default; empty when the backend's dialect has none
    schedule_space: dict[str, tuple[int, ...]] = {}
    # True where a `Graph.write` costs only the rows written (its runtime stores them in place,
    # in host memory or on the device); False where a write re-uploads the whole input, so
    # state is better kept with `Graph.assign` (a growing KV cache)
    in_place_writes: bool = False

    def with_schedule(self, schedule: object) -> Backend:
        """A copy of this backend that lowers with `schedule` (a `luminal_codegen.Schedule`)."""
        if not self.schedulable:
            raise TypeError(f"backend {self.name!r} does not accept a schedule: it does not "
                            f"lower through luminal_codegen.lower")
        twin = copy.copy(self)
        twin.schedule = schedule
        return twin

    def probe(self) -> BackendStatus:
        return BackendStatus(True, device="host")

    def compile(self, graph: Graph) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name!r}>"
