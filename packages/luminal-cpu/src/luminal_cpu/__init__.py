"""luminal-cpu: a luminal backend that compiles the whole graph to native code.

    import luminal as lm
    g.compile((lm.GenericCompiler(), lm.backend("cpu")))

The graph is lowered with `luminal_codegen` (fusion, views as index arithmetic, matmul and
gather recognition), rendered as C, built by the system compiler into one shared library
(cached on disk) and executed with a single native call per `execute()`.
"""

from .backend import CpuBackend

__version__ = "0.1.0"
__all__ = ["CpuBackend"]
