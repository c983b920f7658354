// mk_cpu_rowvec_impl.h: the row passes of mk_cpu_rowvec.h, written once for a vector of
// RV_W floats (GCC/clang vector extensions). mk_cpu_rowvec.c includes this file once per
// width, with RV_W, RV_NAME(f) (a suffixed name) and RV_ATTR (the target) defined.
// Explicit vectors because the compilers keep reduction and exp loops scalar or half-width
// (an accumulator array ends up in memory); one fixed width per ISA because 16-float
// vectors with comparisons fall apart into scalar code on AVX2.
// No include guard: included once per width.

#include "mk_cpu_vec_impl.h"

RV_ATTR static float RV_NAME(rv_max)(const float *x, long n) {
    VF a0 = SPLAT(-__builtin_inff()), a1 = a0;
    VI bad = {0};
    long i = 0;
    for (; i + 2 * RV_W <= n; i += 2 * RV_W) {
        VF v0 = LD(x + i), v1 = LD(x + i + RV_W);
        RV_MAXSTEP(a0, bad, v0);
        RV_MAXSTEP(a1, bad, v1);
    }
    if (i < n && n >= RV_W) {    // the rest as one or two vectors ending at n (max is idempotent)
        VF v0 = LD(x + n - RV_W);
        RV_MAXSTEP(a0, bad, v0);
        if (n - i > RV_W) { VF v1 = LD(x + i); RV_MAXSTEP(a1, bad, v1); }
        i = n;
    }
    RV_MAXSTEP(a0, bad, a1);           // the lanes never hold NaN: only `bad` records them
    float t[RV_W];
    int32_t bb[RV_W];
    memcpy(t, &a0, sizeof t);
    memcpy(bb, &bad, sizeof bb);
    for (int w = RV_W / 2; w > 0; w /= 2)      // tree, as HSUM
        for (int j = 0; j < w; j++) { t[j] = t[j + w] > t[j] ? t[j + w] : t[j]; bb[j] |= bb[j + w]; }
    float m = t[0];
    int b = bb[0];
    for (; i < n; i++) { m = x[i] > m ? x[i] : m; b |= x[i] != x[i]; }
    return b ? __builtin_nanf("") : m;
}

RV_ATTR static float RV_NAME(rv_exp_sum)(const float *x, float *y, long n, float m) {
    VF a0 = {0}, a1 = {0}, mm = SPLAT(m);
    long i = 0;
    if (y) {
        for (; i + 2 * RV_W <= n; i += 2 * RV_W) {
            VF e0 = EXP_NONPOS(LD(x + i) - mm);
            VF e1 = EXP_NONPOS(LD(x + i + RV_W) - mm);
            ST(y + i, e0);
            ST(y + i + RV_W, e1);
            a0 += e0;
            a1 += e1;
        }
    } else {
        for (; i + 2 * RV_W <= n; i += 2 * RV_W) {
            a0 += EXP_NONPOS(LD(x + i) - mm);
            a1 += EXP_NONPOS(LD(x + i + RV_W) - mm);
        }
    }
    if (i + RV_W <= n) {
        VF e = EXP_NONPOS(LD(x + i) - mm);
        if (y) ST(y + i, e);
        a1 += e;
        i += RV_W;
    }
    if (i < n && n >= RV_W) {
        // the rest as the vector ending at n; its first lanes were done above and add
        // nothing. They are stored again with the same values, unless y is x (then x holds
        // terms there now: those lanes keep what y has)
        long o = n - RV_W;
        VI fresh = RV_LANES >= (VI){0} + (int32_t)(i - o);
        VF e = EXP_NONPOS(LD(x + o) - mm);
        a0 += (VF)((VI)e & fresh);
        if (y && y != x) ST(y + o, e);
        else if (y) ST(y + o, (VF)(((VI)e & fresh) | ((VI)LD(y + o) & ~fresh)));
    } else if (i < n) {                // a row shorter than one vector: through a buffer
        float buf[RV_W] = {0};
        memcpy(buf, x, (size_t)n * 4);
        VF e = (VF)((VI)EXP_NONPOS(LD(buf) - mm) & (RV_LANES < (VI){0} + (int32_t)n));
        a0 += e;
        if (y) { ST(buf, e); memcpy(y, buf, (size_t)n * 4); }
    }
    return HSUM(a0 + a1);
}

RV_ATTR static void RV_NAME(rv_scale)(float *y, long n, float f) {
    long i = 0;
    for (; i + RV_W <= n; i += RV_W) ST(y + i, LD(y + i) * f);
    for (; i < n; i++) y[i] *= f;   // (a vector ending at n would re-read just-stored lanes)
}

