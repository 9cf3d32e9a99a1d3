/* luminal-cpu runtime, internal: what the runtime's translation units share. runtime.c (with
 * kquant.c), qgemv.c, qgemv16.c and qgemm8.c are compiled separately, at the same time, and
 * linked into one library (source.py's runtime_units): one unit took a minute to compile.
 * Helpers stay `static inline` here, so every unit inlines them as the single unit did; a
 * function one unit defines and another calls is LM_INTERNAL: linked across units, not
 * exported from the library. */
#include <stdlib.h>
#include <string.h>

#define LM_INTERNAL __attribute__((visibility("hidden")))

#define LM_KC 256          /* values of k per packed panel (runtime.c's tiled GEMM) */
#define LM_GEMV_MAX_M 4    /* the most rows of x the matvec kernels take; more run as GEMMs */

/* the team's slot for a pointer one thread makes and the others read once its loop is done */
LM_INTERNAL void **lm_team_shared(void);

static inline float lm_get(const void *p, int dt, long i) {
  if (dt == LM_F16) return (float)((const _Float16 *)p)[i];
  if (dt == LM_BF16) return lm_bf16_to_f32(((const unsigned short *)p)[i]);
  return ((const float *)p)[i];
}

static inline void lm_put(void *p, int dt, long i, float v) {
  if (dt == LM_F16) ((_Float16 *)p)[i] = (_Float16)v;
  else if (dt == LM_BF16) ((unsigned short *)p)[i] = lm_f32_to_bf16(v);
  else ((float *)p)[i] = v;
}

/* x[0..n) as float32: a pointer into p when it already is, else converted into tmp */
static inline const float *lm_row_f32(const void *p, int dt, long off, long stride, long n,
                                      float *restrict tmp) {
  if (dt == LM_F32 && stride == 1) return (const float *)p + off;
  for (long i = 0; i < n; i++) tmp[i] = lm_get(p, dt, off + i * stride);
  return tmp;
}

/* ----- GGUF blocks ------------------------------------------------------------------------ */
static inline float lm_half_at(const unsigned char *p) {
  _Float16 h;
  memcpy(&h, p, 2);
  return (float)h;
}

static inline long lm_block_bytes(int q) {
  return q == LM_Q8_0 ? 34 : q == LM_Q4_0 ? 18 : q == LM_Q4_1 ? 20 : 22;
}

/* where a 4-bit format's 16 bytes of nibbles start: after d (Q4_0), d and m (Q4_1), d and the
 * 32 fifth bits (Q5_0); Q8_0's 32 quant bytes after d */
static inline long lm_nibbles_at(int q) { return q == LM_Q4_0 || q == LM_Q8_0 ? 2 : q == LM_Q4_1 ? 4 : 6; }

/* The 32 values of one block, exactly as dequantize() defines them (q * d, or q * d + m: a
 * product then a sum, each rounded, as the float32 decomposition computes them). */
#if defined(__AVX512F__)
#include <immintrin.h>
/* the unsigned quants of a 4-bit (Q4_0, Q4_1) or 5-bit (Q5_0) block as floats: values 0..15
 * in lo, 16..31 in hi; Q5_0's fifth bits (bit i of qh for value i) are set through masks */
static inline __attribute__((always_inline)) void lm_nibbles(const unsigned char *restrict b,
                                                             int q, __m512 *lo, __m512 *hi) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + lm_nibbles_at(q))));
  __m512i nlo = _mm512_and_si512(bytes, _mm512_set1_epi32(15)), nhi = _mm512_srli_epi32(bytes, 4);
  if (q == LM_Q5_0) {
    unsigned int qh;
    memcpy(&qh, b + 2, 4);
    const __m512i sixteen = _mm512_set1_epi32(16);
    nlo = _mm512_mask_or_epi32(nlo, (__mmask16)qh, nlo, sixteen);
    nhi = _mm512_mask_or_epi32(nhi, (__mmask16)(qh >> 16), nhi, sixteen);
  }
  *lo = _mm512_cvtepi32_ps(nlo);
  *hi = _mm512_cvtepi32_ps(nhi);
}

