"""`F`: the namespace a case's `fn(F, *tensors)` calls free functions through.

Two adapters expose the same names: `LuminalF(graph)` maps them onto `luminal_nn.functional`
(luminal-nn: a test dependency of every backend that runs the kit) and `luminal` (creation
functions build into `graph`), `TorchF()` onto `torch.nn.functional` and `torch`. A case may
use exactly the names in `FUNCTIONS` and `CREATION`; anything else is an `AttributeError` on
both sides, so a case cannot silently depend on a torch-only function.
"""

from __future__ import annotations

import importlib
from typing import Any

FUNCTIONS = (
    # tensor combinators (luminal: top-level; torch: torch)
    "cat", "stack", "where", "maximum", "minimum", "matmul",
    # torch.nn.functional / luminal_nn.functional
    "relu", "gelu", "silu", "sigmoid", "tanh", "softplus", "leaky_relu", "elu", "hardswish",
    "mish", "softmax", "log_softmax", "pad", "linear", "embedding", "layer_norm", "rms_norm",
    "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "interpolate",
    "scaled_dot_product_attention",
    # PyTorch parity (docs/pytorch-parity.md)
    "einsum", "conv3d", "conv_transpose1d", "conv_transpose2d", "avg_pool3d", "selu", "celu",
    "hardtanh", "logsigmoid", "softsign", "binary_cross_entropy", "max_unpool2d",
)
CREATION = ("arange", "ones", "zeros", "full")


class _Adapter:
    """Resolves `FUNCTIONS` in an ordered list of modules; subclasses add `CREATION`."""

    modules: tuple[str, ...] = ()
    framework = ""

    def __getattr__(self, name: str) -> Any:
        if name not in FUNCTIONS:
            raise AttributeError(
                f"F.{name} is not part of the conformance adapter; cases may use "
                f"{', '.join(FUNCTIONS + CREATION)}"
            )
        for mod in self.modules:
            try:
                module = importlib.import_module(mod)
            except ModuleNotFoundError as e:
                raise ModuleNotFoundError(f"F.{name} is looked up in {mod}, but {e.name} is not "
                                          f"installed (luminal_nn: pip install luminal-nn)") from e
            fn = getattr(module, name, None)
            if fn is not None:
                return fn
        raise AttributeError(f"{self.framework} has no function {name!r}")

    def __repr__(self) -> str:
        return f"<F for {self.framework}>"


class LuminalF(_Adapter):
    """`F` for luminal; `arange`/`ones`/`zeros`/`full` create tensors in `graph`."""

    modules = ("luminal_nn.functional", "luminal")
    framework = "luminal"

    def __init__(self, graph):
        self.graph = graph

    def arange(self, start, end=None, step=1, dtype: str | None = None):
        return self.graph.arange(start, end, step, dtype)

    def ones(self, shape, dtype: str = "float32"):
        return self.graph.ones(shape, dtype)

    def zeros(self, shape, dtype: str = "float32"):
        return self.graph.zeros(shape, dtype)

    def full(self, shape, value, dtype: str | None = None):
        return self.graph.full(shape, value, dtype)


class TorchF(_Adapter):
    """`F` for PyTorch (CPU)."""

    modules = ("torch.nn.functional", "torch")
    framework = "torch"

    @staticmethod
    def _dtype(name: str | None):
        import torch

        return None if name is None else getattr(torch, name)

    def arange(self, start, end=None, step=1, dtype: str | None = None):
        import torch

        args = (start,) if end is None else (start, end, step)
        return torch.arange(*args, dtype=self._dtype(dtype))

    def ones(self, shape, dtype: str = "float32"):
        import torch

        return torch.ones(shape, dtype=self._dtype(dtype))

    def zeros(self, shape, dtype: str = "float32"):
        import torch

        return torch.zeros(shape, dtype=self._dtype(dtype))

    def full(self, shape, value, dtype: str | None = None):
        import torch

        return torch.full(shape, value, dtype=self._dtype(dtype))
