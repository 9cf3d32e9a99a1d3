/* Micro-kernels of tiled attention (flash.py renders the kernels that call them): a tile is
 * LM_FQ queries against LM_FK keys. The scores of LM_FR queries are one register-blocked
 * product (as lm_ukernel in runtime.c: a broadcast of the left operand times a row of the right
 * one, accumulators in registers), and so is their weighted sum of values; between them, the
 * rows' online-softmax step (lm_fa_softmax), whose row maxima and sums are reduced in
 * registers. Included only in programs holding such a kernel, after the prelude (lm_exp2);
 * explicit fmaf, since programs are built with -ffp-contract=off. */
#include <stdlib.h>
#include <string.h>
#define LM_FQ 32  /* queries of a tile */
#define LM_FK 128 /* keys of a tile (the width of a score row; a multiple of 32) */
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

/* s[i][j] = sum_c q[c][i] * kt[c][j] for i < LM_FR, h0 <= j < h1 (multiples of 32, h1 <=
 * LM_FK; the other columns of s are left as they are): q is c-major in panels of LM_FR
 * queries, kt c-major (keys side by side), s row-major with rows of LM_FK */
static inline void lm_fa_scores(long kc, const float *restrict q, const float *restrict kt,
                                float *restrict s, long h0, long h1) {
  for (long h = h0; h < h1; h += 32) {  /* 32 keys at a time: 16 accumulators */
    __m512 r[LM_FR][2];
    for (int i = 0; i < LM_FR; i++) r[i][0] = r[i][1] = _mm512_setzero_ps();
    lm_fa_fma(kc, q, LM_FR, 1, kt + h, LM_FK, r);
    for (int i = 0; i < LM_FR; i++) {
      _mm512_store_ps(s + i * LM_FK + h, r[i][0]);
      _mm512_store_ps(s + i * LM_FK + h + 16, r[i][1]);
    }
  }
}

/* acc[i][:] = acc[i][:] * scale[i] + sum_j w[i][j] * v[j][:] for i < LM_FR, j0 <= j < j1,
 * over rows of `dp` columns (a multiple of LM_FV): w row-major with rows of LM_FK, v and acc
 * row-major with rows of dp. Every weight of the range is applied, zeros included (0 * inf
 * is NaN): a caller leaves out only zero weights of finite values. */
static inline void lm_fa_values(long dp, const float *restrict w, const float *restrict v,
                                const float *restrict scale, float *restrict acc, long j0,
                                long j1) {
  for (long d = 0; d < dp; d += LM_FV) {
    __m512 r[LM_FR][2];
    for (int i = 0; i < LM_FR; i++) {
      const __m512 c = _mm512_set1_ps(scale[i]);
      r[i][0] = _mm512_mul_ps(_mm512_load_ps(acc + i * dp + d), c);
      r[i][1] = _mm512_mul_ps(_mm512_load_ps(acc + i * dp + d + 16), c);
    }
    lm_fa_fma(j1 - j0, w + j0, 1, LM_FK, v + j0 * dp + d, dp, r);
    for (int i = 0; i < LM_FR; i++) {
      _mm512_store_ps(acc + i * dp + d, r[i][0]);
      _mm512_store_ps(acc + i * dp + d + 16, r[i][1]);
    }
  }
}

/* the largest of m and row x[0..LM_FK) (NaNs ignored: max_ps returns its second operand when
 * one is NaN, and the running maximum never is); *nan set when the row holds a NaN */
