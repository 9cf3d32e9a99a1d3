"""luminal: build a lazy static graph, compile it for a device, execute it fast.

    import luminal as lm
    g = lm.Graph()
    a = g.tensor((3, 1), name="a").set([[1.0], [2.0], [3.0]])
    c = (a * 2).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend()))
    g.execute()
    c.numpy()
"""

from . import functional
from .backend import Backend, BackendStatus, Runtime
from .compiler import Compiler, Looped, run_compiler
from .compilers import GenericCompiler
from .dtypes import DType, bfloat16, dtype_of, float16, float32, int32, uint8
from .dtypes import bool_ as bool
from .graph import Graph, GraphModifiedError, RemovedTensorError
from .hl_ops.binary import maximum, minimum, where
from .hl_ops.creation import full_like, linspace, ones_like, rand, randint, randn, zeros_like
from .hl_ops.einsum import einsum
from .hl_ops.matmul import matmul
from .hl_ops.movement import cat, meshgrid, stack
from .hookspecs import hookimpl, hookspec
from .plugins import backend, backends
from .shape import View
from .symbolic import Expr, UnboundDimError
from .tensor import GraphTensor

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendStatus",
    "Compiler",
    "DType",
    "Expr",
    "GenericCompiler",
    "Graph",
    "GraphModifiedError",
    "GraphTensor",
    "Looped",
    "RemovedTensorError",
    "Runtime",
    "UnboundDimError",
    "View",
    "backend",
    "backends",
    "bfloat16",
    "bool",
    "cat",
    "dtype_of",
    "einsum",
    "float16",
    "float32",
    "full_like",
    "functional",
    "hookimpl",
    "hookspec",
    "int32",
    "linspace",
    "matmul",
    "maximum",
    "meshgrid",
    "minimum",
    "ones_like",
    "rand",
    "randint",
    "randn",
    "run_compiler",
    "stack",
    "uint8",
    "where",
    "zeros_like",
]
