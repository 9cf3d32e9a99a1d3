"""`DeviceArray`: a value that lives on a device and is copied to the host only when read.

`Graph.assign(input, value)` makes `input` take `value` after every run (a KV cache, optimizer
state). A device runtime keeps those bytes on the device and puts a `DeviceArray` into
`graph.data[input]`: the graph's checks see the new shape (a cache that grew), while nothing
crosses to the host unless someone reads it. Reading it (`np.asarray`, `.reshape`, any ndarray
attribute) downloads it once. `buffer` and `owner` let the runtime that made it bind the
device buffer directly on the next run. A runtime that later overwrites the buffer passes
`is_current`, and a stale array then refuses to be read instead of showing newer bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class StaleDeviceArrayError(RuntimeError):
    """The buffer behind a `DeviceArray` was overwritten by a later `execute()`."""


class DeviceArray:
    """A read-only array whose bytes are on a device until first read.

    `download()` returns the bytes as a host array (any shape, `dtype`); `buffer` is the
    device buffer and `owner` what it belongs to (a context, a runtime), for the runtime's own
    use; `is_current()` says whether the bytes are still this value's (default: always).
    """

    def __init__(self, download: Callable[[], np.ndarray], shape: tuple[int, ...],
                 dtype: np.dtype, *, buffer: Any = None, owner: Any = None,
                 is_current: Callable[[], bool] | None = None):
        self._download = download
        self._is_current = is_current
        self.buffer = buffer
        self.owner = owner
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self._host: np.ndarray | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def numpy(self) -> np.ndarray:
        """The value on the host (downloaded on the first call, after the run that made it)."""
        if self._host is None:
            if self._is_current is not None and not self._is_current():
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