#if defined(__AVX512BW__)
/* the fifth bits of quant vector v of a packed Q5_0 block (lm_qmat.packed; qh: its 16 rows'
 * u32 qh, row i in lane i) for the low (h = 0) or high (h = 1) nibbles: bit 16h + 4v + j of
 * lane i as the mask bit of byte 4i + j */
static inline __mmask64 lm_q5r_fifth(__m512i qh, int v, int h) {
#if defined(__AVX512BITALG__)
  /* `vpshufbitqmb`: byte p of each qword picks bit idx[p] of that qword (two lanes) */
  unsigned long long idx = 0;
  for (int p = 0; p < 8; p++) idx |= (unsigned long long)(32 * (p / 4) + 16 * h + 4 * v + p % 4) << 8 * p;
  return _mm512_bitshuffle_epi64_mask(qh, _mm512_set1_epi64((long long)idx));
#else
  /* byte 2h + v / 2 of each lane into its four bytes, then bit 4 (v % 2) + j of byte j */
  unsigned char sel[64];
  for (int p = 0; p < 64; p++) sel[p] = (unsigned char)(p % 16 / 4 * 4 + 2 * h + v / 2);
  const unsigned int bits = 0x08040201u << 4 * (v % 2);
  return _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, _mm512_loadu_si512(sel)), _mm512_set1_epi32((int)bits));
#endif
}

/* the 6-bit scales and mins of a packed Q4_K / Q5_K block (blk: its 16 rows' block, three scale
 * vectors at 64) for every row at once (lm_kq_scale_min lane-wise): byte j of sc[0] / mn[0]
 * is sub-block j's scale / min (j < 4), byte j of sc[1] / mn[1] sub-block j + 4's, whose top
 * two bits are bits 6, 7 of byte j of the first / second vector (0xF8: a | (b & c)) */
static inline void lm_q4kr_scales(const unsigned char *blk, __m512i sc[2], __m512i mn[2]) {
  const __m512i s0 = _mm512_loadu_si512(blk + 64), s1 = _mm512_loadu_si512(blk + 128);
  const __m512i s2 = _mm512_loadu_si512(blk + 192), m6 = _mm512_set1_epi8(63);
  const __m512i low4 = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(0x30);
  sc[0] = _mm512_and_si512(s0, m6);
  mn[0] = _mm512_and_si512(s1, m6);
  sc[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(s2, low4), _mm512_srli_epi32(s0, 2), top2, 0xF8);
  mn[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(s2, 4), low4), _mm512_srli_epi32(s1, 2), top2, 0xF8);
}

/* the low (bit = 2p) or high (2p + 1) nibbles of quant vector 8p + t of a packed Q5_K block,
 * with their fifth bits: bit `bit` of the same bytes of qh vector t (its rows' qh bytes
 * 4t .. 4t + 3), moved to bit 4 by one shift of the lane (no other byte's bit lands there)
 * and joined (0xF8: a | (b & c)) */
static inline __m512i lm_q5kr_fifth(__m512i nibbles, __m512i qh, int bit) {
  const __m512i top = bit <= 4 ? _mm512_slli_epi32(qh, 4 - bit) : _mm512_srli_epi32(qh, bit - 4);
  return _mm512_ternarylogic_epi32(nibbles, top, _mm512_set1_epi8(16), 0xF8);
}

/* byte j of each int32 lane of v (a packed layout's per-row bytes), as 16 floats */
static inline __m512 lm_lane_byte(__m512i v, int j) {
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * j), _mm512_set1_epi32(0xFF)));
}

