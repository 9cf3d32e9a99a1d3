/* luminal-cpu runtime: the hand-written kernels generated programs call (API: runtime.h).
 *
 * lm_gemm:  batched C[b] = A[b] (M x K) * B[b]^T (N x K) over strided float32/float16/bfloat16
 *           operands. Small M (decode) streams B once (GEMV); larger M packs panels of A and B
 *           into contiguous tiles and runs a register-blocked micro-kernel.
 * lm_qgemm: the same with B a GGUF block-quantized matrix (Q8_0, Q4_0, Q4_1, Q5_0) that stays
 *           quantized in memory: blocks are decoded to float32 right before use (the float
 *           path; by default x @ W.T runs through integer digits of x instead: qgemv16.c for
 *           up to 4 rows, qgemm8.c for more).
 *
 * Every function is called by all threads of the program's parallel region and shares its
 * work through the team's loops (lm_for_begin / lm_for_next: no barriers). Math is float32 with
 * explicit fmaf: the program is built with -ffp-contract=off so that generated elementwise
 * code rounds exactly like the reference backend. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
static inline long lm_threads(void) { return omp_get_num_threads(); }
static inline long lm_thread_index(void) { return omp_get_thread_num(); }
#else
static inline long lm_threads(void) { return 1; }
static inline long lm_thread_index(void) { return 0; }
#endif

/* ----- the team: work sharing without barriers (API and rationale: runtime.h) --------------- */
#define LM_CHUNKS_PER_THREAD 1  /* more measured slower (decode: 2 -> -8%, 4 -> -20%) */
/* lm_for_begin_work: a chunk's least work, and the most chunks per thread (runtime.h) */
#define LM_CHUNK_NS 20000L
#define LM_MAX_CHUNKS_PER_THREAD 8
#define LM_SPINS 4096           /* busy-wait rounds before yielding the core */
/* Threads claim their own chunks first (thread t of T: the t-th of T contiguous blocks of
 * chunks), then any left: consecutive loops over the same rows then give each row to the same core,
 * which finds what it wrote in its own cache. A first-come counter handed the halves of a
 * loop to whichever thread arrived first: half the time every row crossed cores (in `perf` of
 * a Gemma 3 prefill on two threads, Zen 4, the GEMM's rounding of x into digits, which reads
 * the rows the norm before it wrote, went from 9.9% of the GEMM's samples to 4.3%, as on one
 * thread, and lm_for_next's waits from 5.1% to 3.1% of all). Loops
 * of more than 32 chunks keep the counter. $CC="gcc -DLM_CHUNK_AFFINITY=0" builds without. */
#ifndef LM_CHUNK_AFFINITY
#define LM_CHUNK_AFFINITY 1
#endif

static inline void lm_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* this thread's view of its team and of the loop it is in */
static _Thread_local struct {
  lm_team *team;
  lm_team solo;      /* the team of a thread that entered none: it does every chunk itself */
  unsigned loop;     /* loops begun since entering the team: the current loop's number */
  long index;        /* this thread's number in its team */
  long n, grain, chunks, pending;  /* iterations, per chunk, chunks, chunk done but uncounted */
  unsigned own;      /* the chunks this thread claims first (a mask, loops of <= 32 chunks) */
} lm_me;

void lm_team_enter(lm_team *team) {
  lm_me.team = team;
  lm_me.loop = 0;
  lm_me.index = lm_thread_index();
}

void lm_team_leave(void) { lm_me.team = NULL; }

/* opens a loop of n iterations in `per_thread` chunks per thread, each a multiple of `align`
 * iterations long (all but the last) */
static void lm_for_open(long n, long per_thread, long align) {
  if (!lm_me.team) {  /* outside a parallel region: a team of one */
    lm_me.team = &lm_me.solo;
    memset(&lm_me.solo, 0, sizeof lm_me.solo);
    lm_me.loop = 0;
    lm_me.index = 0;
  }
  const long threads = lm_me.team == &lm_me.solo ? 1 : lm_threads();
  const long parts = threads == 1 ? 1 : threads * per_thread;
  lm_me.loop++;
  lm_me.n = n > 0 ? n : 0;
  lm_me.grain = (lm_me.n + parts - 1) / parts;
  lm_me.grain = (lm_me.grain + align - 1) / align * align;
  if (lm_me.grain < 1) lm_me.grain = 1;
  lm_me.chunks = (lm_me.n + lm_me.grain - 1) / lm_me.grain;
  lm_me.pending = 0;
  /* chunk c is thread c * threads / chunks's (contiguous blocks): this thread's are
   * ceil(index * chunks / threads) .. ceil((index + 1) * chunks / threads) - 1 */
  long first = (lm_me.index * lm_me.chunks + threads - 1) / threads;
  long end = ((lm_me.index + 1) * lm_me.chunks + threads - 1) / threads;
  first = first < 32 ? first : 32, end = end < 32 ? end : 32;
  lm_me.own = (unsigned)(((1ull << end) - 1) & ~((1ull << first) - 1));
}

void lm_for_begin(long n) { lm_for_open(n, LM_CHUNKS_PER_THREAD, 1); }

void lm_for_begin_work(long n, long ns) {
  const long threads = lm_me.team && lm_me.team != &lm_me.solo ? lm_threads() : 1;
  long per_thread = ns / (threads * LM_CHUNK_NS);
  if (per_thread < LM_CHUNKS_PER_THREAD) per_thread = LM_CHUNKS_PER_THREAD;
  if (per_thread > LM_MAX_CHUNKS_PER_THREAD) per_thread = LM_MAX_CHUNKS_PER_THREAD;
  /* long chunks start at multiples of 16 iterations: a flat elementwise loop's 16-lane
   * vectors then group the same elements on any thread count (libmvec's vector exp2f and
   * the scalar one of a loop's remainder can differ in the last bit) */
  lm_for_open(n, per_thread, n >= 64 * threads * per_thread ? 16 : 1);
}

static inline unsigned lm_tag(unsigned long long w) { return (unsigned)(w >> 32); }
static inline long lm_count(unsigned long long w) { return (long)(w & 0xffffffffu); }
static inline unsigned long long lm_word(unsigned tag, long count) {
  return ((unsigned long long)tag << 32) | (unsigned long long)count;
}
/* loop numbers only grow (within one run of a program): a < b, wrap-around safe */
static inline int lm_earlier(unsigned a, unsigned b) { return (int)(a - b) < 0; }