static inline float lm_fa_rowmax(const float *restrict x, float m, int *restrict nan) {
  __m512 r = _mm512_set1_ps(m);
  __mmask16 unordered = 0;
  for (int j = 0; j < LM_FK; j += 16) {
    const __m512 v = _mm512_load_ps(x + j);
    r = _mm512_max_ps(v, r);
    unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  *nan |= unordered != 0;
  return _mm512_reduce_max_ps(r);
}

/* w[j] = lm_exp2(x[j] - mx) for j < LM_FK, and their sum (pairwise): lm_exp2's clamp at -150
 * (NaN kept: max_ps returns its second operand when one is NaN) and its scaling of arguments
 * below -126 by 2^24 around one vector exp2f call per 16 lanes (written before lm_exp2 took
 * its scaling as selected bits, when a loop of lm_exp2 calls cost two calls per 16 lanes) */
static inline float lm_fa_exp2_row(const float *restrict x, float mx, float *restrict w) {
  __mmask16 low[LM_FK / 16];
  const __m512 m = _mm512_set1_ps(mx);
  for (int j = 0; j < LM_FK / 16; j++) {
    const __m512 t = _mm512_max_ps(_mm512_set1_ps(-150.0f),
                                   _mm512_sub_ps(_mm512_load_ps(x + 16 * j), m));
    low[j] = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-126.0f), _CMP_LT_OQ);
    _mm512_store_ps(w + 16 * j, _mm512_mask_add_ps(t, low[j], t, _mm512_set1_ps(24.0f)));
  }
  #pragma omp simd
  for (int j = 0; j < LM_FK; j++) w[j] = exp2f(w[j]);
  __m512 sum[LM_FK / 16];
  for (int j = 0; j < LM_FK / 16; j++) {
    const __m512 e = _mm512_load_ps(w + 16 * j);
    sum[j] = _mm512_mask_mul_ps(e, low[j], e, _mm512_set1_ps(0x1p-24f));
    _mm512_store_ps(w + 16 * j, sum[j]);
  }
  for (int n = LM_FK / 16; n > 1; n /= 2)
    for (int j = 0; j < n / 2; j++) sum[j] = _mm512_add_ps(sum[j], sum[j + n / 2]);
  return _mm512_reduce_add_ps(sum[0]);
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* Without AVX-512 (16 vector registers of 8 floats): the same broadcast x row products, a
 * panel of LM_FR rows in passes of 4 rows x 16 columns (8 accumulators) */
static inline __attribute__((always_inline)) void lm_fa_fma8(
    long n, const float *restrict a, long as, long ai, const float *restrict b, long bs,
    __m256 r[4][2]) {
  for (long k = 0; k < n; k++) {
    const __m256 b0 = _mm256_loadu_ps(b + k * bs), b1 = _mm256_loadu_ps(b + k * bs + 8);
    for (int i = 0; i < 4; i++) {
      const __m256 ak = _mm256_broadcast_ss(a + k * as + i * ai);
      r[i][0] = _mm256_fmadd_ps(ak, b0, r[i][0]);
      r[i][1] = _mm256_fmadd_ps(ak, b1, r[i][1]);
    }
  }
}

static inline void lm_fa_scores(long kc, const float *restrict q, const float *restrict kt,
                                float *restrict s, long h0, long h1) {
  for (int i0 = 0; i0 < LM_FR; i0 += 4)
    for (long h = h0; h < h1; h += 16) {
      __m256 r[4][2];
      for (int i = 0; i < 4; i++) r[i][0] = r[i][1] = _mm256_setzero_ps();
      lm_fa_fma8(kc, q + i0, LM_FR, 1, kt + h, LM_FK, r);
      for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(s + (i0 + i) * LM_FK + h, r[i][0]);
        _mm256_storeu_ps(s + (i0 + i) * LM_FK + h + 8, r[i][1]);
      }
    }
}

static inline void lm_fa_values(long dp, const float *restrict w, const float *restrict v,
                                const float *restrict scale, float *restrict acc, long j0,
                                long j1) {
  for (int i0 = 0; i0 < LM_FR; i0 += 4)
    for (long d = 0; d < dp; d += 16) {
      __m256 r[4][2];
      for (int i = 0; i < 4; i++) {
        const __m256 c = _mm256_set1_ps(scale[i0 + i]);
        float *row = acc + (i0 + i) * dp + d;
        r[i][0] = _mm256_mul_ps(_mm256_loadu_ps(row), c);
        r[i][1] = _mm256_mul_ps(_mm256_loadu_ps(row + 8), c);
      }
      lm_fa_fma8(j1 - j0, w + i0 * LM_FK + j0, 1, LM_FK, v + j0 * dp + d, dp, r);
      for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(acc + (i0 + i) * dp + d, r[i][0]);
        _mm256_storeu_ps(acc + (i0 + i) * dp + d + 8, r[i][1]);
      }
    }
}
#else
static inline void lm_fa_scores(long kc, const float *restrict q, const float *restrict kt,
                                float *restrict s, long h0, long h1) {
  float acc[LM_FR][LM_FK] = {{0}};
  for (long c = 0; c < kc; c++)
    for (int i = 0; i < LM_FR; i++)
      for (long j = h0; j < h1; j++) acc[i][j] = fmaf(q[c * LM_FR + i], kt[c * LM_FK + j], acc[i][j]);
  for (int i = 0; i < LM_FR; i++)
    for (long j = h0; j < h1; j++) s[i * LM_FK + j] = acc[i][j];
}

