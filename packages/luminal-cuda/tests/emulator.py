"""A CPU stand-in for CuPy that *runs* the generated CUDA C, for tests on machines without a GPU.

The module source is compiled as C++ by the host compiler with a small shim: `threadIdx` and
`blockIdx` are thread-local, blocks run one after the other, the threads of a block run as
real threads when the kernel synchronises (`__syncthreads` is a `std::barrier`, a warp shuffle
is an exchange through a per-warp slot array between two barriers) and one after the other
otherwise; `__shared__` is `static`, which blocks running in turn make per-block. Device memory
is host memory (NumPy arrays), cuBLAS's strided-batched GEMM is NumPy, and a stream capture
records the calls that a graph launch replays.

Slow (threads are OS threads), but it executes every line the GPU would: it checks the
generated kernels numerically, and the whole backend (runtime, cuBLAS plans, graph replay)
end to end. Timing and memory-model subtleties of a real GPU are not emulated.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np

SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstring>
#include <math.h>
#include <thread>
#include <vector>
struct lm_dim3 { unsigned x = 1, y = 1, z = 1; };
static thread_local lm_dim3 threadIdx, blockIdx;
static lm_dim3 blockDim, gridDim;
struct lm_warp_ctx { std::barrier<> bar{32}; unsigned long long slot[32]; };
static thread_local std::barrier<> *lm_bar;
static thread_local lm_warp_ctx *lm_warp;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __syncthreads() lm_bar->arrive_and_wait()
static inline int lm_lane() {
  return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
  unsigned long long b = 0, r; std::memcpy(&b, &v, sizeof(T));
  lm_warp->slot[lm_lane()] = b;
  lm_warp->bar.arrive_and_wait();
  r = lm_warp->slot[lm_lane() ^ o];
  lm_warp->bar.arrive_and_wait();
  T out; std::memcpy(&out, &r, sizeof(T)); return out;
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
template <class F> void lm_launch(F body, lm_dim3 g, lm_dim3 b, bool parallel) {
  gridDim = g; blockDim = b;
  const unsigned n = b.x * b.y * b.z;
  for (unsigned z = 0; z < g.z; z++) for (unsigned y = 0; y < g.y; y++)
  for (unsigned x = 0; x < g.x; x++) {
    auto thread = [&](unsigned t, std::barrier<> *bar, lm_warp_ctx *warp) {
      blockIdx = {x, y, z};
      threadIdx = {t % b.x, t / b.x % b.y, t / (b.x * b.y)};
      lm_bar = bar; lm_warp = warp;
      body();
    };
    if (!parallel) { for (unsigned t = 0; t < n; t++) thread(t, nullptr, nullptr); continue; }
    std::barrier<> bar(n);
    std::vector<lm_warp_ctx> warps((n + 31) / 32);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < n; t++) threads.emplace_back(thread, t, &bar, &warps[t / 32]);
    for (auto &th : threads) th.join();
  }
}
"""