int lm_for_next(long *lo, long *hi) {
  lm_team *t = lm_me.team;
  const unsigned p = lm_me.loop;
  if (lm_me.pending) {  /* count the chunk just finished (its writes are released with it) */
    unsigned long long d = __atomic_load_n(&t->done, __ATOMIC_RELAXED), want;
    do want = lm_tag(d) == p ? d + 1 : lm_word(p, 1);
    while (!__atomic_compare_exchange_n(&t->done, &d, want, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
    lm_me.pending = 0;
  }
  if (lm_me.chunks == 0) return 0;
  unsigned long long c = __atomic_load_n(&t->claim, __ATOMIC_ACQUIRE);
  for (;;) {
    if (lm_earlier(lm_tag(c), p)) {  /* first here: every earlier loop is complete, open p */
      __atomic_compare_exchange_n(&t->claim, &c, lm_word(p, 0), 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
      continue;  /* c holds the current word either way */
    }
    if (lm_tag(c) != p) return 0;  /* a later loop is open: p is complete */
    long next;
    unsigned long long want;
    if (LM_CHUNK_AFFINITY && lm_me.chunks <= 32) { /* the count is a mask of claimed chunks */
      const unsigned claimed = (unsigned)lm_count(c);
      const unsigned left = (lm_me.chunks == 32 ? ~0u : (1u << lm_me.chunks) - 1) & ~claimed;
      if (!left) break;
      /* its own in order, else another's last: the owner is working from that block's start */
      next = left & lm_me.own ? __builtin_ctz(left & lm_me.own) : 31 - __builtin_clz(left);
      want = lm_word(p, (long)(claimed | 1u << next));
    } else {
      next = lm_count(c);
      if (next >= lm_me.chunks) break;
      want = lm_word(p, next + 1);
    }
    if (__atomic_compare_exchange_n(&t->claim, &c, want, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      *lo = next * lm_me.grain;
      *hi = *lo + lm_me.grain < lm_me.n ? *lo + lm_me.grain : lm_me.n;
      lm_me.pending = 1;
      return 1;
    }
  }
  /* every chunk is claimed: wait until every one is done (or a later loop shows it was) */
  for (unsigned spins = 0;; spins++) {
    const unsigned long long d = __atomic_load_n(&t->done, __ATOMIC_ACQUIRE);
    if (lm_tag(d) == p ? lm_count(d) == lm_me.chunks : lm_earlier(p, lm_tag(d))) return 0;
    if (lm_earlier(p, lm_tag(__atomic_load_n(&t->claim, __ATOMIC_ACQUIRE)))) return 0;
    if (spins < LM_SPINS) lm_pause();
    else sched_yield();  /* the chunk's thread may be waiting for this core */
  }
}

/* the team's slot for a pointer one thread makes and the others read once its loop is done
 * (a function, not lm_me itself, for the other units: runtime_internal.h) */
void **lm_team_shared(void) { return &lm_me.team->shared; }


#define LM_MR 8
#define LM_MC 96
#define LM_MC_PACKED 256  /* rows of a tile when A is packed once per product (lm_apack) */
#define LM_NC 256
#define LM_GEMV_CHUNK 64



/* ----- micro-kernel ----------------------------------------------------------------------- */
/* c[i][j] = add[i][j] + sum_k a[k][i] * b[k][j] for an LM_MR x LM_NR tile of packed panels
 * (add: earlier blocks' partial sums, row stride ldadd, or NULL for zeros; it may be c) */
#if defined(__AVX512F__)
static inline void lm_ukernel(long kc, const float *restrict a, const float *restrict b,
                              const float *add, long ldadd, float *c, long ldc) {
  __m512 acc[LM_MR][2];
  for (int i = 0; i < LM_MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (long k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_load_ps(b + k * LM_NR), b1 = _mm512_load_ps(b + k * LM_NR + 16);
    for (int i = 0; i < LM_MR; i++) {
      const __m512 ai = _mm512_set1_ps(a[k * LM_MR + i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
  }
  for (int i = 0; i < LM_MR; i++) {
    const __m512 p0 = add ? _mm512_loadu_ps(add + i * ldadd) : _mm512_setzero_ps();
    const __m512 p1 = add ? _mm512_loadu_ps(add + i * ldadd + 16) : _mm512_setzero_ps();
    _mm512_storeu_ps(c + i * ldc, _mm512_add_ps(p0, acc[i][0]));
    _mm512_storeu_ps(c + i * ldc + 16, _mm512_add_ps(p1, acc[i][1]));
  }
}

/* the same for a panel at most 16 columns wide (narrow matrices: half the work) */
static inline void lm_ukernel16(long kc, const float *restrict a, const float *restrict b,
                                const float *add, long ldadd, float *c, long ldc) {
  __m512 acc[LM_MR];
  for (int i = 0; i < LM_MR; i++) acc[i] = _mm512_setzero_ps();
  for (long k = 0; k < kc; k++) {
    const __m512 b0 = _mm512_load_ps(b + k * LM_NR);
    for (int i = 0; i < LM_MR; i++)
      acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[k * LM_MR + i]), b0, acc[i]);
  }
  for (int i = 0; i < LM_MR; i++) {
    const __m512 p = add ? _mm512_loadu_ps(add + i * ldadd) : _mm512_setzero_ps();
    _mm512_storeu_ps(c + i * ldc, _mm512_add_ps(p, acc[i]));
  }
}
#else
static inline void lm_ukernel16(long kc, const float *restrict a, const float *restrict b,
                                const float *add, long ldadd, float *c, long ldc) {
  float acc[LM_MR][16] = {{0}};
  for (long k = 0; k < kc; k++)
    for (int i = 0; i < LM_MR; i++)
      for (int j = 0; j < 16; j++) acc[i][j] = fmaf(a[k * LM_MR + i], b[k * LM_NR + j], acc[i][j]);
  for (int i = 0; i < LM_MR; i++)
    for (int j = 0; j < 16; j++) c[i * ldc + j] = (add ? add[i * ldadd + j] : 0.0f) + acc[i][j];
}

static inline void lm_ukernel(long kc, const float *restrict a, const float *restrict b,
                              const float *add, long ldadd, float *c, long ldc) {
  float acc[LM_MR][LM_NR] = {{0}};
  for (long k = 0; k < kc; k++)
    for (int i = 0; i < LM_MR; i++)
      for (int j = 0; j < LM_NR; j++) acc[i][j] = fmaf(a[k * LM_MR + i], b[k * LM_NR + j], acc[i][j]);
  for (int i = 0; i < LM_MR; i++)
    for (int j = 0; j < LM_NR; j++)
      c[i * ldc + j] = (add ? add[i * ldadd + j] : 0.0f) + acc[i][j];
}
#endif

/* ----- packing ---------------------------------------------------------------------------- */

/* ap[k][i] = A(m0 + i, k0 + k), zero past mr rows */
static void lm_pack_a(const lm_mat *A, long off, long m0, long mr, long k0, long kc,
                      float *restrict ap) {
#if defined(__AVX512F__)
  if (A->dt == LM_F32 && A->ks == 1 && mr == LM_MR) { /* 8 rows x 16 values per transpose */
    _Static_assert(LM_MR == 8, "the transpose fills panels of 8 rows");
    const float *src = (const float *)A->p + off + m0 * A->rs + k0;
    long k = 0;
    for (; k + 16 <= kc; k += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; i++)
        r[i] = i < LM_MR ? _mm512_loadu_ps(src + i * A->rs + k) : _mm512_setzero_ps();
      lm_transpose16(r);
      for (int t = 0; t < 16; t++)
        _mm256_storeu_ps(ap + (k + t) * LM_MR, _mm512_castps512_ps256(r[t]));
    }
    for (; k < kc; k++)
      for (int i = 0; i < LM_MR; i++) ap[k * LM_MR + i] = src[i * A->rs + k];
    return;
  }
#endif
  for (long i = 0; i < LM_MR; i++) {
    if (i >= mr) {
      for (long k = 0; k < kc; k++) ap[k * LM_MR + i] = 0.0f;
      continue;
    }
    const long base = off + (m0 + i) * A->rs + k0 * A->ks;
    if (A->dt == LM_F32 && A->ks == 1) {
      const float *src = (const float *)A->p + base;
      for (long k = 0; k < kc; k++) ap[k * LM_MR + i] = src[k];
    } else {
      for (long k = 0; k < kc; k++) ap[k * LM_MR + i] = lm_get(A->p, A->dt, base + k * A->ks);
    }
  }
}

/* bp[k][j] = B(n0 + j, k0 + k), zero past nr columns */
static void lm_pack_b(const lm_mat *B, long off, long n0, long nr, long k0, long kc,
                      float *restrict bp) {
  if (B->dt == LM_F32 && B->rs == 1) {
    for (long k = 0; k < kc; k++) {
      const float *src = (const float *)B->p + off + n0 + (k0 + k) * B->ks;
      float *dst = bp + k * LM_NR;
      for (long j = 0; j < nr; j++) dst[j] = src[j];
      for (long j = nr; j < LM_NR; j++) dst[j] = 0.0f;
    }
    return;
  }
#if defined(__AVX512F__)
  if (B->dt == LM_F32 && B->ks == 1) { /* rows of B contiguous along k (a linear layer's
    weight): 16 x 16 values at a time through registers, not a scalar store per value */
    const float *src = (const float *)B->p + off + n0 * B->rs + k0;
    for (long j0 = 0; j0 < LM_NR; j0 += 16) {
      const long rn = nr - j0 < 0 ? 0 : nr - j0 < 16 ? nr - j0 : 16;
      long k = 0;
      for (; k + 16 <= kc; k += 16) {
        __m512 r[16];
        for (long j = 0; j < 16; j++)
          r[j] = j < rn ? _mm512_loadu_ps(src + (j0 + j) * B->rs + k) : _mm512_setzero_ps();
        lm_transpose16(r);
        for (int t = 0; t < 16; t++) _mm512_storeu_ps(bp + (k + t) * LM_NR + j0, r[t]);
      }
      for (; k < kc; k++)
        for (long j = 0; j < 16; j++)
          bp[k * LM_NR + j0 + j] = j < rn ? src[(j0 + j) * B->rs + k] : 0.0f;
    }
    return;
  }
#endif
  for (long j = 0; j < LM_NR; j++) {
    if (j >= nr) {
      for (long k = 0; k < kc; k++) bp[k * LM_NR + j] = 0.0f;
      continue;
    }
    const long base = off + (n0 + j) * B->rs + k0 * B->ks;
    if (B->dt == LM_F32 && B->ks == 1) {
      const float *src = (const float *)B->p + base;
      for (long k = 0; k < kc; k++) bp[k * LM_NR + j] = src[k];
    } else {
      for (long k = 0; k < kc; k++) bp[k * LM_NR + j] = lm_get(B->p, B->dt, base + k * B->ks);
    }
  }
}

/* every panel of the block B(n0 .. n0 + nc, k0 .. k0 + kc) of a float32 B whose rows (k) are
 * contiguous along n, filled a row of B at a time: one sequential read per row (the hardware
 * prefetchers follow it) instead of kc short reads per panel */
static void lm_pack_b_rows(const lm_mat *B, long off, long n0, long nc, long k0, long kc,
                           float *restrict bp) {
  for (long k = 0; k < kc; k++) {
    const float *src = (const float *)B->p + off + n0 + (k0 + k) * B->ks;
    for (long j = 0; j < nc; j += LM_NR) {
      float *restrict dst = bp + j * kc + k * LM_NR;
      const long nr = nc - j < LM_NR ? nc - j : LM_NR;
      if (nr == LM_NR) {
        for (long t = 0; t < LM_NR; t++) dst[t] = src[j + t];
      } else {
        for (long t = 0; t < nr; t++) dst[t] = src[j + t];
        for (long t = nr; t < LM_NR; t++) dst[t] = 0.0f;
      }
    }
  }
}

/* Panels of a quantized matrix start on block boundaries: k0 and n0 are multiples of 32
 * (LM_KC and LM_NR are), and so are K (k_contig) or N (otherwise), the lengths of quantized
 * rows. The K-quants (blocks of 256, decoded by kquant.c) come here only along k (k_contig):
 * k0 is a multiple of LM_KC = 256 and K of 256, so a panel holds whole blocks. */
_Static_assert(LM_KC % 256 == 0, "a K panel must hold whole K-quant blocks");

/* the widths of a packable format's block fields in GGUF order, zero-terminated (repack.py's
 * FORMATS) */
static const unsigned char *lm_rows16_fields(int q) {
  static const unsigned char fields[][6] = {
      [LM_Q8_0] = {2, 32}, [LM_Q4_0] = {2, 16}, [LM_Q4_1] = {2, 2, 16}, [LM_Q5_0] = {2, 4, 16},
      [LM_Q4_K] = {2, 2, 12, 128}, [LM_Q5_K] = {2, 2, 12, 32, 128}, [LM_Q6_K] = {128, 64, 16, 2}};
  return fields[q];
}

/* blocks j0 .. j0 + nj of row n of a packed W (lm_qmat.packed: rows interleaved by 16) as
 * GGUF's blocks at out: what the float fallbacks (decode's float matvec, the tiled GEMM and
 * qgemm8.c's rows without a rounding) decode. A field of width w <= 4 at GGUF offset o is
 * 16 w bytes at 16 o, row i's at 16 o + w i; a wider one is 4-byte words laid out so. */
void lm_unpack_blocks(const lm_qmat *W, long n, long j0, long nj, unsigned char *restrict out) {
  const long bb = lm_q_bytes(W->q), row_bytes = W->cols / lm_q_values(W->q) * bb, i = n % 16;
  const unsigned char *fields = lm_rows16_fields(W->q), *group = W->w + n / 16 * 16 * row_bytes;
  for (long j = 0; j < nj; j++) {
    const unsigned char *b = group + (j0 + j) * 16 * bb;
    unsigned char *o = out + bb * j;
    for (long f = 0, at = 0; fields[f]; at += fields[f++]) {
      const long w = fields[f] <= 4 ? fields[f] : 4;
      for (long t = at; t < at + fields[f]; t += w) memcpy(o + t, b + 16 * t + w * i, (size_t)w);
    }
  }
}

/* one group of 16 rows (row_bytes apart at in) in the packed layout at out: the inverse of
 * lm_unpack_blocks, a field's 2- or 4-byte pieces moved as whole words (the compiler turns
 * each fixed-size memcpy into one load and one store) */
static void lm_repack_group(const unsigned char *restrict in, unsigned char *restrict out,
                            long blocks, long bb, long row_bytes, const unsigned char *fields) {
  for (long j = 0; j < blocks; j++) {
    const unsigned char *b = in + j * bb;
    unsigned char *o = out + j * 16 * bb;
    for (long f = 0, at = 0; fields[f]; at += fields[f++]) {
      if (fields[f] == 2) {
        for (long i = 0; i < 16; i++) memcpy(o + 16 * at + 2 * i, b + i * row_bytes + at, 2);
        continue;
      }
      for (long t = at; t < at + fields[f]; t += 4)  /* a 4-byte field, or a wider one's words */
        for (long i = 0; i < 16; i++) memcpy(o + 16 * t + 4 * i, b + i * row_bytes + t, 4);
    }
  }
}

int lm_repack_rows16(const unsigned char *src, unsigned char *dst, long nbytes, int q, long rows,
                     int threads) {
  if (q < LM_Q8_0 || q > LM_Q6_K || rows <= 0 || rows % 16 || nbytes <= 0) return -1;
  const unsigned char *fields = lm_rows16_fields(q);
  long bb = 0;
  for (int f = 0; fields[f]; f++) bb += fields[f];
  if (nbytes % (rows * bb)) return -1;
  const long blocks = nbytes / (rows * bb), row_bytes = blocks * bb, group_bytes = 16 * row_bytes;
  const long groups = rows / 16;
  if (threads < 1) threads = 1;
  if (threads > groups) threads = (int)groups;
  /* in place: a scratch copy of a group per thread */
  unsigned char *scratch = src == dst ? malloc((size_t)(threads * group_bytes)) : NULL;
  if (src == dst && !scratch) return -2;
#ifdef _OPENMP
  #pragma omp parallel for num_threads(threads) schedule(dynamic, 8) if (threads > 1)
#endif
  for (long g = 0; g < groups; g++) {
    const unsigned char *in = src + g * group_bytes;
    if (scratch) {
#ifdef _OPENMP
      unsigned char *tmp = scratch + omp_get_thread_num() * group_bytes;
#else
      unsigned char *tmp = scratch;
#endif
      in = memcpy(tmp, in, (size_t)group_bytes);
    }
    lm_repack_group(in, dst + g * group_bytes, blocks, bb, row_bytes, fields);
  }
  free(scratch);
  return 0;
}

/* row n of a k-contiguous W in GGUF's layout: in place, or (packed) unpacked into tmp (a
 * row's bytes) */
static inline const unsigned char *lm_gguf_row(const lm_qmat *W, long n, long row_bytes,
                                               unsigned char *tmp) {
  if (!W->packed) return W->w + n * row_bytes;
  lm_unpack_blocks(W, n, 0, W->cols / lm_q_values(W->q), tmp);
  return tmp;
}


/* the panel of lm_pack_b decoded from a quantized matrix W (rows x cols, blocks along rows) */
static void lm_pack_bq(const lm_qmat *W, long n0, long nr, long k0, long kc, float *restrict bp) {
  if (W->k_contig) { /* B(n, k) = W[n, k]: decode rows along k, transpose into the panel */
    if (nr < LM_NR) memset(bp, 0, sizeof(float) * kc * LM_NR);
#if defined(__AVX512F__)
    /* 16 rows at a time: decoded whole into `rows`, then moved into the panel 16 x 16
     * values at a time through registers (one scalar store per value was half the cost of
     * packing, measured) */
    float rows[16][LM_KC] __attribute__((aligned(64)));
    for (long j0 = 0; j0 < nr; j0 += 16) {
      const long rn = nr - j0 < 16 ? nr - j0 : 16;
      for (long j = 0; j < 16; j++) {
        if (j < rn) lm_decode_row(W, n0 + j0 + j, k0, kc, rows[j]);
        else memset(rows[j], 0, sizeof(float) * kc);
      }
      for (long k = 0; k < kc; k += 16) {  /* kc is a multiple of 32 (module note above) */
        __m512 r[16];
        for (int j = 0; j < 16; j++) r[j] = _mm512_load_ps(rows[j] + k);
        lm_transpose16(r);
        for (int t = 0; t < 16; t++) _mm512_storeu_ps(bp + (k + t) * LM_NR + j0, r[t]);
      }
    }
#else
    float row[LM_KC];
    for (long j = 0; j < nr; j++) {
      lm_decode_row(W, n0 + j, k0, kc, row);
      for (long k = 0; k < kc; k++) bp[k * LM_NR + j] = row[k];
    }
#endif
  } else { /* B(n, k) = W[k, n]: one decoded block is a row of the panel */
    const long bb = lm_block_bytes(W->q), row_bytes = W->cols / 32 * bb;
    for (long k = 0; k < kc; k++)
      lm_dequant_block(W->w + (k0 + k) * row_bytes + n0 / 32 * bb, W->q, bp + k * LM_NR);
  }
}

/* ----- tiled GEMM ------------------------------------------------------------------------- */

/* packed panels and the C tile of one thread: on the heap (small thread stacks suffice),
 * allocated once per thread and kept for the life of the process */
typedef struct {
  float ap[LM_MC * LM_KC], bp[LM_NC * LM_KC], ct[LM_MC_PACKED * LM_NC];
} lm_work;

/* A packed once for the whole product (every batch reads the same A: a convolution's
 * weights), instead of once per tile: panels of LM_MR rows, k block by k block. Block k0 (a
 * multiple of LM_KC, kc long) starts at p + k0 * mp (mp: M rounded up to LM_MR), and a tile
 * starting at row m0 finds its panels at p + k0 * mp + m0 * kc, as lm_pack_a lays them out. */
typedef struct { const float *p; long mp; } lm_apack;

static lm_work *lm_thread_work(void) {
  static _Thread_local lm_work *work;
  if (!work) work = (lm_work *)aligned_alloc(64, sizeof(lm_work));
  return work;
}

/* the mc x nc tile at (m0, n0) of batch b, summed over k in [k_lo, k_hi), written to `dst`
 * (row stride `ldd`) when given, else stored into C */
static void lm_tile(lm_work *work, long b, long m0, long mc, long n0, long nc, long k_lo,
                    long k_hi, const lm_mat *A, const lm_apack *AP, const long *aoff,
                    const lm_mat *B, const long *boff, const lm_qmat *W, const lm_packer *P,
                    const lm_out *C, float *dst, long ldd) {
  float *restrict ap = work->ap, *restrict bp = work->bp, *ct = work->ct;
  /* whole micro-tiles of a float32 C (or of a K split's partial product, `dst`): the last
   * block's sums go straight into it (no copy of the tile afterwards); others are summed in
   * ct, then copied */
  const int direct = k_hi > k_lo && (dst || C->dt == LM_F32) && mc % LM_MR == 0 &&
                     nc % LM_NR == 0;
  if (k_hi <= k_lo)  /* an empty sum: zeros */
    for (long i = 0; i < mc; i++) memset(ct + i * LM_NC, 0, sizeof(float) * nc);
  float *out = !direct ? ct : dst ? dst : (float *)C->p + C->off[b] + m0 * C->rs + n0;
  const long ldo = !direct ? LM_NC : dst ? ldd : C->rs;
  for (long k0 = k_lo; k0 < k_hi; k0 += LM_KC) {
    const long kc = k_hi - k0 < LM_KC ? k_hi - k0 : LM_KC;
    const int first = k0 == k_lo, last = k0 + kc >= k_hi;
    if (P) P->pack(P->ctx, n0, nc, k0, kc, bp, LM_NR);
    else if (!W && B->dt == LM_F32 && B->rs == 1) lm_pack_b_rows(B, boff[b], n0, nc, k0, kc, bp);
    else for (long j = 0; j < nc; j += LM_NR) {
      const long nr = nc - j < LM_NR ? nc - j : LM_NR;
      if (W) lm_pack_bq(W, n0 + j, nr, k0, kc, bp + j * kc);
      else lm_pack_b(B, boff[b], n0 + j, nr, k0, kc, bp + j * kc);
    }
    const float *apb = ap;
    if (AP) apb = AP->p + k0 * AP->mp + m0 * kc;
    else for (long i = 0; i < mc; i += LM_MR)
      lm_pack_a(A, aoff[b], m0 + i, mc - i < LM_MR ? mc - i : LM_MR, k0, kc, ap + i * kc);
    for (long j = 0; j < nc; j += LM_NR) {
      const int narrow = nc - j <= 16;
      for (long i = 0; i < mc; i += LM_MR) {
        const float *add = first ? NULL : ct + i * LM_NC + j;
        float *c = last ? out + i * ldo + j : ct + i * LM_NC + j;
        const long ldc = last ? ldo : LM_NC;
        if (narrow) lm_ukernel16(kc, apb + i * kc, bp + j * kc, add, LM_NC, c, ldc);
        else lm_ukernel(kc, apb + i * kc, bp + j * kc, add, LM_NC, c, ldc);
      }
    }
  }
  if (direct) return;
  for (long i = 0; i < mc; i++) {
    if (dst) {
      memcpy(dst + i * ldd, ct + i * LM_NC, sizeof(float) * nc);
      continue;
    }
    const long row = C->off[b] + (m0 + i) * C->rs + n0;
    if (C->dt == LM_F32) memcpy((float *)C->p + row, ct + i * LM_NC, sizeof(float) * nc);
    else for (long j = 0; j < nc; j++) lm_put(C->p, C->dt, row + j, ct[i * LM_NC + j]);
  }
}

/* tiles of at most LM_MC x LM_NC, evenly sized (no thin leftover tile), and at least one
 * per thread when the matrix allows it, so both cores of a small matmul get work. A product
 * with fewer tiles than LM_SPLIT_TASKS and a long K (a weight gradient: a sum over every
 * position of a batch) is also split along K into partial products that are added up
 * afterwards; the split depends on the shapes only, so results do not depend on the number
 * of threads. */
#define LM_SPLIT_TASKS 8
#define LM_SPLIT_MIN_K 512
static void lm_gemm_tiled(long nb, const long *aoff, const long *boff, long M, long N, long K,
                          const lm_mat *A, const lm_mat *B, const lm_qmat *W,
                          const lm_packer *P, const lm_out *C) {
  if (nb <= 0 || M <= 0 || N <= 0) return; /* nothing to write (and no tiles to divide by) */
  /* A is packed once up front when every batch shares it and tiles would otherwise pack it
   * again and again (one tile per LM_NC columns); its tiles may then be taller */
  int shared_a = 1;
  for (long b = 1; b < nb && shared_a; b++) shared_a = aoff[b] == aoff[0];
  const int prepack = shared_a && nb * ((N + LM_NC - 1) / LM_NC) > 1;
  const long mc_max = prepack ? LM_MC_PACKED : LM_MC;
  long tm = (M + mc_max - 1) / mc_max, tn = (N + LM_NC - 1) / LM_NC;
  /* the K split is decided on the shapes alone (before tiles are added for the threads) */
  long ks = 1;
  if (!W && nb * tm * tn < LM_SPLIT_TASKS)
    while (ks * 2 * nb * tm * tn <= LM_SPLIT_TASKS && K / (ks * 2) >= LM_SPLIT_MIN_K) ks *= 2;
  while (nb * tm * tn < lm_threads() && (N + tn) / (tn + 1) >= LM_NR) tn++;
  /* with few tiles a thread given one more than the others keeps them waiting (576 columns
   * in 3 tiles kept one of 2 threads idle a third of the product): split the columns so that
   * the busiest thread has the fewest to do */
  if (lm_threads() > 1) {
    const long threads = lm_threads();
    long best = -1;
    for (long t = tn, last = 4 * tn; t <= last && (N + t - 1) / t >= LM_NR; t++) {
      const long c = ((N + t - 1) / t + LM_NR - 1) / LM_NR * LM_NR;
      const long busiest = (nb * tm * ((N + c - 1) / c) + threads - 1) / threads * c;
      if (best < 0 || busiest < best) best = busiest, tn = t;
    }
  }
  const long mc = ((M + tm - 1) / tm + LM_MR - 1) / LM_MR * LM_MR;
  const long nc = ((N + tn - 1) / tn + LM_NR - 1) / LM_NR * LM_NR;
  tm = (M + mc - 1) / mc;
  tn = (N + nc - 1) / nc;
  const long tiles = nb * tm * tn;
  lm_work *work = lm_thread_work();
  const long mp = (M + LM_MR - 1) / LM_MR * LM_MR;
  const long a_floats = prepack ? mp * K : 0, part_floats = ks > 1 ? nb * ks * M * N : 0;
  /* the packed A and the partial sums, shared by the team: one thread allocates, the others
   * get the pointer. No other pointer goes through the team's slot until the loop that frees
   * this one, which begins only once every loop reading it is done: a thread that reads the
   * slot late reads it only for loops it will find done. */
  float *scratch = NULL;
  if (a_floats + part_floats > 0) {
    lm_for_begin(1);
    for (long lo, hi; lm_for_next(&lo, &hi);)
      *lm_team_shared() = malloc(sizeof(float) * (a_floats + part_floats));
    scratch = (float *)*lm_team_shared();
  }
  const lm_apack packed = {scratch, mp}, *AP = prepack ? &packed : NULL;
  if (prepack) {
    const long panels = mp / LM_MR;
    lm_for_begin((K + LM_KC - 1) / LM_KC * panels);
    for (long lo, hi; lm_for_next(&lo, &hi);)
      for (long t = lo; t < hi; t++) {
        const long k0 = t / panels * LM_KC, m0 = t % panels * LM_MR;
        const long kc = K - k0 < LM_KC ? K - k0 : LM_KC;
        lm_pack_a(A, aoff[0], m0, M - m0 < LM_MR ? M - m0 : LM_MR, k0, kc,
                  scratch + k0 * mp + m0 * kc);
      }
  }
  if (ks == 1) {
    lm_for_begin(tiles);
    for (long lo, hi; lm_for_next(&lo, &hi);)
      for (long t = lo; t < hi; t++) {
        const long b = t / (tm * tn), m0 = t / tn % tm * mc, n0 = t % tn * nc;
        lm_tile(work, b, m0, M - m0 < mc ? M - m0 : mc, n0, N - n0 < nc ? N - n0 : nc, 0, K,
                A, AP, aoff, B, boff, W, P, C, NULL, 0);
      }
  } else {
    /* chunks of K in whole LM_KC panels; partial p of batch b is an M x N matrix */
    const long kchunk = (K / ks + LM_KC - 1) / LM_KC * LM_KC;
    float *parts = scratch + a_floats;
    lm_for_begin(tiles * ks);
    for (long lo, hi; lm_for_next(&lo, &hi);)
      for (long t = lo; t < hi; t++) {
        const long tile = t / ks, p = t % ks;
        const long b = tile / (tm * tn), m0 = tile / tn % tm * mc, n0 = tile % tn * nc;
        const long k_lo = p * kchunk, k_hi = k_lo + kchunk < K ? k_lo + kchunk : K;
        float *dst = parts + ((b * ks + p) * M + m0) * N + n0;
        if (k_lo >= k_hi) {  /* an empty chunk adds zeros */
          for (long i = 0; i < (M - m0 < mc ? M - m0 : mc); i++)
            memset(dst + i * N, 0, sizeof(float) * (N - n0 < nc ? N - n0 : nc));
          continue;
        }
        lm_tile(work, b, m0, M - m0 < mc ? M - m0 : mc, n0, N - n0 < nc ? N - n0 : nc, k_lo,
                k_hi, A, AP, aoff, B, boff, W, P, C, dst, N);
      }
    lm_for_begin(nb * M);
    for (long lo, hi; lm_for_next(&lo, &hi);)
      for (long r = lo; r < hi; r++) {
        const long b = r / M, m = r % M;
        const long row = C->off[b] + m * C->rs;
        for (long n = 0; n < N; n++) {
          float acc = 0.0f;
          for (long p = 0; p < ks; p++) acc += parts[((b * ks + p) * M + m) * N + n];
          lm_put(C->p, C->dt, row + n, acc);
        }
      }
  }
  if (scratch) {
    lm_for_begin(1);  /* once every tile and row is done nobody reads the scratch again */
    for (long lo, hi; lm_for_next(&lo, &hi);) free(scratch);
  }
}

/* ----- GEMV paths (M <= LM_GEMV_MAX_M): B is read once, at memory bandwidth --------------- */
/* The rows of A[b] as contiguous float32: pointers into A when it already is, else converted
 * into `buf` (M * K floats). */
void lm_rows_f32(const lm_mat *A, long off, long M, long K, float *buf, const float **x) {
  for (long m = 0; m < M; m++)
    x[m] = lm_row_f32(A->p, A->dt, off + m * A->rs, A->ks, K, buf + m * K);
}

/* the dot products of x[m][0..K) and w[0..K) for the rows m < M of x */
static inline void lm_dots(long M, long K, const float *const *x, const float *restrict w,
                           float *out) {
  for (long m = 0; m < M; m++) {
    const float *xm = x[m];
    float acc = 0.0f;
    #pragma omp simd reduction(+:acc)
    for (long k = 0; k < K; k++) acc = fmaf(xm[k], w[k], acc);
    out[m] = acc;
  }
}

#if defined(__AVX512F__)
/* out[m][j] = the dot product of x[m][0..K) and B's row j (at w + j * rs), j < 16, K a
 * multiple of 16: sixteen columns' partial sums in sixteen registers, reduced together by one
 * transpose instead of one horizontal sum per product (a short K, an attention's head size,
 * made those the cost: a query's scores over a KV cache) */
static void lm_dots16(long M, long K, const float *const *x, const float *restrict w, long rs,
                      float out[][16]) {
  for (long m = 0; m < M; m++) {
    __m512 acc[16];
    for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
    for (long k = 0; k < K; k += 16) {
      const __m512 xv = _mm512_loadu_ps(x[m] + k);
      for (int j = 0; j < 16; j++)
        acc[j] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w + j * rs + k), acc[j]);
    }
    lm_transpose16(acc);
    for (int j = 1; j < 16; j++) acc[0] = _mm512_add_ps(acc[0], acc[j]);
    _mm512_storeu_ps(out[m], acc[0]);
  }
}
#endif

/* B(n, k) contiguous along k: one dot product per (row of A, column n); sixteen columns at a
 * time where B is float32 and K a multiple of 16 (with AVX-512) */
static void lm_gemv_dot(long nb, const long *aoff, const long *boff, long M, long N, long K,
                        const lm_mat *A, const lm_mat *B, const lm_out *C) {
  float *buf = lm_scratch(A, M, K), *wbuf = B->dt == LM_F32 ? NULL : (float *)malloc(sizeof(float) * K);
  const float *x[LM_GEMV_MAX_M];
  long xb = -1;
#if defined(__AVX512F__)
  const long cols = B->dt == LM_F32 && K % 16 == 0 ? 16 : 1;
#else
  const long cols = 1;
#endif
  const long blocks = (N + cols - 1) / cols;
  lm_for_begin(nb * blocks);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / blocks, n0 = t % blocks * cols;
    const long nc = N - n0 < cols ? N - n0 : cols;
    if (b != xb) lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
    float out[LM_GEMV_MAX_M][16];
#if defined(__AVX512F__)
    if (nc == 16) {
      lm_dots16(M, K, x, (const float *)B->p + boff[b] + n0 * B->rs, B->rs, out);
    } else
#endif
    for (long j = 0; j < nc; j++) {
      float dots[LM_GEMV_MAX_M];
      lm_dots(M, K, x, lm_row_f32(B->p, B->dt, boff[b] + (n0 + j) * B->rs, 1, K, wbuf), dots);
      for (long m = 0; m < M; m++) out[m][j] = dots[m];
    }
    for (long m = 0; m < M; m++)
      for (long j = 0; j < nc; j++) lm_put(C->p, C->dt, C->off[b] + m * C->rs + n0 + j, out[m][j]);
  }
  free(buf);
  free(wbuf);
}

#if defined(__AVX512F__)
/* rows of B prefetched ahead: a KV cache's rows are a head's slice of each position, one or
 * more 4 KiB pages apart, which the hardware prefetchers do not follow */
#define LM_AXPY_AHEAD 8
/* acc[m][0..64) = sum over k < K of x[m][k] * w[k * ks + 0..64), for a constant M <= 4: the
 * M x 64 sums stay in registers (the generic loop below loads and stores them every k) */
static inline __attribute__((always_inline)) void lm_axpy64(const int M, long K,
    const float *const *x, const float *restrict w, long ks, float acc[][LM_GEMV_CHUNK]) {
  __m512 s[LM_GEMV_MAX_M][4];
  for (int m = 0; m < M; m++)
    for (int j = 0; j < 4; j++) s[m][j] = _mm512_setzero_ps();
  for (long k = 0; k < K; k++, w += ks) {
    for (int j = 0; j < 4; j++) _mm_prefetch((const char *)(w + LM_AXPY_AHEAD * ks + 16 * j), _MM_HINT_T0);
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16),
                 w2 = _mm512_loadu_ps(w + 32), w3 = _mm512_loadu_ps(w + 48);
    for (int m = 0; m < M; m++) {
      const __m512 a = _mm512_set1_ps(x[m][k]);
      s[m][0] = _mm512_fmadd_ps(a, w0, s[m][0]);
      s[m][1] = _mm512_fmadd_ps(a, w1, s[m][1]);
      s[m][2] = _mm512_fmadd_ps(a, w2, s[m][2]);
      s[m][3] = _mm512_fmadd_ps(a, w3, s[m][3]);
    }
  }
  for (int m = 0; m < M; m++)
    for (int j = 0; j < 4; j++) _mm512_storeu_ps(acc[m] + 16 * j, s[m][j]);
}
#endif

/* B(n, k) contiguous along n: accumulate rows of B scaled by A(m, k), a chunk of n at a time */
static void lm_gemv_axpy(long nb, const long *aoff, const long *boff, long M, long N, long K,
                         const lm_mat *A, const lm_mat *B, const lm_out *C) {
  const long chunks = (N + LM_GEMV_CHUNK - 1) / LM_GEMV_CHUNK;
  float *buf = lm_scratch(A, M, K);
  const float *x[LM_GEMV_MAX_M];
  long xb = -1;
  lm_for_begin(nb * chunks);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / chunks, n0 = t % chunks * LM_GEMV_CHUNK;
    const long nc = N - n0 < LM_GEMV_CHUNK ? N - n0 : LM_GEMV_CHUNK;
    if (b != xb) lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
    float acc[LM_GEMV_MAX_M][LM_GEMV_CHUNK] = {{0}};
    float wtmp[LM_GEMV_CHUNK];
#if defined(__AVX512F__)
    if (B->dt == LM_F32 && nc == LM_GEMV_CHUNK) {
      const float *w = (const float *)B->p + boff[b] + n0;
      switch (M) {
        case 1: lm_axpy64(1, K, x, w, B->ks, acc); break;
        case 2: lm_axpy64(2, K, x, w, B->ks, acc); break;
        case 3: lm_axpy64(3, K, x, w, B->ks, acc); break;
        case 4: lm_axpy64(4, K, x, w, B->ks, acc); break;
        default: break;  /* M = 0: nothing to sum */
      }
    } else
#endif
    for (long k = 0; k < K; k++) {
      const float *w = lm_row_f32(B->p, B->dt, boff[b] + k * B->ks + n0, 1, nc, wtmp);
      for (long m = 0; m < M; m++) {
        const float a = x[m][k];
        #pragma omp simd
        for (long j = 0; j < nc; j++) acc[m][j] = fmaf(a, w[j], acc[m][j]);
      }
    }
    for (long m = 0; m < M; m++)
      for (long j = 0; j < nc; j++) lm_put(C->p, C->dt, C->off[b] + m * C->rs + n0 + j, acc[m][j]);
  }
  free(buf);
}

