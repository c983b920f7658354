// mk_cpu_attention_tiles_impl.h: mk_cpu_attention_tiles.h's steps for a vector of RV_W floats;
// mk_cpu_rowvec.c includes it once per width (RV_W, RV_NAME, RV_ATTR defined).
// Micro-kernels: an AT_MR (scores) or AT_PMR (P V) x (2 vectors) tile of accumulators stays
// in registers over the whole reduction (E for the scores, the key block for P V): at most
// 2 * AT_MR + 3 registers of the 16 (AVX2) or 32 (AVX-512). The P V kernel reads the weights
// packed per query tile (Pp[tile][key][AT_PMR], written so by the softmax step): a tile's
// weights stream in order from L2 instead of one cache line per key. The tile height is a compile-time constant per case of a
// switch (always-inlined body), so edge tiles are the same code with fewer rows.
// No include guard: included once per width.
#include "mk_cpu_vec_impl.h"

#define AT_MR (RV_W == 16 ? 8 : 6)
// a broadcast load: x - 0 is x for every x (SPLAT's 0 + x is not, for -0: a register and an
// add more per broadcast in the micro-kernels' inner loops)
#define AT_BCAST(x) ((x) - (VF){0})
#define AT_NR (2 * RV_W)
#define AT_PMR (RV_W / 2)       // P V tile height: a weight vector of the softmax is two tiles
// mr (1..max, max <= 8) as a constant: each case is its own copy of the inlined tile
#define AT_CASE(call, k, max) case k: call((k) < (max) ? (k) : (max)); break;
#define AT_CASES(call, max) switch (mr) { \
    AT_CASE(call, 1, max) AT_CASE(call, 2, max) AT_CASE(call, 3, max) AT_CASE(call, 4, max) \
    AT_CASE(call, 5, max) AT_CASE(call, 6, max) AT_CASE(call, 7, max) default: call(max); break; }

RV_ATTR static void RV_NAME(at_pack_q)(const float *Q, long ldq, int nq, int E, float *Qp, long ld) {
    for (long p = 0; p < ld; p += AT_NR) {
        float *panel = Qp + p * E;
        int n = nq - p < AT_NR ? (int)(nq - p) : AT_NR;
        if (n < AT_NR) memset(panel, 0, (size_t)E * AT_NR * 4);
        for (int c = 0; c < n; c++)
            for (int e = 0; e < E; e++) panel[(long)e * AT_NR + c] = Q[(p + c) * ldq + e];
    }
}

