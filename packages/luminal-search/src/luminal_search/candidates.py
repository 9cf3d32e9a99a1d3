"""What search records: candidates, per-region results, the whole-graph comparison."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import terms


@dataclass
class Candidate:
    """One way to compile a region: `kind` is "default", "schedule" (any composition of the
    schedule choices below), "rewrite" or "fuse" (a fused region as the one kernel `derived`,
    which the cache does not store: a warm compile derives it again)."""

    kind: str
    label: str
    steps: terms.Steps | None = None  # "rewrite": the region's new term
    store: tuple[int, ...] = ()  # positions in `Region.nodes` to store
    tuning: tuple[tuple[str, int], ...] = ()  # the root kernel's dialect settings
    derived: Any = None  # "fuse": a `fusion.Derived`
    inline: tuple[int, ...] = ()  # positions in `Region.nodes` to recompute in their readers
    loops: bool = False  # the root matmul as generated loops

    def extends(self, other: Candidate) -> bool:
        """Whether this schedule holds every choice of `other` (a schedule) and more."""
        return (self.kind == other.kind == "schedule" and self != other
                and set(other.store) <= set(self.store) and set(other.inline) <= set(self.inline)
                and set(other.tuning) <= set(self.tuning) and self.loops >= other.loops)

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "steps": self.steps,
                "store": list(self.store), "tuning": [list(t) for t in self.tuning],
                "inline": list(self.inline), "loops": self.loops}

    @staticmethod
    def from_json(d: dict) -> Candidate:
        return Candidate(str(d["kind"]), str(d["label"]), d["steps"],
                         tuple(int(p) for p in d["store"]),
                         tuple((str(k), int(v)) for k, v in d["tuning"]),
                         inline=tuple(int(p) for p in d["inline"]), loops=bool(d["loops"]))


DEFAULT = Candidate("default", "default")


@dataclass
class RegionResult:
    """What search found for one distinct region (timed alone, at the search dims)."""

    label: str
    instances: int
    choice: Candidate
    default_s: float = 0.0
    best_s: float = 0.0
    timed: int = 0
    rejected: list[str] = field(default_factory=list)
    egraph_s: float = 0.0
    timings: list[tuple[str, float]] = field(default_factory=list)  # every timed candidate
    # candidates not timed, (label, label of the timed one): they built the same program
    same: list[tuple[str, str]] = field(default_factory=list)

    @property
    def gain(self) -> float:
        return self.default_s / self.best_s if self.best_s > 0 else 1.0

    def as_json(self) -> dict[str, Any]:
        return {"label": self.label, "instances": self.instances,
                "choice": self.choice.as_json(), "default_s": self.default_s,
                "best_s": self.best_s, "timed": self.timed, "rejected": self.rejected,
                "egraph_s": self.egraph_s, "timings": [list(t) for t in self.timings],
                "same": [list(t) for t in self.same]}

    @staticmethod
    def from_json(d: dict) -> RegionResult:
        return RegionResult(str(d["label"]), int(d["instances"]),
                            Candidate.from_json(d["choice"]), float(d["default_s"]),
                            float(d["best_s"]), int(d["timed"]), [str(r) for r in d["rejected"]],
                            float(d["egraph_s"]),
                            [(str(label), float(t)) for label, t in d["timings"]],
                            [(str(label), str(timed)) for label, timed in d["same"]])


@dataclass
class WholeGraph:
    """The whole graph timed with the default plan and with the regions' choices together;
    `kept` is False when the choices lost and search fell back to the default plan."""

    default_s: float = 0.0
    searched_s: float = 0.0
    kept: bool = False

    @property
    def gain(self) -> float:
        return self.default_s / self.searched_s if self.kept and self.searched_s > 0 else 1.0

    def as_json(self) -> dict[str, Any]:
        return {"default_s": self.default_s, "searched_s": self.searched_s, "kept": self.kept}

    @staticmethod
    def from_json(d: dict) -> WholeGraph:
        return WholeGraph(float(d["default_s"]), float(d["searched_s"]), bool(d["kept"]))
