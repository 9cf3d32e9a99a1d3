"""Q8_0, Q4_0, Q4_1 and Q5_0 weights repacked with their rows interleaved by 16, for decode's
matvec.

GGUF stores these matrices row by row, a block per 32 values: a header (f16 d; Q4_1: then
f16 m; Q5_0: then the 32 fifth bits as a u32 qh) and the quants (16 bytes of nibbles; Q8_0:
32 signed bytes). Decode's int16 matvec (csrc/qgemv16.c) then gathers the quant bytes of four
blocks out of the rows' strides and reduces each block across lanes (Q8_0: the float kernel,
one block at a time). The packed layout puts one row in each int32 lane instead: for each
group of 16 rows and each 32-value block, the 16 blocks' bytes (16 times a block's size, so
the matrix keeps its size) are laid out field by field, each header field of width w at GGUF
offset o becoming 16 w bytes at 16 o:

| bytes (Q4_0 / Q4_1 / Q5_0 / Q8_0)       | holds                                               |
| --------------------------------------- | --------------------------------------------------- |
| 0..31                                   | the 16 rows' d (f16), row i at 2i                   |
| - / 32..63 / 32..95 / -                 | Q4_1: the 16 rows' m (f16); Q5_0: their qh (u32),   |
|                                         | row i at 32 + 4i (one 64-byte vector)              |
| 32..287 / 64..319 / 96..351 / 32..543   | 4 vectors of 64 bytes (Q8_0: 8): int32 lane i of    |
|                                         | vector v holds quant bytes 4v..4v+3 of row i        |
|                                         | (values 4v..4v+3 in the low nibbles, 16 + those in  |
|                                         | the high ones; Q8_0: values 4v..4v+3)               |

The contract: the cpu backend decides when it lowers a program (`packed_inputs`) which input
buffers to repack: only where every call reading the buffer is a quantized matmul that reads
it as its weight along k in one of `FORMATS`, with 16 | rows and x held as int16 (the default
`quant_activations`: decode's matvec, prefill's GEMM and their float fallbacks all read the
layout, csrc `lm_qmat.packed`), or a generated kernel that loads its bytes (a tied
embedding's row gather), whose loads are then rewritten to the packed address of the same
byte (`packed_index`); anything else keeps GGUF's layout. The runtime repacks such an input
once, when it binds a new array, into an array of its own, and puts a `luminal.DeviceArray`
in `graph.data` in place of the caller's array, whose read un-packs to GGUF's bytes: the
caller's array is never written, and is released when nothing else holds it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from luminal.graph import Graph
from luminal.symbolic import Expr
from luminal_codegen import Kernel, Matmul, Program, QuantOperand
from luminal_codegen.ir import Load, map_loads

from .source import x_prec

ROWS = 16  # rows per interleaved group
# the packable formats: the widths of their block header's fields (GGUF order), which the
# quant bytes follow (16 bytes of nibbles; QUANT_BYTES where not)
FORMATS = {"q4_0": (2,), "q4_1": (2, 2), "q5_0": (2, 4), "q8_0": (2,)}
QUANT_BYTES = {"q8_0": 32}


def block_bytes(qtype: str) -> int:
    """Bytes of one GGUF block (32 values) of a packable format."""
    return sum(FORMATS[qtype]) + QUANT_BYTES.get(qtype, 16)


def _groups(nbytes: int, qtype: str, rows: int) -> tuple[int, int]:
    bb = block_bytes(qtype)
    if rows % ROWS or nbytes % (rows * bb):
        raise ValueError(f"a packed {qtype} matrix needs rows a multiple of {ROWS} and whole "
                         f"{bb}-byte blocks: {rows} rows, {nbytes} bytes")
    return rows // ROWS, nbytes // (rows * bb)


def _sections(qtype: str) -> list[tuple[int, int]]:
    """(GGUF offset, width) of each header field, then of the quants as 4-byte words."""
    at, out = 0, []
    for width in FORMATS[qtype]:
        out.append((at, width))
        at += width
    return out + [(at + 4 * v, 4) for v in range(QUANT_BYTES.get(qtype, 16) // 4)]


def packed_index(index: Expr, qtype: str, rows: int, cols: int) -> Expr:
    """Where byte `index` of a `rows` x `cols` `qtype` matrix's GGUF bytes (row-major) lies in
    the packed layout: byte o of block j of row r = 16 g + i is, in group g's block j, at
    16 o' + w i + (o - o') for the section (GGUF offset o', width w, `_sections`) holding o.
    For generated kernels that read a packed buffer; exact for every byte of the matrix."""
    bb = block_bytes(qtype)
    row_bytes = cols // 32 * bb
    r, c = index // row_bytes, index % row_bytes
    i, o = r % ROWS, c % bb
    at = r // ROWS * ROWS * row_bytes + c // bb * ROWS * bb
    start = 0
    for width in FORMATS[qtype]:  # o in [start, start + width): 0 or 1 times the field's address
        inside = o.lt(start + width) - o.lt(start)
        at = at + inside * (ROWS * start + width * i + o - start)
        start += width
    # the quant words: o >= start, t = o - start (0 where o is in the header)
    quants = o.ge(start)
    t = (o - start) * quants
    return at + quants * (ROWS * start + 64 * (t // 4) + 4 * i + t % 4)


def repack(raw: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    """GGUF bytes of a `rows`-row `qtype` matrix (any shape, C order) in the packed layout: a
    new flat uint8 array starting on a 64-byte boundary (a Q4_1 block's vectors then load
    aligned)."""
    groups, blocks = _groups(raw.size, qtype, rows)
    bb = block_bytes(qtype)
    b = raw.reshape(groups, ROWS, blocks, bb).transpose(0, 2, 1, 3)
    room = np.empty(raw.size + 64, np.uint8)
    start = -room.__array_interface__["data"][0] % 64
    out = room[start:start + raw.size].reshape(groups, blocks, ROWS * bb)
    for at, width in _sections(qtype):
        out[..., ROWS * at:ROWS * (at + width)] = b[..., at:at + width].reshape(groups, blocks, -1)
    return out.reshape(-1)


def repack_in_place(raw: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    """`repack` into `raw`'s own memory (a writable C-contiguous uint8 array; returned flat):
    a group of 16 rows holds the same bytes in both layouts, so a few groups at a time go
    through a scratch copy of about 1 MB, never a second copy of the matrix (Gemma 3's
    178 MB output head)."""
    groups, blocks = _groups(raw.size, qtype, rows)
    flat = raw.reshape(-1)
    group_bytes = ROWS * blocks * block_bytes(qtype)
    step = max(1, (1 << 20) // group_bytes)
    for g in range(0, groups, step):
        part = flat[g * group_bytes:(g + step) * group_bytes]
        part[:] = repack(part, qtype, part.size // group_bytes * ROWS)
    return flat


def unpack(packed: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    """The GGUF bytes (flat uint8, a new array) of a matrix `repack` packed."""
    groups, blocks = _groups(packed.size, qtype, rows)
    bb = block_bytes(qtype)
    p = packed.reshape(groups, blocks, ROWS * bb)
    out = np.empty((groups, ROWS, blocks, bb), np.uint8)
    t = out.transpose(0, 2, 1, 3)
    for at, width in _sections(qtype):
        section = p[..., ROWS * at:ROWS * (at + width)]
        t[..., at:at + width] = section.reshape(groups, blocks, ROWS, width)
    return out.reshape(-1)


def _packable(kernel: object) -> tuple[str, int, int] | None:
    """(format, rows, cols) of a matmul's quantized weight when the packed layout can hold
    it and every reader of the layout runs (x held as int16), else None."""
    if not isinstance(kernel, Matmul):
        return None
    b = kernel.b
    if (not isinstance(b, QuantOperand) or b.qtype not in FORMATS or not b.k_contiguous
            or x_prec(kernel) != "LM_X_I16" or not (b.rows.is_const and b.cols.is_const)):
        return None
    rows, cols = b.rows.value, b.cols.value
    if rows <= 0 or rows % ROWS or cols <= 0 or cols % 32:
        return None
    return b.qtype, rows, cols


def _loads_only(kernel: object, pos: int) -> bool:
    """Whether `kernel` is a generated kernel that only loads parameter `pos` (its reads then
    go through `packed_index`, `packed_loads`)."""
    return type(kernel) is Kernel and not kernel.params[pos].output and kernel.out.buf != pos


def packed_inputs(graph: Graph, program: Program
                  ) -> tuple[dict[int, tuple[str, int]], frozenset[int]]:
    """The input buffers to repack (buffer -> (format, rows)) and the matmul kernels that read them
    packed. A buffer qualifies when a packable weight (`_packable`) reads it and every other call
    reading it reads it as a packable weight of the same shape, of a kernel all of whose calls
    read qualifying buffers there (a kernel is rendered once for all its calls), or loads it in
    a generated kernel all of whose calls pass qualifying buffers of that shape there (a tied
    embedding's row gather: `packed_loads` rewrites its addresses); and its node is not
    written, assigned or retrieved."""
    bufs, kernels = program.buffers, program.kernels
    untouchable = (set(graph.writes) | set(graph.assignments) | set(graph.assignments.values())
                   | set(graph.retrieved))
    rows_of = [_packable(k) for k in kernels]
    readers: dict[int, list[tuple[int, int]]] = {}  # buffer -> (kernel, parameter)
    for call in program.calls:
        for pos, buf in enumerate(call.args):
            readers.setdefault(buf, []).append((call.kernel, pos))
    chosen, shape_of = {}, {}
    for buf, reads in readers.items():
        spec = bufs[buf]
        weights = [(k, pos) for k, pos in reads
                   if rows_of[k] is not None and pos == kernels[k].b.buf]
        rows = {rows_of[k] for k, _ in weights}
        if (spec.role != "input" or spec.node in untouchable or len(rows) != 1
                or any((k, pos) not in weights and not _loads_only(kernels[k], pos)
                       for k, pos in reads)):
            continue
        ((qtype, r, cols),) = rows
        if spec.numel.is_const and spec.numel.value == r * cols // 32 * block_bytes(qtype):
            chosen[buf], shape_of[buf] = (qtype, r), (qtype, r, cols)
    while True:  # drop kernels that read a buffer left out, then buffers they read
        packed = {k for k, r in enumerate(rows_of) if r is not None and all(
            c.args[kernels[k].b.buf] in chosen for c in program.calls if c.kernel == k)}
        loads = {(k, pos) for buf in chosen for k, pos in readers[buf]
                 if _loads_only(kernels[k], pos) and len({
                     shape_of[c.args[pos]] if c.args[pos] in chosen else None
                     for c in program.calls if c.kernel == k}) == 1}
        kept = {buf: r for buf, r in chosen.items()
                if all(k in packed or (k, pos) in loads for k, pos in readers[buf])}
        if kept == chosen:
            return chosen, frozenset(packed)
        chosen = kept


def packed_loads(program: Program, packed: dict[int, tuple[str, int]]) -> Program:
    """`program` with the generated kernels that load a packed buffer (`packed_inputs`: every
    call of such a kernel passes packed buffers of one shape there) reading it at
    `packed_index`."""
    moves: dict[int, dict[int, tuple[str, int, int]]] = {}  # kernel -> parameter -> shape
    for call in program.calls:
        for pos, buf in enumerate(call.args):
            if buf in packed and type(program.kernels[call.kernel]) is Kernel:
                qtype, rows = packed[buf]
                cols = program.buffers[buf].numel.value // rows // block_bytes(qtype) * 32
                moves.setdefault(call.kernel, {})[pos] = (qtype, rows, cols)
    kernels = list(program.kernels)
    for k, shapes in moves.items():
        def moved(load: Load, shapes=shapes) -> Load:
            if load.buf not in shapes:
                return load
            return replace(load, index=packed_index(load.index, *shapes[load.buf]))
        out = kernels[k].out
        kernels[k] = replace(kernels[k], out=replace(out, value=map_loads(out.value, moved)))
    return replace(program, kernels=kernels)