static inline void lm_fa_values(long dp, const float *restrict w, const float *restrict v,
                                const float *restrict scale, float *restrict acc, long j0,
                                long j1) {
  for (int i = 0; i < LM_FR; i++)
    for (long d = 0; d < dp; d++) {
      float r = acc[i * dp + d] * scale[i];
      for (long j = j0; j < j1; j++) r = fmaf(w[i * LM_FK + j], v[j * dp + d], r);
      acc[i * dp + d] = r;
    }
}
#endif

#if !defined(__AVX512F__)
static inline float lm_fa_rowmax(const float *restrict x, float m, int *restrict nan) {
  int unordered = 0;
  #pragma omp simd reduction(max:m) reduction(|:unordered)
  for (int j = 0; j < LM_FK; j++) {
    m = x[j] > m ? x[j] : m;
    unordered |= x[j] != x[j];
  }
  *nan |= unordered;
  return m;
}

/* lm_exp2's arithmetic in three loops, for the reason given in the AVX-512 version */
static inline float lm_fa_exp2_row(const float *restrict x, float mx, float *restrict w) {
  _Alignas(64) float arg[LM_FK], low[LM_FK];
  #pragma omp simd
  for (int j = 0; j < LM_FK; j++) {
    const float d = x[j] - mx;
    float t = d > -150.0f ? d : -150.0f;
    t = d != d ? d : t;
    low[j] = (float)(t < -126.0f);
    arg[j] = t + 24.0f * low[j];
  }
  #pragma omp simd
  for (int j = 0; j < LM_FK; j++) w[j] = exp2f(arg[j]);
  float sum = 0.0f;
  #pragma omp simd reduction(+:sum)
  for (int j = 0; j < LM_FK; j++) {
    w[j] *= 1.0f - low[j] * (1.0f - 0x1p-24f);
    sum += w[j];
  }
  return sum;
}
#endif

/* The online-softmax step of rows 0..nq of a block (the arithmetic of core's OnlineSoftmax
 * block step): row i's logits x[i][0..LM_FK) (-inf past the last key) become its weights
 * w[i][:] against the new running max m[i], c[i] the factor rescaling what the row summed
 * before, l[i] its new sum of weights; nan[i] set once a logit of the row is NaN. A max of
 * -inf weights nothing and rescales by 1. Returns whether any weight is not 0 (weights are 0,
 * positive or NaN, so a row's sum is 0 only when all of them are). */
static inline int lm_fa_softmax(long nq, const float *restrict x, float *restrict w,
                                float *restrict m, float *restrict l, float *restrict c,
                                int *restrict nan) {
  float mn[LM_FQ], sums[LM_FQ];
  for (long i = 0; i < nq; i++) {
    const float *restrict xi = x + i * LM_FK;
    float *restrict wi = w + i * LM_FK;
    const float mx = lm_fa_rowmax(xi, m[i], nan + i);
    mn[i] = mx;
    if (mx == -INFINITY) {
      memset(wi, 0, sizeof(float) * LM_FK);
      sums[i] = 0.0f;
      continue;
    }
    sums[i] = lm_fa_exp2_row(xi, mx, wi);
  }
  int any = 0;
  #pragma omp simd reduction(|:any)
  for (long i = 0; i < nq; i++) {
    c[i] = mn[i] == -INFINITY ? 1.0f : lm_exp2(m[i] - mn[i]);
    l[i] = l[i] * c[i] + sums[i];
    m[i] = mn[i];
    any |= sums[i] != 0.0f;
  }
  return any;
}
