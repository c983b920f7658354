// gemm.metal: out[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]   (mk_gemm_args)
//
// Kernels (T = float "f32" or half "f16"; half is storage only, accumulation is float):
//   gemm_tiled_<t>         threadgroup-tiled, scalar FMAs per lane
//   gemm_simd_<t>          threadgroup-tiled, 8x8 simdgroup_matrix multiply-accumulate
//                          (compiled only for tile sets whose output tile fits: MK_SIMD_FITS)
//   gemm_splitk_reduce_<t> split-K second pass: sums the partial tiles, applies alpha/beta/C
// Grid (threadgroups): x = ceil(N/BN), y = ceil(M/BM), z = batch * split_k; threads per
// threadgroup = 32*WM*WN. Edge tiles read zeros past M, N, K and guard their stores, so any
// M, N, K works. Batch strides of 0 broadcast an operand. C may alias out (each element is
// read, then written, by the same thread); C is not read when beta == 0 (BLAS semantics).
// With split_k > 1 the first pass writes float partial sums to `partial`
// ([split_k][batch][M][N]) instead of out, and gemm_splitk_reduce finishes.
#include "mk_common.h"
#include "mk_args.h"
#include "mk_gemm_tile.h"
#include "mk_activation.h"

// The final value of one output element: alpha*acc + beta*C, then the fused activation
// (MK_ACT, mk_activation.h; the encoder compiles it from args.activation).
template <typename T>
inline void mk_gemm_finish(float v, int m, int n, const device T* Cb, device T* Ob,
                           constant mk_gemm_args& args)
{
    const int o = m * args.ldc + n;
    float r = args.alpha * v;
    if (args.has_c != 0 && args.beta != 0.0f) {
        r += args.beta * float(Cb[o]);
    }
    Ob[o] = T(mk_act(r));
}

// Where this threadgroup works: batch b, K split s, and the K range [k_begin, k_end).
struct mk_gemm_place {
    int b, s, k_begin, k_end;
};

inline mk_gemm_place mk_gemm_locate(uint z, constant mk_gemm_args& args)
{
    mk_gemm_place p;
    const int K = args.K;
    const int split = args.split_k > 1 ? args.split_k : 1;
    p.b = int(z) / split;
    p.s = int(z) - p.b * split;
    // each split covers whole BK slices so only the last one has a K edge
    const int chunk = mk_cdiv(mk_cdiv(K, split), MK_BK) * MK_BK;
    p.k_begin = min(K, p.s * chunk);
    p.k_end = min(K, p.k_begin + chunk);
    return p;
}

// One output element of a threadgroup: final value, or a partial sum when split.
template <typename T>
inline void mk_gemm_store(float v, int m, int n, thread const mk_gemm_place& p,
                          const device T* C, device T* out, device float* partial,
                          constant mk_gemm_args& args)
{
    if (args.split_k > 1) {
        partial[((p.s * args.batch + p.b) * args.M + m) * args.N + n] = v;
    } else {
        mk_gemm_finish(v, m, n, C + p.b * args.stride_c, out + p.b * args.stride_out, args);
    }
}

