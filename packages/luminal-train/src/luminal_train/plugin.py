"""luminal-train's plugin: registers the autograd compiler by name.

`luminal.plugins.compiler("autograd", params=[...], loss=loss)` builds an `Autograd`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luminal.hookspecs import hookimpl


@hookimpl
def luminal_register_compilers(register: Callable[..., Any]) -> None:
    from .autograd import Autograd

    register("autograd", Autograd, "reverse-mode gradients of a scalar loss w.r.t. parameters")
