"""Views applied to host (NumPy) buffers: how the front end reads a tensor back and how the
reference backend reads its operands; and host buffers aligned for vector loads."""

from __future__ import annotations

import numpy as np

from .shape import View


def aligned_bytes(nbytes: int, alignment: int = 64) -> np.ndarray:
    """A new uint8 array of `nbytes` starting on an `alignment`-byte boundary (NumPy aligns
    its data to 16 only): a view of one allocation of `alignment - 1` more bytes."""
    whole = np.empty(nbytes + alignment - 1, np.uint8)
    start = -whole.ctypes.data % alignment
    return whole[start:start + nbytes]


def concrete_view(view: View, dims: dict[str, int]) -> tuple:
    """(shape, strides, offset, mask) as ints for the given dim values."""
    v = view.substitute(dims) if dims else view
    shape = tuple(d.value for d in v.shape)
    strides = tuple(s.value for s in v.strides)
    mask = None if v.mask is None else tuple((lo.value, hi.value) for lo, hi in v.mask)
    return shape, strides, v.offset.value, mask


def read_view(flat: np.ndarray, view: View, dims: dict[str, int]) -> np.ndarray:
    """The logical array `view` reads from the 1-D buffer `flat` (padding reads 0)."""
    return read_concrete(flat, *concrete_view(view, dims))


def read_concrete(flat, shape, strides, offset, mask) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if n == 0:
        return np.zeros(shape, dtype=flat.dtype)
    if mask is None:
        lo = offset + sum(s * (d - 1) for s, d in zip(strides, shape) if s < 0)
        hi = offset + sum(s * (d - 1) for s, d in zip(strides, shape) if s > 0)
        if lo < 0 or hi >= flat.size:
            raise IndexError(
                f"view reads elements {lo}..{hi} of a buffer of {flat.size}: invalid view"
            )
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[offset:], shape, tuple(s * item for s in strides), writeable=False
        )
    idx = np.full((1,) * len(shape), offset, dtype=np.int64)
    valid = np.ones((1,) * len(shape), dtype=bool)
    for k, (d, s) in enumerate(zip(shape, strides)):
        ar = np.arange(d, dtype=np.int64).reshape([-1 if j == k else 1 for j in range(len(shape))])
        idx = idx + ar * s
        mlo, mhi = mask[k]
        if mlo > 0 or mhi < d:
            valid = valid & (ar >= mlo) & (ar < mhi)
    idx = np.broadcast_to(idx, shape)
    valid = np.broadcast_to(valid, shape)
    if valid.any():
        inside = idx[valid]
        if inside.min() < 0 or inside.max() >= flat.size:
            raise IndexError("view reads outside its buffer: invalid view")
    safe = np.where(valid, idx, 0)
    if flat.size == 0:
        return np.zeros(shape, dtype=flat.dtype)
    return np.where(valid, flat[safe], np.zeros((), dtype=flat.dtype))
