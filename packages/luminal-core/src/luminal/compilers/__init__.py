"""Backend-neutral graph passes."""

from .generic import CSE, ArithmeticSimplify, ConstantFold, DeadCodeElimination, GenericCompiler

__all__ = [
    "CSE",
    "ArithmeticSimplify",
    "ConstantFold",
    "DeadCodeElimination",
    "GenericCompiler",
]
