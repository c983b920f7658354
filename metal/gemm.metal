// gemm.metal: out[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]   (mk_gemm_args)
//
// Kernels (T = float "f32" or half "f16"; half is storage only, accumulation is float):
//   gemm_tiled_<t>         threadgroup-tiled, scalar FMAs per lane
//   gemm_simd_<t>          threadgroup-tiled, 8x8 simdgroup_matrix multiply-accumulate
//                          (compiled only for tile sets whose staging fits: MK_SIMD_FITS)
//   gemm_splitk_reduce_<t> split-K second pass: sums the partial tiles, applies alpha/beta/C
// Grid (threadgroups): x = ceil(N/BN), y = ceil(M/BM), z = batch * split_k; threads per
// threadgroup = 32*WM*WN (declared: [[max_total_threads_per_threadgroup]]). Interior tiles
// load 4-wide without checks and store 2-wide straight from the fragments; edge tiles read
// zeros past M, N, K and check every store, so any M, N, K works. Batch strides of 0
// broadcast an operand. C may alias out (each element is read, then written, by the same
// thread); C is not read when beta == 0 (BLAS semantics).
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

// One lane's two neighbouring elements (m, n) and (m, n+1) of a fragment. `vec` (interior
// tile, even leading dimensions and batch strides) writes them, and reads C, as one
// 2-wide access each; otherwise each element is checked against M and N.
template <typename T>
inline void mk_gemm_store2(float2 v, int m, int n, bool vec, thread const mk_gemm_place& p,
                           const device T* C, device T* out, device float* partial,
                           constant mk_gemm_args& args)
{
    if (!vec) {
        for (int e = 0; e < 2; ++e) {
            if (m < args.M && n + e < args.N) {
                mk_gemm_store(v[e], m, n + e, p, C, out, partial, args);
            }
        }
    } else if (args.split_k > 1) {
        *reinterpret_cast<device float2*>(
            partial + ((p.s * args.batch + p.b) * args.M + m) * args.N + n) = v;
    } else {
        const int o = m * args.ldc + n;
        float2 r = args.alpha * v;
        if (args.has_c != 0 && args.beta != 0.0f) {
            r += args.beta * float2(*reinterpret_cast<const device typename mk_vec<T>::v2*>(
                C + p.b * args.stride_c + o));
        }
        *reinterpret_cast<device typename mk_vec<T>::v2*>(out + p.b * args.stride_out + o) =
            typename mk_vec<T>::v2(T(mk_act(r.x)), T(mk_act(r.y)));
    }
}

// Whether this threadgroup's slices of A and B at k0 can take unchecked vector loads
// (mk_stage): the slice's rows inside the matrix, 4-aligned rows; transposed operands too
// (4-wide along their own rows, m for A^T, k for B^T: mk_stage_trans_vec, whole slices
// only). The last, partial K slice loads 4-wide as well where its cut is whole vectors: A
// (columns k) when K's end is 4-aligned (vectors wholly past it are not loaded, so none
// reaches past a row), B (rows k) always (rows past it are not loaded); it was staged
// element by element, two 16-element rows of A per store instruction sharing banks.
struct mk_gemm_vec {
    bool a, b;
};

inline mk_gemm_vec mk_gemm_vec_at(int m0, int n0, int k0, thread const mk_gemm_place& p,
                                  constant mk_gemm_args& args)
{
    mk_gemm_vec v;
    const bool k_full = k0 + MK_BK <= p.k_end;
    v.a = MK_VEC_LOADS && m0 + MK_BM <= args.M && ((args.lda | args.stride_a) & 3) == 0
          && (k_full || (args.trans_a == 0 && (p.k_end & 3) == 0));
    v.b = MK_VEC_LOADS && n0 + MK_BN <= args.N && ((args.ldb | args.stride_b) & 3) == 0
          && (k_full || args.trans_b == 0);
    return v;
}

template <typename T>
[[max_total_threads_per_threadgroup(MK_NT)]]
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
    threadgroup T As[MK_TILED_A(T)];
    threadgroup T Bs[MK_SIMD_B(T)];

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
        const mk_gemm_vec v = mk_gemm_vec_at(m0, n0, k0, p, args);
        // A tile (m, k) -> As[k*TLDA + m] (transposed: checked loads);  B (k, n) -> Bs[k*LDB + n]
        mk_stage<MK_BM, MK_BK, 1, MK_TLDA(T)>(As, Ab, args.lda, args.trans_a != 0, false,
                                              m0, k0, args.M, p.k_end, int(tid));
        mk_stage<MK_BK, MK_BN, MK_LDB(T), 1>(Bs, Bb, args.ldb, args.trans_b != 0, v.b,
                                             k0, n0, p.k_end, args.N, int(tid));
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
[[max_total_threads_per_threadgroup(MK_NT)]]
kernel void gemm_simd(const device T* A [[buffer(0)]],
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
    threadgroup T As[MK_SIMD_A(T)];                  // As[m*LDA + k]
    threadgroup T Bs[MK_SIMD_B(T)];                  // Bs[k*LDB + n]

    const mk_gemm_place p = mk_gemm_locate(tgp.z, args);
    const int m0 = int(tgp.y) * MK_BM;
    const int n0 = int(tgp.x) * MK_BN;
    const device T* Ab = A + p.b * args.stride_a;
    const device T* Bb = B + p.b * args.stride_b;
    const int sr = int(sg) / MK_WN * MK_SG_M;        // this SIMD-group's sub-tile origin
    const int sc = int(sg) % MK_WN * MK_SG_N;
    const mk_frag_pos f = mk_frag_coord(lane);

    mk_acc_simd acc;
    mk_simd_zero(acc);
    for (int k0 = p.k_begin; k0 < p.k_end; k0 += MK_BK) {
        const mk_gemm_vec v = mk_gemm_vec_at(m0, n0, k0, p, args);
        mk_stage<MK_BM, MK_BK, MK_LDA(T), 1>(As, Ab, args.lda, args.trans_a != 0, v.a,
                                             m0, k0, args.M, p.k_end, int(tid));
        mk_stage<MK_BK, MK_BN, MK_LDB(T), 1>(Bs, Bb, args.ldb, args.trans_b != 0, v.b,
                                             k0, n0, p.k_end, args.N, int(tid));
        threadgroup_barrier(mem_flags::mem_threadgroup);
        mk_simd_step(As, Bs, acc, sr, sc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    // Fragments go straight from the registers to device memory, each lane its own two
    // elements per fragment: 2-wide on interior tiles, checked on edge tiles.
    const bool vec = m0 + MK_BM <= args.M && n0 + MK_BN <= args.N
                     && (args.split_k > 1 ? (args.N & 1) == 0
                         : ((args.ldc | args.stride_c | args.stride_out) & 1) == 0);
    for (int i = 0; i < MK_FM; ++i) {
        for (int j = 0; j < MK_FN; ++j) {
            mk_gemm_store2(float2(acc.v[i][j].thread_elements()), m0 + sr + 8 * i + f.fr,
                           n0 + sc + 8 * j + f.fc, vec, p, C, out, partial, args);
        }
    }
}

#endif  // MK_SIMD_FITS

// Split-K second pass: one thread per output element (grid: ceil(batch*M*N / threads)).
template <typename T>
[[max_total_threads_per_threadgroup(256)]]   // gpu/gemm.py's REDUCE_THREADS
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
