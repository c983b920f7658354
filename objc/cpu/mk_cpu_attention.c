// mk_cpu_attention.c: scaled_dot_product_attention (mk_attention_args) on the CPU, blocked as
// flash attention: a task owns QB query rows (or fewer: query_rows()) of one (batch, head)
// and walks the keys in blocks of KB. Per key block, our own micro-kernels
// (mk_cpu_attention_tiles.h, no BLAS call: OpenBLAS re-packed both operands of every
// 128x256x64 block, ~80% of the time): the scores
// S^T = scale * K Q^T (KB x QB, transposed: Q packed once per task, K read in place), the
// online-softmax update lane-wise over the queries (mask, running max m and sum l, S -> exp(S -
// m)), then O = alpha O + P V with the rescale by exp(m_old - m) fused into the tile's store.
// Scratch is the score block, the rows' m and l, packed Q, and for float16 the converted Q, K
// and V blocks: O(QB * KB), never O(L * S); float32 output rows accumulate in place in `out`.
// Every operand's rows are read (and out's written) at their own row strides (q_sl, k_sl,
// v_sl, o_sl): GPT-2's heads are read straight out of its qkv projection and written merged.
// Strided K and V blocks are copied to dense scratch first (as float16 ones are converted),
// and strided output rows accumulate in dense scratch, copied out at the end: rows 9 KB
// (GPT-2's qkv) or 3 KB (merged heads) apart fall into a few L1 sets, and the kernels
// re-read them per key block and query panel (2 threads, 12x256x64 causal: 1.90 ms in
// place vs 1.36 dense, device run 1).
// docs/attention.md says why the blocks are these sizes.
// The output rows hold the unnormalised sums of exp(s - m) v, divided by l once at the end,
// when no sum can overflow (sums_fit(): every value finite and the visited keys' values
// small enough); else (values near FLT_MAX) they stay normalised (a convex combination): per
// key block P is divided by the new l and O rescaled by l_old*f/l_new, so such values give
// their (representable) weighted mean. The first saves a pass over every score block.
//
// Semantics (as torch, see metal/mk_args.h): hidden keys (false bool mask, causal j > i)
// get -inf added, as torch adds its masks (a NaN or +Inf score gives NaN), so exp gives
// exactly 0; a row that has seen no key yet keeps m = -inf and its weights are set to 0
// directly (exp(-inf - -inf) would be NaN), so a row with nothing visible is 0 @ v. NaN
// scores propagate through the max and the sums. With causal, key blocks past a task's last
// row are not visited when that cannot change the result (skippable()): torch multiplies
// their weight 0 with the values (0 * Inf/NaN = NaN) and adds -inf to their scores (+Inf or
// NaN + -inf = NaN), so a non-finite value or key there, or scores that may overflow, make
// the task visit every key.
#include "mk_cpu.h"
#include "mk_cpu_rowvec.h"
#include "mk_cpu_attention_tiles.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QB 128   // query rows per task, at most (query_rows())
#define QB_MIN 32
#define KB 256   // keys per block

typedef struct {
    const mk_attention_args *a;
    int dtype;
    const void *q, *k, *v, *mask;
    void *out;
    long nqb;          // query blocks per (batch, head)
    int rows;          // query rows per block (query_rows())
    int qb, kb;        // rows of a query block, keys of a key block (rows, KB or less)
    long ld;           // qb rounded up to the micro-kernels' query panel
    int failed;
} at_ctx;

typedef struct {       // one thread's scratch (floats)
    float *S;          // the score block, transposed: kb rows (keys) of ld floats (queries)
    float *P;          // its weights, packed per query tile of the P V kernel (kb ld)
    float *m, *l, *alpha, *tmp;   // per query: running max, sum, the block's factor; 2 ld
    float *Qp, *vtail; // packed Q (E ld); V's last columns (kb nr)
    float *O, *Q, *K, *V;         // float16: float32 copies
} at_scratch;

static size_t esize(int dtype) { return mk_dsize(dtype); }