/* C[b] (M x N) = A[b] * B[b]^T */
void lm_gemm(long nb, const long *aoff, const long *boff, long M, long N, long K,
             lm_mat A, lm_mat B, lm_out C) {
  if (M <= LM_GEMV_MAX_M && B.ks == 1 && K > 0)
    lm_gemv_dot(nb, aoff, boff, M, N, K, &A, &B, &C);
  else if (M <= LM_GEMV_MAX_M && B.rs == 1)
    lm_gemv_axpy(nb, aoff, boff, M, N, K, &A, &B, &C);
  else
    lm_gemm_tiled(nb, aoff, boff, M, N, K, &A, &B, NULL, NULL, &C);
}

void lm_gemm_packed(long M, long N, long K, lm_mat A, lm_packer B, lm_out C) {
  const long zero = 0;
  lm_gemm_tiled(1, &zero, &zero, M, N, K, &A, NULL, NULL, &B, &C);
}


/* ----- quantized ----------------------------------------------------------------------------- */
/* W[n, k]: each output is a dot product of a row of A with a row of W (decode's x @ W.T).
 *
 * AVX-512. The kernel is bound by vector operations per 32-value block (all of them, integer
 * and float, share the same four 256-bit pipes on Zen 4), not by memory, so it does as few
 * as it can: a block's scale is applied once per block, not per value, through the
 * distributive form: for Q4_1, sum_i x_i (q_i d + m) = d * sum_i x_i q_i + m * sum_i x_i;
 * for Q4_0, d * sum_i x_i q_i - 8 d * sum_i x_i; the block sums of x are computed once per
 * call. A block then costs its widening and conversion to float, a multiply and two fused
 * multiply-adds (eight float operations before: 1.6x fewer for Q4). LM_QUNROLL blocks go to
 * separate accumulators (one chain would wait a multiply-add's latency per block). Results
 * equal dequantize-then-matmul up to rounding (below 1e-5 relative).
 * Tried and dropped (no faster on Zen 4, measured): four rows of W side by side, software
 * prefetch, nibbles as bfloat16 for `vdpbf16ps` (x split into two bf16 halves), nibble
 * unpacking without cross-lane shuffles. */