RV_ATTR static void RV_NAME(rv_sub2)(const float *x, float *y, long n, float a, float b) {
    long i = 0;
    for (; i + RV_W <= n; i += RV_W) ST(y + i, (LD(x + i) - a) - b);
    if (i < n && n >= RV_W && y != x) {        // the vector ending at n: done lanes again
        i = n - RV_W;
        ST(y + i, (LD(x + i) - a) - b);
        i = n;
    }
    for (; i < n; i++) y[i] = (x[i] - a) - b;
}

RV_ATTR static float RV_NAME(rv_sum)(const float *x, long n) {
    VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    long i = 0;
    for (; i + 4 * RV_W <= n; i += 4 * RV_W) {
        a0 += LD(x + i);
        a1 += LD(x + i + RV_W);
        a2 += LD(x + i + 2 * RV_W);
        a3 += LD(x + i + 3 * RV_W);
    }
    for (; i + RV_W <= n; i += RV_W) a0 += LD(x + i);
    float s = HSUM((a0 + a1) + (a2 + a3));
    for (; i < n; i++) s += x[i];
    return s;
}

RV_ATTR static float RV_NAME(rv_sumsq_dev)(const float *x, long n, float c) {
    VF a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, cc = SPLAT(c);
    long i = 0;
    for (; i + 4 * RV_W <= n; i += 4 * RV_W) {
        VF d0 = LD(x + i) - cc, d1 = LD(x + i + RV_W) - cc;
        VF d2 = LD(x + i + 2 * RV_W) - cc, d3 = LD(x + i + 3 * RV_W) - cc;
        a0 += d0 * d0;
        a1 += d1 * d1;
        a2 += d2 * d2;
        a3 += d3 * d3;
    }
    for (; i + RV_W <= n; i += RV_W) { VF d = LD(x + i) - cc; a0 += d * d; }
    float s = HSUM((a0 + a1) + (a2 + a3));
    for (; i < n; i++) { float d = x[i] - c; s += d * d; }
    return s;
}

RV_ATTR static float RV_NAME(rv_dev_moments)(const float *x, long n, float c, float *dev_sum) {
    VF a0 = {0}, a1 = {0}, b0 = {0}, b1 = {0}, cc = SPLAT(c);
    long i = 0;
    for (; i + 2 * RV_W <= n; i += 2 * RV_W) {
        VF d0 = LD(x + i) - cc, d1 = LD(x + i + RV_W) - cc;
        b0 += d0;
        b1 += d1;
        a0 += d0 * d0;
        a1 += d1 * d1;
    }
    for (; i + RV_W <= n; i += RV_W) { VF d = LD(x + i) - cc; b0 += d; a0 += d * d; }
    float s = HSUM(a0 + a1), t = HSUM(b0 + b1);
    for (; i < n; i++) { float d = x[i] - c; t += d; s += d * d; }
    *dev_sum = t;
    return s;
}

RV_ATTR static void RV_NAME(rv_norm_out)(const float *x, float *y, long n, float mean,
                                         float rstd, const float *w, const float *b) {
    long i = 0;
    VF mv = SPLAT(mean), rv = SPLAT(rstd);
    // one loop per affine form: no per-element test of w and b
    if (w && b) {
        for (; i + RV_W <= n; i += RV_W) ST(y + i, (LD(x + i) - mv) * rv * LD(w + i) + LD(b + i));
        for (; i < n; i++) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
    } else if (w) {
        for (; i + RV_W <= n; i += RV_W) ST(y + i, (LD(x + i) - mv) * rv * LD(w + i));
        for (; i < n; i++) y[i] = (x[i] - mean) * rstd * w[i];
    } else if (b) {
        for (; i + RV_W <= n; i += RV_W) ST(y + i, (LD(x + i) - mv) * rv + LD(b + i));
        for (; i < n; i++) y[i] = (x[i] - mean) * rstd + b[i];
    } else {
        for (; i + RV_W <= n; i += RV_W) ST(y + i, (LD(x + i) - mv) * rv);
        for (; i < n; i++) y[i] = (x[i] - mean) * rstd;
    }
}


static const mk_rowvec_t RV_NAME(rowvec) = {
    RV_NAME(rv_max), RV_NAME(rv_exp_sum), RV_NAME(rv_scale), RV_NAME(rv_sub2),
    RV_NAME(rv_sum), RV_NAME(rv_sumsq_dev), RV_NAME(rv_dev_moments), RV_NAME(rv_norm_out), RV_W,
};

#include "mk_cpu_vec_undef.h"
