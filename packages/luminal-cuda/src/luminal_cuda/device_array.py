"""`DeviceArray`: an input's value that lives on the GPU, downloaded only when read.

`Graph.assign(input, value)` makes `input` take `value` after every run (a KV cache). The
runtime copies the value into the input's device buffer inside the run (so it is part of the
captured CUDA graph) and puts a `DeviceArray` into `graph.data[input]`: the graph's checks see
the new shape, and nothing crosses PCIe unless someone reads it. The next run overwrites that
buffer, so a `DeviceArray` from an earlier run refuses to be read instead of returning the
newer value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class StaleDeviceArrayError(RuntimeError):
    """The buffer behind a `DeviceArray` was overwritten by a later `execute()`."""


class DeviceArray:
    """A read-only array whose bytes are on the GPU until first read."""

    def __init__(self, download: Callable[[], np.ndarray], shape: tuple[int, ...],
                 dtype: np.dtype, is_current: Callable[[], bool]):
        self._download = download
        self._is_current = is_current
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self._host: np.ndarray | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """The value on the host (downloaded once, after the run that produced it)."""
        if self._host is None:
            if not self._is_current():
                raise StaleDeviceArrayError(
                    "this device value was overwritten by a later execute(); copy it with "
                    "np.array(...) before executing the graph again")
            host = self._download().reshape(self.shape)
            host.flags.writeable = False
            self._host = host
        return self._host

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.numpy()
        if dtype is not None:
            return out.astype(dtype)
        return out.copy() if copy else out

    def __getattr__(self, name: str) -> Any:
        # every other ndarray attribute (reshape, astype, copy, ...) acts on the host value
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.numpy(), name)

    def __getitem__(self, key: Any) -> Any:
        return self.numpy()[key]

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"