#if defined(__AVX512F__)
#define LM_QUNROLL 4

/* the sums of each 32-value block of x */
static void lm_block_sums(const float *x, long K, float *sums) {
  for (long j = 0; j < K / 32; j++)
    sums[j] = _mm512_reduce_add_ps(
        _mm512_add_ps(_mm512_loadu_ps(x + j * 32), _mm512_loadu_ps(x + j * 32 + 16)));
}

/* block j of one row of W times block j of each row of A, into acc[m] and offset[m] */
static inline __attribute__((always_inline)) void lm_qdot_block(
    const unsigned char *restrict row, long j, const float *const *x, const float *const *xsum,
    int q, int M, __m512 *acc, float *offset) {
  const unsigned char *blk = row + j * lm_block_bytes(q);
  const float d = lm_half_at(blk);
  const __m512 dv = _mm512_set1_ps(d);
  __m512 lo, hi;
  if (q == LM_Q8_0) {
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2))));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18))));
  } else {
    lm_nibbles(blk, q, &lo, &hi);
  }
  /* what the block adds besides d * sum x q: m * sum x (Q4_1), -8 d * sum x (Q4_0),
   * -16 d * sum x (Q5_0) */
  const float c = q == LM_Q4_1 ? lm_half_at(blk + 2) : q == LM_Q4_0 ? -8.0f * d : -16.0f * d;
  for (int m = 0; m < M; m++) {
    const __m512 dot = _mm512_fmadd_ps(_mm512_loadu_ps(x[m] + j * 32 + 16), hi,
                                       _mm512_mul_ps(_mm512_loadu_ps(x[m] + j * 32), lo));
    acc[m] = _mm512_fmadd_ps(dot, dv, acc[m]);
    if (q != LM_Q8_0) offset[m] = fmaf(c, xsum[m][j], offset[m]);
  }
}

