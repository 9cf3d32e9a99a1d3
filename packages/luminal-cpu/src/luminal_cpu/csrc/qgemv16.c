/* luminal-cpu: decode's quantized matvec with integer digits of x (the default setting, named
 * `int16`; x @ W.T for up to 4 rows of x, W a GGUF Q4_0 / Q4_1 / Q5_0 / Q4_K / Q5_K / Q6_K
 * matrix quantized along k, or a Q8_0 one in the packed layout).
 *
 * The float kernels (runtime.c's lm_qdot_row, kquant.c's lm_kq_dot_block) convert every weight
 * to a float, which costs more vector work than the memory system needs to deliver the weights
 * (Q4_K at about 40% of the copy bandwidth). qgemv.c's int8 activations remove that work but
 * round x to 8 bits, which moved SmolLM2's logits by up to 1.2 (one digit of 16 bits, 1.5e-5
 * max|x|, still moved them by 9e-3 through its outlier channels: a block holding an outlier
 * rounds the small values beside it coarsely). So each row of x is written as several integer
 * digits per value, float-like together, and the quants meet every digit in integer dot
 * products:
 * - Three signed byte digits (lm_q8x3_quantize, lm_k8x3_quantize): per block of 32 values (the
 *   32-value formats) or 256 (the K-quants in the packed layout), T = rint(x * 127 / max|x| *
 *   65536) = 65536 q1 + 256 q2 + q3 (balanced base 256), x held to 6.0e-8 max|x| per value.
 *   The quants are unsigned bytes (nibbles as they stand: `and 15` and lm_high_nibbles) in
 *   `vpdpbusd`, 64 products per instruction: per 64 bytes of nibbles 2 unpacking operations
 *   and 6 `vpdpbusd`. Bounds: lm_q8x3_group, lm_qr_rows16, lm_q8r_rows16, lm_qr_k_rows16,
 *   lm_qr_q6k_rows16.
 * - Two int16 digits (lm_q16x_quantize; the K-quants in GGUF's layout, whose rows a packed
 *   matrix cannot hold: rows not a multiple of 16): x = dx (q1 + q2 / 32768) with dx =
 *   max|x| / 32767 per block of 256, |q1| <= 32767, |q2| <= 16384, at most dx / 65536 = 4.7e-10
 *   max|x| per value. The weight quants are widened to int16 lanes and meet both digits in
 *   `vpdpwssd` (int16 pairs summed into int32 lanes; `vpmaddwd` + add without VNNI); the two
 *   int32 sums are joined in float (sum1 + sum2 / 32768) and the scales applied once per block.
 *   That costs 7 widening operations and 8 `vpdpwssd` per 64 bytes of nibbles, which left the
 *   packed K-quants compute-bound at one thread (Q4_K 13-19 GB/s, Q6_K 16-18 on Zen 4, against
 *   Q8_0's 28) before they moved to byte digits.
 *
 * GGUF-layout K-quants, lane order. The quants are widened without shuffles: the packed nibble
 * bytes are read as 16-bit words, and (w & 15), (w >> 4) & 15, (w >> 8) & 15, w >> 12 are four
 * vectors of int16 quants in an order fixed per format. The digits are stored in that same
 * order when x is rounded (a per-call O(K) pass; `lm_q16_order`), so the products pair up with
 * no shuffle. The integer sub-block scales multiply the int16 quants, so a whole 256-value
 * block sums in int32 and is converted once. Q4_K / Q5_K widen and scale in one step: the
 * nibbles are masked into bytes (two quants per int16 lane) and `vpmaddubsw` meets each with
 * its scale in the same byte of another vector whose other byte is zero. Their mins are applied
 * through per-sub-block sums of x (dx * sum of the digits, float). Q6_K's - 32 is applied in
 * int16 and its signed scales by `vpmullw`. Overflow (an int32 lane takes 2 products per
 * vector): Q6_K's largest product is |q - 32| * |scale| * |q1| <= 32 * 128 * 32767, 16 per
 * lane per block: 2,147,418,112 < 2^31 - 1 (the tightest); Q5_K 31 * 63 * 32767 * 16 =
 * 1.02e9; Q4_K 15 * 63 * 32767 * 16. A scaled quant (q * scale, at most 32 * 128 = 4096) fits
 * int16.
 *
 * Semantics: the dot product of the dequantized weights with x, up to float32 rounding (the
 * per-block scale products, dx's own rounding, the digits' joins: about 1e-7 relative to
 * sum |w x| per block) and x's rounding above (6.0e-8 max|x| with byte digits, 4.7e-10 with
 * int16 ones). A row of x that is not finite, or a block whose largest magnitude is below
 * LM_Q16X_TINY, has no such rounding: the call returns 0 and the caller runs the float
 * kernels, so NaN and infinities propagate as in the float product. Q8_0 in GGUF's layout (its
 * float kernel needs no widening; only the packed layout, lm_q8r_rows16, does fewer
 * operations) and machines without AVX-512 BW / VBMI return 0 too. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__) && defined(__F16C__)
#include <immintrin.h>
#define LM_Q16X_TINY 1e-30f

/* acc + the sums of adjacent int16 products a_i * b_i in 32-bit lanes */
static inline __m512i lm_dot16(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

/* the high nibble of each byte: one GFNI affine transform (a bit matrix that moves bits 4..7
 * to 0..3) in place of a shift and a mask */
static inline __m512i lm_high_nibbles(__m512i w) {
#if defined(__GFNI__)
  return _mm512_gf2p8affine_epi64_epi8(w, _mm512_set1_epi64(0x1020408000000000LL), 0);
#else
  return _mm512_and_si512(_mm512_srli_epi16(w, 4), _mm512_set1_epi8(15));
#endif
}

/* the four int16 quant vectors of 64 packed nibble bytes read as 32 words */
static inline __attribute__((always_inline)) void lm_nibble_words(__m512i w, __m512i v[4]) {
  const __m512i low4 = _mm512_set1_epi16(15);
  v[0] = _mm512_and_si512(w, low4);
  v[1] = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
  v[2] = _mm512_and_si512(_mm512_srli_epi16(w, 8), low4);
  v[3] = _mm512_srli_epi16(w, 12);
}

/* which value of its 256-value K-quant block int16 lane p of the stored qx holds: the lane
 * order lm_nibble_words gives each format */
static int lm_q16_order(int q, int p) {
  const int v = p / 32 % 4, w = p % 32, odd = v & 1, high = v >> 1;
  if (q == LM_Q6_K) /* half p/128; words 0..15 of ql's 64 bytes feed groups 0, 2 (low, high
                      * nibble), words 16..31 groups 1, 3 */
    return 128 * (p / 128) + 32 * ((w >= 16) + 2 * odd) + 2 * (w % 16) + high;
  /* Q4_K / Q5_K: 64 bytes of qs per p/128; byte l of its first 32 holds sub-block 4(p/128)
   * (low nibble) and + 1 (high), of its last 32 sub-blocks + 2 and + 3 */
  return 32 * (4 * (p / 128) + 2 * (w >= 16) + odd) + 2 * (w % 16) + high;
}

/* one row of x as integer digits, per span (a 256-value K-quant block, or a group of four
 * 32-value blocks). K-quants: q (two int16 digits: the block's first digits, then its second
 * ones, each in lm_q16_order), d (dx) and s (the 8 sub-blocks' sums of x). 32-value formats:
 * b (three byte digits, lm_q8x3_quantize), and 16 lanes each of d (dx / 65536 per int32 lane:
 * lanes 4i..4i+3 are block i's), s (dx / 65536 times the lane's sum of T: Q4_1's offset) and z
 * (Q4_0 / Q5_0: -8 / -16 times that sum of T: the lane's start); and for Q4_1 per 16 blocks bd
 * and bs, dx / 65536 and dx / 65536 times the block's sum of T, block 4g + k of the 16 at
 * 4k + g (lm_q8x3_16's order; the packed kernel's bd for every 32-value format); Q4_0 /
 * Q5_0 / Q8_0: per block j, bz[2j], bz[2j + 1]: -8 / -16 / -128 times the block's sums of q1
 * and of 256 q2 + q3 (lm_qr_rows16, lm_q8r_rows16) */
typedef struct {
  short *q;
  signed char *b;
  float *d, *s, *bd, *bs;
  int *z, *bz;
} lm_q16x;

static long lm_q16_span(int q) { return q >= LM_Q4_K ? 256 : 128; }

/* floats (and ints) of d / s / z per span */
static long lm_q16_lanes(int q) { return q >= LM_Q4_K ? 8 : 16; }

/* The 32-value formats round x[0..K) (K a multiple of 32) to T = rint(x * 127 / max|x| * 65536)
 * per block of 32, |T| <= 127 * 65536, written as three signed byte digits T = 65536 q1 +
 * 256 q2 + q3 with q2, q3 in -128..127 (balanced base 256; |q1| <= 127), so that the nibbles
 * (unsigned bytes) meet them in `vpdpbusd`. x is then held to 1 / 131072 of dx = max|x| / 127
 * per value (6.0e-8 max|x|) plus dx's float32 rounding. Byte p of a digit's 128 per span: x
 * value 32 (p % 64 / 16) + p % 16 + 16 (p >= 64), the order of lm_q8x3_group's nibble bytes
 * (low nibbles, then high ones). 0 when x has no such rounding; spans past K are zero. */
static int lm_q8x3_quantize(const float *restrict x, long K, int q, lm_q16x *out) {
  const long spans = (K + 127) / 128;
  for (long c = 0; c < spans; c++) {
    float *d = out->d + 16 * c, *s = out->s + 16 * c;
    int *z = out->z + 16 * c;
    signed char *b = out->b + 384 * c;
    long lane[16] = {0};
    const int zoff = q == LM_Q4_0 ? -8 : q == LM_Q5_0 ? -16 : q == LM_Q8_0 ? -128 : 0;
    for (int i = 0; i < 384; i++) b[i] = 0;
    for (int l = 0; l < 16; l++) d[l] = 0.0f;
    for (long k = 0; k < 4 && 128 * c + 32 * k < K; k++) {
      const float *xb = x + 128 * c + 32 * k;
      const __m512 v[2] = {_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)};
      /* x - x is NaN once any value is NaN or infinite */
      if (_mm512_cmp_ps_mask(_mm512_sub_ps(v[0], v[0]), _mm512_setzero_ps(), _CMP_NEQ_UQ) |
          _mm512_cmp_ps_mask(_mm512_sub_ps(v[1], v[1]), _mm512_setzero_ps(), _CMP_NEQ_UQ))
        return 0;
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
      if (amax > 0.0f && amax < LM_Q16X_TINY) return 0;
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f, dx = amax / 127.0f;
      /* |x id| <= 127 (id in float32, the product in double: exact), so |T| <= 127 * 65536 */
      const __m512d scale = _mm512_set1_pd((double)id * 65536.0);
      int tv[32], sums[2] = {0, 0};
      for (int h = 0; h < 2; h++) { /* values 16h .. 16h + 15, rounded to nearest even */
        const __m256 halves[2] = {_mm512_castps512_ps256(v[h]),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v[h]), 1))};
        __m256i t8[2];
        for (int i = 0; i < 2; i++) t8[i] = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_cvtps_pd(halves[i]), scale));
        const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(t8[0]), t8[1], 1);
        const __m512i k128 = _mm512_set1_epi32(128), k255 = _mm512_set1_epi32(255);
        const __m512i q3 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(t, k128), k255), k128);
        const __m512i t2 = _mm512_srai_epi32(_mm512_sub_epi32(t, q3), 8);
        const __m512i q2 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(t2, k128), k255), k128);
        const __m512i q1 = _mm512_srai_epi32(_mm512_sub_epi32(t2, q2), 8);
        signed char *at = b + 64 * h + 16 * k;
        _mm_storeu_si128((__m128i *)at, _mm512_cvtepi32_epi8(q1));
        _mm_storeu_si128((__m128i *)(at + 128), _mm512_cvtepi32_epi8(q2));
        _mm_storeu_si128((__m128i *)(at + 256), _mm512_cvtepi32_epi8(q3));
        _mm512_storeu_si512(tv + 16 * h, t);
        if (zoff) {
          sums[0] += _mm512_reduce_add_epi32(q1);
          sums[1] += _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q2, 8), q3));
        }
      }
      if (zoff) out->bz[8 * c + 2 * k] = zoff * sums[0], out->bz[8 * c + 2 * k + 1] = zoff * sums[1];
      for (int i = 0; i < 32; i++) lane[4 * k + i % 16 / 4] += tv[i];
      for (int l = 0; l < 4; l++) d[4 * k + l] = dx / 65536.0f;
      /* block 4c + k of the row: at 4k + c % 4 of its 16 */
      out->bd[16 * (c / 4) + 4 * k + c % 4] = dx / 65536.0f;
      if (q == LM_Q4_1) {
        const long sum = lane[4 * k] + lane[4 * k + 1] + lane[4 * k + 2] + lane[4 * k + 3];
        out->bs[16 * (c / 4) + 4 * k + c % 4] = dx / 65536.0f * (float)sum;
      }
    }
    /* per int32 lane, from its own 8 values: no lane carries a large term that another
     * cancels (an outlier of x would make it large); |8 * 16 * T| < 2^31 */
    for (int l = 0; l < 16; l++) {
      z[l] = q == LM_Q4_0 ? -8 * (int)lane[l] : q == LM_Q5_0 ? -16 * (int)lane[l] : 0;
      s[l] = d[l] * (float)lane[l];
    }
  }
  return 1;
}

