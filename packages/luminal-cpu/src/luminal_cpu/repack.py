"""Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q5_K and Q6_K weights repacked with their rows interleaved by
16, for decode's matvec.

GGUF stores these matrices row by row, a block per 32 values (the K-quants: per 256), each block
a run of fields (`FORMATS`: Q8_0 f16 d, 32 signed bytes; Q4_0 d, 16 bytes of nibbles; Q4_1 d,
f16 m, nibbles; Q5_0 d, u32 qh, nibbles; Q4_K f16 d, f16 dmin, 12 bytes of 6-bit scales and
mins, 128 of nibbles; Q5_K the same with 32 bytes of fifth bits qh before the nibbles; Q6_K 128
bytes of low nibbles ql, 64 of high bits qh, 16 int8 scales, f16 d). Decode's int16 matvec
(csrc/qgemv16.c) then gathers each row's quant bytes out of the rows' strides and reduces each
block across lanes (Q8_0: the float kernel, one block at a time). The packed layout puts one row
in each int32 lane instead: for each group of 16 rows and each block, the 16 blocks' bytes (16
times a block's size, so the matrix keeps its size) are laid out field by field, a field of
width w <= 4 at GGUF offset o becoming 16 w bytes at 16 o (row i's at 16 o + w i: f16 fields are
16 lanes of f16, Q5_0's qh one 64-byte vector), a wider field each of its 4-byte words so (word
o + 4t: one 64-byte vector at 16 (o + 4t), int32 lane i holding row i's 4 bytes):

| bytes (Q4_0 / Q4_1 / Q5_0 / Q8_0)       | holds                                               |
| --------------------------------------- | --------------------------------------------------- |
| 0..31                                   | the 16 rows' d (f16), row i at 2i                   |
| - / 32..63 / 32..95 / -                 | Q4_1: the 16 rows' m (f16); Q5_0: their qh (u32),   |
|                                         | row i at 32 + 4i (one 64-byte vector)              |
| 32..287 / 64..319 / 96..351 / 32..543   | 4 vectors of 64 bytes (Q8_0: 8): int32 lane i of    |
|                                         | vector v holds quant bytes 4v..4v+3 of row i        |
|                                         | (values 4v..4v+3 in the low nibbles, 16 + those in  |
|                                         | the high ones; Q8_0: values 4v..4v+3)               |

| bytes (Q4_K, 2304 per block)      | holds                                               |
| --------------------------------- | --------------------------------------------------- |
| 0..31 / 32..63                    | the 16 rows' d / dmin (f16)                         |
| 64..255                           | 3 vectors: lane i of vector s holds row i's scale   |
|                                   | bytes 4s..4s+3                                      |
| 256..2303                         | 32 vectors: lane i of vector v holds row i's quant  |
|                                   | bytes 4v..4v+3                                      |

| bytes (Q5_K, 2816 per block)      | holds                                               |
| --------------------------------- | --------------------------------------------------- |
| 0..255                            | d, dmin and the scale vectors, as Q4_K's            |
| 256..767                          | 8 vectors: lane i of vector t holds row i's qh      |
|                                   | bytes 4t..4t+3                                      |
| 768..2815                         | 32 quant vectors, as Q4_K's at 256                  |

| bytes (Q6_K, 3360 per block)      | holds                                               |
| --------------------------------- | --------------------------------------------------- |
| 0..2047                           | 32 vectors of ql (lane i of vector a: row i's bytes |
|                                   | 4a..4a+3)                                           |
| 2048..3071                        | 16 vectors of qh                                    |
| 3072..3327                        | 4 vectors of the int8 scales                        |
| 3328..3359                        | the 16 rows' d (f16)                                |

The contract: the cpu backend decides when it lowers a program (`packed_inputs`) which input
buffers to repack: only where every call reading the buffer is a quantized matmul that reads
it as its weight along k in one of `FORMATS`, with 16 | rows and x held as int16 (the default
`quant_activations`) or int24 (decode's matvec, prefill's GEMM and their float fallbacks all
read the layout, csrc `lm_qmat.packed`), or a generated kernel that loads its bytes (a tied
embedding's row gather), whose loads are then rewritten to the packed address of the same
byte (`packed_index`); anything else keeps GGUF's layout. The runtime repacks such an input
once, when it binds a new array (`Graph.prepare`, or the first run), and puts a
`luminal.DeviceArray` in `graph.data` in place of the caller's array, whose read un-packs to
GGUF's bytes. It repacks into an array of its own (the caller's array is never written, and is
released when nothing else holds it), or in place when nothing but the graph holds the array
(a model's weight after `Module.release_to`): no one can see the write, and no second copy is
ever made. The runtime's repack is C (`repack_native`, csrc/runtime.c, on the thread team's
cores); `repack` is the same layout in NumPy, its reference.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
from luminal.graph import Graph
from luminal.host_views import aligned_bytes
from luminal.symbolic import Expr
from luminal_codegen import Kernel, Matmul, Program, QuantOperand
from luminal_codegen.ir import Load, map_loads

from .source import QTYPE_CODES, x_prec

ROWS = 16  # rows per interleaved group
# the packable formats: values per GGUF block, and the widths of the block's fields in GGUF
# order (csrc/runtime.c's lm_rows16_fields holds the same)
FORMATS = {"q8_0": (32, (2, 32)), "q4_0": (32, (2, 16)), "q4_1": (32, (2, 2, 16)),
           "q5_0": (32, (2, 4, 16)), "q4_k": (256, (2, 2, 12, 128)),
           "q5_k": (256, (2, 2, 12, 32, 128)), "q6_k": (256, (128, 64, 16, 2))}


def block_values(qtype: str) -> int:
    """Values of one GGUF block of a packable format (32, or 256 for the K-quants)."""
    return FORMATS[qtype][0]


def block_bytes(qtype: str) -> int:
    """Bytes of one GGUF block of a packable format."""
    return sum(FORMATS[qtype][1])


def _groups(nbytes: int, qtype: str, rows: int) -> tuple[int, int]:
    bb = block_bytes(qtype)
    if rows % ROWS or nbytes % (rows * bb):
        raise ValueError(f"a packed {qtype} matrix needs rows a multiple of {ROWS} and whole "
                         f"{bb}-byte blocks: {rows} rows, {nbytes} bytes")
    return rows // ROWS, nbytes // (rows * bb)


def _sections(qtype: str) -> list[tuple[int, int]]:
    """(GGUF offset, width) of each field of up to 4 bytes, and of each 4-byte word of a wider
    one: the pieces that lie in the packed layout as 16 lanes side by side."""
    at, out = 0, []
    for width in FORMATS[qtype][1]:
        out += [(at, width)] if width <= 4 else [(at + w, 4) for w in range(0, width, 4)]
        at += width
    return out


def packed_index(index: Expr, qtype: str, rows: int, cols: int) -> Expr:
    """Where byte `index` of a `rows` x `cols` `qtype` matrix's GGUF bytes (row-major) lies in
    the packed layout: byte o of block j of row r = 16 g + i is, in group g's block j, at
    16 o' + w i + (o - o') for the section (GGUF offset o', width w, `_sections`) holding o.
    For generated kernels that read a packed buffer; exact for every byte of the matrix."""
    bb = block_bytes(qtype)
    row_bytes = cols // block_values(qtype) * bb
    r, c = index // row_bytes, index % row_bytes
    i, o = r % ROWS, c % bb
    at = r // ROWS * ROWS * row_bytes + c // bb * ROWS * bb
    start = 0
    for width in FORMATS[qtype][1]:  # o in [start, start + width): 0 or 1 times the field's address
        inside = o.lt(start + width) - o.lt(start)
        if width <= 4:
            at = at + inside * (ROWS * start + width * i + o - start)
        else:  # 4-byte words: t = o - start (0 outside the field)
            t = (o - start) * inside
            at = at + inside * (ROWS * start + 64 * (t // 4) + 4 * i + t % 4)
        start += width
    return at


def repack(raw: np.ndarray, qtype: str, rows: int) -> np.ndarray:
    """GGUF bytes of a `rows`-row `qtype` matrix (any shape, C order) in the packed layout: a
    new flat uint8 array starting on a 64-byte boundary (a Q4_1 block's vectors then load
    aligned). The layout's reference: the runtime repacks with `repack_native`, which writes
    the same bytes (Gemma 3's 178 MB Q8_0 head: 14 ms of CPU time in place, 40 ms into a new
    array, against 0.45 s here)."""
    groups, blocks = _groups(raw.size, qtype, rows)
    bb = block_bytes(qtype)
    b = raw.reshape(groups, ROWS, blocks, bb).transpose(0, 2, 1, 3)
    out = aligned_bytes(raw.size).reshape(groups, blocks, ROWS * bb)
    for at, width in _sections(qtype):
        out[..., ROWS * at:ROWS * (at + width)] = b[..., at:at + width].reshape(groups, blocks, -1)
    return out.reshape(-1)


def repack_native(raw: np.ndarray, qtype: str, rows: int, library: ctypes.CDLL,
                  threads: int = 1, in_place: bool = False) -> np.ndarray:
    """`repack`'s bytes written by the runtime library's C (`library`: the cpu backend's
    support library, or a program linked to it; csrc/runtime.c `lm_repack_rows16`), the groups
    of 16 rows split among `threads` threads. `in_place`: into `raw`'s own memory (a writable
    C-contiguous uint8 array; returned flat), a group at a time through a scratch copy of a
    group per thread, never a second copy of the matrix (Gemma 3's 178 MB output head); else
    into a new flat array on a 64-byte boundary, `raw` only read. The size is checked before
    anything is written (a `ValueError`)."""
    _groups(raw.size, qtype, rows)
    if in_place:
        if not (raw.dtype == np.uint8 and raw.flags.c_contiguous and raw.flags.writeable):
            raise ValueError("repack in place needs a writable C-contiguous uint8 array")
        src = out = raw.reshape(-1)
    else:
        src, out = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1), aligned_bytes(raw.size)
    status = library.lm_repack_rows16(
        ctypes.c_void_p(src.ctypes.data), ctypes.c_void_p(out.ctypes.data),
        ctypes.c_long(src.size), ctypes.c_int(QTYPE_CODES[qtype]), ctypes.c_long(rows),
        ctypes.c_int(threads))
    if status:
        raise (MemoryError if status == -2 else ValueError)(
            f"repacking a {rows}-row {qtype} matrix of {src.size} bytes failed ({status})")
    return out


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
    it and every reader of the layout runs (x held as int16 or int24), else None."""
    if not isinstance(kernel, Matmul):
        return None
    b = kernel.b
    if (not isinstance(b, QuantOperand) or b.qtype not in FORMATS or not b.k_contiguous
            or x_prec(kernel) not in ("LM_X_I16", "LM_X_I24")
            or not (b.rows.is_const and b.cols.is_const)):
        return None
    rows, cols = b.rows.value, b.cols.value
    if rows <= 0 or rows % ROWS or cols <= 0 or cols % block_values(b.qtype):
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
        nbytes = r * cols // block_values(qtype) * block_bytes(qtype)
        if spec.numel.is_const and spec.numel.value == nbytes:
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
                blocks = program.buffers[buf].numel.value // rows // block_bytes(qtype)
                cols = blocks * block_values(qtype)
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
