"""Guarded reads of weight files: copies made with ``pread``, never views of a memory map.

A memory-mapped page of a file that someone truncates afterwards kills the process with SIGBUS
when it is touched, and no Python code can turn that signal into an exception. Reading with
``pread`` instead sees the file's current length: a short read becomes an error that names the
file, the tensor and the byte range, and the copy the model keeps is immune to later changes of
the file. This is the truncation rule of luminal_models (see the README): weights are copied
into process memory at load.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import ModelFileError

__all__ = ["read_exact"]


def read_exact(fd: int, offset: int, nbytes: int, where: str,
               error: type[ModelFileError]) -> np.ndarray:
    """``nbytes`` bytes at ``offset`` of the open file ``fd``, as a new read-only uint8 array.

    Raises:
        error: the file ends before ``offset + nbytes`` (it was truncated after it was opened)
            or cannot be read; the message starts with ``where``.
    """
    out = np.empty(nbytes, np.uint8)
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
                        f"{offset + nbytes} but the file has only {offset + done} bytes now "
                        "(it shrank after it was opened)")
        done += got
    out.flags.writeable = False
    return out
