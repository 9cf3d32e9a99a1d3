"""Learning-rate schedules: callables from the 0-based step index to a learning rate.

An optimizer's learning rate is a scalar graph input, so `opt.schedule_lr(step)` changes it
between executions without recompiling. Any `Callable[[int], float]` works as a schedule; these
are the common ones, matching `torch.optim.lr_scheduler` stepped once per optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Schedule = Callable[[int], float]


@dataclass(frozen=True)
class Constant:
    """The same learning rate at every step."""

    lr: float

    def __call__(self, step: int) -> float:
        return self.lr


@dataclass(frozen=True)
class StepDecay:
    """`lr * gamma ** (step // step_size)` (PyTorch `StepLR`)."""

    lr: float
    step_size: int
    gamma: float = 0.1

    def __call__(self, step: int) -> float:
        return self.lr * self.gamma ** (step // self.step_size)


@dataclass(frozen=True)
class Cosine:
    """Half a cosine from `lr` down to `min_lr` over `total_steps` (PyTorch
    `CosineAnnealingLR` with `T_max=total_steps`), then `min_lr` (PyTorch would rise again)."""

    lr: float
    total_steps: int
    min_lr: float = 0.0

    def __call__(self, step: int) -> float:
        frac = min(step, self.total_steps) / self.total_steps
        return self.min_lr + (self.lr - self.min_lr) * (1 + math.cos(math.pi * frac)) / 2


@dataclass(frozen=True)
class LinearWarmup:
    """Ramp linearly from `start_factor * after(0)` to `after(0)` over `warmup_steps`, then
    follow `after` from its step 0 (PyTorch `SequentialLR([LinearLR(start_factor,
    total_iters=warmup_steps), after], milestones=[warmup_steps])`). `after` may be a number."""

    after: Schedule | float
    warmup_steps: int
    start_factor: float = 0.0

    def __call__(self, step: int) -> float:
        after = self.after if callable(self.after) else Constant(float(self.after))
        if step >= self.warmup_steps:
            return after(step - self.warmup_steps)
        frac = step / self.warmup_steps
        return after(0) * (self.start_factor + (1 - self.start_factor) * frac)
