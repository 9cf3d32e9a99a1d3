/* luminal-cpu: decode's quantized matvec with int8 activations (x @ W.T for up to 4 rows of x,
 * W a GGUF Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q5_K / Q6_K matrix quantized along k).
 *
 * The float kernels (runtime.c's lm_qdot_row, kquant.c's lm_kq_dot_block) widen every weight to
 * a float and spend about twelve vector operations per 32 weights: they are bound by that work,
 * not by memory (half the copy bandwidth for Q4). Here, as llama.cpp does, each row of x is
 * first rounded to int8 blocks (x ~ dx * qx, dx = max|x| / 127 per block of 32 values for the
 * 32-value formats and of 256 for the K-quants), so a block of weights meets x in integer dot
 * products (bytes times bytes summed in 32-bit lanes: AVX-512 VNNI or AVX-VNNI `vpdpbusd`,
 * else AVX2 `vpmaddubsw` + `vpmaddwd`) and its scales are applied once per block in float.
 *
 * Semantics: the result is the dot product of the dequantized weights with x rounded that way
 * (dx * qx, qx = rint(x * (127 / max|x|))), up to float32 rounding of the per-block scale
 * products: about 1e-3 relative to sum |w x| away from the exact product. A row of x that is
 * not finite (NaN, infinity), or a block whose largest magnitude is below LM_Q8X_TINY (where
 * 127 / max would overflow), has no such rounding: the whole call then returns 0 and the
 * caller runs the float kernels, so NaN and infinities propagate as in the float product.
 *
 * Each row of W is read front to back (the hardware prefetchers follow one stream; four rows
 * side by side, each a short stream, measured 3.6x slower for Q8_0 at 576 columns), its blocks
 * going to LM_Q8_CHAINS independent accumulators; horizontal sums once per output. */
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#include <math.h>
#define LM_Q8X_TINY 1e-30f
/* two 32-value blocks per 512-bit vector */
#if defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define LM_Q8_PAIRS 1
#else
#define LM_Q8_PAIRS 0
#endif
#define LM_Q8_CHAINS 4

/* one row of x as int8 blocks: q[K], d[K / block] (dx), bs[K / 16] (sums of q over 16 values),
 * and for 32-value blocks s[K / 32] = dx * (sum of q over the block) */
typedef struct {
  signed char *q;
  float *d, *s;
  short *bs;
  /* 32-value blocks with AVX-512 (lm_q8_pair32): per block 8 lanes, of which lane 0 holds -(sum
   * of q) (zero), s (s8), and all hold d (d8), so that two adjacent blocks load as one vector */
  int *zero;
  float *s8, *d8;
} lm_q8x;

/* rounds x[0..K) to int8 blocks of `block` values; 0 when x has no such rounding (above) */
static int lm_q8x_quantize(const float *restrict x, long K, long block, lm_q8x *out) {
  for (long j = 0; j < K / block; j++) {
    const float *xb = x + j * block;
    float amax = 0.0f, probe = 0.0f;
    for (long i = 0; i < block; i++) {
      const float a = fabsf(xb[i]);
      amax = a > amax ? a : amax;
      probe += xb[i] - xb[i]; /* NaN once any value is NaN or infinite */
    }
    if (!(probe == 0.0f) || (amax > 0.0f && amax < LM_Q8X_TINY)) return 0;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    out->d[j] = amax / 127.0f;
    signed char *q = out->q + j * block;
    for (long i = 0; i < block; i++) q[i] = (signed char)(int)nearbyintf(xb[i] * id);
  }
  for (long g = 0; g < K / 16; g++) {
    int s = 0;
    for (int i = 0; i < 16; i++) s += out->q[g * 16 + i];
    out->bs[g] = (short)s;
  }
  if (block == 32)
    for (long j = 0; j < K / 32; j++) {
      const int sum = out->bs[2 * j] + out->bs[2 * j + 1];
      out->s[j] = out->d[j] * (float)sum;
#if LM_Q8_PAIRS
      for (int l = 0; l < 8; l++) {
        out->zero[8 * j + l] = l ? 0 : -sum;
        out->s8[8 * j + l] = l ? 0.0f : out->s[j];
        out->d8[8 * j + l] = out->d[j];
      }
#endif
    }
  return 1;
}