// mr keys x one panel of AT_NR queries
static inline __attribute__((always_inline)) void RV_NAME(at_score_tile)(
        const float *K, long ldk, int E, const float *Qp, float scale, float *St, long ld, const int mr) {
    VF acc[AT_MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = SPLAT(0.0f);
    for (int e = 0; e < E; e++) {
        VF b0 = LD(Qp + (long)e * AT_NR), b1 = LD(Qp + (long)e * AT_NR + RV_W);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            VF a = AT_BCAST(K[(long)r * ldk + e]);
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
    for (int r = 0; r < mr; r++) {
        ST(St + r * ld, acc[r][0] * scale);
        ST(St + r * ld + RV_W, acc[r][1] * scale);
    }
}

RV_ATTR static void RV_NAME(at_scores)(const float *K, long ldk, int nk, int E, const float *Qp,
                                       long ld, float scale, float *St) {
    for (int j = 0; j < nk; j += AT_MR) {          // a key tile's rows of K stay in L1 over the panels
        int mr = nk - j < AT_MR ? nk - j : AT_MR;
        for (long p = 0; p < ld; p += AT_NR) {
#define AT_SCORE(R) RV_NAME(at_score_tile)(K + (long)j * ldk, ldk, E, Qp + p * E, scale, St + j * ld + p, ld, R)
            AT_CASES(AT_SCORE, AT_MR)
#undef AT_SCORE
        }
    }
}

#define AT_SELECT(m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))

RV_ATTR static void RV_NAME(at_softmax)(const float *St, int nk, long ld, float *Pp, float *m,
                                        float *l, float *alpha, int norm, float *tmp) {
    const VF ninf = SPLAT(-__builtin_inff());
    const long tile = (long)nk * AT_PMR;           // floats per query tile of Pp
    float *inv = tmp;                              // norm: 1 / l_new per column
    // a vector of queries at a time, down the keys: the max, m, l and the sums stay in
    // registers (the column's nk rows, one line each, stay in L1 between the two passes)
    for (long c = 0; c < ld; c += RV_W) {
        VF acc = ninf;
        VI bad = {0};
        for (int j = 0; j < nk; j++) { VF v = LD(St + j * ld + c); RV_MAXSTEP(acc, bad, v); }
        VF mo = LD(m + c);
        VF bm = AT_SELECT(bad, SPLAT(__builtin_nanf("")), acc);
        VF mn = AT_SELECT((bm > mo) | (bm != bm), bm, mo);
        VF f = EXP_NONPOS(mo - mn);                // 0 when m_old = -inf; NaN when mn is
        VI none = mn == ninf;                      // nothing visible yet: weights 0, l stays 0
        int any_none = 0;
        for (int q = 0; q < RV_W; q++) any_none |= none[q];
        VF sum = SPLAT(0.0f);
        float *to = Pp + (c / AT_PMR) * tile;      // a vector is two tiles of Pp
        for (int j = 0; j < nk; j++) {
            VF e = EXP_NONPOS(LD(St + j * ld + c) - mn);
            if (any_none) e = AT_SELECT(none, SPLAT(0.0f), e);
            memcpy(to + (long)j * AT_PMR, &e, AT_PMR * 4);
            memcpy(to + tile + (long)j * AT_PMR, (float *)&e + AT_PMR, AT_PMR * 4);
            sum += e;
        }
        VF kept = AT_SELECT(none, SPLAT(0.0f), LD(l + c) * f);
        VF ln = kept + sum;
        ST(m + c, mn);
        ST(l + c, ln);
        if (!norm) { ST(alpha + c, AT_SELECT(none, SPLAT(1.0f), f)); continue; }
        ST(alpha + c, AT_SELECT(none, SPLAT(1.0f), kept / ln));
        ST(inv + c, AT_SELECT(none, SPLAT(0.0f), 1.0f / ln));
    }
    if (norm)                                      // the weights / l: the rows stay normalised
        for (long t = 0; t < ld / AT_PMR; t++)
            for (int j = 0; j < nk; j++)
                for (int r = 0; r < AT_PMR; r++) Pp[t * tile + (long)j * AT_PMR + r] *= inv[t * AT_PMR + r];
}

// mr queries x one panel of nv vectors (nv = 2: AT_NR output columns; 1: the last RV_W or
// fewer), over nk keys: P the query tile's weights (nk rows of AT_PMR), V rows of ldv floats
static inline __attribute__((always_inline)) void RV_NAME(at_pv_tile)(
        const float *P, int nk, const float *V, long ldv, float *O, long ldo,
        const float *alpha, int nd, const int mr, const int nv) {
    VF acc[AT_PMR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = SPLAT(0.0f);
    for (int j = 0; j < nk; j++) {
        VF b0 = LD(V + (long)j * ldv), b1 = nv == 2 ? LD(V + (long)j * ldv + RV_W) : b0;
        const float *p = P + (long)j * AT_PMR;
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            VF a = AT_BCAST(p[r]);
            acc[r][0] += a * b0;
            if (nv == 2) acc[r][1] += a * b1;
        }
    }
    for (int r = 0; r < mr; r++) {
        float *o = O + r * ldo;
        if (nd == nv * RV_W) {
            ST(o, LD(o) * alpha[r] + acc[r][0]);
            if (nv == 2) ST(o + RV_W, LD(o + RV_W) * alpha[r] + acc[r][1]);
        } else {                                   // the last columns: through a buffer
            float t[AT_NR];
            memcpy(t, &acc[r][0], RV_W * 4);
            if (nv == 2) memcpy(t + RV_W, &acc[r][1], RV_W * 4);
            for (int d = 0; d < nd; d++) o[d] = o[d] * alpha[r] + t[d];
        }
    }
}

RV_ATTR static void RV_NAME(at_pv)(const float *Pp, int nq, int nk, const float *V, long ldv,
                                   int Ev, float *O, long ldo, const float *alpha, float *vtail) {
    for (int d0 = 0; d0 < Ev; d0 += AT_NR) {       // a panel of V stays in L1 over the query tiles
        int nd = Ev - d0 < AT_NR ? Ev - d0 : AT_NR;
        int nv = nd > RV_W ? 2 : 1;                // a last panel of RV_W or fewer: one vector
        const float *Vp = V + d0;                  // (Ev = 40 on AVX-512: 32 + 16, not 32 + 32)
        long lv = ldv;
        if (nd < nv * RV_W) {                      // V's last columns, zero-padded to the panel
            memset(vtail, 0, (size_t)nk * nv * RV_W * 4);
            for (int j = 0; j < nk; j++) memcpy(vtail + (long)j * nv * RV_W, V + (long)j * ldv + d0, (size_t)nd * 4);
            Vp = vtail;
            lv = nv * RV_W;
        }
        for (int i = 0; i < nq; i += AT_PMR) {     // Pp's query tiles, each nk x AT_PMR in order
            int mr = nq - i < AT_PMR ? nq - i : AT_PMR;
            const float *P = Pp + (long)(i / AT_PMR) * nk * AT_PMR;
#define AT_PV2(R) RV_NAME(at_pv_tile)(P, nk, Vp, lv, O + (long)i * ldo + d0, ldo, alpha + i, nd, R, 2)
#define AT_PV1(R) RV_NAME(at_pv_tile)(P, nk, Vp, lv, O + (long)i * ldo + d0, ldo, alpha + i, nd, R, 1)
            if (nv == 2) { AT_CASES(AT_PV2, AT_PMR) }
            else { AT_CASES(AT_PV1, AT_PMR) }
#undef AT_PV2
#undef AT_PV1
        }
    }
}

static const mk_attn_tiles_t RV_NAME(attn_tiles) = {
    RV_NAME(at_pack_q), RV_NAME(at_scores), RV_NAME(at_softmax), RV_NAME(at_pv), AT_NR, RV_W,
};

#undef AT_MR
#undef AT_NR
#undef AT_PMR
#undef AT_CASES
#undef AT_CASE
#undef AT_SELECT
#undef AT_BCAST
#include "mk_cpu_vec_undef.h"