// The mask, then causal exclusion, on the transposed score block St[j][c] (key j0 + j, query
// i0 + c; rows of ld floats) for the block's nq queries. Key rows outer: St is written in
// order and the nq mask rows being read stay in cache.
static void mask_cols(const at_ctx *t, float *St, long ld, int nk, int nq, int b, int h, int i0, int j0) {
    const mk_attention_args *a = t->a;
    if (a->mask != MK_ATTN_MASK_NONE) {
        long at = (long)b * a->m_sb + (long)h * a->m_sh + (long)i0 * a->m_sl + (long)j0 * a->m_ss;
        for (int j = 0; j < nk; j++) {
            float *row = St + j * ld;
            long o = at + (long)j * a->m_ss;
            if (a->mask == MK_ATTN_MASK_BOOL) {
                const uint8_t *mr = (const uint8_t *)t->mask + o;
                for (int c = 0; c < nq; c++) row[c] += mr[(long)c * a->m_sl] ? 0.0f : -INFINITY;
            } else if (t->dtype == MK_F32) {
                const float *mr = (const float *)t->mask + o;
                for (int c = 0; c < nq; c++) row[c] += mr[(long)c * a->m_sl];
            } else {
                const mk_half *mr = (const mk_half *)t->mask + o;
                for (int c = 0; c < nq; c++) row[c] += (float)mr[(long)c * a->m_sl];
            }
        }
    }
    if (a->causal)                       // queries i0 + c < j0 + j do not see key j0 + j
        for (int j = 0; j < nk; j++) {
            long hide = (long)j0 + j - i0;
            for (long c = 0; c < (hide < nq ? hide : nq); c++) St[j * ld + c] += -INFINITY;
        }
}

// Sum of squares of n floats at p (float32 or float16, converted through `tmp` of `room`
// floats); Inf/NaN when any is non-finite (or the sum overflows).
static float sumsq(const void *p, long n, int f16, float *tmp, long room) {
    const mk_rowvec_t *rv = mk_rowvec();
    if (!f16) return rv->sumsq_dev((const float *)p, n, 0.0f);
    float s = 0.0f;
    for (long i = 0; i < n; i += room) {
        long c = n - i < room ? n - i : room;
        mk_h2f((const mk_half *)p + i, tmp, c);
        s += rv->sumsq_dev(tmp, c, 0.0f);
    }
    return s;
}

// sumsq over `rows` rows of `cols` elements, `ld` elements apart (room >= cols)
static float sumsq_rows(const void *p, long rows, long cols, long ld, int f16, float *tmp, long room) {
    if (ld == cols || rows <= 1) return sumsq(p, rows * cols, f16, tmp, room);
    float s = 0.0f;
    size_t es = f16 ? 2 : 4;
    for (long r = 0; r < rows; r++) s += sumsq((const char *)p + (size_t)(r * ld) * es, cols, f16, tmp, room);
    return s;
}

// n rows of `cols` float16 values, ld apart, as float32 rows of cols at dst
static void h2f_rows(const mk_half *src, long ld, long n, long cols, float *dst) {
    if (ld == cols) { mk_h2f(src, dst, n * cols); return; }
    for (long r = 0; r < n; r++) mk_h2f(src + r * ld, dst + r * cols, cols);
}

// n rows of `cols` values (float16: converted), ld apart, as dense float32 rows at dst
static const float *dense_rows(const void *src, long ld, long n, long cols, int f16, float *dst) {
    if (f16) h2f_rows((const mk_half *)src, ld, n, cols, dst);
    else
        for (long r = 0; r < n; r++) memcpy(dst + r * cols, (const float *)src + r * ld, (size_t)cols * 4);
    return dst;
}

// whether the kernel works on dense copies of the key / value blocks (scratch w->K / w->V)
static int copies_k(const mk_attention_args *a, int dtype) { return dtype == MK_F16 || a->k_sl != a->E; }
static int copies_v(const mk_attention_args *a, int dtype) { return dtype == MK_F16 || a->v_sl != a->Ev; }
static int copies_o(const mk_attention_args *a, int dtype) {
    return dtype == MK_F16 || (a->o_sl != a->Ev && a->L > 1);
}

