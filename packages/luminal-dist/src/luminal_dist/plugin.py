"""luminal-dist's plugin: the compilers "distributed" and "tensor-parallel", and the
`luminal launch` command. Nothing here imports MPI: the communicator is made when a compiler
is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal.hookspecs import CommandRegistrar, hookimpl


def _distributed(backend: Any = None, comm: Any = None) -> Any:
    from .staged import Distributed

    return Distributed(backend, comm)


def _tensor_parallel(backend: Any = None, comm: Any = None, size: int | None = None) -> Any:
    from .tensor_parallel import TensorParallel

    return TensorParallel(backend, comm, size)


@hookimpl
def luminal_register_compilers(register: Callable[..., Any]) -> None:
    register("distributed", _distributed,
             "runs graphs with collectives over MPI ranks (luminal-dist)")
    register("tensor-parallel", _tensor_parallel,
             "Megatron-style tensor parallelism for Llama and Gemma 3 over MPI ranks "
             "(luminal-dist)")


@hookimpl
def luminal_register_commands(cli: CommandRegistrar) -> None:
    from . import launch

    cli.register("launch", launch.HELP, launch.configure, launch.run)