_HALF = {  # the PTX conversions of the prelude, as host code
    'float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;':
        "_Float16 x; std::memcpy(&x, &h, 2); return (float)x;",
    'lm_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;':
        "_Float16 x = (_Float16)f; lm_half h; std::memcpy(&h, &x, 2); return h;",
}
_SIGNATURE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\) \{')
_BODY = re.compile(r"static __device__ void (\w+_body)\(")
_SYNCS = ("__syncthreads", "lm_block_reduce", "lm_warp_sum", "__shfl")
_CACHE = Path(tempfile.gettempdir()) / "luminal-cuda-emulator"


def _syncs(code: str) -> bool:
    return any(s in code for s in _SYNCS)


def host_compiler() -> str | None:
    return shutil.which("g++") or shutil.which("clang++")


def build_library(source: str) -> ctypes.CDLL:
    """Compile a module's CUDA C for the host, with one `run_<kernel>` launcher per kernel."""
    for cuda, host in _HALF.items():
        source = source.replace(cuda, host)
    # a kernel runs its threads concurrently when it, or a body it calls, synchronises
    chunks = re.split(r'(?m)^(?=static __device__ |extern "C" |template )', source)
    syncing = {m.group(1) for c in chunks if (m := _BODY.match(c)) and _syncs(c)}
    wrappers = []
    for fn in chunks:
        match = _SIGNATURE.match(fn)
        if match is None:
            continue
        name, params = match.groups()
        types = [p.rsplit(" ", 1)[0].replace("__restrict__", "").strip() for p in
                 params.split(", ")]
        args = ", ".join(f"({t})a[{i}]" for i, t in enumerate(types))
        calls = set(re.findall(r"(\w+_body)\(", fn))
        parallel = "true" if _syncs(fn) or calls & syncing else "false"
        wrappers.append(
            f'extern "C" void run_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
            f"unsigned by, unsigned bz, void **a) {{ lm_launch([&] {{ {name}({args}); }}, "
            f"{{gx, gy, gz}}, {{bx, by, bz}}, {parallel}); }}")
    full = SHIM + source + "\n" + "\n".join(wrappers) + "\n"
    key = hashlib.sha256(full.encode()).hexdigest()[:24]
    lib = _CACHE / f"{key}.so"
    if not lib.exists():
        _CACHE.mkdir(parents=True, exist_ok=True)
        src = _CACHE / f"{key}.cpp"
        src.write_text(full)
        tmp = _CACHE / f"{key}.{id(full)}.tmp"
        subprocess.run([host_compiler(), "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread",
                        "-w", str(src), "-o", str(tmp)], check=True, capture_output=True)
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


_DTYPES = {0: np.dtype(np.float32), 2: np.dtype(np.float16), 14: np.dtype(ml_dtypes.bfloat16)}


class _Memory:
    """A device allocation: a host array; `ptr` is its real address."""

    def __init__(self, size: int):
        self.array = np.zeros(max(size, 1), np.uint8)
        self.ptr = self.array.ctypes.data

    def copy_from_device_async(self, src: _Memory, size: int, stream: Any = None) -> None:
        ctypes.memmove(self.ptr, src.ptr, size)


class EmulatedCupy:
    """The parts of the CuPy API the runtime uses, executing on the CPU (see the module
    docstring)."""

    def __init__(self) -> None:
        self.capturing: list | None = None
        self.launches = 0
        emu = self

        class RawModule:
            def __init__(self, code: str, options: tuple = ()):
                self.code = code
                self._lib: ctypes.CDLL | None = None

            def get_function(self, name: str):
                if self._lib is None:
                    self._lib = build_library(self.code)
                run = getattr(self._lib, f"run_{name}")

                def launch(grid, block, args):
                    grid = (*grid, 1, 1)[:3]
                    block = (*block, 1, 1)[:3]
                    ptrs = (ctypes.c_void_p * len(args))(*(int(a) for a in args))
                    emu.enqueue(lambda: run(*(ctypes.c_uint(v) for v in (*grid, *block)), ptrs))

                return launch

        class Stream:
            def __init__(self, non_blocking: bool = False):
                self.ptr = 1

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

            def begin_capture(self):
                emu.capturing = []

            def end_capture(self):
                ops, emu.capturing = emu.capturing, None
                return SimpleNamespace(launch=lambda stream=None: [op() for op in ops])

            def synchronize(self):
                return None

        class Device:
            def __init__(self, ordinal: int = 0):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

        def memcpy(dst, src, n, kind, stream=None):
            emu.enqueue(lambda: ctypes.memmove(dst, src, n))

        def memset(ptr, value, n, stream):
            emu.enqueue(lambda: ctypes.memset(ptr, value, n))

        self.RawModule = RawModule
        self.cuda = SimpleNamespace(
            Stream=Stream, Device=Device, alloc=_Memory,
            runtime=SimpleNamespace(memcpyHostToDevice=1, memcpyDeviceToHost=2,
                                    memcpyDeviceToDevice=3, memcpyAsync=memcpy,
                                    memcpy=lambda dst, src, n, kind: ctypes.memmove(dst, src, n),
                                    memsetAsync=memset),
            cublas=SimpleNamespace(setStream=lambda handle, stream: None,
                                   gemmStridedBatchedEx=lambda *a: emu.enqueue(lambda: _gemm(*a))),
            get_cublas_handle=lambda: 1,
        )

    def enqueue(self, op) -> None:
        """Run `op` now, or record it while a stream is capturing."""
        if self.capturing is not None:
            self.capturing.append(op)
        else:
            op()


def _matrix(ptr: int, dtype: np.dtype, rows: int, cols: int, ld: int, batch: int,
            stride: int) -> np.ndarray:
    """(batch, rows, cols) column-major matrices with leading dim `ld` at `ptr`."""
    item = dtype.itemsize
    span = (batch - 1) * stride + (cols - 1) * ld + rows if rows and cols and batch else 0
    flat = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint8)),
                                 (max(span, 1) * item,)).view(dtype)
    return np.lib.stride_tricks.as_strided(flat, (batch, rows, cols),
                                           (stride * item, item, ld * item))


def _gemm(handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb,
          stride_b, beta, c, ctype, ldc, stride_c, batch, compute, algo):
    """cublasGemmStridedBatchedEx with alpha = 1, beta = 0, float32 accumulation."""
    def op(ptr, dtype, rows, cols, trans, ld, stride):
        shape = (cols, rows) if trans else (rows, cols)
        x = _matrix(ptr, _DTYPES[dtype], *shape, ld, batch, stride).astype(np.float32)
        return x.transpose(0, 2, 1) if trans else x

    res = op(a, atype, m, k, transa, lda, stride_a) @ op(b, btype, k, n, transb, ldb, stride_b)
    out = _matrix(c, _DTYPES[ctype], m, n, ldc, batch, stride_c)
    out[...] = res.astype(out.dtype)
