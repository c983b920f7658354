// mk_cpu_attention_tiles_impl.h: mk_cpu_attention_tiles.h's steps for a vector of RV_W floats;
// mk_cpu_rowvec.c includes it once per width (RV_W, RV_NAME, RV_ATTR defined).
// Micro-kernels: an AT_MR x (2 vectors) tile of accumulators stays in registers over the
// whole reduction (E for the scores, the key block for P V): AT_MR * 2 + 3 registers of the
// 16 (AVX2) or 32 (AVX-512). The tile height is a compile-time constant per case of a
// switch (always-inlined body), so edge tiles are the same code with fewer rows.
// No include guard: included once per width.
#include "mk_cpu_vec_impl.h"

#define AT_MR (RV_W == 16 ? 8 : 6)
// a broadcast load: x - 0 is x for every x (SPLAT's 0 + x is not, for -0: a register and an
// add more per broadcast in the micro-kernels' inner loops)
#define AT_BCAST(x) ((x) - (VF){0})
#define AT_NR (2 * RV_W)
#define AT_CASES(call) switch (mr) { \
    case 1: call(1); break; case 2: call(2); break; case 3: call(3); break; \
    case 4: call(4); break; case 5: call(5); break; case 6: call(6); break; \
    case 7: call(AT_MR > 7 ? 7 : 1); break; default: call(AT_MR); break; }

RV_ATTR static void RV_NAME(at_pack_q)(const float *Q, int nq, int E, float *Qp, long ld) {
    for (long p = 0; p < ld; p += AT_NR) {
        float *panel = Qp + p * E;
        int n = nq - p < AT_NR ? (int)(nq - p) : AT_NR;
        if (n < AT_NR) memset(panel, 0, (size_t)E * AT_NR * 4);
        for (int c = 0; c < n; c++)
            for (int e = 0; e < E; e++) panel[(long)e * AT_NR + c] = Q[(p + c) * E + e];
    }
}

