"""Q4_1 weights repacked with their rows interleaved by 16, for decode's matvec.

GGUF stores a Q4_1 matrix row by row, a 20-byte block (f16 d, f16 m, 16 bytes of nibbles) per
32 values. Decode's int16 matvec (csrc/qgemv16.c) then gathers the quant bytes of four blocks
out of 80-byte strides and reduces each block across lanes. The packed layout puts one row in
each int32 lane instead, for each group of 16 rows and each 32-value block (320 bytes, the
same as the 16 GGUF blocks it replaces, so the matrix keeps its size):

| bytes    | holds                                                              |
| -------- | ------------------------------------------------------------------ |
| 0..31    | the 16 rows' d (f16), row i at 2i                                  |
| 32..63   | the 16 rows' m (f16)                                               |
| 64..319  | 4 vectors of 64 bytes: int32 lane i of vector v holds quant bytes  |
|          | 4v..4v+3 of row i (values 4v..4v+3 in the low nibbles, 16 + those  |
|          | in the high ones)                                                  |

The contract: the cpu backend decides when it lowers a program (`packed_inputs`) which input
buffers to repack: only where every call reading the buffer is a quantized matmul that reads
it as its Q4_1 weight along k, with 16 | rows and x held as int16 (the default
`quant_activations`: decode's matvec, prefill's GEMM and their float fallbacks all read the
layout, csrc `lm_qmat.packed`); anything else keeps GGUF's layout. The runtime repacks such
an input once, when it binds a new array, into an array of its own, and puts a
`luminal.DeviceArray` in `graph.data` in place of the caller's array, whose read un-packs to
GGUF's bytes: the caller's array is never written, and is released when nothing else holds
it.
"""

from __future__ import annotations

import numpy as np
from luminal.graph import Graph
from luminal_codegen import Matmul, Program, QuantOperand

from .source import x_prec

ROWS = 16  # rows per interleaved group
_BLOCK = 20  # bytes of a GGUF Q4_1 block (32 values)


def _groups(nbytes: int, rows: int) -> tuple[int, int]:
    if rows % ROWS or nbytes % (rows * _BLOCK):
        raise ValueError(f"a packed Q4_1 matrix needs rows a multiple of {ROWS} and whole "
                         f"{_BLOCK}-byte blocks: {rows} rows, {nbytes} bytes")
    return rows // ROWS, nbytes // (rows * _BLOCK)


def repack_q4_1(raw: np.ndarray, rows: int) -> np.ndarray:
    """GGUF Q4_1 bytes of a `rows`-row matrix (any shape, C order) in the packed layout: a new
    flat uint8 array starting on a 64-byte boundary (a block's vectors then load aligned)."""
    groups, blocks = _groups(raw.size, rows)
    b = raw.reshape(groups, ROWS, blocks, _BLOCK).transpose(0, 2, 1, 3)
    room = np.empty(raw.size + 64, np.uint8)
    start = -room.__array_interface__["data"][0] % 64
    out = room[start:start + raw.size].reshape(groups, blocks, 5, 64)
    out[:, :, 0, :32] = b[..., 0:2].reshape(groups, blocks, 32)
    out[:, :, 0, 32:] = b[..., 2:4].reshape(groups, blocks, 32)
    out[:, :, 1:] = (b[..., 4:].reshape(groups, blocks, ROWS, 4, 4).transpose(0, 1, 3, 2, 4)
                     .reshape(groups, blocks, 4, 64))
    return out.reshape(-1)


def unpack_q4_1(packed: np.ndarray, rows: int) -> np.ndarray:
    """The GGUF bytes (flat uint8, a new array) of a matrix `repack_q4_1` packed."""
    groups, blocks = _groups(packed.size, rows)
    p = packed.reshape(groups, blocks, 5, 64)
    out = np.empty((groups, ROWS, blocks, _BLOCK), np.uint8)
    t = out.transpose(0, 2, 1, 3)
    t[..., 0:2] = p[:, :, 0, :32].reshape(groups, blocks, ROWS, 2)
    t[..., 2:4] = p[:, :, 0, 32:].reshape(groups, blocks, ROWS, 2)
    t[..., 4:] = (p[:, :, 1:].reshape(groups, blocks, 4, ROWS, 4).transpose(0, 1, 3, 2, 4)
                  .reshape(groups, blocks, ROWS, 16))
    return out.reshape(-1)


def _packable(kernel: object) -> tuple[int, int] | None:
    """(rows, bytes) of a matmul's quantized weight when the packed layout can hold it and
    every reader of the layout runs (x held as int16), else None."""
    if not isinstance(kernel, Matmul):
        return None
    b = kernel.b
    if (not isinstance(b, QuantOperand) or b.qtype != "q4_1" or not b.k_contiguous
            or x_prec(kernel) != "LM_X_I16" or not (b.rows.is_const and b.cols.is_const)):
        return None
    rows, cols = b.rows.value, b.cols.value
    if rows <= 0 or rows % ROWS or cols <= 0 or cols % 32:
        return None
    return rows, rows * cols // 32 * _BLOCK


def packed_inputs(graph: Graph, program: Program) -> tuple[dict[int, int], frozenset[int]]:
    """The input buffers to repack (buffer -> rows) and the matmul kernels that read them
    packed. A buffer qualifies when every call reading it reads it as a packable weight
    (`_packable`) of a kernel all of whose calls read qualifying buffers there (a kernel is
    rendered once for all its calls), and its node is not written, assigned or retrieved."""
    bufs, kernels = program.buffers, program.kernels
    untouchable = (set(graph.writes) | set(graph.assignments) | set(graph.assignments.values())
                   | set(graph.retrieved))
    rows_of = [_packable(k) for k in kernels]
    readers: dict[int, list[tuple[int, int]]] = {}  # buffer -> (kernel, parameter)
    for call in program.calls:
        for pos, buf in enumerate(call.args):
            readers.setdefault(buf, []).append((call.kernel, pos))
    chosen = {}
    for buf, reads in readers.items():
        spec = bufs[buf]
        rows = {rows_of[k] for k, _ in reads}
        if (spec.role != "input" or spec.node in untouchable or len(rows) != 1 or None in rows
                or any(pos != kernels[k].b.buf for k, pos in reads)):
            continue
        ((r, nbytes),) = rows
        if spec.numel.is_const and spec.numel.value == nbytes:
            chosen[buf] = r
    while True:  # drop kernels that read a buffer left out, then buffers they read
        packed = {k for k, r in enumerate(rows_of) if r is not None and all(
            c.args[kernels[k].b.buf] in chosen for c in program.calls if c.kernel == k)}
        kept = {buf: r for buf, r in chosen.items()
                if all(k in packed for k, _ in readers[buf])}
        if kept == chosen:
            return chosen, frozenset(packed)
        chosen = kept
