"""CUDA C helpers that the core renderer's prelude does not have.

The source must compile with NVRTC as CuPy ships it, where no CUDA header can be assumed
(`cuda_fp16.h` lives in the toolkit, which a pip-installed CuPy does not bring, and there is
no `math.h` for `INFINITY`/`NAN`). So float16 buffers are plain 16-bit storage converted with
one PTX instruction each way; all arithmetic is in float32 anyway. Block reductions use warp
shuffles, then one partial per warp through shared memory.
"""

from __future__ import annotations

CUDA_PRELUDE = r"""
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
typedef unsigned short lm_half;

static __device__ __forceinline__ float lm_h2f(lm_half h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
static __device__ __forceinline__ lm_half lm_f2h(float f) {
  lm_half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
static __device__ __forceinline__ float lm_round_h(float f) { return lm_h2f(lm_f2h(f)); }

struct LmAdd { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct LmOr { template <class T> __device__ T operator()(T a, T b) const { return a | b; } };
struct LmMax {
  template <class T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

static __device__ __forceinline__ float lm_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* The reduction of `v` over the whole block, returned to every thread. Every thread of the
   block must call it (it synchronises); blockDim.x is a multiple of 32, at most 1024. */
template <class T, class Op>
static __device__ T lm_block_reduce(T v, Op op, T identity) {
  __shared__ T part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  /* an earlier call may still be reading part[] */
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < nwarps ? part[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
"""

# Every assignment of a run (KV caches) copied by one launch: entry i of `table` is
# (destination, source, bytes); block b copies chunk b % chunks of entry b / chunks.
COPY_CHUNK = 1 << 14
COPY_KERNEL = r"""
struct alignas(16) lm_u4 { unsigned int x, y, z, w; };
extern "C" __global__ void lm_copies(const unsigned long long *__restrict__ t, const long chunks) {
  const long entry = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  unsigned char *dst = (unsigned char *)t[3 * entry];
  const unsigned char *src = (const unsigned char *)t[3 * entry + 1];
  const long n = (long)t[3 * entry + 2];
  long begin = chunk * LM_CHUNK, end = begin + LM_CHUNK < n ? begin + LM_CHUNK : n;
  if (begin >= end) return;
  if (((unsigned long long)dst | (unsigned long long)src) % 16 == 0) {
    const long words = (end - begin) / 16;
    lm_u4 *d = (lm_u4 *)(dst + begin);
    const lm_u4 *s = (const lm_u4 *)(src + begin);
    for (long i = threadIdx.x; i < words; i += blockDim.x) d[i] = s[i];
    begin += words * 16;
  }
  for (long i = begin + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
}
""".replace("LM_CHUNK", str(COPY_CHUNK))