/* max|x| of the 256 values at xb into *amax; 0 when they have no rounding into digits (a NaN
 * or an infinity, or 0 < max|x| < LM_Q16X_TINY) */
static inline int lm_block256_amax(const float *restrict xb, float *amax) {
  __m512 mx = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int i = 0; i < 16; i++) {
    const __m512 v = _mm512_loadu_ps(xb + 16 * i);
    /* x - x is NaN once any value is NaN or infinite */
    bad |= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_NEQ_UQ);
    mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
  }
  *amax = _mm512_reduce_max_ps(mx);
  return !bad && !(*amax > 0.0f && *amax < LM_Q16X_TINY);
}

/* The packed K-quants (lm_qr_k_rows16, lm_qr_q6k_rows16) round x[0..K) (K a multiple of 256)
 * as the 32-value formats do, per block of 256: T = rint(x * 127 / max|x| * 65536), |T| <=
 * 127 * 65536, as three signed byte digits T = 65536 q1 + 256 q2 + q3 (|q1| <= 127, q2 and q3
 * in -128..127), each digit's 256 bytes in x's own order (768 bytes per block at b + 768 c).
 * x is held to 1 / 131072 of dx = max|x| / 127 per value (6.0e-8 max|x|) plus dx's float32
 * rounding. d[c] = dx / 65536; s[8c + j] = dx / 65536 times sub-block j's (32 values) exact
 * sum of T (Q4_K / Q5_K's mins); bz[32c + 2j], bz[32c + 2j + 1] = -32 times the 16-value
 * sub-block j's sums of q1 and of 256 q2 + q3 (Q6_K's - 32; |.| <= 32 * 16 * 127 and 32 * 16 *
 * 128 * 257). 0 when x has no such rounding (NaN, infinities, 0 < max|x| < LM_Q16X_TINY). */
static int lm_k8x3_quantize(const float *restrict x, long K, lm_q16x *out) {
  const __m512i k128 = _mm512_set1_epi32(128), k255 = _mm512_set1_epi32(255);
  for (long c = 0; c < K / 256; c++) {
    const float *xb = x + 256 * c;
    float amax;
    if (!lm_block256_amax(xb, &amax)) return 0;
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f, dx = amax / 127.0f;
    /* |x id| <= 127 (id in float32, the product in double: exact), so |T| <= 127 * 65536 */
    const __m512d scale = _mm512_set1_pd((double)id * 65536.0);
    signed char *b = out->b + 768 * c;
    for (int i = 0; i < 16; i++) { /* values 16i .. 16i + 15: 16-value sub-block i */
      const __m512 v = _mm512_loadu_ps(xb + 16 * i);
      const __m256 halves[2] = {_mm512_castps512_ps256(v),
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))};
      __m256i t8[2];
      for (int k = 0; k < 2; k++) t8[k] = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_cvtps_pd(halves[k]), scale));
      const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(t8[0]), t8[1], 1);
      const __m512i q3 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(t, k128), k255), k128);
      const __m512i t2 = _mm512_srai_epi32(_mm512_sub_epi32(t, q3), 8);
      const __m512i q2 = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(t2, k128), k255), k128);
      const __m512i q1 = _mm512_srai_epi32(_mm512_sub_epi32(t2, q2), 8);
      _mm_storeu_si128((__m128i *)(b + 16 * i), _mm512_cvtepi32_epi8(q1));
      _mm_storeu_si128((__m128i *)(b + 256 + 16 * i), _mm512_cvtepi32_epi8(q2));
      _mm_storeu_si128((__m128i *)(b + 512 + 16 * i), _mm512_cvtepi32_epi8(q3));
      const int s1 = _mm512_reduce_add_epi32(q1);
      const int s23 = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q2, 8), q3));
      out->bz[32 * c + 2 * i] = -32 * s1, out->bz[32 * c + 2 * i + 1] = -32 * s23;
      /* |sum of T| over 32 values <= 32 * 127 * 65536 < 2^31 */
      out->z[16 * c + i] = _mm512_reduce_add_epi32(t);
    }
    out->d[c] = dx / 65536.0f;
    for (int j = 0; j < 8; j++) out->s[8 * c + j] = dx / 65536.0f * (float)(out->z[16 * c + 2 * j] + out->z[16 * c + 2 * j + 1]);
  }
  return 1;
}