/* a packed Q6_K block's quants: ql vector a (bytes 4a .. 4a + 3 of each row's 128; half h =
 * a / 16, a % 16 = 8 G + 4 q + r) holds values 128 h + 32 g + 16 q + 4 r .. + 3, g = G in the
 * low nibbles (n = 0) and G + 2 in the high ones (n = 1), whose top two bits are bits 2g,
 * 2g + 1 of the same bytes of qh vector 8 h + 4 q + r. The six bits of nibble half n, in bits
 * 0..5 of each byte (bits 6, 7 are left over: the caller drops them); one select (0xD8:
 * c ? b : a) of the nibbles and qh's bits moved to bits 4, 5 */
static inline __m512i lm_q6kr_six(__m512i ql, __m512i qh, int G, int n) {
  const __m512i top2 = _mm512_set1_epi8(0x30);
  if (n == 0) return _mm512_ternarylogic_epi32(ql, _mm512_slli_epi32(qh, 4 - 2 * G), top2, 0xD8);
  return _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), G ? _mm512_srli_epi32(qh, 2) : qh, top2, 0xD8);
}
#endif

static inline void lm_dequant_vec(const unsigned char *restrict b, int q, __m512 *lo, __m512 *hi) {
  const __m512 d = _mm512_set1_ps(lm_half_at(b));
  if (q == LM_Q8_0) {
    const __m128i *qs = (const __m128i *)(b + 2);
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs))), d);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qs + 1))), d);
    return;
  }
  __m512 nlo, nhi;
  lm_nibbles(b, q, &nlo, &nhi);
  if (q != LM_Q4_1) { /* (q - 8) * d, or (q - 16) * d for Q5_0 */
    const __m512 zero = _mm512_set1_ps(q == LM_Q4_0 ? 8.0f : 16.0f);
    *lo = _mm512_mul_ps(_mm512_sub_ps(nlo, zero), d);
    *hi = _mm512_mul_ps(_mm512_sub_ps(nhi, zero), d);
  } else {
    const __m512 m = _mm512_set1_ps(lm_half_at(b + 2));
    *lo = _mm512_add_ps(_mm512_mul_ps(nlo, d), m);
    *hi = _mm512_add_ps(_mm512_mul_ps(nhi, d), m);
  }
}

