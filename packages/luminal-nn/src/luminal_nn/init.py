"""Default initialisers (PyTorch's defaults), as `init(shape, rng) -> array` callables."""

from __future__ import annotations

import math

import numpy as np

from .module import Initializer

__all__ = ["normal", "ones", "uniform_fan_in", "zeros"]


def uniform_fan_in(fan_in: int) -> Initializer:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): what torch's Linear and Conv layers draw."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    return init


def normal(std: float = 1.0) -> Initializer:
    def init(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    return init


def ones(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.ones(shape, np.float32)


def zeros(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.zeros(shape, np.float32)
