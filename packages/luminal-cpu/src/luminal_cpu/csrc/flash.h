/* Micro-kernels of tiled attention (flash.py renders the kernels that call them): a tile is
 * LM_FQ queries against LM_FK keys. The scores of LM_FR queries are one register-blocked
 * product (as lm_ukernel in runtime.c: a broadcast of the left operand times a row of the right
 * one, accumulators in registers), and so is their weighted sum of values. Included only in
 * programs holding such a kernel; explicit fmaf, since programs are built with
 * -ffp-contract=off. */
#include <stdlib.h>
#include <string.h>
#define LM_FQ 32  /* queries of a tile */
#define LM_FK 64  /* keys of a tile (the width of a score row; a multiple of 32) */
#define LM_FR 8   /* queries of one micro-kernel call */
#define LM_FV 32  /* value columns of one micro-kernel pass (the rows are padded to it) */
/* a float sum of up to 256 magnitudes of a query, and the largest magnitude of a block's
 * keys, each times this, bound the magnitude of every float dot product of them (rounding
 * included) */
#define LM_FA_SLACK (1.0f + 0x1p-10f)

/* a buffer of at least `floats` floats (64-byte aligned) for the calling thread, kept between
 * calls: grown when a longer sequence needs it, never shrunk */
static float *lm_fa_scratch(long floats) {
  static _Thread_local float *buf;
  static _Thread_local long cap;
  if (floats > cap) {
    free(buf);
    buf = (float *)aligned_alloc(64, (size_t)(floats + 15) / 16 * 64);
    cap = floats;
  }
  return buf;
}

#if defined(__AVX512F__)
#include <immintrin.h>

/* r[i][0..32) += sum_k a[k * as + i * ai] * b[k * bs + 0..32) for i < LM_FR, k < n: the loop
 * of both micro-kernels, a broadcast of the left operand times a row of the right one */
static inline __attribute__((always_inline)) void lm_fa_fma(
    long n, const float *restrict a, long as, long ai, const float *restrict b, long bs,
    __m512 r[LM_FR][2]) {
  for (long k = 0; k < n; k++) {
    const __m512 b0 = _mm512_load_ps(b + k * bs), b1 = _mm512_load_ps(b + k * bs + 16);
    for (int i = 0; i < LM_FR; i++) {
      const __m512 ak = _mm512_set1_ps(a[k * as + i * ai]);
      r[i][0] = _mm512_fmadd_ps(ak, b0, r[i][0]);
      r[i][1] = _mm512_fmadd_ps(ak, b1, r[i][1]);
    }
  }
}

/* s[i][j] = sum_c q[c][i] * kt[c][j] for i < LM_FR, j < LM_FK: q is c-major in panels of
 * LM_FR queries, kt c-major (keys side by side), s row-major with rows of LM_FK */
static inline void lm_fa_scores(long kc, const float *restrict q, const float *restrict kt,
                                float *restrict s) {
  for (long h = 0; h < LM_FK; h += 32) {  /* 32 keys at a time: 16 accumulators */
    __m512 r[LM_FR][2];
    for (int i = 0; i < LM_FR; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
    lm_fa_fma(kc, q, LM_FR, 1, kt + h, LM_FK, r);
    for (int i = 0; i < LM_FR; i++) {
      _mm512_store_ps(s + i * LM_FK + h, r[i][0]);
      _mm512_store_ps(s + i * LM_FK + h + 16, r[i][1]);
    }
  }
}

/* acc[i][:] = acc[i][:] * scale[i] + sum_j w[i][j] * v[j][:] for i < LM_FR, j < LM_FK, over
 * rows of `dp` columns (a multiple of LM_FV): w row-major with rows of LM_FK, v and acc
 * row-major with rows of dp. Every weight is applied, zeros included (0 * inf is NaN). */
static inline void lm_fa_values(long dp, const float *restrict w, const float *restrict v,
                                const float *restrict scale, float *restrict acc) {
  for (long d = 0; d < dp; d += LM_FV) {
    __m512 r[LM_FR][2];
    for (int i = 0; i < LM_FR; i++) {
      const __m512 c = _mm512_set1_ps(scale[i]);
      r[i][0] = _mm512_mul_ps(_mm512_load_ps(acc + i * dp + d), c);
      r[i][1] = _mm512_mul_ps(_mm512_load_ps(acc + i * dp + d + 16), c);
    }
    lm_fa_fma(LM_FK, w, 1, LM_FK, v + d, dp, r);
    for (int i = 0; i < LM_FR; i++) {
      _mm512_store_ps(acc + i * dp + d, r[i][0]);
      _mm512_store_ps(acc + i * dp + d + 16, r[i][1]);
    }
  }
}
#else
static inline void lm_fa_scores(long kc, const float *restrict q, const float *restrict kt,
                                float *restrict s) {
  float acc[LM_FR][LM_FK] = {{0}};
  for (long c = 0; c < kc; c++)
    for (int i = 0; i < LM_FR; i++)
      for (int j = 0; j < LM_FK; j++) acc[i][j] = fmaf(q[c * LM_FR + i], kt[c * LM_FK + j], acc[i][j]);
  for (int i = 0; i < LM_FR; i++)
    for (int j = 0; j < LM_FK; j++) s[i * LM_FK + j] = acc[i][j];
}

static inline void lm_fa_values(long dp, const float *restrict w, const float *restrict v,
                                const float *restrict scale, float *restrict acc) {
  for (int i = 0; i < LM_FR; i++)
    for (long d = 0; d < dp; d++) {
      float r = acc[i * dp + d] * scale[i];
      for (long j = 0; j < LM_FK; j++) r = fmaf(w[i * LM_FK + j], v[j * dp + d], r);
      acc[i * dp + d] = r;
    }
}
#endif