/* lm_q16_order as one `vpermt2w` per 32 lanes: lanes 32j .. 32j + 31 of a block's digits are
 * words idx[j] of the two 32-value chunks of x src[j][0] (words 0..31) and src[j][1] (32..63).
 * Every format's lanes 32j .. 32j + 15 read one chunk and the other 16 one more (see
 * lm_q16_order), so two chunks suffice. */
typedef struct {
  short idx[8][32];
  int src[8][2];
} lm_q16_perm;

static void lm_q16_perm_of(int q, lm_q16_perm *pm) {
  for (int j = 0; j < 8; j++) {
    pm->src[j][0] = lm_q16_order(q, 32 * j) / 32;
    pm->src[j][1] = lm_q16_order(q, 32 * j + 16) / 32;
    for (int w = 0; w < 32; w++)
      pm->idx[j][w] = (short)(lm_q16_order(q, 32 * j + w) - 32 * pm->src[j][w >= 16] + 32 * (w >= 16));
  }
}

/* the K-quants: rounds x[0..K) (K a multiple of 256) to two int16 digits per value; 0 when x
 * has no such rounding (see above). In AVX-512, 16 values at a time (the scalar loop took
 * about 10 TSC cycles a value, 8 us per row of x at K = 2048 on every call). */
static int lm_q16x_quantize(const float *restrict x, long K, const lm_q16_perm *pm, lm_q16x *out) {
  const int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (long c = 0; c < K / 256; c++) {
    const float *xb = x + 256 * c;
    float amax;
    if (!lm_block256_amax(xb, &amax)) return 0;
    /* x = dx (q1 + q2 / 32768) with |q1| <= 32767, |q2| <= 16384 (|x id - q1| <= 1/2, and
     * the residual is computed in double: exact for these operands) */
    const float id = amax > 0.0f ? 32767.0f / amax : 0.0f, dx = amax / 32767.0f;
    const __m512d scale = _mm512_set1_pd((double)id), unit = _mm512_set1_pd(32768.0);
    __m512i chunk[2][8]; /* per digit, the 32-value chunks as words */
    for (int g = 0; g < 8; g++) {
      __m256i words[2][2];
      __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (int h = 0; h < 2; h++) {
        const __m512 v = _mm512_loadu_ps(xb + 32 * g + 16 * h);
        const __m256 halves[2] = {_mm512_castps512_ps256(v),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))};
        __m256i q[2][2];
        for (int i = 0; i < 2; i++) {
          const __m512d scaled = _mm512_mul_pd(_mm512_cvtps_pd(halves[i]), scale);
          const __m512d q1 = _mm512_roundscale_pd(scaled, round);
          q[0][i] = _mm512_cvtpd_epi32(q1);
          q[1][i] = _mm512_cvtpd_epi32(_mm512_roundscale_pd(_mm512_mul_pd(_mm512_sub_pd(scaled, q1), unit), round));
        }
        for (int digit = 0; digit < 2; digit++) {
          const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(q[digit][0]), q[digit][1], 1);
          sum[digit] = _mm512_add_epi32(sum[digit], t);
          words[digit][h] = _mm512_cvtepi32_epi16(t);
        }
      }
      for (int digit = 0; digit < 2; digit++)
        chunk[digit][g] = _mm512_inserti64x4(_mm512_castsi256_si512(words[digit][0]), words[digit][1], 1);
      /* the sub-block's sum of x / dx, from exact integer sums of each digit */
      const double bsum = (double)_mm512_reduce_add_epi32(sum[0]) + (double)_mm512_reduce_add_epi32(sum[1]) / 32768.0;
      out->s[8 * c + g] = dx * (float)bsum;
    }
    out->d[c] = dx;
    short *qc = out->q + 512 * c;
    for (int digit = 0; digit < 2; digit++)
      for (int j = 0; j < 8; j++)
        _mm512_storeu_si512(qc + 256 * digit + 32 * j,
                            _mm512_permutex2var_epi16(chunk[digit][pm->src[j][0]], _mm512_loadu_si512(pm->idx[j]),
                                                      chunk[digit][pm->src[j][1]]));
  }
  return 1;
}

/* the int32 lanes of the sums over x's two digits, as one float: sum[0] + sum[1] / 32768 */
static inline __m512 lm_digits(const __m512i sum[2]) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[1]), _mm512_set1_ps(1.0f / 32768.0f), _mm512_cvtepi32_ps(sum[0]));
}

/* ----- Q4_0 / Q4_1 / Q5_0: four blocks per step ------------------------------------------ */
/* acc + the sums of 4 adjacent products u_i * s_i (u unsigned, s signed bytes) in 32-bit
 * lanes; without VNNI |u_i s_i + u_j s_j| <= 2 * 31 * 128 does not saturate `vpmaddubsw` */
static inline __m512i lm_dot8(__m512i acc, __m512i u, __m512i s) {
#if defined(__AVX512VNNI__)
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

/* The nibble bytes of 4 blocks are gathered by one `vpermt2b` (byte 16i + j: byte j of block i)
 * and split into two vectors of unsigned quants, values j and 16 + j of block i at byte
 * 16i + j, so int32 lanes 4i..4i+3 hold block i's sums. The three digits of x meet them in one
 * chain of 6 `vpdpbusd` with two 8-bit shifts between the digits, which leaves sum(q T) in each
 * lane, T = 65536 q1 + 256 q2 + q3: exact, |8 * 31 * 127 * 65536 + 8 * 31 * 128 * 257| =
 * 2,072,510,464 < 2^31 - 1 (Q5_0, the largest quants) at every step of the chain. */

/* the quants of blocks 0..n-1 (1 to 4) at blk as u[2] (above); lo, hi: the group's first 64
 * bytes and the rest */
static inline __attribute__((always_inline)) void lm_q8x3_quants(
    const unsigned char *restrict blk, int n, int q, __m512i *lo, __m512i *hi, __m512i u[2]) {
  const int bb = (int)lm_block_bytes(q), at = (int)lm_nibbles_at(q), bytes = n * bb;
  *lo = _mm512_maskz_loadu_epi8(bytes >= 64 ? ~0ULL : (1ULL << bytes) - 1, blk);
  *hi = bytes > 64 ? _mm512_maskz_loadu_epi8((1ULL << (bytes - 64)) - 1, blk + 64) : _mm512_setzero_si512();
  unsigned char idx[64];
  for (int i = 0; i < 64; i++) idx[i] = (unsigned char)(i / 16 * bb + at + i % 16);
  const __m512i nib = _mm512_permutex2var_epi8(*lo, _mm512_loadu_si512(idx), *hi);
  u[0] = _mm512_and_si512(nib, _mm512_set1_epi8(15));
  u[1] = lm_high_nibbles(nib);
  if (q == LM_Q5_0) { /* fifth bit of value v of block i: bit v of its 32-bit qh */
    unsigned long long fifth[2] = {0, 0};
    for (int i = 0; i < n; i++) {
      unsigned int qh;
      memcpy(&qh, blk + i * bb + 2, 4);
      fifth[0] |= (unsigned long long)(qh & 0xFFFF) << 16 * i;
      fifth[1] |= (unsigned long long)(qh >> 16) << 16 * i;
    }
    for (int h = 0; h < 2; h++) u[h] = _mm512_mask_add_epi8(u[h], fifth[h], u[h], _mm512_set1_epi8(16));
  }
}

/* per int32 lane: sum(q T) of its 8 values (Q4_0 / Q5_0: of (q - 8) T, (q - 16) T), span c */
static inline __attribute__((always_inline)) __m512i lm_q8x3_dot(const __m512i u[2], const lm_q16x *x,
                                                                 long c, int q) {
  const signed char *xb = x->b + 384 * c;
  __m512i sum = _mm512_setzero_si512();
  for (int digit = 0; digit < 3; digit++) {
    if (digit) sum = _mm512_slli_epi32(sum, 8);
    sum = lm_dot8(sum, u[0], _mm512_loadu_si512(xb + 128 * digit));
    sum = lm_dot8(sum, u[1], _mm512_loadu_si512(xb + 128 * digit + 64));
  }
  return q == LM_Q4_1 ? sum : _mm512_add_epi32(sum, _mm512_loadu_si512(x->z + 16 * c));
}

/* blocks 4c .. 4c + 3 of one row of W (n of them there, 1 to 4) times those of each row of x:
 * the scales per int32 lane (the row's last groups) */
static inline __attribute__((always_inline)) void lm_q8x3_group(
    const unsigned char *restrict blk, long c, int n, const lm_q16x *x, int q, int M,
    __m512 *acc) {
  const int bb = (int)lm_block_bytes(q);
  __m512i lo, hi, u[2];
  lm_q8x3_quants(blk, n, q, &lo, &hi, u);
  /* word `at` of block i over lanes 4i..4i+3 (f16 scale: at = 0; Q4_1's offset: 1) */
  short di[32], mi[32];
  for (int i = 0; i < 32; i++) di[i] = (short)(i < 16 ? i / 4 * bb / 2 : 0), mi[i] = (short)(di[i] + 1);
  const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(lo, _mm512_loadu_si512(di), hi)));
  __m512 mw = _mm512_setzero_ps();
  if (q == LM_Q4_1)
    mw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(lo, _mm512_loadu_si512(mi), hi)));
  for (int m = 0; m < M; m++) {
    const __m512 sum = _mm512_cvtepi32_ps(lm_q8x3_dot(u, x + m, c, q));
    acc[m] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dw, _mm512_loadu_ps(x[m].d + 16 * c)), acc[m]);
    if (q == LM_Q4_1) acc[m] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(x[m].s + 16 * c), acc[m]);
  }
}

