/* luminal-cpu: prefill's quantized GEMM through int8 digits of x (x @ W.T for more than
 * LM_GEMV_MAX_M rows of x, W a GGUF Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q4_K / Q5_K / Q6_K matrix
 * quantized along k).
 *
 * The float path (runtime.c's lm_gemm_tiled with lm_pack_bq) decodes W into float panels and
 * runs a float32 micro-kernel at the core's FMA peak: 16 products per instruction. Here W's
 * quants are decoded to int8 panels (no float values: a chunk of 16 rows decoded row by row,
 * then moved into panels by 16 x 16 dword transposes; `vpgatherdd` straight from the rows
 * cost 15% of the GEMM on Zen 4) and meet x in `vpdpbusd`: 64 products (u8 x s8, four summed
 * per int32 lane) per instruction. With three digits of x that is 21 products per
 * instruction at best, measured 1.04-1.09x over the float GEMM on a Gemma 3 layer's matmuls
 * (M = 128, Zen 4); with two, 32 (a Gemma 3 prefill 1.3x faster than with three); with one,
 * 64 (2.1-2.2x the float GEMM).
 *
 * x. Each group of G values of a row of x (G = 32; 16 for Q6_K, whose scales change every 16)
 * is scaled by dx = max|x| / 127 to t = x / dx in [-127, 127] and written as D unsigned
 * byte digits:
 * - D = 2 (the default, `int16`): T = nearest(256 t), |T| <= 32512, stored as q1 = T >> 8
 *   (+ 128) and u2 = T & 255, so t is kept to 1/512: at most dx / 512 = 1.5e-5 of the group's
 *   max|x| per value, a 16-bit fixed-point x (bfloat16 keeps 8 bits of each value). Gemma 3's
 *   first-forward logits moved by 3.1e-3 against transformers with it (three digits: 3e-5),
 *   its greedy tokens and SmolLM2's stayed transformers'. Taking the outlier columns out
 *   exactly did not bring it near three digits' (README: two digits fall short of float by
 *   about 8 bits over every value).
 * - D = 3 (`int24`, float-like): t = q1 + u2 / 256 + u3 / 65536
 *   with q1 = floor(t) stored as q1 + 128, u2 = floor(256 frac), u3 = nearest(256 frac2) (both
 *   clamped to 255), all computed exactly in float32 from t: the value kept differs from x by
 *   at most dx (2^-16 + 2^-17) (the digits and t's own rounding), about 1.8e-7 of the group's
 *   max|x|. One int16 digit (1.5e-5 of max|x|) moved Gemma 3's logits by 8.7e-3 through its
 *   outlier channels; this is 80x finer, at a finer granularity (32 values, not 256).
 * - D = 1 (`int8`, llama.cpp's numerics): t rounded, stored + 128.
 * The + 128 makes the digits unsigned for `vpdpbusd`; the first digit's accumulator starts
 * at -128 times the sum of the group's weights, which removes it exactly.
 *
 * W. Each group of a row of W is s (a float scale) times G signed int8 quants plus o (a float
 * offset; Q4_1 / Q4_K / Q5_K only): Q8_0 q with s = d; Q4_0 / Q5_0 q - 8 / q - 16, s = d;
 * Q4_1 q, s = d, o = m; Q4_K / Q5_K q, s = d sc, o = -dmin m (sub-blocks of 32); Q6_K q - 32,
 * s = d sc (sub-blocks of 16). The offsets meet the sums of x's groups (as kept).
 *
 * Per group and output, int32 sums S1, S2, S3 of (digit) * (quant) are joined as
 * T = S1 * 256 + S2, exactly, in one accumulator (S1's products, a shift left by 8, then S2's)
 * and f = float(T) + float(S3) / 256 (two float32 roundings: about 6e-8 of sum |x q| / dx),
 * then C += f * (dx s) (+ o * sum x). Overflow (at every step of those sums): a sum holds
 * G = 32 products of a digit (<= 255) and a quant (|q| <= 128): |S| <= 1,044,480, and S1's
 * start |128 * sum q| <= 524,288; S1 ends as sum (q1) q, |S1| <= 32 * 128 * 128 = 524,288,
 * so |T| <= 524,288 * 256 + 1,044,480 = 135,266,304 < 2^31 - 1 (vpdpbusd sums four products
 * into its int32 lane without saturating).
 *
 * Semantics: the product of the dequantized W with x (as kept above), up to float32
 * rounding of the per-group scale products and sums. A row of x holding NaN or an infinity,
 * or a group whose max|x| is below LM_Q8X_TINY (its dx would lose precision), has no such
 * rounding: that row's outputs are float dot products with W's decoded rows (the float
 * GEMM's numerics), so NaN and infinities propagate as in the float product. Machines
 * without AVX-512 BW / DQ / VNNI return 0 (the float GEMM runs). */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)
#include <immintrin.h>
#define LM_Q8X_TINY 1e-30f
#define LM_G8_ROWS 12  /* int32 accumulator rows of a micro-tile: MR rows of x times D digits */
#define LM_G8_NR 32    /* rows of W per panel: two vectors of 16 */
#define LM_G8_KC 256   /* values of k per packed chunk of W */

/* rows of x per micro-tile: 4 with three digits (16 int32 accumulators), 6 with two (12), 12
 * with one (24) */
static inline int lm_g8_mr(int D) { return LM_G8_ROWS / D; }

/* x's digits and scales for the whole call. Digit dwords (four consecutive k of one digit of
 * one row) at a[((p * groups + g) * LM_G8_ROWS + d * MR + i) * (G / 4) + j] for row i of
 * panel p (rows p MR .. p MR + MR - 1), group g, dword j, digit d (a digit's G bytes of a
 * group are contiguous, so they are written with vector stores); dx of row i at
 * dxs[(p * groups + g) * 2 MR + i] and the group's sum of x (as kept) MR floats after it, so
 * the micro-kernel reads a group's with one pointer and fixed offsets. Rows past the last are
 * zero digits (a first digit of 128) with dx 0. */
typedef struct {
  unsigned int *a;
  float *dxs;
  int *bad; /* per row: 1 when it has no such rounding (it is then zero digits here) */
  long groups, rows, panels;
} lm_g8x;

/* ----- x ---------------------------------------------------------------------------------- */
/* one group of G (16 or 32) values of a row of x into its D digits (G bytes each, digit d at
 * digits + d * step), dx and (with `sums`: W has offsets) the sum of the group; 0 (nothing
 * written) when it has no rounding: a NaN or infinity, or max|x| neither 0 nor at least
 * LM_Q8X_TINY */