// Whether a causal task of rows i0..i0+nq-1 may leave out keys kend..S-1: only when every
// value there is finite (torch's weight 0 times them is 0) and no score of theirs can be
// +Inf or NaN: |scale q.k| <= |scale| |q| |k| (Cauchy-Schwarz) with finite keys and query
// rows bounds every score; 1e30 leaves room for float rounding. O((S - kend) (E + Ev)) reads,
// next to the O(nq kend (E + Ev)) of the visited keys.
static int skippable(const at_ctx *t, const at_scratch *w, const float *Q, long ldq,
                     const char *kb, const char *vb, int nq, int kend) {
    const mk_attention_args *a = t->a;
    const int f16 = t->dtype == MK_F16;
    const size_t es = esize(t->dtype);
    long n = a->S - kend;
    if (a->mask != MK_ATTN_MASK_NONE) return 0;     // (torch refuses a mask with is_causal)
    float vv = sumsq_rows(vb + (size_t)kend * a->v_sl * es, n, a->Ev, a->v_sl, f16, w->V,
                          (long)t->kb * a->Ev);
    if (!(vv < INFINITY)) return 0;
    if (a->E == 0) return 1;
    float kk = sumsq_rows(kb + (size_t)kend * a->k_sl * es, n, a->E, a->k_sl, f16, w->K,
                          (long)t->kb * a->E);
    float qq = sumsq_rows(Q, nq, a->E, ldq, 0, NULL, 0);      // (float32 already)
    return fabsf(a->scale) * sqrtf(kk) * sqrtf(qq) < 1e30f;
}

// Whether the output rows may hold unnormalised sums (sum of exp(s - m) v over the visited
// keys, divided by l once at the end, as flash attention does): only when no such sum can
// overflow. Each weight is <= 1, so |sum| <= kend * max|v| <= kend * sqrt(sum of v^2) over
// the keys 0..kend-1; a non-finite value makes it fail. Otherwise (values near FLT_MAX) every
// key block's weights are divided by l before they meet v: the rows stay normalised.
// O(kend Ev) reads next to the block's O(nq kend (E + Ev)) multiply-adds.
static int sums_fit(const at_ctx *t, const at_scratch *w, const char *vb, int kend) {
    const mk_attention_args *a = t->a;
    float vv = sumsq_rows(vb, kend, a->Ev, a->v_sl, t->dtype == MK_F16, w->V, (long)t->kb * a->Ev);
    return (float)kend * sqrtf(vv) < 1e37f;      // (NaN/Inf compare false)
}

// One query block: rows i0..i0+nq-1 of (b, h).
static void attend_block(const at_ctx *t, const at_scratch *w, int b, int h, int i0, int nq) {
    const mk_attention_args *a = t->a;
    const mk_attn_tiles_t *tl = mk_attn_tiles();
    const int E = a->E, Ev = a->Ev, f16 = t->dtype == MK_F16;
    const size_t es = esize(t->dtype);
    const char *qb = (const char *)t->q + ((long)b * a->q_sb + (long)h * a->q_sh + (long)i0 * a->q_sl) * es;
    const char *kb = (const char *)t->k + ((long)b * a->k_sb + (long)(h / (a->Hq / a->Hk)) * a->k_sh) * es;
    const char *vb = (const char *)t->v + ((long)b * a->v_sb + (long)(h / (a->Hq / a->Hv)) * a->v_sh) * es;
    long orow = (long)b * a->o_sb + (long)h * a->o_sh + (long)i0 * a->o_sl;   // first output row
    const int co = copies_o(a, t->dtype);
    float *O = co ? w->O : (float *)t->out + orow;
    const long ldo = co ? Ev : a->o_sl;
    const float *Q = (const float *)qb;
    const int ck = copies_k(a, t->dtype), cv = copies_v(a, t->dtype);
    long ldq = a->q_sl, ldk = ck ? E : a->k_sl, ldv = cv ? Ev : a->v_sl;
    if (f16) { h2f_rows((const mk_half *)qb, a->q_sl, nq, E, w->Q); Q = w->Q; ldq = E; }
    const long ld = t->ld;                                // of the (transposed) score block
    tl->pack_q(Q, ldq, nq, E, w->Qp, ld);
    for (int r = 0; r < nq; r++) memset(O + r * ldo, 0, (size_t)Ev * 4);
    for (long c = 0; c < ld; c++) { w->m[c] = -INFINITY; w->l[c] = 0.0f; }

    int kend = a->causal && i0 + nq < a->S ? i0 + nq : a->S;
    if (kend < a->S && !skippable(t, w, Q, ldq, kb, vb, nq, kend)) kend = a->S;
    const int direct = sums_fit(t, w, vb, kend);
    for (int j0 = 0; j0 < kend; j0 += t->kb) {
        int nk = kend - j0 < t->kb ? kend - j0 : t->kb;
        const float *K = (const float *)(kb + (size_t)j0 * a->k_sl * es);
        const float *V = (const float *)(vb + (size_t)j0 * a->v_sl * es);
        if (ck) K = dense_rows(K, a->k_sl, nk, E, f16, w->K);
        if (cv) V = dense_rows(V, a->v_sl, nk, Ev, f16, w->V);
        if (E > 0) tl->scores(K, ldk, nk, E, w->Qp, ld, a->scale, w->S);
        else memset(w->S, 0, (size_t)nk * ld * 4);
        mask_cols(t, w->S, ld, nk, nq, b, h, i0, j0);
        // the weights; alpha: the sums' factor (direct: exp(m_old - m); else also / l)
        tl->softmax(w->S, nk, ld, w->P, w->m, w->l, w->alpha, !direct, w->tmp);
        tl->pv(w->P, nq, nk, V, ldv, Ev, O, ldo, w->alpha, w->vtail);
    }
    if (direct)                              // the sums / l (l = 0: nothing visible, O = 0)
        for (int r = 0; r < nq; r++)
            if (w->l[r] != 0.0f) mk_rowvec()->scale(O + (long)r * ldo, Ev, 1.0f / w->l[r]);
    if (f16)
        for (int r = 0; r < nq; r++)
            mk_f2h(O + (long)r * Ev, (mk_half *)t->out + orow + (long)r * a->o_sl, Ev);
    else if (co)
        for (int r = 0; r < nq; r++)
            memcpy((float *)t->out + orow + (long)r * a->o_sl, O + (long)r * Ev, (size_t)Ev * 4);
}