/* Q4_1's blocks 16e .. 16e + 15 (four groups) of one row of W times those of each row of x. The
 * scales and offsets are applied once per 16 blocks: each group's lanes (float) are summed per
 * block, block 4g + k landing in lane 4k + g of one vector, and the 16 f16 scales and offsets
 * are gathered into that order by one merging word permute per group and converted at once
 * (Q4_1 in L2 on Zen 4: 10.7 TSC cycles per group against 13.0 with both per group; Q4_0 and
 * Q5_0, with no offset to batch, measured no faster this way). */
static inline __attribute__((always_inline)) void lm_q8x3_16(
    const unsigned char *restrict blk, long e, const lm_q16x *x, int M, __m512 *acc) {
  const int bb = (int)lm_block_bytes(LM_Q4_1);
  __m512 f[LM_GEMV_MAX_M][4];
  __m512i dm = _mm512_setzero_si512();
  for (int g = 0; g < 4; g++) {
    __m512i lo, hi, u[2];
    lm_q8x3_quants(blk + 4 * g * bb, 4, LM_Q4_1, &lo, &hi, u);
    /* word 4k + g: d of block k, word 16 + 4k + g: its m */
    short idx[32];
    for (int w = 0; w < 32; w++) idx[w] = (short)(w % 16 / 4 * bb / 2 + w / 16);
    dm = _mm512_mask_permutexvar_epi16(dm, 0x11111111u << g, _mm512_loadu_si512(idx), lo);
    for (int m = 0; m < M; m++) f[m][g] = _mm512_cvtepi32_ps(lm_q8x3_dot(u, x + m, 4 * e + g, LM_Q4_1));
  }
  const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
  const __m512 mw = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1));
  for (int m = 0; m < M; m++) {
    /* per 128-bit lane k: f[g] holds block k of group g in 4 floats; pairs, then quads */
    const __m512 p = _mm512_add_ps(_mm512_unpacklo_ps(f[m][0], f[m][1]), _mm512_unpackhi_ps(f[m][0], f[m][1]));
    const __m512 r = _mm512_add_ps(_mm512_unpacklo_ps(f[m][2], f[m][3]), _mm512_unpackhi_ps(f[m][2], f[m][3]));
    const __m512 sum = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(p), _mm512_castps_pd(r))),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(p), _mm512_castps_pd(r))));
    acc[m] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dw, _mm512_loadu_ps(x[m].bd + 16 * e)), acc[m]);
    acc[m] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(x[m].bs + 16 * e), acc[m]);
  }
}

/* ----- the 32-value formats' prefetch --------------------------------------------------- */
/* With 2 to 4 rows of x the packed 32-value kernels (lm_qr_rows16, lm_q8r_rows16) request a
 * block's lines LM_QR_AHEAD bytes ahead into L2 per block. One thread from DRAM, Zen 4, ns a
 * block of 16 rows at 4 rows of x: Q4_0 37-41 against 51-60 without, Q4_1 35-41 against
 * 44-46, Q5_0 37-42 against 50-62, Q8_0 38-42 against 52-77 (2 rows: Q8_0 22 against 25, the
 * others equal; 4096 bytes ahead the same but for Q8_0 at 2 rows, 2304 into L1 36-42). One
 * row is left without: there the hardware prefetcher keeps up (Q4_0 / Q5_0 the same with
 * any distance, Q8_0 14.3 against 16-22). $CC="gcc -DLM_QR_AHEAD=..." builds another
 * distance to measure. */
#ifndef LM_QR_AHEAD
#define LM_QR_AHEAD 8192
#endif
static inline __attribute__((always_inline)) void lm_qr_prefetch(const unsigned char *p, long bytes, int M) {
  for (long i = 0; M > 1 && i < (bytes + 63) / 64; i++) _mm_prefetch((const char *)p + LM_QR_AHEAD + 64 * i, _MM_HINT_T1);
}

/* ----- Q4_0 / Q4_1 / Q5_0 with rows interleaved by 16 (lm_qmat.packed) --------------------- */
/* One 32-value block of 16 rows per step, each row in its own int32 lane: the four 64-byte
 * quant vectors load whole (no gather; Q5_0's fifth bits join them through one
 * `vpshufbitqmb` mask per vector and half, lm_q5r_fifth), the low and high nibbles of vector
 * v (values 4v .. 4v + 3 and 16 + 4v .. of each row) meet x's digit dwords broadcast to every
 * lane, and the 16 rows' d (and Q4_1's m) convert in one `vcvtph2ps`: no reduction across
 * lanes per block. Per digit and half (low, high nibbles) a chain of 4 `vpdpbusd` (6 short
 * chains: one chain per half with the shifts between the digits measured 6-8% slower at one
 * row of x, its latency showing), each summing 16 values.
 * - Q4_1: joined per half as (S1 * 256 + S2) * 256 + S3, |16 * 15 * (127 * 65536 + 128 *
 *   257)| = 2,005,432,320 < 2^31 - 1 at every step; the halves join in float: one rounding
 *   where the GGUF kernel (lm_q8x3_16) rounds four 8-value lane sums, so results differ from
 *   it in the last bits (both within float32 rounding of the exact sum of the digit products).
 * - Q4_0 / Q5_0: a half's join would not fit int32 (16 * 31 * 127 * 65536 > 2^31), so the
 *   block's sum stays two exact integers, S1 + z1 (|.| <= 32 * 31 * 127 + 16 * 32 * 127) and
 *   256 S2 + S3 + z2 (< 2^26; z: -8 / -16 times the block's digit sums, x's bz), joined as
 *   (S1 + z1) * 65536 + (256 S2 + S3 + z2) in one `vfmadd`: one rounding (two when the low
 *   part passes 2^24) where the GGUF kernel rounds four lane sums. */