static inline void lm_dequant_block(const unsigned char *restrict b, int q, float *restrict out) {
  __m512 lo, hi;
  lm_dequant_vec(b, q, &lo, &hi);
  _mm512_storeu_ps(out, lo);
  _mm512_storeu_ps(out + 16, hi);
}
#else
static inline void lm_dequant_block(const unsigned char *restrict b, int q, float *restrict out) {
  const float d = lm_half_at(b);
  if (q == LM_Q8_0) {
    for (int i = 0; i < 32; i++) out[i] = (float)(signed char)b[2 + i] * d;
  } else if (q == LM_Q4_0) {
    for (int i = 0; i < 16; i++) {
      out[i] = (float)((int)(b[2 + i] & 15) - 8) * d;
      out[i + 16] = (float)((int)(b[2 + i] >> 4) - 8) * d;
    }
  } else if (q == LM_Q5_0) {
    unsigned int qh;
    memcpy(&qh, b + 2, 4);
    for (int i = 0; i < 16; i++) {
      out[i] = (float)((int)((b[6 + i] & 15) | ((qh >> i) & 1) << 4) - 16) * d;
      out[i + 16] = (float)((int)((b[6 + i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - 16) * d;
    }
  } else {
    const float m = lm_half_at(b + 2);
    for (int i = 0; i < 16; i++) {
      out[i] = (float)(b[4 + i] & 15) * d + m;
      out[i + 16] = (float)(b[4 + i] >> 4) * d + m;
    }
  }
}
#endif

#if defined(__AVX512F__)
/* r[i] := column i of the 16 x 16 matrix whose rows are r[0..16) (4 shuffle stages) */
static inline __attribute__((always_inline)) void lm_transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  /* per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3] */
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  __m512 u[16];
  for (int i = 0; i < 16; i += 4) {  /* u[i + c], lane l: column 4 l + c of rows i .. i + 3 */
    const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; c++) {  /* gather lane l of u[c], u[4 + c], u[8 + c], u[12 + c] */
    const __m512 s0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 s1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 s2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 s3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
}
#endif

/* ----- K-quant blocks (Q4_K, Q5_K, Q6_K: kquant.c) ---------------------------------------- */
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

/* lm_kq_decode for the packing of GEMM panels (lm_decode_row) */
static void lm_kq_decode_block(const unsigned char *restrict b, int q, float *restrict out) {
  lm_kq_decode(b, q, out);
}

/* values and bytes of one GGUF block of W's format */
static inline long lm_q_values(int q) { return q >= LM_Q4_K ? 256 : 32; }
static inline long lm_q_bytes(int q) { return q >= LM_Q4_K ? lm_kq_block_bytes(q) : lm_block_bytes(q); }

/* blocks j0 .. j0 + nj of row n of a packed W as GGUF's blocks at out (runtime.c) */
LM_INTERNAL void lm_unpack_blocks(const lm_qmat *W, long n, long j0, long nj, unsigned char *restrict out);

/* one row of W decoded: B(n, k0 .. k0 + kc) for a k-contiguous W (kc: any multiple of the
 * block; a packed W is unpacked LM_KC values at a time) */
static inline void lm_decode_row(const lm_qmat *W, long n, long k0, long kc, float *restrict out) {
  const int kq = W->q >= LM_Q4_K;
  const long be = lm_q_values(W->q), bb = lm_q_bytes(W->q);
  const unsigned char *row = W->w + n * (W->cols / be * bb);
  /* unpacked blocks: Q8_0's are the largest of 32 values (Q6_K's 210 bytes of 256 fewer) */
  unsigned char blocks[LM_KC / 32 * 34];
  for (long k = 0; k < kc; k += be) {
    const unsigned char *b = row + (k0 + k) / be * bb;
    if (W->packed) {
      const long j = k % LM_KC / be;
      if (!j) lm_unpack_blocks(W, n, (k0 + k) / be, (kc - k < LM_KC ? kc - k : LM_KC) / be, blocks);
      b = blocks + bb * j;
    }
    if (kq) lm_kq_decode_block(b, W->q, out + k);
    else lm_dequant_block(b, W->q, out + k);
  }
}

/* The rows of A[b] as contiguous float32: pointers into A when it already is, else converted
 * into `buf` (M * K floats). */
LM_INTERNAL void lm_rows_f32(const lm_mat *A, long off, long M, long K, float *buf, const float **x);

/* per-thread scratch for converted rows of A (freed at the end of the call) */
static inline float *lm_scratch(const lm_mat *A, long M, long K) {
  return (A->dt == LM_F32 && A->ks == 1) ? NULL : (float *)malloc(sizeof(float) * M * K);
}

/* a matvec's work items t = b * N + n (batch b, row n of W): from t, the rows n0 .. n1 of
 * batch b that a chunk ending at hi holds, walked with a pointer so that no row pays a
 * 64-bit division (at K = 576, 360 bytes a row of Q4_1, `t / N` and `t % N` per row cost a
 * fifth of one thread's time with W in L2) */
static inline void lm_batch_rows(long t, long hi, long N, long *b, long *n0, long *n1) {
  *b = t / N, *n0 = t % N;
  *n1 = N - *n0 < hi - t ? N : *n0 + (hi - t);
}

/* The row loop of decode's integer-activation matvecs (qgemv.c, qgemv16.c), one for both:
 * NAME##_formats(nb, M, N, K, xs, W, C) computes C[b] = x[b] * W^T (Q8_0 only where Q8 is 1)
 * from xs (type X: the rows of x as the kernel rounded them, batch b's M rows at xs + b * M)
 * through ROW(w, K, x, q, M, out), which writes one row of W times each row of x to out[0..M).
 * A chunk's rows of one batch are walked as lm_batch_rows says.
 * A macro rather than a function pointer so that ROW is inlined into the loop with q and M as
 * constants, one copy per (format, M); all inlined into the caller, as the two copies were
 * (a separate function measured 7-10% slower for int8 Q4_1 and Q5_K: code placement). */
#define LM_INT_GEMV_DRIVER(NAME, ROW, X, Q8)                                                    \
  static inline __attribute__((always_inline)) void NAME##_qm(                                  \
      long nb, long N, long K, const X *xs, const lm_qmat *W, const lm_out *C, int q, int M) {  \
    const long row_bytes = q >= LM_Q4_K ? K / 256 * lm_kq_block_bytes(q)                        \
                                        : K / 32 * lm_block_bytes(q);                           \
    lm_for_begin(nb * N);                                                                       \
    for (long lo, hi; lm_for_next(&lo, &hi);)                                                   \
      for (long t = lo, b, n0, n1; t < hi; t += n1 - n0) {                                      \
        lm_batch_rows(t, hi, N, &b, &n0, &n1);                                                  \
        const X *x = xs + b * M;                                                                \
        const unsigned char *w = W->w + n0 * row_bytes;                                         \
        for (long n = n0; n < n1; n++, w += row_bytes) {                                        \
          float out[LM_GEMV_MAX_M];                                                             \
          ROW(w, K, x, q, M, out);                                                              \
          for (int m = 0; m < M; m++) lm_put(C->p, C->dt, C->off[b] + m * C->rs + n, out[m]);   \
        }                                                                                       \
      }                                                                                         \
  }                                                                                             \
  static inline __attribute__((always_inline)) void NAME##_q(                                   \
      long nb, long M, long N, long K, const X *xs, const lm_qmat *W, const lm_out *C, int q) { \
    switch (M) {                                                                                \
      case 1: NAME##_qm(nb, N, K, xs, W, C, q, 1); break;                                       \
      case 2: NAME##_qm(nb, N, K, xs, W, C, q, 2); break;                                       \
      case 3: NAME##_qm(nb, N, K, xs, W, C, q, 3); break;                                       \
      default: NAME##_qm(nb, N, K, xs, W, C, q, 4); break;                                      \
    }                                                                                           \
  }                                                                                             \
  static inline __attribute__((always_inline)) void NAME##_formats(                             \
      long nb, long M, long N, long K, const X *xs, const lm_qmat *W, const lm_out *C) {        \
    switch (W->q) {                                                                             \
      case LM_Q8_0: if (Q8) NAME##_q(nb, M, N, K, xs, W, C, LM_Q8_0); break;                    \
      case LM_Q4_0: NAME##_q(nb, M, N, K, xs, W, C, LM_Q4_0); break;                            \
      case LM_Q4_1: NAME##_q(nb, M, N, K, xs, W, C, LM_Q4_1); break;                            \
      case LM_Q5_0: NAME##_q(nb, M, N, K, xs, W, C, LM_Q5_0); break;                            \
      case LM_Q4_K: NAME##_q(nb, M, N, K, xs, W, C, LM_Q4_K); break;                            \
      case LM_Q5_K: NAME##_q(nb, M, N, K, xs, W, C, LM_Q5_K); break;                            \
      default: NAME##_q(nb, M, N, K, xs, W, C, LM_Q6_K); break;                                 \
    }                                                                                           \
  }

/* qgemv.c: x @ W.T through int8 activations; 0 when the float kernels must run instead */
LM_INTERNAL int lm_q8_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                           const lm_qmat *W, const lm_out *C);

/* qgemv16.c: the same through int16 activations */
LM_INTERNAL int lm_q16_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                            const lm_qmat *W, const lm_out *C);

/* qgemm8.c: prefill's x @ W.T through int8 digits of x; 0 when the float GEMM must run */
LM_INTERNAL int lm_q8_gemm(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                           const lm_qmat *W, const lm_out *C);
