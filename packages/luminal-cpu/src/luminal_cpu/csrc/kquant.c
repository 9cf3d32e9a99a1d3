/* luminal-cpu: quantized matmuls for the GGUF K-quants (Q4_K, Q5_K, Q6_K).
 *
 * lm_kq_gemm is lm_qgemm (runtime.h) for these formats; lm_qgemm hands them over. Layouts and
 * values are luminal.quant's (ggml-common.h): a block decodes to exactly the float32 values the
 * primitive decomposition computes (the same products and differences, each rounded once), so
 * only the summation order of the matmul differs.
 *
 * - few rows of A times W^T (decode): one pass over W; with AVX-512 each sub-block is widened
 *   and converted in registers and its scale applied once to its dot product, otherwise each
 *   block is decoded into a buffer that stays in L1; per-row vector accumulators are summed
 *   horizontally once per output;
 * - more rows times W^T (prefill): runtime.c's tiled GEMM, which decodes the blocks it needs
 *   into its packed panels (lm_pack_bq calls lm_kq_decode_block): W is never decoded whole;
 * - x @ W (blocks across the output columns): W is decoded once into a float32 scratch matrix
 *   shared by the team, then the float GEMM (lm_gemm) runs on it.
 *
 * Like every runtime function, these are called by all threads of the program's parallel region
 * and share work through the team's loops (lm_for_begin / lm_for_next, no barrier); the x @ W
 * path uses orphaned `omp for` loops. Q5_0 lives in runtime.c with the other 32-value formats.
 * A W in the packed layout (lm_qmat.packed: Q4_K / Q5_K / Q6_K) reaches the first two only (they are
 * the fallbacks of qgemv16.c and qgemm8.c, which read it): its rows are unpacked to GGUF's
 * bytes (lm_gguf_row, lm_decode_row). */
#include <stdlib.h>
#include <string.h>

#define LM_KQ_GEMV_MAX_M 4

#if defined(__AVX512F__)
/* Decode's matvec, AVX-512: as runtime.c's lm_qdot_block, a block is never written out as
 * floats; each 32-value sub-block (16 for Q6_K's scales) is widened and converted in
 * registers, multiplied by x, and its scale applied once to the sum: for Q4_K/Q5_K,
 * sum_l x_l (step q_l - offset) = step * sum_l x_l q_l - offset * sum_l x_l, with the block
 * sums of x computed once per call; Q6_K's (q - 32) is formed in integers (exact). */

/* the 16 bytes at p, each widened to a 32-bit lane */
static inline __m512i lm_kq_bytes(const unsigned char *p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* acc[m] += scale * (x[m][k .. k+16) . v) */
static inline __attribute__((always_inline)) void lm_kq_fma16(
    const float *const *x, long k, __m512i v, float scale, int M, __m512 *acc) {
  const __m512 vf = _mm512_cvtepi32_ps(v), sv = _mm512_set1_ps(scale);
  for (int m = 0; m < M; m++)
    acc[m] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(x[m] + k), vf), sv, acc[m]);
}

/* block `blk` (values k0 .. k0+256 of a row of W) times x[m], into acc[2][m] (two chains:
 * even and odd sub-blocks) and offset[m] */
static inline __attribute__((always_inline)) void lm_kq_dot_block(
    const unsigned char *restrict blk, int q, long k0, const float *const *x,
    const float *const *xsum, int M, __m512 acc[2][LM_KQ_GEMV_MAX_M], float *offset) {
  const __m512i fifteen = _mm512_set1_epi32(15);
  if (q == LM_Q6_K) {
    const float d = lm_kq_half(blk + 208);
    const signed char *scales = (const signed char *)(blk + 192);
    const __m512i three = _mm512_set1_epi32(3), thirty_two = _mm512_set1_epi32(32);
    for (int half = 0; half < 2; half++) {
      const unsigned char *ql = blk + 64 * half, *qh = blk + 128 + 32 * half;
      const __m512i h0 = lm_kq_bytes(qh), h1 = lm_kq_bytes(qh + 16);
      for (int g = 0; g < 4; g++) {
        const unsigned char *lo = ql + 32 * (g & 1);
        const unsigned shift = (g >> 1) * 4, hshift = 2 * g;
        const long k = k0 + 128 * half + 32 * g;
        const __m512i a = _mm512_sub_epi32(_mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(lm_kq_bytes(lo), shift), fifteen),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h0, hshift), three), 4)), thirty_two);
        const __m512i b = _mm512_sub_epi32(_mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi32(lm_kq_bytes(lo + 16), shift), fifteen),
            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h1, hshift), three), 4)), thirty_two);
        lm_kq_fma16(x, k, a, d * (float)scales[8 * half + 2 * g], M, acc[g & 1]);
        lm_kq_fma16(x, k + 16, b, d * (float)scales[8 * half + 2 * g + 1], M, acc[g & 1]);
      }
    }
    return;
  }
  const float d = lm_kq_half(blk), dmin = lm_kq_half(blk + 2);
  const unsigned char *qh = blk + 16, *qs = blk + (q == LM_Q5_K ? 48 : 16);
  __m512i h0 = _mm512_setzero_si512(), h1 = _mm512_setzero_si512();
  if (q == LM_Q5_K) h0 = lm_kq_bytes(qh), h1 = lm_kq_bytes(qh + 16);
  for (int j = 0; j < 8; j++) {
    float sc, mn;
    lm_kq_scale_min(blk + 4, j, &sc, &mn);
    const unsigned shift = (j & 1) * 4;
    __m512i a = _mm512_and_si512(_mm512_srli_epi32(lm_kq_bytes(qs + 32 * (j / 2)), shift), fifteen);
    __m512i b = _mm512_and_si512(_mm512_srli_epi32(lm_kq_bytes(qs + 32 * (j / 2) + 16), shift), fifteen);
    if (q == LM_Q5_K) { /* the fifth bit of value l is bit j of qh[l] */
      const __m512i bit = _mm512_set1_epi32(1 << j), sixteen = _mm512_set1_epi32(16);
      a = _mm512_mask_or_epi32(a, _mm512_test_epi32_mask(h0, bit), a, sixteen);
      b = _mm512_mask_or_epi32(b, _mm512_test_epi32_mask(h1, bit), b, sixteen);
    }
    const float step = d * sc, off = dmin * mn;
    const long k = k0 + 32 * j;
    const __m512 af = _mm512_cvtepi32_ps(a), bf = _mm512_cvtepi32_ps(b), sv = _mm512_set1_ps(step);
    for (int m = 0; m < M; m++) {
      const __m512 dot = _mm512_fmadd_ps(_mm512_loadu_ps(x[m] + k + 16), bf,
                                         _mm512_mul_ps(_mm512_loadu_ps(x[m] + k), af));
      acc[j & 1][m] = _mm512_fmadd_ps(dot, sv, acc[j & 1][m]);
      offset[m] = fmaf(-off, xsum[m][k / 32], offset[m]);
    }
  }
}