static void attend_range(void *vc, long begin, long end) {
    at_ctx *t = vc;
    const mk_attention_args *a = t->a;
    int f16 = t->dtype == MK_F16;
    size_t qb = (size_t)t->qb, kb = (size_t)t->kb, ld = (size_t)t->ld;   // sized for small problems too
    size_t nr = (size_t)mk_attn_tiles()->nr;
    size_t floats = 2 * kb * ld + 5 * ld + (size_t)a->E * ld + kb * nr;
    const int ck = copies_k(a, t->dtype), cv = copies_v(a, t->dtype);
    const int co = copies_o(a, t->dtype);
    if (f16) floats += qb * a->E;
    if (co) floats += qb * a->Ev;
    floats += (ck ? kb * a->E : 0) + (cv ? kb * a->Ev : 0);
    float *buf = mk_alloc(floats * 4);
    if (!buf) { __atomic_store_n(&t->failed, 1, __ATOMIC_RELAXED); return; }
    at_scratch w = {0};
    float *p = buf;
    w.S = p; p += kb * ld;
    w.P = p; p += kb * ld;
    w.m = p; p += ld;
    w.l = p; p += ld;
    w.alpha = p; p += ld;
    w.tmp = p; p += 2 * ld;
    w.Qp = p; p += (size_t)a->E * ld;
    w.vtail = p; p += kb * nr;
    if (co) { w.O = p; p += qb * a->Ev; }
    if (f16) { w.Q = p; p += qb * a->E; }
    if (ck) { w.K = p; p += kb * a->E; }
    if (cv) w.V = p;
    for (long it = begin; it < end; it++) {
        long bh = it / t->nqb;
        // the last query blocks first: under causal they have the most keys, and the pool
        // hands out chunks in order, so the long tasks do not come last
        long qblk = t->nqb - 1 - it % t->nqb;
        int i0 = (int)(qblk * t->rows);
        int nq = a->L - i0 < t->rows ? a->L - i0 : t->rows;
        attend_block(t, &w, (int)(bh / a->Hq), (int)(bh % a->Hq), i0, nq);
    }
    mk_free(buf);
}