static inline __attribute__((always_inline)) void lm_qr_rows16(
    const unsigned char *restrict w, long blocks, const lm_q16x *x, int q, int M, __m512 *acc) {
  const long gb = 16 * lm_block_bytes(q), nib = 16 * lm_nibbles_at(q);
  for (long j = 0; j < blocks; j++, w += gb) {
    lm_qr_prefetch(w, gb, M);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
    __m512 mw = _mm512_setzero_ps();
    __m512i qh = _mm512_setzero_si512();
    if (q == LM_Q4_1) mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 32)));
    if (q == LM_Q5_0) qh = _mm512_loadu_si512(w + 32);
    __m512i u[2][4];
    for (int v = 0; v < 4; v++) {
      const __m512i qv = _mm512_loadu_si512(w + nib + 64 * v);
      u[0][v] = _mm512_and_si512(qv, _mm512_set1_epi8(15));
      u[1][v] = lm_high_nibbles(qv);
      if (q == LM_Q5_0)
        for (int h = 0; h < 2; h++)
          u[h][v] = _mm512_mask_add_epi8(u[h][v], lm_q5r_fifth(qh, v, h), u[h][v], _mm512_set1_epi8(16));
    }
    /* block j is block j % 4 of x's span j / 4: its low values' digit bytes at 16 (j % 4),
     * its high values' at 64 + 16 (j % 4) of each digit's 128 (lm_q8x3_quantize) */
    const long c = j / 4, k = j % 4, at = 16 * (c / 4) + 4 * k + c % 4;
    for (int m = 0; m < M; m++) {
      const signed char *xb = x[m].b + 384 * c + 16 * k;
      __m512i part[3][2];
      for (int digit = 0; digit < 3; digit++)
        for (int h = 0; h < 2; h++) {
          part[digit][h] = _mm512_setzero_si512();
          for (int v = 0; v < 4; v++) {
            int dword;
            memcpy(&dword, xb + 128 * digit + 64 * h + 4 * v, 4);
            part[digit][h] = lm_dot8(part[digit][h], u[h][v], _mm512_set1_epi32(dword));
          }
        }
      __m512 f;
      if (q == LM_Q4_1) {
        __m512i sum[2];
        for (int h = 0; h < 2; h++)
          sum[h] = _mm512_add_epi32(
              _mm512_slli_epi32(_mm512_add_epi32(_mm512_slli_epi32(part[0][h], 8), part[1][h]), 8), part[2][h]);
        f = _mm512_add_ps(_mm512_cvtepi32_ps(sum[0]), _mm512_cvtepi32_ps(sum[1]));
      } else {
        const __m512i high = _mm512_add_epi32(_mm512_add_epi32(part[0][0], part[0][1]), _mm512_set1_epi32(x[m].bz[2 * j]));
        const __m512i low = _mm512_add_epi32(
            _mm512_slli_epi32(_mm512_add_epi32(part[1][0], part[1][1]), 8),
            _mm512_add_epi32(_mm512_add_epi32(part[2][0], part[2][1]), _mm512_set1_epi32(x[m].bz[2 * j + 1])));
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
      }
      acc[m] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(x[m].bd[at])), acc[m]);
      if (q == LM_Q4_1) acc[m] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x[m].bs[at]), acc[m]);
    }
  }
}

/* Q8_0 with rows interleaved by 16: per block, the 16 rows' d, then 8 quant vectors, int32
 * lane i of vector v holding quants 4v .. 4v + 3 of row i. The signed quants are made unsigned
 * for `vpdpbusd` by flipping their top bit (q + 128), which x's bz removes (-128 times the
 * block's digit sums). Per digit a chain of 8 `vpdpbusd`, each summing 4 values of every row:
 * 24 per 16 blocks, and one conversion, join and scale per 16 rows, against about 10 vector
 * operations per block of the float kernel (lm_qdot_row: widen, convert, multiply, its own d),
 * which cannot keep up with DRAM (1.7 ns a block from L2 as from DRAM at one thread).
 * The join is Q5_0's (lm_qr_rows16): S1 + z1 (|.| <= 32 * 128 * 127; |S1| <= 32 * 255 * 127
 * before z1) and 256 S2 + S3 + z2 (|.| <= 256 * 32 * 255 * 128 + 32 * 255 * 128 +
 * 128 * 32 * 32896 = 403,800,064 < 2^31 - 1 at every step), joined as
 * (S1 + z1) * 65536 + (256 S2 + S3 + z2) in one `vfmadd`. */
static inline __attribute__((always_inline)) void lm_q8r_rows16(
    const unsigned char *restrict w, long blocks, const lm_q16x *x, int M, __m512 *acc) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  for (long j = 0; j < blocks; j++, w += 16 * 34) {
    lm_qr_prefetch(w, 16 * 34, M);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
    __m512i u[8];
    for (int v = 0; v < 8; v++) u[v] = _mm512_xor_si512(_mm512_loadu_si512(w + 32 + 64 * v), flip);
    /* block j is block j % 4 of x's span j / 4: values 4v .. 4v + 3 at 16 (j % 4) + 4v (v < 4),
     * 64 + 16 (j % 4) + 4 (v - 4) (v >= 4) of each digit's 128 (lm_q8x3_quantize) */
    const long c = j / 4, k = j % 4, at = 16 * (c / 4) + 4 * k + c % 4;
    for (int m = 0; m < M; m++) {
      const signed char *xb = x[m].b + 384 * c + 16 * k;
      __m512i part[3];
      for (int digit = 0; digit < 3; digit++) {
        part[digit] = _mm512_setzero_si512();
        for (int v = 0; v < 8; v++) {
          int dword;
          memcpy(&dword, xb + 128 * digit + 64 * (v / 4) + 4 * (v % 4), 4);
          part[digit] = lm_dot8(part[digit], u[v], _mm512_set1_epi32(dword));
        }
      }
      const __m512i high = _mm512_add_epi32(part[0], _mm512_set1_epi32(x[m].bz[2 * j]));
      const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(part[1], 8),
                                           _mm512_add_epi32(part[2], _mm512_set1_epi32(x[m].bz[2 * j + 1])));
      const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
      acc[m] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(x[m].bd[at])), acc[m]);
    }
  }
}

/* ----- Q4_K / Q5_K / Q6_K with rows interleaved by 16 (lm_qmat.packed) ---------------------- */
/* acc + u . the 4 signed bytes at p broadcast to every int32 lane (`vpdpbusd` with an embedded
 * broadcast: GCC loads the dword into a register of its own with `vpbroadcastd` instead) */
static inline __attribute__((always_inline)) __m512i lm_dot8_at(__m512i acc, __m512i u, const signed char *p) {
#if defined(__AVX512VNNI__)
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const int *)p));
  return acc;
#else
  int dword;
  memcpy(&dword, p, 4);
  return lm_dot8(acc, u, _mm512_set1_epi32(dword));
#endif
}

/* The packed K-quant kernels request the lines of the block LM_KQ_AHEAD blocks ahead into L2,
 * spread over the current block's vectors. One row of x, 64 MB of weights from DRAM, Zen 4, GB/s
 * at 1 / 2 threads (gemvab, alternating rounds of one run): 3 blocks ahead Q4_K 21.6 / 41.8,
 * Q5_K 26.4 / 42.3, Q6_K 28.8 / 39.5, against Q4_K 18.3 / 36.6 one block ahead into L1 (the
 * int16 kernel's choice), Q5_K 22.5 / 39.9 and Q6_K 23.2 / 39.4 two ahead into L2; 4 ahead
 * 23.3 / 41.1, 27.8 / 37.2, 30.1 / 35.8. $CC="gcc -DLM_KQ_AHEAD=..." builds another distance. */
#ifndef LM_KQ_AHEAD
#define LM_KQ_AHEAD 3
#endif

/* a prefetch that stays where it is written: GCC moves `_mm_prefetch` freely, and in the fully
 * unrolled K-quant loops it gathered a block's 32 to 64 prefetches at the block's start, where
 * they stalled the loads (Q6_K 5 GB/s against 20 spread over the block, one thread, Zen 4). A
 * volatile asm is not reordered against the others. level 0: into L1 (prefetcht0), 1: L2. */
static inline __attribute__((always_inline)) void lm_prefetch_at(const void *p, int level) {
  if (level == 0) __asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
  else __asm__ volatile("prefetcht1 %0" : : "m"(*(const char *)p));
}

/* Q4_K / Q5_K with rows interleaved by 16 (lm_qmat.packed): one 256-value block of 16 rows per
 * step, row i in int32 lane i of every vector. Quant vector v holds bytes 4v .. 4v + 3 of each
 * row's 128 (pair p = v / 8 of sub-blocks: values 4 (v % 8) .. + 3 of sub-block 2p in the low
 * nibbles, of 2p + 1 in the high ones). `and 15` and the high nibbles (lm_high_nibbles; Q5_K's
 * fifth bits from qh vector v % 8 joined by lm_q5kr_fifth) are the unsigned byte operands of
 * `vpdpbusd` as they stand, and the x digit dword they meet is 4 consecutive values of x,
 * 32 (2p + h) + 4 (v % 8) (lm_k8x3_quantize's natural order), broadcast to every lane: per
 * vector 2 unpacking operations and 6 `vpdpbusd` (2 halves x 3 digits, each its own chain, so
 * that 6 chains per row of x run side by side), against 7 widening operations and 8
 * `vpdpwssd` for GGUF's layout's int16 digits. Per sub-block j and lane, each digit's sum S_d
 * (32 products; |S1| <= 32 * 31 * 127 = 125,984, |S2|, |S3| <= 32 * 31 * 128 = 126,976 for
 * Q5_K's 31, Q4_K 15: 60,960 and 61,440) is exact; they are joined as
 *   f_j = float((S1 << 8) + S2) * 256 + float(S3)
 * (|(S1 << 8) + S2| <= 32,378,880 < 2^31: exact in int32, and below 2^24 for Q4_K, where the
 * conversion is exact; Q5_K's may round once; then one rounding in the `vfmadd`), and per row
 * the block is
 *   (dx / 65536) sum_j (d sc_j) f_j - dmin sum_j m_j s_j
 * (s_j: x's sub-block sums, dx / 65536 times the exact sum of T), in the order written (the
 * GGUF kernel takes x in int16 digits: results differ in the last bits). The 16 rows' 6-bit
 * scales and mins are unpacked for all lanes at once (lm_q4kr_scales), d and dmin convert in
 * one `vcvtph2ps` each. The loops are unrolled whole (`#pragma GCC unroll`) so that the chains
 * stay in registers (objdump at M = 1: 192 `vpdpbusd` with their x dword as an embedded
 * broadcast, no spills). */