static inline __attribute__((always_inline)) int lm_g8_group(const float *x, int G, int D, int sums,
                                                             unsigned char *digits, long step, float *dx,
                                                             float *xs) {
  const int nv = G / 16;
  __m512 v[2], amax = _mm512_setzero_ps(), sum = _mm512_setzero_ps();
  for (int h = 0; h < nv; h++) {
    v[h] = _mm512_loadu_ps(x + 16 * h);
    if (_mm512_fpclass_ps_mask(v[h], 0x99)) return 0; /* NaN (quiet, signaling), +-inf */
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v[h]));
  }
  const float m = _mm512_reduce_max_ps(amax);
  if (m > 0.0f && m < LM_Q8X_TINY) return 0;
  *dx = D >= 2 ? m / 127.0f / 256.0f : m / 127.0f; /* D = 2, 3: the digits count 256ths of dx */
  const __m512 scale = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
  const __m512i bias = _mm512_set1_epi32(128), top = _mm512_set1_epi32(255);
  for (int h = 0; h < nv; h++) {
    const __m512 t = _mm512_mul_ps(v[h], scale);
    if (D == 1) {
      const __m512 q = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      sum = _mm512_add_ps(sum, q);
      _mm_storeu_si128((__m128i *)(digits + 16 * h), _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), bias)));
      continue;
    }
    if (D == 2) { /* t rounded to 256ths: T = 256 q1 + u2, q1 = T >> 8, u2 = T & 255 */
      const __m512i T = _mm512_cvtps_epi32(_mm512_mul_ps(t, _mm512_set1_ps(256.0f)));
      sum = _mm512_add_ps(sum, _mm512_cvtepi32_ps(T));
      _mm_storeu_si128((__m128i *)(digits + 16 * h), _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_srai_epi32(T, 8), bias)));
      _mm_storeu_si128((__m128i *)(digits + step + 16 * h), _mm512_cvtepi32_epi8(_mm512_and_si512(T, top)));
      continue;
    }
    const __m512 q1 = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 f1 = _mm512_mul_ps(_mm512_sub_ps(t, q1), _mm512_set1_ps(256.0f)); /* exact */
    const __m512 u2 = _mm512_min_ps(_mm512_roundscale_ps(f1, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                                    _mm512_set1_ps(255.0f));
    const __m512 f2 = _mm512_mul_ps(_mm512_sub_ps(f1, u2), _mm512_set1_ps(256.0f));
    const __m512i u3 = _mm512_min_epi32(_mm512_cvtps_epi32(f2), top);
    /* the value kept, in 256ths of dx: 256 q1 + u2 + u3 / 256 (exact: 24 bits) */
    sum = _mm512_add_ps(sum, _mm512_fmadd_ps(q1, _mm512_set1_ps(256.0f), _mm512_add_ps(u2, _mm512_mul_ps(_mm512_cvtepi32_ps(u3), _mm512_set1_ps(1.0f / 256.0f)))));
    _mm_storeu_si128((__m128i *)(digits + 16 * h), _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q1), bias)));
    _mm_storeu_si128((__m128i *)(digits + step + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(u2)));
    _mm_storeu_si128((__m128i *)(digits + 2 * step + 16 * h), _mm512_cvtepi32_epi8(u3));
  }
  *xs = sums ? *dx * _mm512_reduce_add_ps(sum) : 0.0f; /* the sum of the group as kept */
  return 1;
}

/* row i of panel p's first digit of group g */
static inline unsigned char *lm_g8_digits(const lm_g8x *X, int G, long p, long g, int i) {
  return (unsigned char *)(X->a + (p * X->groups + g) * LM_G8_ROWS * (G / 4)) + i * G;
}

/* the rows of panel p into X (the group sums of x only when W has offsets: `sums`); a row
 * without a rounding (and padding) becomes zero digits */
static inline __attribute__((always_inline)) void lm_g8_panel(const lm_mat *A, const long *aoff, long M, long K,
                                                              int G, int D, int sums, long p, float *tmp,
                                                              const lm_g8x *X) {
  const int MR = lm_g8_mr(D);
  for (int i = 0; i < MR; i++) {
    const long r = p * MR + i;
    float *dx = X->dxs + p * X->groups * 2 * MR + i;
    const float *x = NULL;
    if (r < X->rows) x = lm_row_f32(A->p, A->dt, aoff[r / M] + r % M * A->rs, A->ks, K, tmp);
    int bad = 0; /* a group without a rounding: the whole row's digits are zero */
    for (long g = 0; x && !bad && g < X->groups; g++)
      bad = !lm_g8_group(x + g * G, G, D, sums, lm_g8_digits(X, G, p, g, i), (long)MR * G,
                         dx + g * 2 * MR, dx + g * 2 * MR + MR);
    if (r < X->rows) X->bad[r] = bad;
    for (long g = 0; (!x || bad) && g < X->groups; g++) { /* q1 = 0 */
      unsigned char *digits = lm_g8_digits(X, G, p, g, i);
      dx[g * 2 * MR] = dx[g * 2 * MR + MR] = 0.0f;
      for (int d = 0; d < D; d++) memset(digits + d * MR * G, d ? 0 : 128, (size_t)G);
    }
  }
}

/* ----- W ---------------------------------------------------------------------------------- */
/* bytes 0 .. 15 of v as the low nibbles then the high ones (32 bytes) */
static inline __m256i lm_g8_nibbles(__m128i v) {
  const __m128i low4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
}

/* the 32 values of sub-block `odd` (0: low nibbles, 1: high) of 32 bytes */
static inline __m256i lm_g8_half_nibbles(__m256i v, int odd) {
  return _mm256_and_si256(odd ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(15));
}

/* values k0 .. k0 + kc of one row of W (k0, kc multiples of 256 for the K-quants, of 32
 * otherwise) as signed quants out[0 .. kc), and each group's scale and offset at s[l * ld],
 * o[l * ld] */