// Query rows per task: QB, halved (down to QB_MIN) while there are fewer than 3 tasks per
// thread. GPT-2 small's 12 heads x 256 rows are 24 tasks of 128 rows: at 16 threads, with
// causal's tasks of 1 and 2 units, the last ones end at 3 units where 36 / 16 = 2.25 would do;
// 64-row tasks end near 8 of their units (= 4 of the 128-row ones') of 120 / 16 = 7.5.
// MPSKERN_CPU_ATTENTION_ROWS (read per call, for tests and same-build A/B runs) forces the
// rows of every call: 128, 64 or 32; auto or unset: the rule below.
static int forced_rows(void) {       // 0: auto; -1: not a choice (check_args' error)
    const char *e = getenv("MPSKERN_CPU_ATTENTION_ROWS");
    if (!e || !*e || !strcmp(e, "auto")) return 0;
    return !strcmp(e, "128") ? 128 : !strcmp(e, "64") ? 64 : !strcmp(e, "32") ? 32 : -1;
}

static int query_rows(const mk_attention_args *a) {
    int forced = forced_rows();
    if (forced > 0) return forced;
    long bh = (long)a->B * a->Hq, want = 3L * mk_cpu_threads();
    int rows = QB;
    while (rows > QB_MIN && bh * ((a->L + rows - 1) / rows) < want) rows /= 2;
    return rows;
}

static mk_status check_args(const mk_attention_args *a) {
    MK_CHECK_NONNEG(a->B); MK_CHECK_NONNEG(a->L); MK_CHECK_NONNEG(a->S);
    MK_CHECK_NONNEG(a->E); MK_CHECK_NONNEG(a->Ev);
    MK_CHECK_POS(a->Hq); MK_CHECK_POS(a->Hk); MK_CHECK_POS(a->Hv);
    if (a->Hq % a->Hk || a->Hq % a->Hv)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_attention: Hk=%d and Hv=%d must divide Hq=%d",
                            a->Hk, a->Hv, a->Hq);
    if (a->q_sb < 0 || a->q_sh < 0 || a->k_sb < 0 || a->k_sh < 0 || a->v_sb < 0 || a->v_sh < 0 ||
        a->m_sb < 0 || a->m_sh < 0 || a->m_sl < 0 || a->m_ss < 0 || a->q_sl < 0 || a->k_sl < 0 ||
        a->v_sl < 0 || a->o_sb < 0 || a->o_sh < 0 || a->o_sl < 0)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_attention: negative stride");
    if (a->mask < MK_ATTN_MASK_NONE || a->mask > MK_ATTN_MASK_ADD)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_attention: mask kind %d is not MK_ATTN_MASK_*", a->mask);
    if (forced_rows() < 0)
        return mk_set_error(MK_ERR_INVALID, "mk_cpu_attention: MPSKERN_CPU_ATTENTION_ROWS=%s: "
                            "expected auto, 128, 64 or 32 (unset means auto)",
                            getenv("MPSKERN_CPU_ATTENTION_ROWS"));
    return MK_OK;
}

mk_status mk_cpu_attention(const mk_attention_args *a, int dtype, const void *q, const void *k,
                           const void *v, const void *mask, void *out) {
    MK_CHECK_PTR(a);
    MK_CHECK_DTYPE(dtype);
    mk_status st = check_args(a);
    if (st) return st;
    if (a->B == 0 || a->L == 0 || a->Ev == 0) return MK_OK;
    MK_CHECK_PTR(out);
    if (a->S > 0) {
        MK_CHECK_PTR(v);
        if (a->E > 0) { MK_CHECK_PTR(q); MK_CHECK_PTR(k); }
        if (a->mask != MK_ATTN_MASK_NONE) MK_CHECK_PTR(mask);
    }
    int rows = query_rows(a);
    at_ctx t = {a, dtype, q, k, v, mask, out, (a->L + rows - 1) / rows, rows,
                a->L < rows ? a->L : rows, a->S < KB ? (a->S > 0 ? a->S : 1) : KB, 0, 0};
    int nr = mk_attn_tiles()->nr;
    t.ld = (t.qb + nr - 1) / nr * nr;
    long items = (long)a->B * a->Hq * t.nqb;
    // a task's multiply-adds: small problems run inline (waking the pool costs more)
    mk_parallel_for(items, mk_grain((long)t.qb * a->S * (a->E + a->Ev)), attend_range, &t);
    if (t.failed) return mk_set_error(MK_ERR_NOMEM, "mk_cpu_attention: out of memory for block scratch");
    return MK_OK;
}
