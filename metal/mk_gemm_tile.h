// mk_gemm_tile.h: the GEMM tile machinery shared by gemm.metal and conv2d.metal (implicit
// GEMM). A threadgroup computes a BM x BN tile of the output, stepping over K in BK slices
// staged in threadgroup memory as float (float16 inputs are widened once, on load); its
// 32*WM*WN threads form a WM x WN grid of SIMD-groups, each owning a (BM/WM) x (BN/WN)
// sub-tile. Two ways to compute a sub-tile:
//   tiled: each lane of a SIMD-group (lanes as 4 rows x 8 columns) holds TM x TN outputs at
//          rows lane_row + 4*i, columns lane_col + 8*j (strided, so neighbouring lanes read
//          neighbouring threadgroup words);
//   simd:  8x8 simdgroup_matrix fragments, FM x FN of them per SIMD-group.
// Tile parameters come in as macros (mpskern/tuning/tiles.py declares the space and the
// rules; the same macro set goes to Metal's preprocessorMacros and the simulator's -D).
#ifndef MK_GEMM_TILE_H
#define MK_GEMM_TILE_H

#if !defined(MK_BM) || !defined(MK_BN) || !defined(MK_BK) || !defined(MK_WM) || !defined(MK_WN)
#error "GEMM tile macros MK_BM, MK_BN, MK_BK, MK_WM, MK_WN must be defined (see mpskern/tuning/tiles.py)"
#endif

#define MK_NT (MK_SIMD_WIDTH * MK_WM * MK_WN)   // threads per threadgroup
#define MK_SG_M (MK_BM / MK_WM)                  // sub-tile rows per SIMD-group
#define MK_SG_N (MK_BN / MK_WN)                  // sub-tile columns per SIMD-group
#define MK_TM (MK_SG_M / 4)                      // tiled: rows per lane
#define MK_TN (MK_SG_N / 8)                      // tiled: columns per lane
#define MK_FM (MK_SG_M / 8)                      // simd: fragment rows per SIMD-group
#define MK_FN (MK_SG_N / 8)                      // simd: fragment columns per SIMD-group
#define MK_AB_FLOATS (MK_BM * MK_BK + MK_BK * MK_BN)   // A and B slices
// simd kernels reuse the A/B staging area for the output tile in the epilogue
#define MK_SMEM_FLOATS (MK_AB_FLOATS > MK_BM * MK_BN ? MK_AB_FLOATS : MK_BM * MK_BN)

// The divisibility both variants need (8-row fragments imply the tiled kernel's 4 x 8 lanes).
static_assert(MK_BM % (8 * MK_WM) == 0, "MK_BM must be a multiple of 8*MK_WM");
static_assert(MK_BN % (8 * MK_WN) == 0, "MK_BN must be a multiple of 8*MK_WN");
static_assert(MK_BK % 8 == 0, "MK_BK must be a multiple of 8");
static_assert(MK_NT <= 1024, "at most 1024 threads per threadgroup");
static_assert(MK_AB_FLOATS * 4 <= 32768, "at most 32 KiB of threadgroup memory");
// The simd kernels also hold the output tile, so a tile set that fits the tiled kernels may
// not fit them: the .metal files compile the simd kernels only where they fit (32 KiB, the
// threadgroup memory of every Apple GPU family).
// MK_NO_SIMDGROUP_MATRIX (the Metal shim defines it on GPUs without simdgroup matrices,
// family Apple6 and older): no simd kernels at all.
#if defined(MK_NO_SIMDGROUP_MATRIX)
#define MK_SIMD_FITS 0
#else
#define MK_SIMD_FITS (MK_SMEM_FLOATS * 4 <= 32768)
#endif

// ---------------------------------------------------------------- tiled (scalar) variant
// A slice staged as As[k*BM + m], B slice as Bs[k*BN + n].
struct mk_acc_tiled {
    float v[MK_TM][MK_TN];
};

inline void mk_tiled_zero(thread mk_acc_tiled& acc)
{
    for (int i = 0; i < MK_TM; ++i) {
        for (int j = 0; j < MK_TN; ++j) {
            acc.v[i][j] = 0.0f;
        }
    }
}

// acc += As(rows tr + 4i) x Bs(columns tc + 8j) over one BK slice (tr, tc: tile-local).
inline void mk_tiled_step(const threadgroup float* As, const threadgroup float* Bs,
                          thread mk_acc_tiled& acc, int tr, int tc)
{
    for (int k = 0; k < MK_BK; ++k) {
        float a[MK_TM];
        float b[MK_TN];
        for (int i = 0; i < MK_TM; ++i) {
            a[i] = As[k * MK_BM + tr + 4 * i];
        }
        for (int j = 0; j < MK_TN; ++j) {
            b[j] = Bs[k * MK_BN + tc + 8 * j];
        }
        for (int i = 0; i < MK_TM; ++i) {
            for (int j = 0; j < MK_TN; ++j) {
                acc.v[i][j] += a[i] * b[j];
            }
        }
    }
}

#if !defined(MK_NO_SIMDGROUP_MATRIX)
// ---------------------------------------------------------------- simdgroup_matrix variant
// A slice staged row-major as As[m*BK + k], B slice as Bs[k*BN + n].
struct mk_acc_simd {
    simdgroup_matrix<float, 8, 8> v[MK_FM][MK_FN];
};

inline void mk_simd_zero(thread mk_acc_simd& acc)
{
    for (int i = 0; i < MK_FM; ++i) {
        for (int j = 0; j < MK_FN; ++j) {
            acc.v[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
}

// acc += this SIMD-group's rows of As x its columns of Bs over one BK slice; (sr, sc) is the
// sub-tile's tile-local origin.
inline void mk_simd_step(const threadgroup float* As, const threadgroup float* Bs,
                         thread mk_acc_simd& acc, int sr, int sc)
{
    for (int k = 0; k < MK_BK; k += 8) {
        simdgroup_matrix<float, 8, 8> a[MK_FM];
        simdgroup_matrix<float, 8, 8> b[MK_FN];
        for (int i = 0; i < MK_FM; ++i) {
            simdgroup_load(a[i], As + (sr + 8 * i) * MK_BK + k, MK_BK);
        }
        for (int j = 0; j < MK_FN; ++j) {
            simdgroup_load(b[j], Bs + k * MK_BN + sc + 8 * j, MK_BN);
        }
        for (int i = 0; i < MK_FM; ++i) {
            for (int j = 0; j < MK_FN; ++j) {
                simdgroup_multiply_accumulate(acc.v[i][j], a[i], b[j], acc.v[i][j]);
            }
        }
    }
}

// Write the accumulators into Cs[r*BN + c] (the BM x BN output tile, float).
inline void mk_simd_store(thread mk_acc_simd& acc, threadgroup float* Cs, int sr, int sc)
{
    for (int i = 0; i < MK_FM; ++i) {
        for (int j = 0; j < MK_FN; ++j) {
            simdgroup_store(acc.v[i][j], Cs + (sr + 8 * i) * MK_BN + sc + 8 * j, MK_BN);
        }
    }
}

#endif  // !MK_NO_SIMDGROUP_MATRIX

#endif