// mr keys x one panel of AT_NR queries
static inline __attribute__((always_inline)) void RV_NAME(at_score_tile)(
        const float *K, int E, const float *Qp, float scale, float *St, long ld, const int mr) {
    VF acc[AT_MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = SPLAT(0.0f);
    for (int e = 0; e < E; e++) {
        VF b0 = LD(Qp + (long)e * AT_NR), b1 = LD(Qp + (long)e * AT_NR + RV_W);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            VF a = AT_BCAST(K[(long)r * E + e]);
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
    for (int r = 0; r < mr; r++) {
        ST(St + r * ld, acc[r][0] * scale);
        ST(St + r * ld + RV_W, acc[r][1] * scale);
    }
}

RV_ATTR static void RV_NAME(at_scores)(const float *K, int nk, int E, const float *Qp, long ld,
                                       float scale, float *St) {
    for (int j = 0; j < nk; j += AT_MR) {          // a key tile's rows of K stay in L1 over the panels
        int mr = nk - j < AT_MR ? nk - j : AT_MR;
        for (long p = 0; p < ld; p += AT_NR) {
#define AT_SCORE(R) RV_NAME(at_score_tile)(K + (long)j * E, E, Qp + p * E, scale, St + j * ld + p, ld, R)
            AT_CASES(AT_SCORE)
#undef AT_SCORE
        }
    }
}

#define AT_SELECT(m, a, b) ((VF)(((m) & (VI)(a)) | (~(m) & (VI)(b))))

RV_ATTR static void RV_NAME(at_softmax)(float *St, int nk, long ld, float *m, float *l,
                                        float *alpha, int norm, float *tmp) {
    float *mx = tmp, *bad = tmp + ld;              // the block's column max; NaN seen (bits)
    const VF ninf = SPLAT(-__builtin_inff());
    for (long c = 0; c < ld; c += RV_W) { ST(mx + c, ninf); ST(bad + c, SPLAT(0.0f)); }
    for (int j = 0; j < nk; j++) {                 // row by row: St is read in order
        const float *row = St + j * ld;
        for (long c = 0; c < ld; c += RV_W) {
            VF acc = LD(mx + c), v = LD(row + c);
            VI b = (VI)LD(bad + c);
            RV_MAXSTEP(acc, b, v);
            ST(mx + c, acc);
            ST(bad + c, (VF)b);
        }
    }
    for (long c = 0; c < ld; c += RV_W) {          // the new max (into m and mx), f into alpha
        VF bm = LD(mx + c), mo = LD(m + c);
        bm = AT_SELECT((VI)LD(bad + c), SPLAT(__builtin_nanf("")), bm);
        VI take = (bm > mo) | (bm != bm);
        VF mn = AT_SELECT(take, bm, mo);
        ST(alpha + c, EXP_NONPOS(mo - mn));        // 0 when m_old = -inf; NaN when mn is
        ST(mx + c, mn);
        ST(m + c, mn);
        ST(bad + c, SPLAT(0.0f));                  // now the block's sums
    }
    float *sum = bad;
    for (int j = 0; j < nk; j++) {                 // the weights; 0 where nothing is visible
        float *row = St + j * ld;
        for (long c = 0; c < ld; c += RV_W) {
            VF mn = LD(mx + c);
            VF e = EXP_NONPOS(LD(row + c) - mn);
            e = AT_SELECT(mn == ninf, SPLAT(0.0f), e);
            ST(row + c, e);
            ST(sum + c, LD(sum + c) + e);
        }
    }
    for (long c = 0; c < ld; c += RV_W) {          // l and alpha
        VF f = LD(alpha + c);
        VI none = LD(mx + c) == ninf;              // (then l is 0 and stays 0)
        VF kept = AT_SELECT(none, SPLAT(0.0f), LD(l + c) * f);
        VF ln = kept + LD(sum + c);
        ST(l + c, ln);
        if (!norm) { ST(alpha + c, AT_SELECT(none, SPLAT(1.0f), f)); continue; }
        ST(alpha + c, AT_SELECT(none, SPLAT(1.0f), kept / ln));
        ST(sum + c, AT_SELECT(none, SPLAT(0.0f), 1.0f / ln));
    }
    if (norm)                                      // the weights / l: the rows stay normalised
        for (int j = 0; j < nk; j++)
            for (long c = 0; c < ld; c += RV_W) ST(St + j * ld + c, LD(St + j * ld + c) * LD(sum + c));
}

// mr queries x one panel of AT_NR output columns, over nk keys; V rows of ldv floats
static inline __attribute__((always_inline)) void RV_NAME(at_pv_tile)(
        const float *St, long ld, int nk, const float *V, long ldv, float *O, long ldo,
        const float *alpha, int nd, const int mr) {
    VF acc[AT_MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = SPLAT(0.0f);
    for (int j = 0; j < nk; j++) {
        VF b0 = LD(V + (long)j * ldv), b1 = LD(V + (long)j * ldv + RV_W);
        const float *p = St + j * ld;
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            VF a = AT_BCAST(p[r]);
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
    for (int r = 0; r < mr; r++) {
        float *o = O + r * ldo;
        if (nd == AT_NR) {
            ST(o, LD(o) * alpha[r] + acc[r][0]);
            ST(o + RV_W, LD(o + RV_W) * alpha[r] + acc[r][1]);
        } else {                                   // the last columns: through a buffer
            float t[AT_NR];
            memcpy(t, &acc[r][0], RV_W * 4);
            memcpy(t + RV_W, &acc[r][1], RV_W * 4);
            for (int d = 0; d < nd; d++) o[d] = o[d] * alpha[r] + t[d];
        }
    }
}

RV_ATTR static void RV_NAME(at_pv)(const float *St, long ld, int nq, int nk, const float *V,
                                   long ldv, int Ev, float *O, long ldo, const float *alpha,
                                   float *vtail) {
    for (int d0 = 0; d0 < Ev; d0 += AT_NR) {       // a panel of V stays in L1 over the query tiles
        int nd = Ev - d0 < AT_NR ? Ev - d0 : AT_NR;
        const float *Vp = V + d0;
        long lv = ldv;
        if (nd < AT_NR) {                          // V's last columns, zero-padded to a panel
            memset(vtail, 0, (size_t)nk * AT_NR * 4);
            for (int j = 0; j < nk; j++) memcpy(vtail + (long)j * AT_NR, V + (long)j * ldv + d0, (size_t)nd * 4);
            Vp = vtail;
            lv = AT_NR;
        }
        for (int i = 0; i < nq; i += AT_MR) {
            int mr = nq - i < AT_MR ? nq - i : AT_MR;
#define AT_PV(R) RV_NAME(at_pv_tile)(St + i, ld, nk, Vp, lv, O + (long)i * ldo + d0, ldo, alpha + i, nd, R)
            AT_CASES(AT_PV)
#undef AT_PV
        }
    }
}

static const mk_attn_tiles_t RV_NAME(attn_tiles) = {
    RV_NAME(at_pack_q), RV_NAME(at_scores), RV_NAME(at_softmax), RV_NAME(at_pv), AT_NR, RV_W,
};

#undef AT_MR
#undef AT_NR
#undef AT_CASES
#undef AT_SELECT
#undef AT_BCAST
#include "mk_cpu_vec_undef.h"