static inline __attribute__((always_inline)) void lm_qr_k_rows16(
    const unsigned char *restrict w, long blocks, const lm_q16x *x, int q, int M, __m512 *acc) {
  const long gb = 16 * lm_kq_block_bytes(q), lines = gb / 64, qs = gb - 16 * 128;
  const __m512i low4 = _mm512_set1_epi8(15);
  for (long c = 0; c < blocks; c++, w += gb) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 32)));
    __m512i sc[2], mn[2];
    lm_q4kr_scales(w, sc, mn);
    __m512i qh[8];
    for (int t = 0; t < 8 && q == LM_Q5_K; t++) qh[t] = _mm512_loadu_si512(w + 256 + 64 * t);
    __m512 dot[LM_GEMV_MAX_M], mins[LM_GEMV_MAX_M];
    for (int m = 0; m < M; m++) dot[m] = mins[m] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
      /* per row of x: the int32 sums of sub-block 2p + h (h = 0: low nibbles, 1: high), digit */
      __m512i sum[LM_GEMV_MAX_M][2][3];
      for (int m = 0; m < M; m++)
        for (int h = 0; h < 2; h++) sum[m][h][0] = sum[m][h][1] = sum[m][h][2] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int t = 0; t < 8; t++) {
        const long v = 8 * p + t;
        const __m512i qv = _mm512_loadu_si512(w + qs + 64 * v);
        __m512i u[2] = {_mm512_and_si512(qv, low4), lm_high_nibbles(qv)};
        if (q == LM_Q5_K)
          for (int h = 0; h < 2; h++) u[h] = lm_q5kr_fifth(u[h], qh[t], 2 * p + h);
        /* the lines of the block LM_KQ_AHEAD blocks on (Q4_K 36, Q5_K 44), one or two per
         * vector, into L2 (see LM_KQ_AHEAD) */
        lm_prefetch_at(w + LM_KQ_AHEAD * gb + 64 * (lines - 32 + v), 1);
        if (v < lines - 32) lm_prefetch_at(w + LM_KQ_AHEAD * gb + 64 * v, 1);
        for (int m = 0; m < M; m++)
          for (int h = 0; h < 2; h++) {
            /* values 32 (2p + h) + 4t .. + 3 of x, in natural order */
            const signed char *xb = x[m].b + 768 * c + 32 * (2 * p + h) + 4 * t;
            for (int digit = 0; digit < 3; digit++)
              sum[m][h][digit] = lm_dot8_at(sum[m][h][digit], u[h], xb + 256 * digit);
          }
      }
      for (int h = 0; h < 2; h++) {
        const int j = 2 * p + h;
        const __m512 scj = _mm512_mul_ps(d, lm_lane_byte(sc[j / 4], j % 4)), mnj = lm_lane_byte(mn[j / 4], j % 4);
        for (int m = 0; m < M; m++) {
          /* (S1 << 8) + S2: |.| <= 256 * 32 * 31 * 127 + 32 * 31 * 128 < 2^25 (Q4_K: 15, < 2^24) */
          const __m512i top = _mm512_add_epi32(_mm512_slli_epi32(sum[m][h][0], 8), sum[m][h][1]);
          const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(top), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(sum[m][h][2]));
          dot[m] = _mm512_fmadd_ps(f, scj, dot[m]);
          mins[m] = _mm512_fmadd_ps(mnj, _mm512_set1_ps(x[m].s[8 * c + j]), mins[m]);
        }
      }
    }
    for (int m = 0; m < M; m++)
      acc[m] = _mm512_fnmadd_ps(dmin, mins[m], _mm512_fmadd_ps(dot[m], _mm512_set1_ps(x[m].d[c]), acc[m]));
  }
}

/* Q6_K with rows interleaved by 16 (lm_qmat.packed): per ql vector a (lm_q6kr_six's layout:
 * half h = a / 16, a % 16 = 8 G + 4 q + r) the six bits are merged byte-wise as unsigned
 * quants 0..63 (the nibbles: `and 15` / lm_high_nibbles, qh's bits 2g, 2g + 1 moved to bits 4,
 * 5 by one shift and joined by one `vpternlogd`), which meet x's digit dword (values 128 h +
 * 32 g + 16 q + 4 r .. + 3, g = G for the low nibbles and G + 2 for the high ones) broadcast as
 * in lm_qr_k_rows16: 6 chains per row of x, each over the 4 vectors of one 16-value sub-block.
 * The - 32 is applied through x: the first digit's chain starts at z1 = -32 sum(q1) and the
 * third's at z2 = -32 sum(256 q2 + q3) over the sub-block (x's bz), so that per lane
 *   S1 + z1 = sum (u - 32) q1, |.| <= 16 * 32 * 127 = 65,024, and
 *   256 S2 + S3 + z2 = sum (u - 32)(256 q2 + q3), |.| <= 16 * 32 * 128 * 257 = 16,842,752,
 * every partial sum of the chains within |z| + 16 * 63 * 128 and 256 * 16 * 63 * 128 +
 * 16 * 63 * 128 + |z2| < 2^26 (exact in int32); the sub-block is joined as
 * (S1 + z1) * 65536 + (256 S2 + S3 + z2) in one `vfmadd` (one rounding, two when the low part
 * passes 2^24), scaled by its sc_j per lane and summed in float, the block's sum then by d dx
 * / 65536 (the GGUF kernel takes x in int16 digits: results differ in the last bits). */
static inline __attribute__((always_inline)) void lm_qr_q6k_rows16(
    const unsigned char *restrict w, long blocks, const lm_q16x *x, int M, __m512 *acc) {
  const long gb = 16 * lm_kq_block_bytes(LM_Q6_K);
  const __m512i low4 = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(0x30);
  for (long c = 0; c < blocks; c++, w += gb) {
    __m512 dot[LM_GEMV_MAX_M];
    for (int m = 0; m < M; m++) dot[m] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
      for (int G = 0; G < 2; G++)
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) { /* the ql vectors in order: the prefetchers follow */
          /* per row of x: the sums of sub-blocks 8h + 2G + q (n = 0: low nibbles) and + 4
           * (n = 1: high), per digit; the first and last digits' chains start at x's bz (the
           * - 32: z1, z2), so that S1 + z1 and S3 + z2 come out */
          __m512i sum[LM_GEMV_MAX_M][2][3];
          for (int m = 0; m < M; m++)
            for (int n = 0; n < 2; n++) {
              const int j = 8 * h + 2 * G + q + 4 * n;
              sum[m][n][0] = _mm512_set1_epi32(x[m].bz[32 * c + 2 * j]);
              sum[m][n][1] = _mm512_setzero_si512();
              sum[m][n][2] = _mm512_set1_epi32(x[m].bz[32 * c + 2 * j + 1]);
            }
#pragma GCC unroll 4
          for (int r = 0; r < 4; r++) {
            const int a = 16 * h + 8 * G + 4 * q + r;
            const __m512i ql = _mm512_loadu_si512(w + 64 * a);
            const __m512i qh = _mm512_loadu_si512(w + 2048 + 64 * (8 * h + 4 * q + r));
            /* the lines of the block LM_KQ_AHEAD blocks on, spread over this block's vectors,
             * into L2 (see LM_KQ_AHEAD) */
            lm_prefetch_at(w + LM_KQ_AHEAD * gb + 105 * a, 1);
            lm_prefetch_at(w + LM_KQ_AHEAD * gb + 105 * a + 64, 1);
            /* quants 0..63 as unsigned bytes: the nibbles, and bits 2g, 2g + 1 of qh moved to
             * bits 4, 5 (0xF8: a | (b & c); a 32-bit shift: bits that cross into the next byte
             * land outside 0x30) */
            const __m512i u[2] = {
                _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low4), _mm512_slli_epi32(qh, 4 - 2 * G), top2, 0xF8),
                _mm512_ternarylogic_epi32(lm_high_nibbles(ql), G ? _mm512_srli_epi32(qh, 2) : qh, top2, 0xF8)};
            for (int m = 0; m < M; m++)
              for (int n = 0; n < 2; n++) {
                /* values 128 h + 32 (G + 2n) + 16 q + 4 r .. + 3 of x, in natural order */
                const signed char *xb = x[m].b + 768 * c + 128 * h + 32 * (G + 2 * n) + 16 * q + 4 * r;
                for (int digit = 0; digit < 3; digit++)
                  sum[m][n][digit] = lm_dot8_at(sum[m][n][digit], u[n], xb + 256 * digit);
              }
          }
          for (int n = 0; n < 2; n++) {
            const int j = 8 * h + 2 * G + q + 4 * n;
            const __m512i sv = _mm512_loadu_si512(w + 3072 + 64 * (j / 4));
            const __m512 scj = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(sv, 24 - 8 * (j % 4)), 24));
            for (int m = 0; m < M; m++) {
              /* (S1 + z1) 65536 + (256 S2 + S3 + z2): |S1 + z1| <= 16 * 32 * 127, |256 S2 +
               * S3 + z2| <= 256 * 16 * 63 * 128 + 16 * 63 * 128 + 32 * 16 * 128 * 257 < 2^26 */
              const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(sum[m][n][1], 8), sum[m][n][2]);
              const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[m][n][0]), _mm512_set1_ps(65536.0f), _mm512_cvtepi32_ps(low));
              dot[m] = _mm512_fmadd_ps(f, scj, dot[m]);
            }
          }
        }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 3328)));
    for (int m = 0; m < M; m++) acc[m] = _mm512_fmadd_ps(dot[m], _mm512_mul_ps(d, _mm512_set1_ps(x[m].d[c])), acc[m]);
  }
}

