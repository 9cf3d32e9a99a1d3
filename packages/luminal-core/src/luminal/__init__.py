"""luminal: build a lazy static graph, compile it for a device, execute it fast.

    import luminal as lm
    g = lm.Graph()
    a = g.tensor((3, 1), name="a").set([[1.0], [2.0], [3.0]])
    c = (a * 2).retrieve()
    g.compile((lm.GenericCompiler(), lm.backend()))
    g.execute()
    c.numpy()
"""

from .backend import Backend, BackendStatus
from .dtypes import DType, bfloat16, dtype_of, float16, float32, int32, uint8
from .dtypes import bool_ as bool
from .errors import OpError
from .graph import Graph, GraphModifiedError, RemovedTensorError
from .hl_ops.binary import maximum, minimum, where
from .hl_ops.creation import full_like, linspace, ones_like, rand, randint, randn, zeros_like
from .hl_ops.einsum import einsum
from .hl_ops.matmul import matmul
from .hl_ops.movement import cat, meshgrid, stack
from .hookspecs import hookimpl, hookspec
from .passes import GenericCompiler
from .pipeline import Compiler, Looped, run_compiler
from .plugins import backend, backends, compiler, compilers
from .runtime import Runtime
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
    "OpError",
    "RemovedTensorError",
    "Runtime",
    "UnboundDimError",
    "View",
    "backend",
    "backends",
    "bfloat16",
    "bool",
    "cat",
    "compiler",
    "compilers",
    "dtype_of",
    "einsum",
    "float16",
    "float32",
    "full_like",
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


# Modules that left core, and where they went: `lm.functional` and `import luminal.functional`
# say so instead of failing with a bare "no attribute" / "no module".
_MOVED = {"functional": "luminal.functional moved to luminal_nn.functional (as PyTorch keeps it "
                        "in torch.nn): pip install luminal-nn, then "
                        "`import luminal_nn.functional as F`"}


def __getattr__(name: str):
    raise AttributeError(_MOVED.get(name, f"module 'luminal' has no attribute {name!r}"))