/* out[m] = one row of W . x[m] for M (a compile-time constant) rows of A */
static inline __attribute__((always_inline)) void lm_qdot_row(
    const unsigned char *restrict row, long K, const float *const *x, const float *const *xsum,
    int q, int M, float *out) {
  __m512 acc[LM_QUNROLL][LM_GEMV_MAX_M];
  float offset[LM_QUNROLL][LM_GEMV_MAX_M];
  for (int u = 0; u < LM_QUNROLL; u++)
    for (int m = 0; m < M; m++) acc[u][m] = _mm512_setzero_ps(), offset[u][m] = 0.0f;
  const long blocks = K / 32;
  long j = 0;
  for (; j + LM_QUNROLL <= blocks; j += LM_QUNROLL)
    for (int u = 0; u < LM_QUNROLL; u++)
      lm_qdot_block(row, j + u, x, xsum, q, M, acc[u], offset[u]);
  for (; j < blocks; j++) lm_qdot_block(row, j, x, xsum, q, M, acc[0], offset[0]);
  for (int m = 0; m < M; m++) {
    __m512 total = acc[0][m];
    float off = offset[0][m];
    for (int u = 1; u < LM_QUNROLL; u++) total = _mm512_add_ps(total, acc[u][m]), off += offset[u][m];
    out[m] = _mm512_reduce_add_ps(total) + off;
  }
}

