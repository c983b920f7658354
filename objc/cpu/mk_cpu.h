// mk_cpu.h: what the CPU kernels (objc/cpu/*.c) share: the thread pool, float16 storage,
// scratch memory, the BLAS entry point and argument checks. Not part of the public ABI.
#ifndef MK_CPU_H
#define MK_CPU_H
#include <stddef.h>
#include <stdint.h>
#include "mpskern.h"

// float16 is storage only: kernels convert rows/blocks to float32 and accumulate there.
typedef _Float16 mk_half;

/* ---- thread pool (mk_cpu_threads.c) */
// fn(ctx, begin, end) is called on disjoint sub-ranges covering [0, n), from the pool's
// workers and the calling thread. Ranges hold at least `grain` items (except the last).
// Runs inline when n <= grain, when one thread is configured, or when the pool is busy
// (a nested call or a call from another application thread): always correct, never a deadlock.
typedef void (*mk_range_fn)(void *ctx, long begin, long end);
void mk_parallel_for(long n, long grain, mk_range_fn fn, void *ctx);
// Holding the pool (mk_pool_hold: 1 when taken; no job of the holder's is running): then
// mk_pool_gang runs fn(ctx, i, i + 1) for i < n each on its own thread, all at once (tasks
// that wait for each other); -1 with nothing run when the workers cannot be started.
int mk_pool_hold(void);
void mk_pool_release(void);
int mk_pool_gang(int n, mk_range_fn fn, void *ctx);
int mk_cpu_threads(void);             // effective thread count (>= 1)
// Waking the pool costs a few microseconds: a task should carry at least this many
// element-operations. mk_grain(work per item) = items per task (>= 1).
#define MK_MIN_TASK_WORK 16384L
static inline long mk_grain(long work_per_item) {
    long g = MK_MIN_TASK_WORK / (work_per_item > 0 ? work_per_item : 1);
    return g < 1 ? 1 : g;
}

/* ---- float16 <-> float32 blocks (mk_cpu_convert.c) */
void mk_h2f(const mk_half *src, float *dst, long n);
void mk_f2h(const float *src, mk_half *dst, long n);
// Parallel versions for large blocks.
void mk_h2f_par(const mk_half *src, float *dst, long n);
void mk_f2h_par(const float *src, mk_half *dst, long n);

/* ---- scratch memory: 64-byte aligned; NULL on failure */
void *mk_alloc(size_t bytes);
void mk_free(void *p);

/* ---- BLAS (mk_cpu_blas.c): row-major single-precision GEMM, single-threaded,
   out = alpha * op(A) @ op(B) + beta * out; K >= 1 and valid leading dims. */
void mk_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc);
// The same as one BLAS call on `threads` threads (its jobs on our pool; Accelerate: its own)
void mk_sgemm_threads(int threads, int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc);
/* ---- the same, cut into tiles over our thread pool (mk_cpu_gemm_par.c) */
void mk_sgemm_par(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);
// The same with an epilogue: ep(ep_ctx, tile, ldc, rows, cols) runs on each output tile
// right after its BLAS call, on the same thread, while the tile is in cache (gemm and
// conv2d apply their fused activation this way); when the GEMM is one call (one thread or
// a small GEMM), the tile is the whole output. ep may be NULL.
typedef void (*mk_tile_fn)(void *ep_ctx, float *C, int ldc, int rows, int cols);
void mk_sgemm_par_ep(int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc, mk_tile_fn ep, void *ep_ctx);
// A batch of equal GEMMs as one grid over all items' tiles: item b reads A + b*stride_a,
// B + b*stride_b, Cin + b*stride_c and writes C + b*stride_out (strides in floats). Cin
// (ldc, like C) is copied into each tile before its BLAS call when beta != 0 and it is not
// the output itself (Cin == C with equal strides: C is read in place; NULL: none).
void mk_sgemm_batch_par_ep(int trans_a, int trans_b, int batch, int M, int N, int K,
                           float alpha, const float *A, int lda, long stride_a, const float *B,
                           int ldb, long stride_b, float beta, const float *Cin, long stride_c,
                           float *C, int ldc, long stride_out, mk_tile_fn ep, void *ep_ctx);
// An mk_tile_fn applying mk_activate to every row of the tile; ep_ctx points at the
// MK_ACT_* code (an int).
void mk_activate_tile(void *ep_ctx, float *C, int ldc, int rows, int cols);