/* acc + the sums of 4 adjacent products u_i * s_i (u unsigned, s signed bytes) in 32-bit lanes */
static inline __m256i lm_dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, u, s);
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else /* |u_i s_i + u_j s_j| <= 2 * 63 * 127 for every format here: no int16 saturation */
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* acc + the sums of adjacent int16 products a_i * b_i in 32-bit lanes */
static inline __m256i lm_dot_s16(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#elif defined(__AVXVNNI__)
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

static inline __m256 lm_half8(const unsigned char *p) {
  short h;
  memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(h));
}

static inline float lm_hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* byte i of the result is 16 where bit i of bits is set, else 0 */
static inline __m256i lm_bits16(unsigned int bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_set1_epi8((__mmask32)bits, 16);
#else
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
      _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
#endif
}

/* ----- the 32-value formats --------------------------------------------------------------- */
/* block j of one row of W times block j of each row of x, into acc[m] and offset[m] */
static inline __attribute__((always_inline)) void lm_q8_block32(
    const unsigned char *restrict blk, long j, const lm_q8x *x, int q, int M, __m256 *acc,
    float *offset) {
  __m256i u;
  if (q == LM_Q8_0) {
    u = _mm256_loadu_si256((const __m256i *)(blk + 2));
  } else { /* values 0..15 from the low nibbles, 16..31 from the high ones */
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + lm_nibbles_at(q))));
    u = _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
    if (q == LM_Q5_0) {
      unsigned int qh;
      memcpy(&qh, blk + 2, 4);
      u = _mm256_or_si256(u, lm_bits16(qh));
    }
  }
  const __m256 dw = lm_half8(blk);
  const float mw = q == LM_Q4_1 ? lm_half_at(blk + 2) : 0.0f;
  for (int m = 0; m < M; m++) {
    __m256i s = _mm256_loadu_si256((const __m256i *)(x[m].q + 32 * j)), sum;
    if (q == LM_Q8_0) { /* signed weights: |w| times x with w's sign */
      sum = lm_dot_u8s8(_mm256_setzero_si256(), _mm256_abs_epi8(u), _mm256_sign_epi8(s, u));
    } else { /* (q - 8) or (q - 16): the offset times the block's sum of x, in integers */
      const int zero = q == LM_Q4_0 ? 8 : q == LM_Q5_0 ? 16 : 0;
      const int xs = x[m].bs[2 * j] + x[m].bs[2 * j + 1];
      sum = lm_dot_u8s8(_mm256_castsi128_si256(_mm_cvtsi32_si128(-zero * xs)), u, s);
      if (q == LM_Q4_1) offset[m] = fmaf(mw, x[m].s[j], offset[m]);
    }
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_broadcast_ss(x[m].d + j)),
                             acc[m]);
  }
}

#if LM_Q8_PAIRS
/* blocks j and j + 1 (Q4_0, Q4_1, Q5_0) of one row of W times those of each row of x: the work
 * of lm_q8_block32 on 512-bit vectors, half the operations per block */