static inline __attribute__((always_inline)) void lm_qgemv_dot_qm(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q, int MM) {
  const long row_bytes = K / 32 * lm_block_bytes(q);
  float *buf = lm_scratch(A, M, K), *sums = (float *)malloc(sizeof(float) * (M * (K / 32) + 1));
  unsigned char *tmp = W->packed ? (unsigned char *)malloc(row_bytes) : NULL;
  const float *x[LM_GEMV_MAX_M], *xsum[LM_GEMV_MAX_M];
  for (long m = 0; m < M; m++) xsum[m] = sums + m * (K / 32);
  long xb = -1;
  lm_for_begin(nb * N);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo, b, n0, n1; t < hi; t += n1 - n0) {
    lm_batch_rows(t, hi, N, &b, &n0, &n1);
    if (b != xb) {
      lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
      for (long m = 0; m < M; m++) lm_block_sums(x[m], K, sums + m * (K / 32));
    }
    for (long n = n0; n < n1; n++) {
      float out[LM_GEMV_MAX_M];
      lm_qdot_row(lm_gguf_row(W, n, row_bytes, tmp), K, x, xsum, q, MM, out);
      for (long m = 0; m < M; m++) lm_put(C->p, C->dt, C->off[b] + m * C->rs + n, out[m]);
    }
  }
  free(buf);
  free(sums);
  free(tmp);
}