/* ---- our own AVX-512 float32 GEMM (mk_cpu_sgemm_avx512.c): the batched GEMM above with the
   activation act (MK_ACT_*) in its store; Cin NULL: C is read in place. 0 (nothing done)
   where the CPU or build has no AVX-512 or memory is short. MPSKERN_CPU_GEMM (read per call:
   auto, own, grid, whole) forces a GEMM path for tests and A/B benchmarks; -1 when it is
   none of these. */
int mk_own_sgemm_batch(int trans_a, int trans_b, int batch, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, const float *Cin, long stride_c, float *C,
                       int ldc, long stride_out, int act);
enum { MK_GEMM_AUTO, MK_GEMM_OWN, MK_GEMM_GRID, MK_GEMM_WHOLE };
int mk_gemm_path(void);

/* ---- fused activations (mk_cpu_activation.c): y[i] = act(y[i]) in place, act = MK_ACT_*
   (MK_ACT_NONE: nothing); for the pass that writes a gemm / conv2d output. */
void mk_activate(float *y, long n, int act);

/* ---- conv2d by Winograd F(m x m, 3x3), m = 4 or 2 (mk_cpu_winograd.c): for
   mk_winograd_applies() convolutions (3x3, stride 1, dilation 1); mk_cpu_conv2d chooses.
   MK_ERR_UNSUPPORTED (no error set): declined, the input or weights hold non-finite or huge
   values (y may be partly written); MK_ERR_NOMEM: scratch did not fit. Either way the
   caller runs the call another way. kb_cap: output channels per channel block at most
   (0: its own rule; 32: the rule before session 10, MPSKERN_CPU_CONV=winograd32 for A/B). */
int mk_winograd_applies(const mk_conv2d_args *a);
mk_status mk_cpu_conv2d_winograd(const mk_conv2d_args *a, int m, int kb_cap, int dtype,
                                 const void *x, const void *w, const float *bias, void *y);

/* ---- one image's conv2d GEMM y = w @ col with the reduction cut into chunks
   (mk_cpu_conv_splitk.c; conv2d's small-images path on many threads).
   mk_conv_splitk_parts: the chunk count pk (1: do not split) and the tiles per chunk
   (*pm output-channel parts x *pn pixel parts, set when pk > 1) for a K x PQ output with
   CRS reduction rows on `threads` threads. mk_conv_gemm_splitk: y (K x PQ) = w (K x CRS)
   @ col (CRS x PQ) + bias (per row, may be NULL), then activation act; MK_ERR_NOMEM when
   its partial outputs do not fit (nothing written then). */
int mk_conv_splitk_parts(int K, int PQ, long CRS, int threads, int *pm, int *pn);
mk_status mk_conv_gemm_splitk(int K, int PQ, long CRS, int pm, int pn, int pk,
                              const float *w, const float *col, const float *bias, int act,
                              float *y);

/* ---- a conv2d GEMM over images with few output pixels (mk_cpu_conv_fewpix.c; conv2d's
   small-images path): mk_conv_fewpix_max_pixels() is the most pixels an image may have
   (0: not on this CPU). mk_conv_fewpix: y (N images of K x PQ) = act(w (K x CRS) @ col[n]
   + bias (per row, may be NULL)), col[n] at col + n * col_img with its CRS rows ldc floats
   apart, ldc a multiple of the vector width >= PQ (lanes past PQ are read, never stored). */
int mk_conv_fewpix_max_pixels(void);
void mk_conv_fewpix(int N, int K, int PQ, long CRS, const float *w, const float *col,
                    long ldc, long col_img, const float *bias, int act, float *y);

/* ---- conv2d by a direct kernel for few input channels (mk_cpu_conv_direct.c: the 7x7/2
   stem): for mk_conv_direct_applies() convolutions (groups 1, at most 7 input channels, a
   window of 2+ taps, padding that does not dwarf the input); mk_cpu_conv2d chooses.
   MK_ERR_NOMEM: its padded input copy did not fit; the caller runs the call another way. */
int mk_conv_direct_applies(const mk_conv2d_args *a);
mk_status mk_cpu_conv2d_direct(const mk_conv2d_args *a, int dtype, const void *x,
                               const void *w, const float *bias, void *y);
