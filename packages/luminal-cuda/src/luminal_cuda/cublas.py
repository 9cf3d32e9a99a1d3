"""`cublasGemmStridedBatchedEx` called directly through ctypes, so GEMMs can be captured.

cuBLAS supports CUDA-graph capture, but CuPy's wrappers refuse any cuBLAS call while a stream
is capturing (`NotImplementedError: calling cuBLAS API during stream capture is currently
unsupported`, CuPy 14), which kept every run with a matmul (prefill, batched work) out of CUDA
graphs. The function is taken from the very libcublas CuPy loaded, so CuPy's handle is valid for
it; where that library cannot be found (no CuPy-loaded cuBLAS in this process, as under the
tests' stand-ins for CuPy), `gemm_function` returns CuPy's own wrapper.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

_INT, _I64, _PTR = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
# handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB,
# beta, C, Ctype, ldc, strideC, batchCount, computeType, algo
_ARGTYPES = [_PTR, _INT, _INT, _INT, _INT, _INT, _PTR, _PTR, _INT, _INT, _I64, _PTR, _INT, _INT,
             _I64, _PTR, _PTR, _INT, _INT, _I64, _INT, _INT, _INT]


class CublasError(RuntimeError):
    """A cuBLAS call returned a status other than CUBLAS_STATUS_SUCCESS."""


def loaded_cublas() -> Path | None:
    """The libcublas (not cublasLt) mapped into this process, if any (Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if Path(path).name.startswith("libcublas.so"):
            return Path(path)
    return None


def gemm_function(cupy: Any) -> Callable[..., None]:
    """A callable with the arguments of CuPy's `cublas.gemmStridedBatchedEx`."""
    if not (isinstance(cupy, types.ModuleType) and cupy.__name__ == "cupy"):
        return cupy.cuda.cublas.gemmStridedBatchedEx  # a stand-in: its handle is not real
    cupy.cuda.get_cublas_handle()  # makes CuPy load cuBLAS
    path = loaded_cublas()
    if path is None:
        return cupy.cuda.cublas.gemmStridedBatchedEx
    fn = ctypes.CDLL(str(path)).cublasGemmStridedBatchedEx
    fn.argtypes, fn.restype = _ARGTYPES, ctypes.c_int

    def gemm(*args: int) -> None:
        status = fn(*args)
        if status:
            raise CublasError(f"cublasGemmStridedBatchedEx failed with status {status}")

    return gemm