template <typename T>
kernel void gemm_tiled(const device T* A [[buffer(0)]],
                       const device T* B [[buffer(1)]],
                       const device T* C [[buffer(2)]],
                       device T* out [[buffer(3)]],
                       constant mk_gemm_args& args [[buffer(4)]],
                       device float* partial [[buffer(5)]],
                       uint3 tgp [[threadgroup_position_in_grid]],
                       uint tid [[thread_index_in_threadgroup]],
                       uint sg [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float As[MK_BK * MK_BM];
    threadgroup float Bs[MK_BK * MK_BN];

    const mk_gemm_place p = mk_gemm_locate(tgp.z, args);
    const int m0 = int(tgp.y) * MK_BM;
    const int n0 = int(tgp.x) * MK_BN;
    const device T* Ab = A + p.b * args.stride_a;
    const device T* Bb = B + p.b * args.stride_b;
    // this lane's first row and column in the tile
    const int tr = int(sg) / MK_WN * MK_SG_M + int(lane) / 8;
    const int tc = int(sg) % MK_WN * MK_SG_N + int(lane) % 8;

    mk_acc_tiled acc;
    mk_tiled_zero(acc);
    for (int k0 = p.k_begin; k0 < p.k_end; k0 += MK_BK) {
        // A tile (m, k) -> As[k*BM + m];  B tile (k, n) -> Bs[k*BN + n]
        mk_load_tile(As, 1, MK_BM, Ab, args.lda, args.trans_a != 0, MK_BM, MK_BK,
                     m0, k0, args.M, p.k_end, int(tid), MK_NT);
        mk_load_tile(Bs, MK_BN, 1, Bb, args.ldb, args.trans_b != 0, MK_BK, MK_BN,
                     k0, n0, p.k_end, args.N, int(tid), MK_NT);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_tiled_step(As, Bs, acc, tr, tc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (int i = 0; i < MK_TM; ++i) {
        for (int j = 0; j < MK_TN; ++j) {
            const int m = m0 + tr + 4 * i;
            const int n = n0 + tc + 8 * j;
            if (m < args.M && n < args.N) {
                mk_gemm_store(acc.v[i][j], m, n, p, C, out, partial, args);
            }
        }
    }
}

#if MK_SIMD_FITS
template <typename T>
kernel void gemm_simd(const device T* A [[buffer(0)]],
                      const device T* B [[buffer(1)]],
                      const device T* C [[buffer(2)]],
                      device T* out [[buffer(3)]],
                      constant mk_gemm_args& args [[buffer(4)]],
                      device float* partial [[buffer(5)]],
                      uint3 tgp [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]])
{
    threadgroup float smem[MK_SMEM_FLOATS];

    threadgroup float* As = smem;                    // As[m*BK + k]
    threadgroup float* Bs = smem + MK_BM * MK_BK;    // Bs[k*BN + n]
    const mk_gemm_place p = mk_gemm_locate(tgp.z, args);
    const int m0 = int(tgp.y) * MK_BM;
    const int n0 = int(tgp.x) * MK_BN;
    const device T* Ab = A + p.b * args.stride_a;
    const device T* Bb = B + p.b * args.stride_b;
    const int sr = int(sg) / MK_WN * MK_SG_M;        // this SIMD-group's sub-tile origin
    const int sc = int(sg) % MK_WN * MK_SG_N;

    mk_acc_simd acc;
    mk_simd_zero(acc);
    for (int k0 = p.k_begin; k0 < p.k_end; k0 += MK_BK) {
        mk_load_tile(As, MK_BK, 1, Ab, args.lda, args.trans_a != 0, MK_BM, MK_BK,
                     m0, k0, args.M, p.k_end, int(tid), MK_NT);
        mk_load_tile(Bs, MK_BN, 1, Bb, args.ldb, args.trans_b != 0, MK_BK, MK_BN,
                     k0, n0, p.k_end, args.N, int(tid), MK_NT);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_simd_step(As, Bs, acc, sr, sc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // Edge tiles and the epilogue go through threadgroup memory: fragments have no
    // per-element bounds, so store the whole tile, then each thread finishes elements.
    mk_simd_store(acc, smem, sr, sc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int i = int(tid); i < MK_BM * MK_BN; i += MK_NT) {
        const int r = i / MK_BN;
        const int m = m0 + r;
        const int n = n0 + i - r * MK_BN;
        if (m < args.M && n < args.N) {
            mk_gemm_store(smem[i], m, n, p, C, out, partial, args);
        }
    }
}

#endif  // MK_SIMD_FITS

// Split-K second pass: one thread per output element (grid: ceil(batch*M*N / threads)).
template <typename T>
kernel void gemm_splitk_reduce(const device float* partial [[buffer(0)]],
                               const device T* C [[buffer(1)]],
                               device T* out [[buffer(2)]],
                               constant mk_gemm_args& args [[buffer(3)]],
                               uint gid [[thread_position_in_grid]])
{
    const int mn = args.M * args.N;
    const int i = int(gid);
    if (i < args.batch * mn) {
        const int b = i / mn;
        const int e = i - b * mn;
        const int m = e / args.N;
        const int n = e - m * args.N;
        float v = 0.0f;
        for (int s = 0; s < args.split_k; ++s) {
            v += partial[(s * args.batch + b) * mn + e];
        }
        mk_gemm_finish(v, m, n, C + b * args.stride_c, out + b * args.stride_out, args);
    }
}

// The kernels, one per dtype (mk_common.h): <name>_f32, <name>_f16.
MK_PER_DTYPE(gemm_tiled)

#if MK_SIMD_FITS
MK_PER_DTYPE(gemm_simd)
#endif

MK_PER_DTYPE(gemm_splitk_reduce)