/* M (rows of A, 1 to LM_GEMV_MAX_M) as a compile-time constant */
static inline __attribute__((always_inline)) void lm_qgemv_dot_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  switch (M) {
    case 1: lm_qgemv_dot_qm(nb, aoff, M, N, K, A, W, C, q, 1); break;
    case 2: lm_qgemv_dot_qm(nb, aoff, M, N, K, A, W, C, q, 2); break;
    case 3: lm_qgemv_dot_qm(nb, aoff, M, N, K, A, W, C, q, 3); break;
    default: lm_qgemv_dot_qm(nb, aoff, M, N, K, A, W, C, q, 4); break;
  }
}
#else
/* portable: decode a block, multiply-add it into per-row partial sums */
static inline __attribute__((always_inline)) void lm_qgemv_dot_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  const long bb = lm_block_bytes(q), row_bytes = K / 32 * bb;
  float *buf = lm_scratch(A, M, K);
  unsigned char *tmp = W->packed ? (unsigned char *)malloc(row_bytes) : NULL;
  const float *x[LM_GEMV_MAX_M];
  long xb = -1;
  lm_for_begin(nb * N);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / N, n = t % N;
    if (b != xb) lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
    const unsigned char *row = lm_gguf_row(W, n, row_bytes, tmp);
    float acc[LM_GEMV_MAX_M][32] = {{0}};
    float blk[32];
    for (long k0 = 0; k0 < K; k0 += 32) {
      lm_dequant_block(row + k0 / 32 * bb, q, blk);
      for (long m = 0; m < M; m++) {
        const float *xm = x[m] + k0;
        #pragma omp simd
        for (int i = 0; i < 32; i++) acc[m][i] = fmaf(xm[i], blk[i], acc[m][i]);
      }
    }
    for (long m = 0; m < M; m++) {
      float s = 0.0f;
      for (int i = 0; i < 32; i++) s += acc[m][i];
      lm_put(C->p, C->dt, C->off[b] + m * C->rs + n, s);
    }
  }
  free(buf);
  free(tmp);
}
#endif

