/* luminal-cpu runtime API: what generated programs call (implementation: runtime.c, built
 * once into its own cached shared library that every generated library links to). */

/* Work sharing without barriers. Every thread of lm_run's parallel region calls the same
 * work-shared loops in the same order, each as
 *
 *     lm_for_begin(n);
 *     for (long lo, hi; lm_for_next(&lo, &hi);)
 *       for (long i = lo; i < hi; i++) ...
 *
 * Threads claim chunks of the n iterations, each its own first (so that loops over the same
 * rows keep a row on one core), then any left, until none are left, then
 * wait until every claimed chunk is done: the next loop may read what this one wrote. No
 * thread waits for another thread to *arrive*, only for claimed work to finish, so a thread
 * that the OS keeps off its core holds nobody up unless it holds a chunk (and when it runs
 * again it passes the loops the others finished without stopping). lm_run declares one
 * zeroed team and every thread enters it. */
typedef struct {
  _Alignas(64) unsigned long long claim;  /* (loop number << 32) | claimed chunks' mask (or
                                           * the next chunk, loops of more than 32) */
  _Alignas(64) unsigned long long done;   /* (loop number << 32) | chunks finished */
  _Alignas(64) void *shared;              /* a pointer one thread hands the others */
} lm_team;
void lm_team_enter(lm_team *team);
void lm_team_leave(void);
void lm_for_begin(long n);
/* lm_for_begin for a loop whose iterations take about `ns` nanoseconds on one core in all:
 * one chunk per thread when that is short, else finer chunks (up to 8 per thread, of at
 * least 20 us each) that the threads claim as they finish. One chunk per thread is cheapest
 * when the halves take equally long, but a thread the OS preempts, an iteration range that
 * costs more than another (a concatenation whose second half pools) or a core that runs a
 * few percent slower leaves the other thread waiting for up to half the loop. */
void lm_for_begin_work(long n, long ns);
int lm_for_next(long *lo, long *hi);

enum { LM_F32 = 0, LM_F16 = 1, LM_BF16 = 2 };
enum { LM_Q8_0 = 0, LM_Q4_0 = 1, LM_Q4_1 = 2, LM_Q5_0 = 3, LM_Q4_K = 4, LM_Q5_K = 5, LM_Q6_K = 6 };

/* element (row, k) of batch b is p[off[b] + row*rs + k*ks] */
typedef struct { const void *p; int dt; long rs, ks; } lm_mat;

/* a GGUF block-quantized matrix W (rows x cols, blocks of 32 or 256 elements along each row);
 * k_contig: the product reads W[n, k] (x @ W.T), else W[k, n] (x @ W); x_prec: how decode's
 * matvec holds x (LM_X_F32: float32; LM_X_I8: int8 blocks, qgemv.c; LM_X_I16 and LM_X_I24:
 * int16 digits, qgemv16.c) and prefill's GEMM (LM_X_F32: the float GEMM; LM_X_I8: one int8
 * digit per value; LM_X_I16: two; LM_X_I24: three; qgemm8.c); packed: a W in one of repack.py's FORMATS (k_contig,
 * rows a multiple of 16) whose rows are interleaved by 16 (the runtime's repacked layout,
 * repack.py): per group of 16 rows and block, the 16 blocks' fields side by side in GGUF's
 * order, a field of width w <= 4 at offset o as 16 w bytes at 16 o (row i's at 16 o + w i), a
 * wider one as one 64-byte vector per 4-byte word (int32 lane i: row i's word); same size as
 * GGUF's (lm_rows16_fields) */
enum { LM_X_F32 = 0, LM_X_I8 = 1, LM_X_I16 = 2, LM_X_I24 = 3 };
typedef struct {
  const unsigned char *w; int q; int k_contig; long rows, cols; int x_prec; int packed;
} lm_qmat;

/* where results go: element (m, n) of batch b is p[off[b] + m*rs + n], of element type dt */
typedef struct { void *p; int dt; const long *off; long rs; } lm_out;

/* C[b] (M x N) = A[b] (M x K) * B[b]^T, B[b] being N x K */
void lm_gemm(long nb, const long *aoff, const long *boff, long M, long N, long K,
             lm_mat A, lm_mat B, lm_out C);

/* the same with B decoded from W, which every batch shares */
void lm_qgemm(long nb, const long *aoff, long M, long N, long K, lm_mat A, lm_qmat W, lm_out C);

/* lm_qgemm for Q5_0 and the K-quants (kquant.c) */
void lm_kq_gemm(long nb, const long *aoff, long M, long N, long K, lm_mat A, lm_qmat W, lm_out C);

/* B computed while the GEMM packs it, never stored whole (an implicit GEMM: a convolution's
 * im2col matrix gathered from its input block by block). pack(ctx, n0, nc, k0, kc, bp, w)
 * writes the block B(n0 .. n0 + nc, k0 .. k0 + kc) as panels of w columns: B(n0 + j, k0 + k)
 * goes to bp[(j / w) * w * kc + k * w + j % w], and the last panel is padded with zeros.
 * One call per block lets it walk the input a row at a time (w-column panels filled in
 * turn), which the hardware prefetchers follow. */
#define LM_NR 32  /* columns of a packed B panel (the micro-kernel's width) */
typedef void (*lm_pack_fn)(const void *ctx, long n0, long nc, long k0, long kc, float *bp,
                           long w);
typedef struct { lm_pack_fn pack; const void *ctx; } lm_packer;

/* C (M x N) = A (M x K) * B^T with B's panels from `B` */
void lm_gemm_packed(long M, long N, long K, lm_mat A, lm_packer B, lm_out C);

/* Called from Python (runtime.py), outside any program: the `rows`-row W of format q (its
 * nbytes of GGUF's bytes at src) written to dst with its rows interleaved by 16 (lm_qmat.packed;
 * dst may be src: repacked in place, a group of 16 rows at a time through a scratch copy), the
 * groups split among `threads` OpenMP threads. 0; -1 when q is not packable or nbytes is not
 * whole blocks of whole groups of 16 rows (nothing written); -2 when out of memory. */
int lm_repack_rows16(const unsigned char *src, unsigned char *dst, long nbytes, int q, long rows,
                     int threads);