static inline __attribute__((always_inline)) void lm_g8_row(const unsigned char *row, int q, long k0,
                                                            long kc, signed char *out, float *s,
                                                            float *o, long ld) {
  if (q < LM_Q4_K) {
    const long bb = lm_block_bytes(q);
    for (long l = 0; l < kc / 32; l++) {
      const unsigned char *b = row + (k0 / 32 + l) * bb;
      const float d = lm_half_at(b);
      s[l * ld] = d;
      o[l * ld] = q == LM_Q4_1 ? lm_half_at(b + 2) : 0.0f;
      __m256i v;
      if (q == LM_Q8_0) {
        v = _mm256_loadu_si256((const __m256i *)(b + 2));
      } else {
        v = lm_g8_nibbles(_mm_loadu_si128((const __m128i *)(b + lm_nibbles_at(q))));
        if (q == LM_Q5_0) { /* bit i of qh: the fifth bit of value i */
          unsigned int qh;
          memcpy(&qh, b + 2, 4);
          v = _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16));
        }
        if (q != LM_Q4_1) v = _mm256_sub_epi8(v, _mm256_set1_epi8(q == LM_Q4_0 ? 8 : 16));
      }
      _mm256_storeu_si256((__m256i *)(out + 32 * l), v);
    }
    return;
  }
  const long bb = lm_kq_block_bytes(q);
  for (long c = 0; c < kc / 256; c++) {
    const unsigned char *b = row + (k0 / 256 + c) * bb;
    signed char *dst = out + 256 * c;
    if (q == LM_Q6_K) { /* ggml's dequantize_row_q6_K; groups of 16 */
      const float d = lm_half_at(b + 208);
      for (int g = 0; g < 16; g++) {
        s[(16 * c + g) * ld] = d * (float)(signed char)b[192 + g];
        o[(16 * c + g) * ld] = 0.0f;
      }
      for (int h = 0; h < 2; h++) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        for (int grp = 0; grp < 4; grp++) {
          const __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (grp & 1)));
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * grp), _mm256_set1_epi8(3));
          const __m256i v = _mm256_or_si256(lm_g8_half_nibbles(ql, grp >> 1), _mm256_slli_epi16(hi, 4));
          _mm256_storeu_si256((__m256i *)(dst + 128 * h + 32 * grp), _mm256_sub_epi8(v, _mm256_set1_epi8(32)));
        }
      }
      continue;
    }
    /* Q4_K / Q5_K: sub-block sb is d sc q - dmin m; its quants are the low (sb even) or high
     * nibbles of qs[32 (sb / 2) ..], plus (Q5_K) 16 for bit sb of qh[l] */
    const float d = lm_half_at(b), dmin = lm_half_at(b + 2);
    const unsigned char *qs = b + (q == LM_Q5_K ? 48 : 16);
    const __m256i qh = q == LM_Q5_K ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
    for (int sb = 0; sb < 8; sb++) {
      float sc, mn;
      lm_kq_scale_min(b + 4, sb, &sc, &mn);
      s[(8 * c + sb) * ld] = d * sc;
      o[(8 * c + sb) * ld] = -(dmin * mn);
      __m256i v = lm_g8_half_nibbles(_mm256_loadu_si256((const __m256i *)(qs + 32 * (sb / 2))), sb & 1);
      if (q == LM_Q5_K)
        v = _mm256_mask_add_epi8(v, _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << sb))), v, _mm256_set1_epi8(16));
      _mm256_storeu_si256((__m256i *)(dst + 32 * sb), v);
    }
  }
}

/* The packed chunk of a panel: groups g0 .. g0 + ng of rows n0 .. n0 + 31 (rows past N repeat
 * row N - 1; their outputs are not stored). Dword t of the chunk's values (k = 4t .. 4t + 3)
 * of row 16 v + i is b[(2 t + v) 16 + i]; per local group l: start[l][32] = -128 * its row's
 * sum of quants; s[l][32], o[l][32]. */
typedef struct {
  int *b, *start;
  float *s, *o;
  signed char *rows; /* LM_G8_KC bytes per row of 16 rows: a half-panel decoded row by row */
} lm_g8w;

/* lm_g8_pack for a packed W (lm_qmat.packed): a half-panel (16 rows from a multiple of 16) is
 * one group of the layout, whose quant vectors hold dword t of row i in lane i already (low
 * nibbles: t = 0..3, high: 4..7; Q8_0: vector t), so the chunk is stored with no
 * transposition (Q5_0's fifth bits joined as in lm_qr_rows16, Q4_0 / Q5_0 centred as lm_g8_row
 * does) and the 16 rows' d (and Q4_1's m) convert at once. A half-panel past N reads the last group (its outputs are
 * not stored). */
static inline __attribute__((always_inline)) void lm_g8_pack_rows16(const lm_qmat *W, int q, long N, long n0,
                                                                    long g0, long ng, const lm_g8w *P) {
  const long blocks = W->cols / 32, gb = 16 * lm_block_bytes(q), nib = 16 * lm_nibbles_at(q);
  const __m512i ones = _mm512_set1_epi8(1), low4 = _mm512_set1_epi8(15);
  const __m512i centre = _mm512_set1_epi8(q == LM_Q4_0 ? 8 : q == LM_Q5_0 ? 16 : 0);
  for (int v = 0; v < 2; v++) {
    const long g = n0 / 16 + v < N / 16 ? n0 / 16 + v : N / 16 - 1;
    const unsigned char *blk = W->w + (g * blocks + g0) * gb;
    for (long l = 0; l < ng; l++, blk += gb) {
      _mm512_storeu_ps(P->s + l * LM_G8_NR + 16 * v, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk)));
      _mm512_storeu_ps(P->o + l * LM_G8_NR + 16 * v, q == LM_Q4_1 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)))
                                                                  : _mm512_setzero_ps());
      const __m512i qh = q == LM_Q5_0 ? _mm512_loadu_si512(blk + 32) : _mm512_setzero_si512();
      __m512i sum = _mm512_setzero_si512();
      for (int u = 0; q == LM_Q8_0 && u < 8; u++) { /* Q8_0's 8 vectors: dwords 0..7, signed */
        const __m512i w = _mm512_loadu_si512(blk + nib + 64 * u);
        _mm512_storeu_si512(P->b + ((l * 8 + u) * 2 + v) * 16, w);
        sum = _mm512_dpbusd_epi32(sum, ones, w);
      }
      for (int u = 0; q != LM_Q8_0 && u < 4; u++) {
        const __m512i w = _mm512_loadu_si512(blk + nib + 64 * u);
        __m512i half[2] = {_mm512_and_si512(w, low4), _mm512_and_si512(_mm512_srli_epi16(w, 4), low4)};
        for (int h = 0; h < 2; h++) {
          if (q == LM_Q5_0) half[h] = _mm512_mask_add_epi8(half[h], lm_q5r_fifth(qh, u, h), half[h], _mm512_set1_epi8(16));
          half[h] = _mm512_sub_epi8(half[h], centre);
          _mm512_storeu_si512(P->b + ((l * 8 + u + 4 * h) * 2 + v) * 16, half[h]);
          sum = _mm512_dpbusd_epi32(sum, ones, half[h]);
        }
      }
      _mm512_storeu_si512(P->start + l * 32 + 16 * v, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
    }
  }
}

/* lm_g8_pack for a packed K-quant W: the chunk is one block (LM_G8_KC = 256), and a
 * half-panel one group of the layout, so each quant vector's low and high nibble halves are
 * dwords of the panel as they stand (Q4_K / Q5_K's vector v, the block's last 2048 bytes:
 * dwords 16 (v / 8) + v % 8 and + 8, Q5_K's fifth bits joined by lm_q5kr_fifth;
 * Q6_K's ql vector a: 32 h + 8 g + 4 q + r, g = G and G + 2, lm_q6kr_six), and the 16 rows'
 * scales unpack at once (lm_q4kr_scales); s and o are lm_g8_row's products. */