/* lm_q16_gemv_formats for a packed W: work items are (batch, group of 16 rows) */
static inline __attribute__((always_inline)) void lm_qr_gemv_m(
    long nb, long N, long K, const lm_q16x *xs, const lm_qmat *W, const lm_out *C, int q, int M) {
  const long groups = N / 16, blocks = K / lm_q_values(q), group_bytes = 16 * blocks * lm_q_bytes(q);
  lm_for_begin(nb * groups);
  for (long lo, hi; lm_for_next(&lo, &hi);)
    for (long t = lo; t < hi; t++) {
      const long b = t / groups, g = t % groups;
      __m512 acc[LM_GEMV_MAX_M];
      for (int m = 0; m < M; m++) acc[m] = _mm512_setzero_ps();
      if (q == LM_Q8_0) lm_q8r_rows16(W->w + g * group_bytes, blocks, xs + b * M, M, acc);
      else if (q == LM_Q4_K || q == LM_Q5_K) lm_qr_k_rows16(W->w + g * group_bytes, blocks, xs + b * M, q, M, acc);
      else if (q == LM_Q6_K) lm_qr_q6k_rows16(W->w + g * group_bytes, blocks, xs + b * M, M, acc);
      else lm_qr_rows16(W->w + g * group_bytes, blocks, xs + b * M, q, M, acc);
      for (int m = 0; m < M; m++) {
        const long at = C->off[b] + m * C->rs + 16 * g;
        if (C->dt == LM_F32) {
          _mm512_storeu_ps((float *)C->p + at, acc[m]);
        } else {
          float out[16];
          _mm512_storeu_ps(out, acc[m]);
          for (int i = 0; i < 16; i++) lm_put(C->p, C->dt, at + i, out[i]);
        }
      }
    }
}

/* the format and M (1 to LM_GEMV_MAX_M) as compile-time constants */
static inline __attribute__((always_inline)) void lm_qr_gemv_q(
    long nb, long M, long N, long K, const lm_q16x *xs, const lm_qmat *W, const lm_out *C, int q) {
  switch (M) {
    case 1: lm_qr_gemv_m(nb, N, K, xs, W, C, q, 1); break;
    case 2: lm_qr_gemv_m(nb, N, K, xs, W, C, q, 2); break;
    case 3: lm_qr_gemv_m(nb, N, K, xs, W, C, q, 3); break;
    default: lm_qr_gemv_m(nb, N, K, xs, W, C, q, 4); break;
  }
}

static void lm_qr_gemv(long nb, long M, long N, long K, const lm_q16x *xs, const lm_qmat *W,
                       const lm_out *C) {
  switch (W->q) {
    case LM_Q8_0: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q8_0); break;
    case LM_Q4_0: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q4_0); break;
    case LM_Q4_1: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q4_1); break;
    case LM_Q5_0: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q5_0); break;
    case LM_Q4_K: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q4_K); break;
    case LM_Q5_K: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q5_K); break;
    default: lm_qr_gemv_q(nb, M, N, K, xs, W, C, LM_Q6_K); break;
  }
}

/* ----- the K-quants: one 256-value block per step ---------------------------------------- */
/* int16 lanes: idx[i] of a (as 32 words) */
static inline __m512i lm_words(const short idx[32], __m512i a) {
  return _mm512_permutexvar_epi16(_mm512_loadu_si512(idx), a);
}

/* sum[digit] + v[e] . the 32 int16 of digit `digit` at xq + 32 e (the K-quants' layout: a
 * block's 256 first digits, then its 256 second ones) */
static inline __attribute__((always_inline)) void lm_q16_dot4(const __m512i v[4], const short *xq,
                                                              __m512i sum[2]) {
  for (int digit = 0; digit < 2; digit++)
    for (int e = 0; e < 4; e++)
      sum[digit] = lm_dot16(sum[digit], v[e], _mm512_loadu_si512(xq + 256 * digit + 32 * e));
}

static inline __attribute__((always_inline)) void lm_q16_block256(
    const unsigned char *restrict blk, long c, const lm_q16x *x, int q, int M, __m512 *acc,
    __m256 *minacc) {
  __m512i sum[LM_GEMV_MAX_M][2];
  for (int m = 0; m < M; m++) sum[m][0] = sum[m][1] = _mm512_setzero_si512();
  if (q == LM_Q6_K) {
    /* lane idx for the sub-block scales: four scales, each over 8 lanes */
    short quad[4][32];
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < 32; i++) quad[k][i] = (short)(4 * k + i / 8);
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192))));
    const __m512i bits45 = _mm512_set1_epi16(0x30), thirty_two = _mm512_set1_epi16(32);
    for (int h = 0; h < 2; h++) {
      __m512i v[4];
      lm_nibble_words(_mm512_loadu_si512(blk + 64 * h), v);
      const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
      const __m512i sa = lm_words(quad[2 * h], sc), sb = lm_words(quad[2 * h + 1], sc);
      for (int e = 0; e < 4; e++) {
        /* bits 2g, 2g + 1 of qh[l] on top: g = (lane >= 16) + 2 (e odd), l odd for e >= 2 */
        short sh[32];
        for (int i = 0; i < 32; i++) sh[i] = (short)(8 * (e >> 1) + 2 * ((i >= 16) + 2 * (e & 1)));
        const __m512i top = _mm512_slli_epi16(_mm512_srlv_epi16(hb, _mm512_loadu_si512(sh)), 4);
        const __m512i val = _mm512_sub_epi16(_mm512_ternarylogic_epi32(v[e], top, bits45, 0xF8), thirty_two);
        v[e] = _mm512_mullo_epi16(val, e & 1 ? sb : sa);
      }
      for (int m = 0; m < M; m++) lm_q16_dot4(v, x[m].q + 512 * c + 128 * h, sum[m]);
    }
    const __m512 d = _mm512_set1_ps(lm_half_at(blk + 208));
    for (int m = 0; m < M; m++)
      acc[m] = _mm512_fmadd_ps(lm_digits(sum[m]), _mm512_mul_ps(d, _mm512_set1_ps(x[m].d[c])), acc[m]);
    return;
  }
  /* Q4_K / Q5_K: the 6-bit scales and mins of the 8 sub-blocks (lm_kq_scale_min), as bytes */
  unsigned int a, b, cc;
  memcpy(&a, blk + 4, 4), memcpy(&b, blk + 8, 4), memcpy(&cc, blk + 12, 4);
  const unsigned long long scb = (a & 0x3f3f3f3fu) |
      (unsigned long long)((cc & 0x0f0f0f0fu) | ((a >> 6) & 0x03030303u) << 4) << 32;
  const unsigned long long mnb = (b & 0x3f3f3f3fu) |
      (unsigned long long)(((cc >> 4) & 0x0f0f0f0fu) | ((b >> 6) & 0x03030303u) << 4) << 32;
  const __m512i sc = _mm512_castsi128_si512(_mm_cvtsi64_si128((long long)scb));
  const unsigned char *qs = blk + (q == LM_Q5_K ? 48 : 16);
  __m512i hb = _mm512_setzero_si512();
  if (q == LM_Q5_K) hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
  const __m512i low4 = _mm512_set1_epi8(15);
  __m512i v[4];
  for (int p = 0; p < 2; p++) {
    /* the nibble bytes: int16 lane w of `nib[0]` holds the quants of lm_nibble_words' v[0]
     * (low byte) and v[2] (high byte), of nib[1] those of v[1] and v[3] */
    const __m512i w = _mm512_loadu_si512(qs + 64 * p);
    __m512i nib[2] = {_mm512_and_si512(w, low4), lm_high_nibbles(w)};
    for (int odd = 0; odd < 2; odd++) {
      if (q == LM_Q5_K) { /* the fifth bit of value l of sub-block s is bit s of qh[l]: here
                           * bit t = 4p + odd + 2 (w >= 16) of each byte of the lane, moved to
                           * bit 4 by one 16-bit shift (by 4 - t or t - 4: no bit of one byte
                           * lands on bit 4 of the other) */
        short sh[32];
        for (int i = 0; i < 32; i++) sh[i] = (short)(p ? 2 * (i >= 16) + odd : 4 - 2 * (i >= 16) - odd);
        const __m512i cnt = _mm512_loadu_si512(sh);
        const __m512i top = p ? _mm512_srlv_epi16(hb, cnt) : _mm512_sllv_epi16(hb, cnt);
        nib[odd] = _mm512_ternarylogic_epi32(nib[odd], top, _mm512_set1_epi8(16), 0xF8);
      }
      /* sub-block scale 4p + odd (lanes 0..15) and + 2 (16..31) in the byte that meets each
       * quant in `vpmaddubsw` (the other byte of the lane zero): widening and scaling in one */
      unsigned char idx[64];
      for (int i = 0; i < 64; i++) idx[i] = (unsigned char)(4 * p + odd + 2 * (i >= 32));
      const __m512i at = _mm512_loadu_si512(idx);
      v[odd] = _mm512_maddubs_epi16(nib[odd], _mm512_maskz_permutexvar_epi8(0x5555555555555555ULL, at, sc));
      v[odd + 2] = _mm512_maddubs_epi16(nib[odd], _mm512_maskz_permutexvar_epi8(0xAAAAAAAAAAAAAAAAULL, at, sc));
    }
    for (int m = 0; m < M; m++) lm_q16_dot4(v, x[m].q + 512 * c + 128 * p, sum[m]);
  }
  /* d and dmin (two f16) in one conversion */
  unsigned int dd;
  memcpy(&dd, blk, 4);
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd));
  const __m512 d = _mm512_broadcastss_ps(dm);
  const __m256 mins = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)),
      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mnb))));
  for (int m = 0; m < M; m++) {
    acc[m] = _mm512_fmadd_ps(lm_digits(sum[m]), _mm512_mul_ps(d, _mm512_set1_ps(x[m].d[c])), acc[m]);
    minacc[m] = _mm256_fmadd_ps(mins, _mm256_loadu_ps(x[m].s + 8 * c), minacc[m]);
  }
}

