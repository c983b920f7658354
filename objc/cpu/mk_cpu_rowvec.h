// mk_cpu_rowvec.h: vectorised passes over a contiguous float32 row, shared by softmax and the
// row norms. Each is compiled at the widest width that runs well (16 floats for AVX-512,
// 8 for AVX2 / SSE / NEON) and mk_rowvec() picks the set for this CPU once; callers go
// through the table. Not part of the public ABI.
#ifndef MK_CPU_ROWVEC_H
#define MK_CPU_ROWVEC_H
#include "mk_cpu.h"

typedef struct {
    // maximum of x[0..n); NaN if any element is NaN
    float (*max)(const float *x, long n);
    // sum of exp(x - m) for x - m <= 0 (m >= max, or NaN: then NaN); when y is not NULL also
    // stores the terms there (y may alias x). Terms below ~1e-38 (and exp(-inf)) are 0.
    float (*exp_sum)(const float *x, float *y, long n, float m);
    // y[i] *= f
    void (*scale)(float *y, long n, float f);
    // y[i] = (x[i] - a) - b (y may alias x): log_softmax's output
    void (*sub2)(const float *x, float *y, long n, float a, float b);
    // sum of x, and sum of (x - c)^2
    float (*sum)(const float *x, long n);
    float (*sumsq_dev)(const float *x, long n, float c);
    // sum of (x - c)^2, and the sum of (x - c) into *dev_sum (one pass)
    float (*dev_moments)(const float *x, long n, float c, float *dev_sum);
    // y[i] = (x[i] - mean) * rstd [* w[i]] [+ b[i]] (w, b may be NULL; y may alias x)
    void (*norm_out)(const float *x, float *y, long n, float mean, float rstd,
                     const float *w, const float *b);
    int width;   // floats per vector of this set (reported by tests)
} mk_rowvec_t;

const mk_rowvec_t *mk_rowvec(void);

/* Rows over threads: whole rows per task, unless that leaves too many threads idle: more
   than the op's share (max_busy_pct: the busy share of threads, in percent, at or below
   which cutting pays). Then each row is cut into segments, as many as make rows x
   segments a multiple of the threads, each at least MK_MIN_SEGMENT floats; the ops reduce
   per segment and combine per row. Measured on 16 cores (rows of 50257, against whole rows
   with threads idle): layer_norm gained from 2 rows of 8 threads to 12 of 16 (1.58 / 1.09x
   torch against 1.11 / 0.99), so norms cut at <= 89% busy; softmax, which reads x twice
   and computes exp twice when cut, gained at <= 4 rows of 16 threads (2.19 vs 1.71x) and
   lost at 8 of 16 (1.34 vs 1.71x), so it cuts at <= 25%. */
#define MK_MIN_SEGMENT 4096L
static inline long mk_row_segments(long rows, long n, long threads, int max_busy_pct) {
    if (threads <= 1 || rows <= 0) return 1;
    long rounds = (rows + threads - 1) / threads;
    if (rows * 100 > rounds * threads * max_busy_pct) return 1;
    long a = rows, b = threads;                  // gcd
    while (b) { long r = a % b; a = b; b = r; }
    long segs = threads / a, cap = n / MK_MIN_SEGMENT;
    if (segs > cap) segs = cap;
    return segs < 2 ? 1 : segs;
}
// start of segment i of `segs` in a row of n floats (on a 16-float boundary; i = segs: n)
static inline long mk_segment_start(long i, long segs, long n) {
    return i >= segs ? n : (n * i / segs) & ~15L;
}
// Floats [lo, lo + len) of row r of x (rows of n elements, float32 or float16 by dtype) as
// float32: a pointer into x, or buf (len floats) holding the converted float16 values.
static inline const float *mk_row_piece(int dtype, const void *x, long n, long r, long lo, long len,
                                        float *buf) {
    if (dtype == MK_F32) return (const float *)x + r * n + lo;
    mk_h2f((const mk_half *)x + r * n + lo, buf, len);
    return buf;
}

/* A pass over rows cut into segments (mk_row_segments), as an mk_parallel_for body:
   mk_segment_range(pass, b, e) calls piece(ctx, &g) for the segments p = b..e-1 (p = row *
   segs + i) with g.x the segment as float32 (mk_row_piece). The statistics pass has y NULL;
   the output pass gives g.y, where the piece writes its output from g.x (in place for
   float16 rows: g.y is g.x's buffer, stored to y after the call). failed: out of memory. */
typedef struct {
    long p, row, lo, len;
    const float *x;
    float *y;
} mk_segment;
typedef struct {
    int dtype;
    const void *x;
    void *y;
    long n, segs;
    void (*piece)(void *ctx, const mk_segment *g);
    void *ctx;
    int failed;
} mk_segment_pass;
void mk_segment_range(void *pass, long b, long e);
#endif
