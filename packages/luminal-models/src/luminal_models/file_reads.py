"""Guarded reads of weight files: copies made with ``pread``, never views of a memory map.

A memory-mapped page of a file that someone truncates afterwards kills the process with SIGBUS
when it is touched, and no Python code can turn that signal into an exception. Reading with
``pread`` instead sees the file's current length: a short read becomes an error that names the
file, the tensor and the byte range, and the copy the model keeps is immune to later changes of
the file. This is the truncation rule of luminal_models (see the README): weights are copied
into process memory at load, each tensor starting on a 64-byte boundary (a cache line and an
AVX-512 vector) so that kernels' vector loads of it, and of its in-place repacked layouts, never
straddle two lines.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from luminal.host_views import aligned_bytes

from .errors import ModelFileError

__all__ = ["OpenFile", "read_exact"]



def read_exact(fd: int, offset: int, nbytes: int, where: str,
               error: type[ModelFileError]) -> np.ndarray:
    """``nbytes`` bytes at ``offset`` of the open file ``fd``, as a new read-only uint8 array
    that starts on a 64-byte boundary.

    Raises:
        error: the file ends before ``offset + nbytes`` (it was truncated after it was opened)
            or cannot be read; the message starts with ``where``.
    """
    out = aligned_bytes(nbytes)
    view = memoryview(out)
    done = 0
    while done < nbytes:
        try:
            got = os.preadv(fd, [view[done:]], offset + done)
        except OSError as e:
            raise error(f"{where}: cannot read bytes {offset}..{offset + nbytes}: "
                        f"{e.strerror or e}") from e
        if got == 0:
            raise error(f"{where}: truncated file: its data spans bytes {offset}.."
                        f"{offset + nbytes} but the file has only {os.fstat(fd).st_size} bytes "
                        "now (it shrank after it was opened)")
        done += got
    out.flags.writeable = False
    return out


class OpenFile:
    """A weight file held open for guarded reads; readers subclass it and set `error` (their
    exception type) and `kind` (what the file should be, for messages)."""

    error: type[ModelFileError] = ModelFileError
    kind = "weight file"

    def _open(self, path: str | os.PathLike[str]) -> int:
        """Open `path` (kept open until `close`); returns its size."""
        self.path = Path(path)
        self._file: Any = None
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 (closed by close())
            return os.fstat(self._file.fileno()).st_size
        except FileNotFoundError:
            raise self.error(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise self.error(f"{self.path}: is a directory, not a {self.kind}") from None
        except OSError as e:
            self.close()
            raise self.error(f"{self.path}: cannot read: {e.strerror or e}") from e

    def _read(self, offset: int, nbytes: int, what: str) -> np.ndarray:
        """The bytes of `what` (e.g. "tensor 'x'") as a new read-only uint8 array."""
        if self._file is None:
            raise self.error(f"{self.path}: {what}: the file has been closed")
        return read_exact(self._file.fileno(), offset, nbytes, f"{self.path}: {what}",
                          self.error)

    def close(self) -> None:
        """Close the file (arrays already returned are copies and stay valid)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
