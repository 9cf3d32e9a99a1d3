"""The compiler protocol: any object with `compile(graph)`. A tuple or list of compilers is a
compiler that runs them left to right."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .ir import Graph


@runtime_checkable
class Compiler(Protocol):
    def compile(self, graph: Graph) -> Any: ...


def run_compiler(compiler: Any, graph: Graph) -> Any:
    """Run a compiler, or a (nested) tuple/list of them in order; returns their outputs."""
    if isinstance(compiler, (tuple, list)):
        return tuple(run_compiler(c, graph) for c in compiler)
    if compiler is None:
        return None
    if not hasattr(compiler, "compile"):
        raise TypeError(
            f"{compiler!r} is not a compiler: expected an object with compile(graph), or a "
            f"tuple of them"
        )
    return compiler.compile(graph)


class Looped:
    """Re-run a compiler until the graph stops changing (at most `max_rounds` times)."""

    def __init__(self, compiler: Any, max_rounds: int = 20):
        self.compiler, self.max_rounds = compiler, max_rounds

    def compile(self, graph: Graph) -> None:
        for _ in range(self.max_rounds):
            before = graph.version
            run_compiler(self.compiler, graph)
            if graph.version == before:
                return
