/* luminal-cpu: quantized matmuls for the GGUF K-quants (Q4_K, Q5_K, Q6_K).
 *
 * lm_kq_gemm is lm_qgemm (runtime.h) for these formats; lm_qgemm hands them over. Layouts and
 * values are luminal.quant's (ggml-common.h): a block decodes to exactly the float32 values the
 * primitive decomposition computes (the same products and differences, each rounded once), so
 * only the summation order of the matmul differs.
 *
 * - few rows of A times W^T (decode): one pass over W; each block is decoded into a small
 *   buffer that stays in L1 and multiplied into per-row vector accumulators, which are summed
 *   horizontally once per output;
 * - anything else (prefill, x @ W): W is decoded once into a float32 scratch matrix shared by
 *   the team, then the float GEMM (lm_gemm) runs on it.
 *
 * Like every runtime function, these are called by all threads of the program's parallel region:
 * the decode path shares its rows through the team's loops (lm_for_begin / lm_for_next, no
 * barrier), the prefill path through orphaned `omp for` loops. Q5_0 lives in runtime.c with
 * the other 32-value formats. */
#include <stdlib.h>
#include <string.h>

#define LM_KQ_GEMV_MAX_M 4

static inline float lm_kq_half(const unsigned char *p) {
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

#define LM_KQ_BLOCK 256  /* values per K-quant block */

static inline long lm_kq_block_bytes(int q) { return q == LM_Q4_K ? 144 : q == LM_Q5_K ? 176 : 210; }

/* the 6-bit scale and min of sub-block j of Q4_K/Q5_K (ggml's get_scale_min_k4) */
static inline void lm_kq_scale_min(const unsigned char *s, int j, float *sc, float *mn) {
  if (j < 4) {
    *sc = (float)(s[j] & 63);
    *mn = (float)(s[j + 4] & 63);
  } else {
    *sc = (float)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *mn = (float)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/* Q4_K (qh == NULL) or Q5_K: sub-block j is d*sc_j * q - dmin*m_j */
static inline void lm_kq_decode_k(const unsigned char *restrict b, const unsigned char *qh,
                                  const unsigned char *restrict qs, float *restrict out) {
  const float d = lm_kq_half(b), dmin = lm_kq_half(b + 2);
  for (int j = 0; j < 8; j++) {
    float sc, mn;
    lm_kq_scale_min(b + 4, j, &sc, &mn);
    const float step = d * sc, offset = dmin * mn;
    const unsigned char *q = qs + 32 * (j / 2);
    const int shift = (j & 1) * 4;
    float *o = out + 32 * j;
    if (qh) {
      #pragma omp simd
      for (int l = 0; l < 32; l++)
        o[l] = step * (float)(((q[l] >> shift) & 15) + (((qh[l] >> j) & 1) << 4)) - offset;
    } else {
      #pragma omp simd
      for (int l = 0; l < 32; l++) o[l] = step * (float)((q[l] >> shift) & 15) - offset;
    }
  }
}

static inline void lm_kq_decode_q6_k(const unsigned char *restrict b, float *restrict out) {
  const float d = lm_kq_half(b + 208);
  const signed char *scales = (const signed char *)(b + 192);
  for (int half = 0; half < 2; half++) {
    const unsigned char *ql = b + 64 * half, *qh = b + 128 + 32 * half;
    for (int g = 0; g < 4; g++) {
      const unsigned char *lo = ql + 32 * (g & 1);
      const int shift = (g >> 1) * 4;
      float *o = out + 128 * half + 32 * g;
      const float s0 = d * (float)scales[8 * half + 2 * g];
      const float s1 = d * (float)scales[8 * half + 2 * g + 1];
      #pragma omp simd
      for (int l = 0; l < 32; l++) {
        const int v = (((lo[l] >> shift) & 15) | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
        o[l] = (l < 16 ? s0 : s1) * (float)v;
      }
    }
  }
}

/* the LM_KQ_BLOCK values of one block */
static inline __attribute__((always_inline)) void lm_kq_decode(const unsigned char *restrict b,
                                                               int q, float *restrict out) {
  switch (q) {
    case LM_Q4_K: lm_kq_decode_k(b, NULL, b + 16, out); break;
    case LM_Q5_K: lm_kq_decode_k(b, b + 16, b + 48, out); break;
    default: lm_kq_decode_q6_k(b, out); break;
  }
}

static inline float lm_kq_get(const void *p, int dt, long i) {
  if (dt == LM_F16) return (float)((const _Float16 *)p)[i];
  if (dt == LM_BF16) return lm_bf16_to_f32(((const unsigned short *)p)[i]);
  return ((const float *)p)[i];
}

static inline void lm_kq_put(void *p, int dt, long i, float v) {
  if (dt == LM_F16) ((_Float16 *)p)[i] = (_Float16)v;
  else if (dt == LM_BF16) ((unsigned short *)p)[i] = lm_f32_to_bf16(v);
  else ((float *)p)[i] = v;
}

/* C[b] (M <= 4 rows) = A[b] * W^T, W[n, k] quantized along k. Inlined per format. */
static inline __attribute__((always_inline)) void lm_kq_gemv_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  const long be = LM_KQ_BLOCK, bb = lm_kq_block_bytes(q), row_bytes = K / be * bb;
  float *x = (float *)malloc(sizeof(float) * LM_KQ_GEMV_MAX_M * K);
  long xb = -1;
  lm_for_begin(nb * N);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / N, n = t % N;
    if (b != xb) { /* this thread's copy of batch b's rows of A, as contiguous float32 */
      for (long m = 0; m < M; m++)
        for (long k = 0; k < K; k++)
          x[m * K + k] = lm_kq_get(A->p, A->dt, aoff[b] + m * A->rs + k * A->ks);
      xb = b;
    }
    const unsigned char *row = W->w + n * row_bytes;
    float acc[LM_KQ_GEMV_MAX_M][32] __attribute__((aligned(64))) = {{0}};
    float w[LM_KQ_BLOCK] __attribute__((aligned(64)));
    for (long k0 = 0; k0 < K; k0 += be) {
      lm_kq_decode(row + k0 / be * bb, q, w);
      for (long m = 0; m < M; m++) {
        const float *xm = x + m * K + k0;
        for (long c = 0; c < be; c += 32) {
          #pragma omp simd aligned(w : 64)
          for (int l = 0; l < 32; l++) acc[m][l] = fmaf(xm[c + l], w[c + l], acc[m][l]);
        }
      }
    }
    for (long m = 0; m < M; m++) {
      float s = 0.0f;
      for (int l = 0; l < 32; l++) s += acc[m][l];
      lm_kq_put(C->p, C->dt, C->off[b] + m * C->rs + n, s);
    }
  }
  free(x);
}

static void lm_kq_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                       const lm_qmat *W, const lm_out *C) {
  switch (W->q) {
    case LM_Q4_K: lm_kq_gemv_q(nb, aoff, M, N, K, A, W, C, LM_Q4_K); break;
    case LM_Q5_K: lm_kq_gemv_q(nb, aoff, M, N, K, A, W, C, LM_Q5_K); break;
    default: lm_kq_gemv_q(nb, aoff, M, N, K, A, W, C, LM_Q6_K); break;
  }
}

/* W decoded into a float32 matrix the whole team shares, then the float GEMM */
static void lm_kq_gemm_decoded(long nb, const long *aoff, long M, long N, long K,
                               const lm_mat *A, const lm_qmat *W, const lm_out *C) {
  const long be = LM_KQ_BLOCK, bb = lm_kq_block_bytes(W->q);
  const long row_bytes = W->cols / be * bb;
  float *dense = NULL;
  #pragma omp single copyprivate(dense)
  dense = (float *)malloc(sizeof(float) * W->rows * W->cols);
  #pragma omp for schedule(static)
  for (long r = 0; r < W->rows; r++)
    for (long c = 0; c < W->cols; c += be)
      lm_kq_decode(W->w + r * row_bytes + c / be * bb, W->q, dense + r * W->cols + c);
  long *zeros = (long *)calloc(nb, sizeof(long));
  /* B(n, k) = W[n, k] (k_contig) or W[k, n] */
  const lm_mat B = {dense, LM_F32, W->k_contig ? K : 1, W->k_contig ? 1 : N};
  lm_gemm(nb, aoff, zeros, M, N, K, *A, B, *C);
  free(zeros);
  #pragma omp barrier
  #pragma omp single
  free(dense);
}

void lm_kq_gemm(long nb, const long *aoff, long M, long N, long K, lm_mat A, lm_qmat W,
                lm_out C) {
  if (M <= LM_KQ_GEMV_MAX_M && W.k_contig) lm_kq_gemv(nb, aoff, M, N, K, &A, &W, &C);
  else lm_kq_gemm_decoded(nb, aoff, M, N, K, &A, &W, &C);
}
