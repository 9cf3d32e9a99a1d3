"""`DeviceArray`: a value that lives on the device and is copied to the host only when read.

`Graph.assign(input, value)` makes `input` take `value` after every run. The runtime hands the
value's device buffer to the input (no copy, no transfer) and puts a `DeviceArray` into
`graph.data[input]`, so the graph's checks see the new shape (a KV cache that grew) while the
bytes stay on the device for the next run. Reading it (`np.asarray`, `.reshape`, any ndarray
attribute) downloads it once. The buffer is never written again: the runtime gives the
assigned node a fresh buffer for the next run, so a `DeviceArray` held from an earlier run
keeps that run's value.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class DeviceArray:
    """A read-only array whose bytes are in an OpenCL buffer until first read."""

    def __init__(self, queue: Any, buffer: Any, shape: tuple[int, ...], dtype: np.dtype):
        self.queue = queue
        self.context = queue.context
        self.buffer = buffer
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
        """The value on the host (downloaded on the first call, after pending work)."""
        if self._host is None:
            import pyopencl as cl

            host = np.empty(self.shape, self.dtype)
            if host.size:
                cl.enqueue_copy(self.queue, host, self.buffer, is_blocking=True)
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