/* C[b] (MM <= 4 rows, a compile-time constant) = A[b] * W^T, W[n, k] quantized along k */
static inline __attribute__((always_inline)) void lm_kq_gemv_qm(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q, int MM) {
  const long bb = lm_kq_block_bytes(q), row_bytes = K / LM_KQ_BLOCK * bb;
  float *buf = lm_scratch(A, M, K), *sums = (float *)malloc(sizeof(float) * (M * (K / 32) + 1));
  unsigned char *tmp = W->packed ? (unsigned char *)malloc(row_bytes) : NULL;
  const float *x[LM_KQ_GEMV_MAX_M], *xsum[LM_KQ_GEMV_MAX_M];
  for (long m = 0; m < M; m++) xsum[m] = sums + m * (K / 32);
  long xb = -1;
  lm_for_begin(nb * N);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / N, n = t % N;
    if (b != xb) {
      lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
      for (long m = 0; m < M; m++) lm_block_sums(x[m], K, sums + m * (K / 32));
    }
    const unsigned char *row = lm_gguf_row(W, n, row_bytes, tmp);
    __m512 acc[2][LM_KQ_GEMV_MAX_M];
    float offset[LM_KQ_GEMV_MAX_M];
    for (int m = 0; m < MM; m++)
      acc[0][m] = acc[1][m] = _mm512_setzero_ps(), offset[m] = 0.0f;
    for (long k0 = 0; k0 < K; k0 += LM_KQ_BLOCK)
      lm_kq_dot_block(row + k0 / LM_KQ_BLOCK * bb, q, k0, x, xsum, MM, acc, offset);
    for (int m = 0; m < MM; m++)
      lm_put(C->p, C->dt, C->off[b] + m * C->rs + n,
                _mm512_reduce_add_ps(_mm512_add_ps(acc[0][m], acc[1][m])) + offset[m]);
  }
  free(buf);
  free(sums);
  free(tmp);
}

static inline __attribute__((always_inline)) void lm_kq_gemv_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  switch (M) {
    case 1: lm_kq_gemv_qm(nb, aoff, M, N, K, A, W, C, q, 1); break;
    case 2: lm_kq_gemv_qm(nb, aoff, M, N, K, A, W, C, q, 2); break;
    case 3: lm_kq_gemv_qm(nb, aoff, M, N, K, A, W, C, q, 3); break;
    default: lm_kq_gemv_qm(nb, aoff, M, N, K, A, W, C, q, 4); break;
  }
}
#else
/* portable: each block decoded into an L1 buffer, then multiplied into per-row accumulators */
static inline __attribute__((always_inline)) void lm_kq_gemv_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  const long be = LM_KQ_BLOCK, bb = lm_kq_block_bytes(q), row_bytes = K / be * bb;
  float *x = (float *)malloc(sizeof(float) * LM_KQ_GEMV_MAX_M * K);
  unsigned char *tmp = W->packed ? (unsigned char *)malloc(row_bytes) : NULL;
  long xb = -1;
  lm_for_begin(nb * N);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / N, n = t % N;
    if (b != xb) { /* this thread's copy of batch b's rows of A, as contiguous float32 */
      for (long m = 0; m < M; m++)
        for (long k = 0; k < K; k++)
          x[m * K + k] = lm_get(A->p, A->dt, aoff[b] + m * A->rs + k * A->ks);
      xb = b;
    }
    const unsigned char *row = lm_gguf_row(W, n, row_bytes, tmp);
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
      lm_put(C->p, C->dt, C->off[b] + m * C->rs + n, s);
    }
  }
  free(x);
  free(tmp);
}
#endif

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
  else if (W.k_contig) lm_gemm_tiled(nb, aoff, aoff, M, N, K, &A, NULL, &W, NULL, &C);
  else lm_kq_gemm_decoded(nb, aoff, M, N, K, &A, &W, &C);
}
