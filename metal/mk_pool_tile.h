// mk_pool_tile.h: the tile every pool kernel (pool.metal, pool_indices.metal,
// adaptive_pool.metal) walks. A threadgroup owns a contiguous range of outputs: planes
// [nc0, nc0 + np) (np > 1 only when a tile holds whole planes, TP == P) times output rows
// [p0, p0 + tp), all Q columns; so its outputs are y[ybase .. ybase + np*tp*Q), and the
// input rows they read are one contiguous span of x. Staged (mk_pool_tile.staged), the
// threadgroup copies that span into threadgroup memory as float with aligned vector loads
// (from the 128-byte line below the span's first element to its last vector; only the
// buffer's last < 4 elements go one by one): every device load is a vector and a
// SIMD-group's lanes fill whole lines. Then windows are reduced from there. Unstaged (a
// window's rows wider than the stage: gpu/pool.py decides), windows read x directly.
// Lanes of a SIMD-group take consecutive outputs (consecutive columns); a thread finds its
// first output with three divisions and steps to the next without any (mk_pool_next).
// Dispatch: grid (ceil(N*C / NP), ceil(P / TP)) threadgroups of any size <= 1024.
#ifndef MK_POOL_TILE_H
#define MK_POOL_TILE_H

#include "mk_args.h"

#define MK_POOL_STAGE 4096      // floats of input a tile may stage (gpu/pool.py STAGE)
#define MK_POOL_SLACK 128       // + the line below the span and the last vector

// The tiling gpu/pool.py chose (int32 x 8, buffer after the op's arguments).
struct mk_pool_tile {
    int NP;                     // planes per threadgroup
    int TP;                     // output rows per threadgroup
    int staged;                 // 1: through threadgroup memory; 0: windows read x
    int dq, dr, dpl;            // one step of `threads` outputs: columns, rows, planes
    int unused0, unused1;
};

// This threadgroup's outputs.
struct mk_pool_at {
    int nc0, np, p0, tp;
    int count;                  // np * tp * Q
    int ybase;                  // (nc0*P + p0)*Q: the first output
    int base;                   // the element of x at stage[0] (staged), else 0
};

inline mk_pool_at mk_pool_block(constant mk_pool2d_args& a, constant mk_pool_tile& t,
                                uint3 tgp)
{
    mk_pool_at at;
    at.nc0 = int(tgp.x) * t.NP;
    at.np = min(t.NP, a.N * a.C - at.nc0);
    at.p0 = int(tgp.y) * t.TP;
    at.tp = min(t.TP, a.P - at.p0);
    at.count = at.np * at.tp * a.Q;
    at.ybase = (at.nc0 * a.P + at.p0) * a.Q;
    at.base = 0;
    return at;
}

// The input rows [x, y] a tile of windows h = p*stride_h - pad_h + i*dil_h reads: from
// its first output row's window to its last one's, clipped to the input.
inline int2 mk_pool_rows(constant mk_pool2d_args& a, thread const mk_pool_at& at)
{
    return int2(max(0, at.p0 * a.stride_h - a.pad_h),
                min(a.H - 1, (at.p0 + at.tp - 1) * a.stride_h - a.pad_h + (a.kh - 1) * a.dil_h));
}

// Copies the input rows [hlo, hhi] of the tile's planes (one contiguous span of x) into
// `stage` when t.staged; returns the element of x at stage[0] (0 unstaged: windows then
// index x itself). Holds a barrier (uniform: t.staged is the dispatch's).
template <typename T>
inline int mk_pool_stage(const device T* x, threadgroup float* stage,
                         constant mk_pool2d_args& a, constant mk_pool_tile& t,
                         thread const mk_pool_at& at, int hlo, int hhi, uint tid, uint nt)
{
    if (t.staged == 0) {
        return 0;
    }
    const int line = 128 / int(sizeof(T));
    const int g0 = (at.nc0 * a.H + hlo) * a.W;
    const int g1 = max(g0, ((at.nc0 + at.np - 1) * a.H + hhi + 1) * a.W);
    const int total = a.N * a.C * a.H * a.W;
    const int base = g0 & ~(line - 1);
    const int vend = min((g1 + 3) & ~3, total & ~3);     // vectors [base, vend)
    threadgroup float4* s4 = (threadgroup float4*)stage;
    const device vec<T, 4>* x4 = (const device vec<T, 4>*)(x + base);
    for (int i = int(tid); i < (vend - base) >> 2; i += int(nt)) {
        const vec<T, 4> v = x4[i];      // a vector load (the profiler sees one access)
        s4[i] = float4(v);
    }
    for (int g = vend + int(tid); g < g1; g += int(nt)) {      // the buffer's last < 4
        stage[g - base] = float(x[g]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return base;
}

// A thread's output: o-th of the tile, in plane pl, row r (of P), column q.
struct mk_pool_out {
    int o, q, r, pl;
};

inline mk_pool_out mk_pool_first(constant mk_pool2d_args& a, uint tid)
{
    mk_pool_out u;
    u.o = int(tid);
    const int rr = int(tid) / a.Q;
    u.q = int(tid) - rr * a.Q;
    u.pl = rr / a.P;
    u.r = rr - u.pl * a.P;
    return u;
}

inline void mk_pool_next(thread mk_pool_out& u, constant mk_pool2d_args& a,
                         constant mk_pool_tile& t, uint nt)
{
    u.o += int(nt);
    u.q += t.dq;
    u.r += t.dr;
    u.pl += t.dpl;
    if (u.q >= a.Q) {
        u.q -= a.Q;
        u.r += 1;
    }
    if (u.r >= a.P) {
        u.r -= a.P;
        u.pl += 1;
    }
}

// Offset of the output's plane in the window source (stage or x).
inline int mk_pool_plane(constant mk_pool2d_args& a, thread const mk_pool_at& at,
                         thread const mk_pool_out& u)
{
    return (at.nc0 + u.pl) * a.H * a.W - at.base;
}

#endif