static inline __attribute__((always_inline)) void lm_g8_pack_k16(const lm_qmat *W, int q, long N, long n0,
                                                                 long g0, const lm_g8w *P) {
  const long blocks = W->cols / 256, gb = 16 * lm_kq_block_bytes(q), c = g0 * (q == LM_Q6_K ? 16 : 32) / 256;
  const __m512i ones = _mm512_set1_epi8(1), low4 = _mm512_set1_epi8(15);
  for (int v = 0; v < 2; v++) {
    const long g = n0 / 16 + v < N / 16 ? n0 / 16 + v : N / 16 - 1;
    const unsigned char *blk = W->w + (g * blocks + c) * gb;
    /* dword t of row 16 v + i at b[(2 t + v) 16 + i]; group l's start, s, o at [32 l + 16 v] */
    int *b = P->b + 16 * v, *start = P->start + 16 * v;
    float *s = P->s + 16 * v, *o = P->o + 16 * v;
    if (q != LM_Q6_K) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
      const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 32)));
      __m512i sc[2], mn[2];
      lm_q4kr_scales(blk, sc, mn);
      for (int j = 0; j < 8; j++) {
        _mm512_storeu_ps(s + 32 * j, _mm512_mul_ps(d, lm_lane_byte(sc[j / 4], j % 4)));
        _mm512_storeu_ps(o + 32 * j, _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(dmin, lm_lane_byte(mn[j / 4], j % 4))));
      }
      for (int p = 0; p < 4; p++) {
        __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int t = 0; t < 8; t++) {
          const __m512i w = _mm512_loadu_si512(blk + gb - 16 * 128 + 64 * (8 * p + t));
          __m512i half[2] = {_mm512_and_si512(w, low4), _mm512_and_si512(_mm512_srli_epi16(w, 4), low4)};
          for (int h = 0; h < 2; h++) {
            if (q == LM_Q5_K) half[h] = lm_q5kr_fifth(half[h], _mm512_loadu_si512(blk + 256 + 64 * t), 2 * p + h);
            _mm512_storeu_si512(b + 2 * 16 * (16 * p + 8 * h + t), half[h]);
            sum[h] = _mm512_dpbusd_epi32(sum[h], ones, half[h]);
          }
        }
        for (int h = 0; h < 2; h++)
          _mm512_storeu_si512(start + 32 * (2 * p + h), _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum[h], 7)));
      }
      continue;
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 3328)));
    for (int l = 0; l < 16; l++) { /* int8 scale l: byte l % 4 of each lane of vector l / 4 */
      const __m512i sv = _mm512_loadu_si512(blk + 3072 + 64 * (l / 4));
      _mm512_storeu_ps(s + 32 * l, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * (l % 4)), 24))));
      _mm512_storeu_ps(o + 32 * l, _mm512_setzero_ps());
    }
    for (int h = 0; h < 2; h++)
      for (int G = 0; G < 2; G++)
        for (int q4 = 0; q4 < 2; q4++) {
          __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
          for (int r = 0; r < 4; r++) {
            const __m512i ql = _mm512_loadu_si512(blk + 64 * (16 * h + 8 * G + 4 * q4 + r));
            const __m512i qh = _mm512_loadu_si512(blk + 2048 + 64 * (8 * h + 4 * q4 + r));
            for (int n = 0; n < 2; n++) {
              const __m512i val = _mm512_sub_epi8(_mm512_and_si512(lm_q6kr_six(ql, qh, G, n), _mm512_set1_epi8(63)),
                                                  _mm512_set1_epi8(32));
              _mm512_storeu_si512(b + 2 * 16 * (32 * h + 8 * (G + 2 * n) + 4 * q4 + r), val);
              sum[n] = _mm512_dpbusd_epi32(sum[n], ones, val);
            }
          }
          for (int n = 0; n < 2; n++) /* group (16 values) 8 h + 2 (G + 2 n) + q4 */
            _mm512_storeu_si512(start + 32 * (8 * h + 2 * (G + 2 * n) + q4),
                                _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum[n], 7)));
        }
  }
}