static inline __attribute__((always_inline)) void lm_q8_pair32(
    const unsigned char *restrict blk, long j, const lm_q8x *x, int q, int M, __m512 *acc) {
  const long bb = lm_block_bytes(q), at = lm_nibbles_at(q);
  /* values 0..15 of each block from its low nibbles, 16..31 from its high ones */
  const __m512i b = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + at)))),
      _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk + bb + at))), 1);
  __m512i u = _mm512_and_si512(_mm512_srlv_epi64(b, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                               _mm512_set1_epi8(15));
  if (q == LM_Q5_0) {
    unsigned int h0, h1;
    memcpy(&h0, blk + 2, 4), memcpy(&h1, blk + bb + 2, 4);
    u = _mm512_mask_add_epi8(u, (__mmask64)h0 | (__mmask64)h1 << 32, u, _mm512_set1_epi8(16));
  }
  /* the two blocks' f16 scales (and Q4_1's offsets), each over its block's 8 lanes */
  const __m256i head = _mm256_loadu_si256((const __m256i *)blk);
  const __m512 dw = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
      _mm256_setr_m128i(_mm_set1_epi16(0), _mm_set1_epi16((short)(bb / 2))), head));
  __m512 mw = _mm512_setzero_ps();
  if (q == LM_Q4_1)
    mw = _mm512_cvtph_ps(_mm256_permutexvar_epi16(
        _mm256_setr_m128i(_mm_set1_epi16(1), _mm_set1_epi16((short)(bb / 2 + 1))), head));
  for (int m = 0; m < M; m++) {
    const __m512i s = _mm512_loadu_si512(x[m].q + 32 * j);
    __m512i start = _mm512_setzero_si512();
    if (q != LM_Q4_1) /* (q - 8) or (q - 16): the offset times the block's sum of x */
      start = _mm512_slli_epi32(_mm512_loadu_si512(x[m].zero + 8 * j), q == LM_Q4_0 ? 3 : 4);
    const __m512i sum = _mm512_dpbusd_epi32(start, u, s);
    acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, _mm512_loadu_ps(x[m].d8 + 8 * j)),
                             acc[m]);
    if (q == LM_Q4_1) acc[m] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(x[m].s8 + 8 * j), acc[m]);
  }
}
#endif

/* ----- the K-quants (256-value blocks, one dx per block) ---------------------------------- */
/* int16 lane j of each 128-bit half of v (holding 8 int16), broadcast over that half */
static inline __m256i lm_lane16(__m256i v, int j) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)((2 * j + 1) << 8 | 2 * j)));
}

