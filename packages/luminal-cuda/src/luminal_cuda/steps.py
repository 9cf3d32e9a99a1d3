"""Concrete launches for one set of dim values: grids, argument tuples, cuBLAS calls.

Everything data-independent is computed once per dim binding and kept as a list of
zero-argument callables (`Step`), so an eager run is a Python loop over prepared launches and
a CUDA-graph capture records exactly the same calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .codegen import Code, Gemm, Generated, QuantGemm
from .dialect import THREADS, KernelFunction, RenderedKernel
from .matmul import COMPUTE_32F, COMPUTE_32F_FAST_TF32, CUDA_R, GEMM_DEFAULT, plan_gemm
from .prelude import COPY_CHUNK
from .quant import QMATVEC_MAX_ROWS, WARPS


@dataclass(frozen=True)
class Member:
    """One kernel's part of a launch: its body, its block count, its buffer pointers and the
    threads per block its body is written for."""

    function: KernelFunction
    blocks: int
    ptrs: list[int]
    threads: int = THREADS

Step = Callable[[], None]


@dataclass
class Launcher:
    """What steps need from the runtime: CuPy, the compiled module, the GEMM function
    (`cublas.gemm_function`) and the cuBLAS handle, the
    stream (for memcpy/memset), the device array of dim values kernels read, and whether
    float32 GEMMs may use TF32 tensor cores."""

    cupy: Any
    module: Any
    gemm_fn: Any
    handle: int
    stream: Any
    dims_ptr: int
    tf32: bool
    _functions: dict[str, Any] = field(default_factory=dict)
    # cuBLAS reads alpha and beta through host pointers: keep them alive here
    _one: np.ndarray = field(default_factory=lambda: np.ones(1, np.float32))
    _zero: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))

    def function(self, name: str) -> Any:
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.module.get_function(name)
        return fn

    # ----- generated kernels ----------------------------------------------------------------
    def _args(self, ptrs: list[int], uses_dims: bool) -> tuple:
        return tuple(np.uint64(p) for p in (*ptrs, *([self.dims_ptr] if uses_dims else [])))

    def kernel(self, rk: RenderedKernel, ptrs: list[int], dims: dict[str, int]) -> list[Step]:
        """A generated kernel over its domain at `dims` (an upper bound of the real dims: the
        kernel checks its real extent)."""
        return self.launch(Member(rk.function, rk.blocks(rk.points.evaluate(dims)), ptrs,
                                  rk.block))

    def launch(self, member: Member) -> list[Step]:
        """`member`'s kernel launched on its own."""
        if member.blocks == 0:
            return []
        fn = self.function(member.function.name)
        args = self._args(member.ptrs, member.function.uses_dims)
        return [lambda: fn((member.blocks,), (member.threads,), args)]

    def member(self, code: Code, ptrs: list[int], dims: dict[str, int]) -> Member | None:
        """`code` at `dims` as one kernel that can share a launch, or None when it is not one
        kernel there (cuBLAS, or a quantized matmul of many rows: dequantize + cuBLAS)."""
        if isinstance(code, Generated):
            rk = code.kernel
            return Member(rk.function, rk.blocks(rk.points.evaluate(dims)), ptrs, rk.block)
        if isinstance(code, QuantGemm):
            rows, batch, n = self._quant_rows(code, dims)
            if self._uses_qmatvec(code, rows * batch):
                assert code.kernels.qmatvec is not None
                return Member(code.kernels.qmatvec, -(-n // WARPS) * rows * batch, ptrs)
        return None

    def fused(self, name: str, members: list[Member]) -> list[Step]:
        """`members` side by side in one launch of the fused entry `name` (`fusion.py`); each
        must be written for `THREADS` threads per block."""
        assert all(m.threads == THREADS for m in members), "fused bodies need THREADS threads"
        total = sum(m.blocks for m in members)
        if total == 0:
            return []
        fn = self.function(name)
        args: list = [np.uint64(self.dims_ptr)]
        for m in members:
            args += [np.int64(m.blocks), *(np.uint64(p) for p in m.ptrs)]
        args_t = tuple(args)
        return [lambda: fn((total,), (THREADS,), args_t)]

    # ----- matmuls --------------------------------------------------------------------------
    def gemm(self, code: Gemm, ptrs: list[int], dims: dict[str, int]) -> list[Step]:
        mm = code.matmul
        calls = plan_gemm(mm, dims) if code.types is not None else None
        if calls is None:
            return self.kernel(code.fallback, ptrs, dims)
        tb, ta, tc = code.types
        sizes = [p.dtype.itemsize for p in mm.params]
        fp32 = all(t == CUDA_R["float32"] for t in code.types)
        compute = COMPUTE_32F_FAST_TF32 if self.tf32 and fp32 else COMPUTE_32F
        one, zero = self._one.ctypes.data, self._zero.ctypes.data
        steps = []
        for c in calls:
            args = (
                self.handle, c.transa, c.transb, c.m, c.n, c.k, one,
                ptrs[2] + c.offset_a * sizes[2], tb, c.lda, c.stride_a,
                ptrs[1] + c.offset_b * sizes[1], ta, c.ldb, c.stride_b, zero,
                ptrs[0] + c.offset_c * sizes[0], tc, c.ldc, c.stride_c, c.batch,
                compute, GEMM_DEFAULT,
            )
            steps.append(lambda args=args: self.gemm_fn(*args))
        return steps

    @staticmethod
    def _quant_rows(code: QuantGemm, dims: dict[str, int]) -> tuple[int, int, int]:
        """(rows, batch, output columns) of a quantized matmul at `dims`."""
        mm = code.matmul
        batch = 1
        for e in mm.batch:
            batch *= e.evaluate(dims)
        return mm.m.evaluate(dims), batch, mm.n.evaluate(dims)

    @staticmethod
    def _uses_qmatvec(code: QuantGemm, rows: int) -> bool:
        return code.kernels.qmatvec is not None and rows <= QMATVEC_MAX_ROWS

    def quant_gemm(self, code: QuantGemm, ptrs: list[int], scratch: int,
                   dims: dict[str, int]) -> list[Step]:
        rows, batch, n = self._quant_rows(code, dims)
        if rows * batch == 0 or n == 0:
            return []
        member = self.member(code, ptrs, dims)
        if member is not None:
            return self.launch(member)
        q = code.matmul.b
        total = q.rows.evaluate(dims) * q.cols.evaluate(dims)
        dequantize = Member(code.kernels.dequant, -(-total // THREADS), [scratch, ptrs[2]])
        return self.launch(dequantize) + self.gemm(code.dequantized, [ptrs[0], ptrs[1], scratch],
                                                   dims)

    def steps(self, code: Generated | Gemm | QuantGemm, ptrs: list[int], scratch: int,
              dims: dict[str, int]) -> list[Step]:
        """The launches of one kernel of the program."""
        if isinstance(code, Generated):
            return self.kernel(code.kernel, ptrs, dims)
        if isinstance(code, Gemm):
            return self.gemm(code, ptrs, dims)
        return self.quant_gemm(code, ptrs, scratch, dims)

    def labels(self, code: Generated | Gemm | QuantGemm, count: int,
               dims: dict[str, int]) -> list[str]:
        """What each of the `count` launches of `code` is, for profiles."""
        if isinstance(code, Generated):
            rk = code.kernel
            kind = "attention" if "lm_dot" in rk.source else (
                "block-reduce" if rk.block_mode else "kernel")
            return [f"{kind} {rk.name}"] * count
        if isinstance(code, QuantGemm):
            rows, batch, _ = self._quant_rows(code, dims)
            kernels = code.kernels
            if self._uses_qmatvec(code, rows * batch) and kernels.qmatvec is not None:
                return [f"qmatvec {kernels.qmatvec.name}"] * count
            return ([f"dequantize {kernels.dequant.name}"] + ["gemm dequantized"] * count)[:count]
        cublas = code.types is not None and plan_gemm(code.matmul, dims) is not None
        return [f"{'gemm' if cublas else 'gemm-fallback'} {code.fallback.name}"] * count

    def copies(self, table_ptr: int, entries: list[tuple[int, int, int]]) -> list[Step]:
        """Device-to-device copies (the assignments), (destination, source, bytes) each, in
        one launch; the table is written to `table_ptr` (3 x 8 bytes per entry) now."""
        entries = [e for e in entries if e[2]]
        if not entries:
            return []
        table = np.array(entries, np.uint64)
        rt = self.cupy.cuda.runtime
        self.stream.synchronize()  # a replay queued earlier may still read the old table
        rt.memcpy(table_ptr, table.ctypes.data, table.nbytes, rt.memcpyHostToDevice)
        chunks = max(-(-n // COPY_CHUNK) for _, _, n in entries)
        fn = self.function("lm_copies")
        args = (np.uint64(table_ptr), np.int64(chunks))
        grid = len(entries) * chunks
        return [lambda: fn((grid,), (THREADS,), args)]