/* W[k, n]: decode a chunk of each row of W and accumulate it scaled by A(m, k) */
static inline __attribute__((always_inline)) void lm_qgemv_axpy_q(
    long nb, const long *aoff, long M, long N, long K, const lm_mat *A, const lm_qmat *W,
    const lm_out *C, int q) {
  const long bb = lm_block_bytes(q), row_bytes = N / 32 * bb;
  const long parts = (N + LM_GEMV_CHUNK - 1) / LM_GEMV_CHUNK;
  float *buf = lm_scratch(A, M, K);
  const float *x[LM_GEMV_MAX_M];
  long xb = -1;
  lm_for_begin(nb * parts);
  for (long lo, hi; lm_for_next(&lo, &hi);)
  for (long t = lo; t < hi; t++) {
    const long b = t / parts, n0 = t % parts * LM_GEMV_CHUNK;
    const long nc = N - n0 < LM_GEMV_CHUNK ? N - n0 : LM_GEMV_CHUNK;
    if (b != xb) lm_rows_f32(A, aoff[b], M, K, buf, x), xb = b;
    float acc[LM_GEMV_MAX_M][LM_GEMV_CHUNK] __attribute__((aligned(64))) = {{0}};
    float w[LM_GEMV_CHUNK] __attribute__((aligned(64)));
    for (long k = 0; k < K; k++) {
      for (long j = 0; j < nc; j += 32)
        lm_dequant_block(W->w + k * row_bytes + (n0 + j) / 32 * bb, q, w + j);
      for (long m = 0; m < M; m++) {
        const float a = x[m][k];
        #pragma omp simd
        for (long j = 0; j < nc; j++) acc[m][j] = fmaf(a, w[j], acc[m][j]);
      }
    }
    for (long m = 0; m < M; m++)
      for (long j = 0; j < nc; j++) lm_put(C->p, C->dt, C->off[b] + m * C->rs + n0 + j, acc[m][j]);
  }
  free(buf);
}

#define LM_PER_FORMAT(fn, ...)                         \
  switch (W->q) {                                      \
    case LM_Q8_0: fn(__VA_ARGS__, LM_Q8_0); break;     \
    case LM_Q4_0: fn(__VA_ARGS__, LM_Q4_0); break;     \
    case LM_Q5_0: fn(__VA_ARGS__, LM_Q5_0); break;     \
    default: fn(__VA_ARGS__, LM_Q4_1); break;          \
  }

static void lm_qgemv_dot(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                         const lm_qmat *W, const lm_out *C) {
  LM_PER_FORMAT(lm_qgemv_dot_q, nb, aoff, M, N, K, A, W, C)
}

static void lm_qgemv_axpy(long nb, const long *aoff, long M, long N, long K, const lm_mat *A,
                          const lm_qmat *W, const lm_out *C) {
  LM_PER_FORMAT(lm_qgemv_axpy_q, nb, aoff, M, N, K, A, W, C)
}



/* C[b] (M x N) = A[b] * B^T with B decoded from the quantized W (shared by every batch) */
void lm_qgemm(long nb, const long *aoff, long M, long N, long K, lm_mat A, lm_qmat W,
              lm_out C) {
  /* a packed W (the runtime repacks only where every matmul reading it holds x as int16)
   * reaches qgemv16.c, qgemm8.c and the float kernels, which read its layout */
  if (M <= LM_GEMV_MAX_M && W.k_contig && W.x_prec == LM_X_I8 && !W.packed && lm_q8_gemv(nb, aoff, M, N, K, &A, &W, &C))
    return; /* decode's matvec through int8 activations (qgemv.c) */
  if (M <= LM_GEMV_MAX_M && W.k_contig && W.x_prec >= LM_X_I16 && lm_q16_gemv(nb, aoff, M, N, K, &A, &W, &C))
    return; /* through int16 digits of x (qgemv16.c) */
  if (M > LM_GEMV_MAX_M && W.k_contig && W.x_prec != LM_X_F32 && lm_q8_gemm(nb, aoff, M, N, K, &A, &W, &C))
    return; /* prefill through int8 digits of x (qgemm8.c) */
  if (W.q >= LM_Q4_K) { /* the K-quants: kquant.c */
    lm_kq_gemm(nb, aoff, M, N, K, A, W, C);
    return;
  }
  if (M <= LM_GEMV_MAX_M && W.k_contig)
    lm_qgemv_dot(nb, aoff, M, N, K, &A, &W, &C);
  else if (M <= LM_GEMV_MAX_M)
    lm_qgemv_axpy(nb, aoff, M, N, K, &A, &W, &C);
  else
    lm_gemm_tiled(nb, aoff, aoff, M, N, K, &A, NULL, &W, NULL, &C);
}