static inline __attribute__((always_inline)) void lm_q8_block256(
    const unsigned char *restrict blk, long j, const lm_q8x *x, int q, int M, __m256 *acc) {
  __m256i sum[LM_GEMV_MAX_M];
  for (int m = 0; m < M; m++) sum[m] = _mm256_setzero_si256();
  const __m256i low4 = _mm256_set1_epi8(15);
  const signed char *xq[LM_GEMV_MAX_M];
  for (int m = 0; m < M; m++) xq[m] = x[m].q + 256 * j;
  if (q == LM_Q6_K) {
    const __m256i bits45 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
      const unsigned char *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
      const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
      const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
      const __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
      /* value l of group g: nibble of l0 / l1 (g even / odd; low nibble for g < 2), bits
       * 2g, 2g+1 of hb[l] on top; all in 0..63 (the - 32 is applied below with x's sums) */
      const __m256i v[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), bits45)),
          _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hb, bits45)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), bits45))};
      /* scales 8h .. 8h+7 as int16 in both halves; group g's first 16 values take 2g, the
       * next 16 take 2g + 1 */
      const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 192 + 8 * h))));
      for (int g = 0; g < 4; g++) {
        const __m256i s = _mm256_shuffle_epi8(sc, _mm256_setr_m128i(
            _mm_set1_epi16((short)((4 * g + 1) << 8 | 4 * g)), _mm_set1_epi16((short)((4 * g + 3) << 8 | (4 * g + 2)))));
        for (int m = 0; m < M; m++)
          sum[m] = lm_dot_s16(sum[m], _mm256_maddubs_epi16(v[g], _mm256_loadu_si256((const __m256i *)(xq[m] + 128 * h + 32 * g))), s);
      }
    }
    const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
    const __m256 d = lm_half8(blk + 208);
    for (int m = 0; m < M; m++) {
      const __m256i zero = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x[m].bs + 16 * j)), scales);
      sum[m] = _mm256_sub_epi32(sum[m], _mm256_slli_epi32(zero, 5));
      acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[m]), _mm256_mul_ps(d, _mm256_broadcast_ss(x[m].d + j)), acc[m]);
    }
    return;
  }
  /* Q4_K / Q5_K: 6-bit scale and min of each 32-value sub-block (lm_kq_scale_min), as bytes */
  unsigned int a, b, c;
  memcpy(&a, blk + 4, 4), memcpy(&b, blk + 8, 4), memcpy(&c, blk + 12, 4);
  const unsigned long long scb = (a & 0x3f3f3f3fu) |
      (unsigned long long)((c & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4) << 32;
  const unsigned long long mnb = (b & 0x3f3f3f3fu) |
      (unsigned long long)(((c >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4) << 32;
  const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)scb)));
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi64_si128((long long)mnb),
      _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
  const unsigned char *qs = blk + (q == LM_Q5_K ? 48 : 16);
  __m256i hb = _mm256_setzero_si256();
  if (q == LM_Q5_K) hb = _mm256_loadu_si256((const __m256i *)(blk + 16));
  for (int p = 0; p < 4; p++) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
    __m256i v[2] = {_mm256_and_si256(w, low4), _mm256_and_si256(_mm256_srli_epi16(w, 4), low4)};
    if (q == LM_Q5_K) { /* the fifth bit of value l of sub-block i is bit i of hb[l] */
      const __m256i bit4 = _mm256_set1_epi8(16);
      for (int e = 0; e < 2; e++) {
        const int i = 2 * p + e;
        const __m256i t = i <= 4 ? _mm256_slli_epi16(hb, 4 - i) : _mm256_srli_epi16(hb, i - 4);
        v[e] = _mm256_or_si256(v[e], _mm256_and_si256(t, bit4));
      }
    }
    for (int e = 0; e < 2; e++) {
      const __m256i s = lm_lane16(sc, 2 * p + e);
      for (int m = 0; m < M; m++)
        sum[m] = lm_dot_s16(sum[m], _mm256_maddubs_epi16(v[e], _mm256_loadu_si256((const __m256i *)(xq[m] + 64 * p + 32 * e))), s);
    }
  }
  const __m256 d = lm_half8(blk), dmin = lm_half8(blk + 2);
  for (int m = 0; m < M; m++) {
    const __m256 dx = _mm256_broadcast_ss(x[m].d + j);
    const __m256i msum = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(x[m].bs + 16 * j)), mins);
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[m]), _mm256_mul_ps(d, dx), acc[m]);
    acc[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, dx), acc[m]);
  }
}

/* out[m] = one row of W . x[m]; LM_Q8_CHAINS blocks go to separate accumulators */
static inline __attribute__((always_inline)) void lm_q8_row(
    const unsigned char *restrict w, long K, const lm_q8x *x, int q, int M, float *out) {
  __m256 acc[LM_Q8_CHAINS][LM_GEMV_MAX_M];
  float offset[LM_Q8_CHAINS][LM_GEMV_MAX_M];
  for (int u = 0; u < LM_Q8_CHAINS; u++)
    for (int m = 0; m < M; m++) acc[u][m] = _mm256_setzero_ps(), offset[u][m] = 0.0f;
  const long block = q >= LM_Q4_K ? 256 : 32, blocks = K / block;
  const long bb = q >= LM_Q4_K ? lm_kq_block_bytes(q) : lm_block_bytes(q);
  long j = 0;
#if LM_Q8_PAIRS
  __m512 wide[LM_Q8_CHAINS][LM_GEMV_MAX_M];
  const int pairs = q == LM_Q4_0 || q == LM_Q4_1 || q == LM_Q5_0;
  if (pairs) {
    for (int u = 0; u < LM_Q8_CHAINS; u++)
      for (int m = 0; m < M; m++) wide[u][m] = _mm512_setzero_ps();
    for (; j + 2 * LM_Q8_CHAINS <= blocks; j += 2 * LM_Q8_CHAINS)
      for (int u = 0; u < LM_Q8_CHAINS; u++) lm_q8_pair32(w + (j + 2 * u) * bb, j + 2 * u, x, q, M, wide[u]);
    for (; j + 2 <= blocks; j += 2) lm_q8_pair32(w + j * bb, j, x, q, M, wide[0]);
  }
#endif
  for (; j + LM_Q8_CHAINS <= blocks; j += LM_Q8_CHAINS)
    for (int u = 0; u < LM_Q8_CHAINS; u++) {
      if (q >= LM_Q4_K) lm_q8_block256(w + (j + u) * bb, j + u, x, q, M, acc[u]);
      else lm_q8_block32(w + (j + u) * bb, j + u, x, q, M, acc[u], offset[u]);
    }
  for (; j < blocks; j++) {
    if (q >= LM_Q4_K) lm_q8_block256(w + j * bb, j, x, q, M, acc[0]);
    else lm_q8_block32(w + j * bb, j, x, q, M, acc[0], offset[0]);
  }
  for (int m = 0; m < M; m++) {
    __m256 total = acc[0][m];
    float off = offset[0][m];
    for (int u = 1; u < LM_Q8_CHAINS; u++) total = _mm256_add_ps(total, acc[u][m]), off += offset[u][m];
#if LM_Q8_PAIRS
    if (pairs) {
      __m512 t = wide[0][m];
      for (int u = 1; u < LM_Q8_CHAINS; u++) t = _mm512_add_ps(t, wide[u][m]);
      total = _mm256_add_ps(total, _mm256_add_ps(_mm512_castps512_ps256(t), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1))));
    }