// The same tiles for mk_conv_pointwise_applies() convolutions (1x1, groups 1, float32, at
// most 512 input channels, many threads and pixels), reading the input in place (stride 1,
// no padding) or a copy of the strided/padded pixels gathered once.
int mk_conv_pointwise_applies(const mk_conv2d_args *a, int dtype);
mk_status mk_cpu_conv2d_pointwise(const mk_conv2d_args *a, const void *x, const void *w,
                                  const float *bias, void *y);

/* ---- the pool2d variants mk_cpu_pool2d routes to: adaptive_avg_pool2d (MK_POOL_ADAPTIVE_AVG,
   mk_cpu_adaptive_pool.c; checks its own arguments) and max with indices
   (mk_cpu_pool2d_indices.c; arguments checked by mk_cpu_pool2d, nothing empty). */
mk_status mk_cpu_adaptive_avg_pool2d(const mk_pool2d_args *a, int dtype, const void *x, void *y);
mk_status mk_cpu_max_pool2d_indices(const mk_pool2d_args *a, int dtype, const void *x, void *y,
                                    int64_t *indices);
/* The plane loop all three share (mk_cpu_pool2d.c): planes b..e-1 of x (H*W elements each,
   float32 or float16 by dtype) into y (P*Q each) by plane(ctx, i, xp, yp) on float32 planes;
   float16 planes are staged through float32 buffers. 0 when out of memory. */
typedef void (*mk_plane_fn)(void *ctx, long i, const float *xp, float *yp);
int mk_pool_planes(const mk_pool2d_args *a, int dtype, const void *x, void *y, long b, long e,
                   mk_plane_fn plane, void *ctx);
// mk_parallel_for's grain for planes of a windowed pool (a plane's reads and taps)
long mk_pool_grain(const mk_pool2d_args *a);

/* ---- x86-64: hot loops are compiled for AVX-512, AVX2+FMA+F16C and the baseline, and the
   loader picks one (GCC's function multiversioning; the build stays portable, no
   -march=native). Elsewhere (arm64: NEON is the baseline) a plain function.
   CFLAGS="-DMK_NO_MULTIVERSION [-march=...]" builds one ISA only and -DMK_NO_F16C drops
   the F16C conversions: how the baseline and AVX2 paths are tested on an AVX-512 machine. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__) \
    && !defined(MK_NO_MULTIVERSION)
#define MK_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MK_MULTIVERSION
#endif

/* ---- helpers */
#define MK_CHECK_DTYPE(d) do { if ((d) != MK_F32 && (d) != MK_F16) \
    return mk_set_error(MK_ERR_INVALID, "%s: dtype %d is not MK_F32 (0) or MK_F16 (1)", \
                        __func__, (int)(d)); } while (0)
#define MK_CHECK_PTR(p) do { if (!(p)) \
    return mk_set_error(MK_ERR_INVALID, "%s: %s is NULL", __func__, #p); } while (0)
#define MK_CHECK_NONNEG(v) do { if ((v) < 0) \
    return mk_set_error(MK_ERR_INVALID, "%s: %s = %d must be >= 0", __func__, #v, (int)(v)); } while (0)
#define MK_CHECK_POS(v) do { if ((v) <= 0) \
    return mk_set_error(MK_ERR_INVALID, "%s: %s = %d must be > 0", __func__, #v, (int)(v)); } while (0)

// The opening of a kernel entry point with an args struct: a and dtype valid, then the
// kernel's own check of a (returns its error)
#define MK_CHECK_ENTRY(a, dtype, check) do { MK_CHECK_PTR(a); MK_CHECK_DTYPE(dtype); \
    mk_status check_st_ = check(a); if (check_st_) return check_st_; } while (0)

static inline size_t mk_dsize(int dtype) { return dtype == MK_F16 ? 2 : 4; }

/* ---- sliding windows: the outputs i in [0, n) whose tap i*step + off lies in [0, len),
   as [*lo, *hi) (empty: lo == hi). In 64-bit arithmetic: int32 arguments (a stride near
   2^31, a tap offset s*dilation - padding) overflow int. Conv and pool kernels use it
   for rows, columns and, with step = dilation, for the taps of one window. */
static inline void mk_tap_range(long off, long step, long len, long n, int *lo, int *hi) {
    long l = off >= 0 ? 0 : (-off + step - 1) / step;
    long h = len - off <= 0 ? 0 : (len - off - 1) / step + 1;
    if (h > n) h = n;
    if (l > h) l = h;
    *lo = (int)l; *hi = (int)h;
}

#endif