/* out[m] = one row of W . x[m]. One accumulator per row of x: the blocks are independent
 * (each sums in its own int32 lanes), so out-of-order execution overlaps them anyway, and
 * two alternating accumulators measured 4-8% slower (K-quants 8%). */
static inline __attribute__((always_inline)) void lm_q16_row(
    const unsigned char *restrict w, long K, const lm_q16x *x, int q, int M, float *out) {
  __m512 acc[LM_GEMV_MAX_M];
  __m256 minacc[LM_GEMV_MAX_M];
  for (int m = 0; m < M; m++) acc[m] = _mm512_setzero_ps(), minacc[m] = _mm256_setzero_ps();
  if (q >= LM_Q4_K) {
    const long bb = lm_kq_block_bytes(q), blocks = K / 256;
    for (long c = 0; c < blocks; c++) lm_q16_block256(w + c * bb, c, x, q, M, acc, minacc);
  } else {
    const long bb = lm_block_bytes(q), blocks = K / 32, full = blocks / 4;
    const long runs = q == LM_Q4_1 ? blocks / 16 : 0; /* of 16 blocks, scaled at once */
    for (long e = 0; e < runs; e++) lm_q8x3_16(w + 16 * e * bb, e, x, M, acc);
    for (long c = 4 * runs; c < full; c++) lm_q8x3_group(w + 4 * c * bb, c, 4, x, q, M, acc);
    if (blocks % 4) lm_q8x3_group(w + 4 * full * bb, full, (int)(blocks % 4), x, q, M, acc);
  }
  for (int m = 0; m < M; m++) {
    const __m256 mn = minacc[m];
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(mn), _mm256_extractf128_ps(mn, 1));
    s = _mm_hadd_ps(s, s);
    out[m] = _mm512_reduce_add_ps(acc[m]) - _mm_cvtss_f32(_mm_hadd_ps(s, s));
  }
}

LM_INT_GEMV_DRIVER(lm_q16_gemv, lm_q16_row, lm_q16x, 0)

/* C[b] = A[b] * W^T through int16 activations; 0 (nothing written) when the float kernels must
 * run (see above). Every thread rounds every batch itself, so all reach the same answer
 * without talking. */
int lm_q16_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                const lm_qmat *W, const lm_out *C) {
  const int q = W->q;
  if (q == LM_Q8_0 && !W->packed) return 0; /* GGUF's Q8_0 runs the float kernel */
  const int kq = q >= LM_Q4_K;
  const long span = lm_q16_span(q), spans = (K + span - 1) / span, lanes = lm_q16_lanes(q);
  const long rows = nb * M, dlen = kq ? spans : spans * lanes;
  /* the packed K-quants: three byte digits per value (lm_k8x3_quantize); GGUF's K-quants: two
   * int16 digits (lm_q16x_quantize); 32-value formats: three bytes (lm_q8x3_quantize) */
  const int k8 = kq && W->packed;
  const size_t digits = (size_t)(k8 ? 3 * 256 * spans : kq ? (long)sizeof(short) * 2 * 256 * spans : 3 * 128 * spans);
  const long zlen = k8 ? 16 * spans : kq ? 0 : spans * lanes, bzlen = k8 ? 32 * spans : 8 * spans;
  lm_q16_perm perm;
  if (kq && !k8) lm_q16_perm_of(q, &perm);
  float *buf = lm_scratch(A, M, K);
  const long blocks16 = kq ? 0 : (spans + 3) / 4 * 16; /* bd, bs */
  const size_t per_row = 64 + digits + sizeof(float) * (dlen + spans * lanes + 2 * blocks16) + sizeof(int) * (zlen + bzlen);
  char *mem = (char *)aligned_alloc(64, ((size_t)rows * per_row + 63) / 64 * 64);
  lm_q16x *xs = (lm_q16x *)malloc(sizeof(lm_q16x) * rows);
  int ok = 1;
  char *at = mem;
  for (long b = 0; b < nb && ok; b++) {
    const float *x[LM_GEMV_MAX_M];
    lm_rows_f32(A, aoff[b], M, K, buf, x);
    for (long m = 0; m < M && ok; m++) {
      lm_q16x *r = xs + b * M + m;
      r->q = (short *)at, r->b = (signed char *)at, at += digits;
      r->d = (float *)at, at += sizeof(float) * dlen;
      r->s = (float *)at, at += sizeof(float) * spans * lanes;
      r->bd = (float *)at, at += sizeof(float) * blocks16;
      r->bs = (float *)at, at += sizeof(float) * blocks16;
      r->z = (int *)at, at += sizeof(int) * zlen;
      r->bz = (int *)at, at += sizeof(int) * bzlen;
      at += 64 - (at - mem) % 64;
      ok = !kq ? lm_q8x3_quantize(x[m], K, q, r) : k8 ? lm_k8x3_quantize(x[m], K, r)
                                                      : lm_q16x_quantize(x[m], K, &perm, r);
    }
  }
  /* Each thread decides from x alone, and a late thread may read x after the team has moved
   * on and reused its buffer, so threads can take different paths. That is safe only because
   * both paths are one team loop (the float matvec too): the late thread's loop number still
   * matches, and it finds that loop complete. A fallback with more loops would hang the team
   * (qgemm8.c decides per row inside its loops for that reason). */
  if (ok && W->packed) lm_qr_gemv(nb, M, N, K, xs, W, C);
  else if (ok) lm_q16_gemv_formats(nb, M, N, K, xs, W, C);
  free(buf);
  free(mem);
  free(xs);
  return ok;
}
#else
/* no AVX-512 BW / VBMI: the float kernels do all the work */
int lm_q16_gemv(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                const lm_qmat *W, const lm_out *C) {
  (void)nb, (void)aoff, (void)M, (void)N, (void)K, (void)A, (void)W, (void)C;
  return 0;
}
#endif