static inline __attribute__((always_inline)) void lm_g8_pack(const lm_qmat *W, int q, int G, long N,
                                                             long n0, long g0, long ng,
                                                             const lm_g8w *P) {
  const int J = G / 4;
  const long rb = W->cols / (q >= LM_Q4_K ? 256 : 32) * (q >= LM_Q4_K ? lm_kq_block_bytes(q) : lm_block_bytes(q));
  const long kc = ng * G, dwords = kc / 4;
  const __m512i ones = _mm512_set1_epi8(1);
  if (W->packed) {
    if (q >= LM_Q4_K) lm_g8_pack_k16(W, q, N, n0, g0, P);
    else lm_g8_pack_rows16(W, q, N, n0, g0, ng, P);
    return;
  }
  for (int v = 0; v < 2; v++) {
    for (int i = 0; i < 16; i++) {
      const long n = n0 + 16 * v + i < N ? n0 + 16 * v + i : N - 1;
      lm_g8_row(W->w + n * rb, q, g0 * G, kc, P->rows + i * LM_G8_KC, P->s + 16 * v + i,
                P->o + 16 * v + i, LM_G8_NR);
    }
    /* 16 rows x 16 dwords at a time through registers (kc is a multiple of 64 bytes but for
     * a last chunk of 32-value groups: 32 or 96 bytes, whose other half is never read) */
    for (long t = 0; t < dwords; t += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps((const float *)(P->rows + i * LM_G8_KC) + t);
      lm_transpose16(r);
      for (int u = 0; u < 16 && t + u < dwords; u++) _mm512_storeu_ps((float *)P->b + (2 * (t + u) + v) * 16, r[u]);
    }
    for (long l = 0; l < ng; l++) {
      __m512i sum = _mm512_setzero_si512();
      for (int j = 0; j < J; j++) sum = _mm512_dpbusd_epi32(sum, ones, _mm512_loadu_si512(P->b + ((l * J + j) * 2 + v) * 16));
      _mm512_storeu_si512(P->start + l * 32 + 16 * v, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
    }
  }
}

/* ----- the micro-kernel ------------------------------------------------------------------- */
/* A micro-tile's whole chunk (its ng groups) runs in one inline asm block: the group's int32
 * sums are formed there (GCC 12 compiled that loop in C, fully unrolled, with its
 * accumulators moved through other registers and the stack: 1.15x slower on a Gemma 3
 * layer), and the tile's float sums C stay in registers from the chunk's first group to its
 * last (12 int32 and 12 float sums, three digits' 16 and 8, W's two vectors and the
 * broadcast: 27 zmm in the loop, the epilogue's scales and temporaries in the other 5; one
 * digit runs its 12 rows as two tiles of 6). Per dword j of a group: W's two vectors (zmm30,
 * zmm31), then per row-digit its dword broadcast (zmm29) and two `vpdpbusd`. Per group the
 * float operations are those of one output in order: f = float(T) (three digits:
 * fma(float(u), 1/256, float(T))), C = fma(f, dx s, C), then with offsets C = fma(sum x, o,
 * C). The epilogue's multiply and FMA share the core's vector pipes with the `vpdpbusd` (per
 * output vector and group two against 16 at two digits), which bounds the kernel near 89% of
 * the `vpdpbusd` peak; keeping C in registers (no load and store per group) took it from 86%
 * to 88% on L1-resident data (Zen 4). The registers are fixed (named in the text) rather than
 * operands: 24 accumulators as in-out operands pass GCC's 30. Pointers: a (x's digits of the
 * group), b (W's), st (the chunk's start sums of the group; its s and o at the fixed offsets
 * so and oo after it), dxs (the group's dx and sums of x, lm_g8x); r10 / r11 / eax walk a pass
 * over the group's J dwords, which leaves r11 at W's next group. */
#define LM_G8_Z(n) "%%zmm" #n
/* dword j of row-digit r (r10 at dword j of the group's first) times W's two vectors into
 * zmm ra, rb */
#define LM_G8_DPZ(r, ra, rb)                                                                \
  "vpbroadcastd " #r "*%c[gb](%%r10), %%zmm29\n\t"                                           \
  "vpdpbusd %%zmm30, %%zmm29, " LM_G8_Z(ra) "\n\t" "vpdpbusd %%zmm31, %%zmm29, " LM_G8_Z(rb) "\n\t"
#define LM_G8_STZ(ra, rb) "vmovdqu32 (%[st]), " LM_G8_Z(ra) "\n\t" "vmovdqu32 64(%[st]), " LM_G8_Z(rb) "\n\t"
#define LM_G8_SHZ(ra, rb) "vpslld $8, " LM_G8_Z(ra) ", " LM_G8_Z(ra) "\n\t" "vpslld $8, " LM_G8_Z(rb) ", " LM_G8_Z(rb) "\n\t"
#define LM_G8_ZZ(ra, rb) "vpxord " LM_G8_Z(ra) ", " LM_G8_Z(ra) ", " LM_G8_Z(ra) "\n\t" \
                         "vpxord " LM_G8_Z(rb) ", " LM_G8_Z(rb) ", " LM_G8_Z(rb) "\n\t"
/* C's vectors ra, rb (row i of the tile) from / to ct at byte off */
#define LM_G8_CLD(off, ra, rb) "vmovups " #off "(%[ct]), " LM_G8_Z(ra) "\n\t" "vmovups " #off "+64(%[ct]), " LM_G8_Z(rb) "\n\t"
#define LM_G8_CST(off, ra, rb) "vmovups " LM_G8_Z(ra) ", " #off "(%[ct])\n\t" "vmovups " LM_G8_Z(rb) ", " #off "+64(%[ct])\n\t"
#define LM_G8_PASS(body)                                                                    \
  "movq %[a], %%r10\n\t" "movq %[b], %%r11\n\t" "movl %[nj], %%eax\n\t"                       \
  "1:\n\t"                                                                                  \
  "vmovdqu32 (%%r11), %%zmm30\n\t" "vmovdqu32 64(%%r11), %%zmm31\n\t"                         \
  body                                                                                      \
  "addq $128, %%r11\n\t" "addq $4, %%r10\n\t" "decl %%eax\n\t" "jnz 1b\n\t"
/* two digits, row i (dx at byte dxo of dxs): C[ca, cb] += float(T[ta, tb]) * (dx s) */
#define LM_G8_EP2(dxo, ta, tb, ca, cb)                                                      \
  "vbroadcastss " #dxo "(%[dxs]), %%zmm26\n\t"                                              \
  "vcvtdq2ps " LM_G8_Z(ta) ", %%zmm28\n\t" "vmulps %%zmm24, %%zmm26, %%zmm27\n\t"               \
  "vfmadd231ps %%zmm27, %%zmm28, " LM_G8_Z(ca) "\n\t"                                          \
  "vcvtdq2ps " LM_G8_Z(tb) ", %%zmm28\n\t" "vmulps %%zmm25, %%zmm26, %%zmm27\n\t"               \
  "vfmadd231ps %%zmm27, %%zmm28, " LM_G8_Z(cb) "\n\t"
/* three digits, row i: f = fma(float(u), 1/256 (zmm26), float(T)); C += f * (dx s) */
#define LM_G8_EP3(dxo, ta, tb, ua, ub, ca, cb)                                              \
  "vbroadcastss " #dxo "(%[dxs]), %%zmm29\n\t"                                              \
  "vcvtdq2ps " LM_G8_Z(ta) ", %%zmm27\n\t" "vcvtdq2ps " LM_G8_Z(ua) ", %%zmm28\n\t"             \
  "vfmadd231ps %%zmm26, %%zmm28, %%zmm27\n\t" "vmulps %%zmm24, %%zmm29, %%zmm28\n\t"            \
  "vfmadd231ps %%zmm28, %%zmm27, " LM_G8_Z(ca) "\n\t"                                          \
  "vcvtdq2ps " LM_G8_Z(tb) ", %%zmm27\n\t" "vcvtdq2ps " LM_G8_Z(ub) ", %%zmm28\n\t"             \
  "vfmadd231ps %%zmm26, %%zmm28, %%zmm27\n\t" "vmulps %%zmm25, %%zmm29, %%zmm28\n\t"            \
  "vfmadd231ps %%zmm28, %%zmm27, " LM_G8_Z(cb) "\n\t"
/* the group's offsets o (zmm30, 31: W's vectors are done) */
#define LM_G8_O "vmovups %c[oo](%[st]), %%zmm30\n\t" "vmovups %c[oo]+64(%[st]), %%zmm31\n\t"
/* row i's sum of x (at byte xso of dxs) times o into C[ca, cb] */
#define LM_G8_MN(xso, ca, cb)                                                               \
  "vbroadcastss " #xso "(%[dxs]), %%zmm29\n\t"                                              \
  "vfmadd231ps %%zmm30, %%zmm29, " LM_G8_Z(ca) "\n\t" "vfmadd231ps %%zmm31, %%zmm29, " LM_G8_Z(cb) "\n\t"
/* C from ct (or zero with `first`), the group loop, C to ct */
#define LM_G8_CHUNK(zero, load, group, store)                                               \
  __asm__ volatile("testl %[first], %[first]\n\t" "jz 2f\n\t" zero "jmp 3f\n\t"              \
                   "2:\n\t" load "3:\n\t" "4:\n\t" group                                    \
                   "addq %[ab], %[a]\n\t" "movq %%r11, %[b]\n\t" "addq $128, %[st]\n\t"       \
                   "decq %[n]\n\t" "jnz 4b\n\t" store                                       \
                   : [a] "+r"(a), [b] "+r"(b), [st] "+r"(st), [dxs] "+r"(dxs), [n] "+r"(n)    \
                   : [ct] "r"(c), [first] "r"(first), [nj] "i"(G / 4), [gb] "i"(G), [ab] "i"(LM_G8_ROWS * G), \
                     [so] "i"(so), [oo] "i"(2 * so)                                         \
                   : "r10", "r11", "rax", "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", \
                     "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", "zmm12", "zmm13", "zmm14", "zmm15", \
                     "zmm16", "zmm17", "zmm18", "zmm19", "zmm20", "zmm21", "zmm22", "zmm23",       \
                     "zmm24", "zmm25", "zmm26", "zmm27", "zmm28", "zmm29", "zmm30", "zmm31", "cc", \
                     "memory")

/* Two digits (6 rows of x, digit d of row i is row-digit d 6 + i): T in zmm 2i, 2i + 1 (256 S1 +
 * S2, S1 less 128 sum q: a first pass for S1, shifted, then S2 added; the bound in the header
 * holds at every step), C in zmm 12 + 2i, 13 + 2i. A last panel with fewer rows runs the
 * first 2 or 4 only (a 128-token prefill's last panel holds 2: a full one was 3% of the
 * GEMM's products wasted). Row i's registers and offsets: T (ta, tb), C (ca, cb), its
 * row-digits r1 = i and r2 = 6 + i, dx and sum x at bytes dxo and xso of dxs, C at cto of ct;
 * LM_G8_EACH2_n applies f to the first n rows. */
#define LM_G8_EACH2_2(f) f(0, 1, 12, 13, 0, 6, 0, 24, 0) f(2, 3, 14, 15, 1, 7, 4, 28, 128)
#define LM_G8_EACH2_4(f) LM_G8_EACH2_2(f) f(4, 5, 16, 17, 2, 8, 8, 32, 256) f(6, 7, 18, 19, 3, 9, 12, 36, 384)
#define LM_G8_EACH2_6(f) LM_G8_EACH2_4(f) f(8, 9, 20, 21, 4, 10, 16, 40, 512) f(10, 11, 22, 23, 5, 11, 20, 44, 640)
#define LM_G8_2ST(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_STZ(ta, tb)
#define LM_G8_2D1(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_DPZ(r1, ta, tb)
#define LM_G8_2SH(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_SHZ(ta, tb)
#define LM_G8_2D2(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_DPZ(r2, ta, tb)
#define LM_G8_2EP(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_EP2(dxo, ta, tb, ca, cb)
#define LM_G8_2MN(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_MN(xso, ca, cb)
#define LM_G8_2ZZ(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_ZZ(ca, cb)
#define LM_G8_2LD(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_CLD(cto, ca, cb)
#define LM_G8_2SV(ta, tb, ca, cb, r1, r2, dxo, xso, cto) LM_G8_CST(cto, ca, cb)
/* a group of rows `each` (one or two digits: `passes`), then dxs moved on by `dxstep` bytes */
#define LM_G8_GROUP(each, passes, mins, dxstep)                                             \
  each(LM_G8_2ST) passes(each)                                                              \
  "vmovups %c[so](%[st]), %%zmm24\n\t" "vmovups %c[so]+64(%[st]), %%zmm25\n\t"                \
  each(LM_G8_2EP) mins "addq $" #dxstep ", %[dxs]\n\t"
#define LM_G8_PASSES2(each) LM_G8_PASS(each(LM_G8_2D1)) each(LM_G8_2SH) LM_G8_PASS(each(LM_G8_2D2))
/* a chunk of those groups */
#define LM_G8_CHUNK12(each, passes, dxstep, mins)                                           \
  LM_G8_CHUNK(each(LM_G8_2ZZ), each(LM_G8_2LD), LM_G8_GROUP(each, passes, mins, dxstep),      \
              each(LM_G8_2SV))
/* the chunk for the first n rows (n = 2, 4, 6) of a tile, with or without offsets */
#define LM_G8_CHUNK2(n, mins) LM_G8_CHUNK12(LM_G8_EACH2_##n, LM_G8_PASSES2, 48, mins)
#define LM_G8_M2(n) LM_G8_O LM_G8_EACH2_##n(LM_G8_2MN)

/* Three digits (4 rows of x, digit d of row i is row-digit d 4 + i): T in zmm 2i, 2i + 1 (formed
 * as with two digits), u = S3 in zmm 8 + 2i, 9 + 2i, C in zmm 16 + 2i, 17 + 2i; a last panel
 * of 1 or 2 rows runs the first 2. Row i's registers and offsets as with two digits, u in
 * (ua, ub), row-digits r1 = i, r2 = 4 + i, r3 = 8 + i. */
#define LM_G8_EACH3_2(f) f(0, 1, 8, 9, 16, 17, 0, 4, 8, 0, 16, 0) f(2, 3, 10, 11, 18, 19, 1, 5, 9, 4, 20, 128)
#define LM_G8_EACH3_4(f) LM_G8_EACH3_2(f) f(4, 5, 12, 13, 20, 21, 2, 6, 10, 8, 24, 256) \
                         f(6, 7, 14, 15, 22, 23, 3, 7, 11, 12, 28, 384)
#define LM_G8_3ST(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_STZ(ta, tb) LM_G8_ZZ(ua, ub)
#define LM_G8_3D1(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_DPZ(r1, ta, tb)
#define LM_G8_3SH(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_SHZ(ta, tb)
#define LM_G8_3D2(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_DPZ(r2, ta, tb)
#define LM_G8_3D3(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_DPZ(r3, ua, ub)
#define LM_G8_3EP(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_EP3(dxo, ta, tb, ua, ub, ca, cb)
#define LM_G8_3MN(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_MN(xso, ca, cb)
#define LM_G8_3ZZ(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_ZZ(ca, cb)
#define LM_G8_3LD(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_CLD(cto, ca, cb)
#define LM_G8_3SV(ta, tb, ua, ub, ca, cb, r1, r2, r3, dxo, xso, cto) LM_G8_CST(cto, ca, cb)
#define LM_G8_G3(each, mins)                                                                \
  each(LM_G8_3ST) LM_G8_PASS(each(LM_G8_3D1)) each(LM_G8_3SH)                                 \
  LM_G8_PASS(each(LM_G8_3D2) each(LM_G8_3D3))                                                \
  "vmovups %c[so](%[st]), %%zmm24\n\t" "vmovups %c[so]+64(%[st]), %%zmm25\n\t"                \
  each(LM_G8_3EP) mins "addq $32, %[dxs]\n\t"
/* zmm26 = 1/256 (0x3b800000) for the three digits' f */
#define LM_G8_K3 "movl $0x3b800000, %%eax\n\t" "vpbroadcastd %%eax, %%zmm26\n\t"
#define LM_G8_CHUNK3(n, mins)                                                               \
  LM_G8_CHUNK(LM_G8_K3 LM_G8_EACH3_##n(LM_G8_3ZZ), LM_G8_K3 LM_G8_EACH3_##n(LM_G8_3LD),      \
              LM_G8_G3(LM_G8_EACH3_##n, mins), LM_G8_EACH3_##n(LM_G8_3SV))
#define LM_G8_M3(n) LM_G8_O LM_G8_EACH3_##n(LM_G8_3MN)
/* One digit (12 rows of x, row-digit i; run as rows 0 .. 5 and 6 .. 11, the second with a,
 * dxs and ct moved to row 6): T in zmm 2i, 2i + 1, C in zmm 12 + 2i, 13 + 2i; row i's sum x at
 * byte 48 + 4i of dxs (12 rows' dx before it). Its rows take the two-digit operations (their
 * second row-digit, r2, unused). */
#define LM_G8_EACH1_2(f) f(0, 1, 12, 13, 0, -1, 0, 48, 0) f(2, 3, 14, 15, 1, -1, 4, 52, 128)
#define LM_G8_EACH1_4(f) LM_G8_EACH1_2(f) f(4, 5, 16, 17, 2, -1, 8, 56, 256) f(6, 7, 18, 19, 3, -1, 12, 60, 384)
#define LM_G8_EACH1_6(f) LM_G8_EACH1_4(f) f(8, 9, 20, 21, 4, -1, 16, 64, 512) f(10, 11, 22, 23, 5, -1, 20, 68, 640)
#define LM_G8_PASSES1(each) LM_G8_PASS(each(LM_G8_2D1))
#define LM_G8_CHUNK1(n, mins) LM_G8_CHUNK12(LM_G8_EACH1_##n, LM_G8_PASSES1, 96, mins)
#define LM_G8_M1(n) LM_G8_O LM_G8_EACH1_##n(LM_G8_2MN)

/* chunk(n, ...) with the offsets' terms (mins) or without */
#define LM_G8_PICK(chunk, n, m) do { if (mins) chunk(n, m(n)); else chunk(n, ""); } while (0)

/* ct[i][0 .. 32) += row i of panel p times the chunk's 32 rows of W over its ng groups
 * (starting at group g0 of X). With `first` (the chunk holds the product's first group) the
 * sums start at zero instead of ct's old values; with `out` (it holds the last) they go to
 * out[i] (C's row, columns masked by mk[v]; none when out[i] is NULL): C is written once,
 * with no zeroing or copy of ct. */
static inline __attribute__((always_inline)) void lm_g8_kernel(const lm_g8x *X, long p, long g0, long ng,
                                                               const lm_g8w *P, int G, int D, int mins,
                                                               float *ct, int first, float *const *out,
                                                               const __mmask16 mk[2]) {
  const int MR = lm_g8_mr(D), so = LM_G8_KC / G * LM_G8_NR * 4; /* bytes from start to s */
  const long rem = X->rows - p * MR; /* real rows of the tile */
  for (int h = 0; h < (D == 1 ? 2 : 1); h++) { /* one digit: rows 0 .. 5, then 6 .. 11 */
    const long rows = rem - 6 * h;
    if (rows <= 0) break;
    const unsigned char *a = (const unsigned char *)(X->a + (p * X->groups + g0) * LM_G8_ROWS * (G / 4)) + 6 * h * G;
    const int *b = P->b, *st = P->start;
    const float *dxs = X->dxs + (p * X->groups + g0) * 2 * MR + 6 * h;
    float *c = ct + 6 * h * LM_G8_NR;
    long n = ng;
    if (D == 2 && rows <= 2) LM_G8_PICK(LM_G8_CHUNK2, 2, LM_G8_M2);
    else if (D == 2 && rows <= 4) LM_G8_PICK(LM_G8_CHUNK2, 4, LM_G8_M2);
    else if (D == 2) LM_G8_PICK(LM_G8_CHUNK2, 6, LM_G8_M2);
    else if (D == 3 && rows <= 2) LM_G8_PICK(LM_G8_CHUNK3, 2, LM_G8_M3);
    else if (D == 3) LM_G8_PICK(LM_G8_CHUNK3, 4, LM_G8_M3);
    else if (rows <= 2) LM_G8_PICK(LM_G8_CHUNK1, 2, LM_G8_M1);
    else if (rows <= 4) LM_G8_PICK(LM_G8_CHUNK1, 4, LM_G8_M1);
    else LM_G8_PICK(LM_G8_CHUNK1, 6, LM_G8_M1);
  }
  for (int i = 0; out && i < MR; i++)
    for (int v = 0; out[i] && v < 2; v++)
      _mm512_mask_storeu_ps(out[i] + 16 * v, mk[v], _mm512_load_ps(ct + i * LM_G8_NR + 16 * v));
}

/* every panel of W (32 of its rows) times every row of x, for format q with D digits */
static inline __attribute__((always_inline)) void lm_g8_run(long M, long N, long K, const lm_mat *A,
                                                            const long *aoff, const lm_qmat *W,
                                                            const lm_out *C, const lm_g8x *X,
                                                            int q, int D) {
  const int G = q == LM_Q6_K ? 16 : 32, J = G / 4, MR = lm_g8_mr(D);
  const int mins = q == LM_Q4_1 || q == LM_Q4_K || q == LM_Q5_K;
  const long cg = LM_G8_KC / G, rows = X->rows;
  float *wrow = (float *)malloc(sizeof(float) * 2 * K), *tmp = wrow + K;
  long *bad = (long *)malloc(sizeof(long) * rows), nbad = -1;
  float *ct = (float *)aligned_alloc(64, sizeof(float) * LM_G8_NR * X->panels * MR);
  lm_g8w P;
  P.b = (int *)aligned_alloc(64, sizeof(int) * (cg * J * LM_G8_NR + 3 * cg * LM_G8_NR) + 16 * LM_G8_KC);
  P.start = P.b + cg * J * LM_G8_NR;
  P.s = (float *)(P.start + cg * LM_G8_NR);
  P.o = P.s + cg * LM_G8_NR;
  P.rows = (signed char *)(P.o + cg * LM_G8_NR);
  const long panels = (N + LM_G8_NR - 1) / LM_G8_NR;
  lm_for_begin(panels);
  for (long lo, hi; lm_for_next(&lo, &hi);)
    for (long t = lo; t < hi; t++) {
      const long n0 = t * LM_G8_NR, nc = N - n0 < LM_G8_NR ? N - n0 : LM_G8_NR;
      /* the panel's columns of C (only these: the other panels are other threads') */
      const __mmask16 mk[2] = {(__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1),
                               (__mmask16)(nc >= 32 ? 0xffff : nc > 16 ? (1u << (nc - 16)) - 1 : 0)};
      for (long g0 = 0; g0 < X->groups; g0 += cg) {
        const long ng = X->groups - g0 < cg ? X->groups - g0 : cg;
        const int last = g0 + ng == X->groups && C->dt == LM_F32; /* else ct, converted below */
        lm_g8_pack(W, q, G, N, n0, g0, ng, &P);
        for (long p = 0; p < X->panels; p++) {
          float *out[LM_G8_ROWS];
          for (int i = 0; last && i < MR; i++) {
            const long r = p * MR + i;
            out[i] = r < rows ? (float *)C->p + C->off[r / M] + r % M * C->rs + n0 : NULL;
          }
          lm_g8_kernel(X, p, g0, ng, &P, G, D, mins, ct + p * MR * LM_G8_NR, g0 == 0, last ? out : NULL, mk);
        }
      }
      if (C->dt != LM_F32)
        for (long r = 0; r < rows; r++) {
          const long at = C->off[r / M] + r % M * C->rs + n0;
          for (long j = 0; j < nc; j++) lm_put(C->p, C->dt, at + j, ct[r * LM_G8_NR + j]);
        }
      /* rows without a rounding: float dot products with W's decoded rows (NaN and
       * infinities propagate as in the float GEMM), over what the digits wrote; listed once
       * per thread (testing every row for every column cost 4% of a Gemma 3 prefill) */
      if (nbad < 0)
        for (long r = nbad = 0; r < rows; r++)
          if (X->bad[r]) bad[nbad++] = r;
      for (long j = 0; j < nc && nbad; j++) {
        lm_decode_row(W, n0 + j, 0, K, wrow);
        for (long b = 0; b < nbad; b++) {
          const long r = bad[b];
          const float *x = lm_row_f32(A->p, A->dt, aoff[r / M] + r % M * A->rs, A->ks, K, tmp);
          float acc = 0.0f;
          for (long k = 0; k < K; k++) acc = fmaf(x[k], wrow[k], acc);
          lm_put(C->p, C->dt, C->off[r / M] + r % M * C->rs + n0 + j, acc);
        }
      }
    }
  free(ct);
  free(P.b);
  free(wrow);
  free(bad);
}

static inline __attribute__((always_inline)) void lm_g8_run_q(long M, long N, long K, const lm_mat *A,
                                                              const long *aoff, const lm_qmat *W,
                                                              const lm_out *C, const lm_g8x *X, int D) {
  switch (W->q) {
    case LM_Q8_0: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q8_0, D); break;
    case LM_Q4_0: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q4_0, D); break;
    case LM_Q4_1: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q4_1, D); break;
    case LM_Q5_0: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q5_0, D); break;
    case LM_Q4_K: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q4_K, D); break;
    case LM_Q5_K: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q5_K, D); break;
    default: lm_g8_run(M, N, K, A, aoff, W, C, X, LM_Q6_K, D); break;
  }
}