#endif
    out[m] = lm_hsum8(total) + off;
  }
}

LM_INT_GEMV_DRIVER(lm_q8_gemv, lm_q8_row, lm_q8x, 1)

/* C[b] = A[b] * W^T through int8 activations; 0 (nothing written) when some row of A has no
 * int8 rounding (not finite, or too small: see above) and the float kernels must run. Every
 * thread quantizes every batch itself, so all reach the same answer without talking. */
int lm_q8_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
               const lm_qmat *W, const lm_out *C) {
  const long block = W->q >= LM_Q4_K ? 256 : 32, rows = nb * M;
  float *buf = lm_scratch(A, M, K);
  const long lanes = block == 32 && LM_Q8_PAIRS ? K / 32 * 8 : 0; /* of zero, s8 and d8 */
  char *mem = (char *)malloc((size_t)rows * (K + sizeof(float) * (K / block + K / 32 + 3 * lanes) + sizeof(short) * (K / 16)) + 1);
  lm_q8x *xs = (lm_q8x *)malloc(sizeof(lm_q8x) * rows);
  int ok = 1;
  char *at = mem;
  for (long b = 0; b < nb && ok; b++) {
    const float *x[LM_GEMV_MAX_M];
    lm_rows_f32(A, aoff[b], M, K, buf, x);
    for (long m = 0; m < M && ok; m++) {
      lm_q8x *r = xs + b * M + m;
      r->d = (float *)at, at += sizeof(float) * (K / block);
      r->s = (float *)at, at += sizeof(float) * (K / 32);
      r->bs = (short *)at, at += sizeof(short) * (K / 16);
      r->zero = (int *)at, at += sizeof(int) * lanes;
      r->s8 = (float *)at, at += sizeof(float) * lanes;
      r->d8 = (float *)at, at += sizeof(float) * lanes;
      r->q = (signed char *)at, at += K;
      ok = lm_q8x_quantize(x[m], K, block, r);
    }
  }
  /* one team loop, as the float fallback: see lm_q16_gemv on why that matters */
  if (ok) lm_q8_gemv_formats(nb, M, N, K, xs, W, C);
  free(buf);
  free(mem);
  free(xs);
  return ok;
}
#else
/* no AVX2: the float kernels do all the work */
int lm_q8_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
               const lm_qmat *W, const lm_out *C) {
  (void)nb, (void)aoff, (void)M, (void)N, (void)K, (void)A, (void)W, (void)C;
  return 0;
}
#endif