/* C[b] = A[b] * W^T through int8 digits of x: 2 (x_prec LM_X_I16), 3 (LM_X_I24, float-like)
 * or 1 (LM_X_I8); 0 (nothing written) on machines without the instructions. One thread allocates
 * the digits, all round their share of the rows, then take panels of W. Whether a row has a
 * rounding is decided inside those loops, not by each thread before them: a thread that
 * arrives late (the others may have finished the whole product and gone on to overwrite x)
 * must run the same loops as the others, whatever it would read. */
int lm_q8_gemm(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
               const lm_qmat *W, const lm_out *C) {
  if (nb <= 0 || M <= 0 || N <= 0 || K <= 0) return 0;
  const int D = W->x_prec == LM_X_I8 ? 1 : W->x_prec == LM_X_I16 ? 2 : 3, MR = lm_g8_mr(D), G = W->q == LM_Q6_K ? 16 : 32;
  const int sums = W->q == LM_Q4_1 || W->q == LM_Q4_K || W->q == LM_Q5_K; /* W's offsets meet them */
  lm_g8x X;
  X.groups = K / G;
  X.rows = nb * M;
  X.panels = (X.rows + MR - 1) / MR;
  const size_t adw = (size_t)X.panels * X.groups * (G / 4) * LM_G8_ROWS;
  const size_t fl = (size_t)X.panels * MR * X.groups;
  lm_for_begin(1);
  for (long lo, hi; lm_for_next(&lo, &hi);)
    *lm_team_shared() = aligned_alloc(64, (sizeof(int) * (adw + X.rows) + 2 * sizeof(float) * fl + 63) / 64 * 64);
  void *mem = *lm_team_shared();
  X.a = (unsigned int *)mem;
  X.dxs = (float *)(X.a + adw);
  X.bad = (int *)(X.dxs + 2 * fl);
  float *tmp = (float *)malloc(sizeof(float) * K);
  lm_for_begin(X.panels);
  for (long lo, hi; lm_for_next(&lo, &hi);)
    for (long p = lo; p < hi; p++) {
      if (D == 3) lm_g8_panel(A, aoff, M, K, G, 3, sums, p, tmp, &X);
      else if (D == 2) lm_g8_panel(A, aoff, M, K, G, 2, sums, p, tmp, &X);
      else lm_g8_panel(A, aoff, M, K, G, 1, sums, p, tmp, &X);
    }
  free(tmp);
  if (D == 3) lm_g8_run_q(M, N, K, A, aoff, W, C, &X, 3);
  else if (D == 2) lm_g8_run_q(M, N, K, A, aoff, W, C, &X, 2);
  else lm_g8_run_q(M, N, K, A, aoff, W, C, &X, 1);
  lm_for_begin(1); /* once every loop reading the digits is done */
  for (long lo, hi; lm_for_next(&lo, &hi);) free(mem);
  return 1;
}
#else
/* no AVX-512 BW / DQ / VNNI: the float GEMM does all the work */
int lm_q8_gemm(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
               const lm_qmat *W, const lm_out *C) {
  (void)nb, (void)aoff, (void)M, (void)N, (void)K, (void)A, (void)W, (void)C;
  return 0;
}
#endif
