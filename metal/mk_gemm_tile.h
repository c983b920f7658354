// mk_gemm_tile.h: the GEMM tile machinery shared by gemm.metal and conv2d.metal (implicit
// GEMM). A threadgroup computes a BM x BN tile of the output, stepping over K in BK slices
// staged in threadgroup memory in the inputs' own type (half stays half: half the bytes,
// twice the resident threadgroups); its 32*WM*WN threads form a WM x WN grid of
// SIMD-groups, each owning a (BM/WM) x (BN/WN) sub-tile. Two ways to compute a sub-tile:
//   tiled: each lane of a SIMD-group (lanes as 4 rows x 8 columns) holds TM x TN outputs at
//          rows lane_row + 4*i, columns lane_col + 8*j (strided, so neighbouring lanes read
//          neighbouring threadgroup words);
//   simd:  8x8 simdgroup_matrix fragments, FM x FN of them per SIMD-group, stored straight
//          from the registers to device memory (no output tile in threadgroup memory).
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
// Staged rows are padded by 16 bytes (4 floats, 8 halves): under 32 banks x 4 bytes the 8
// rows a fragment load or a vector store touches then start on 8 different 4-bank groups,
// so no bank serves two words of one instruction more often than the minimum (MLX's steel
// GEMM pads the same way). MK_PAD(T) is the padding in elements of T.
#define MK_PAD(T) (16 / int(sizeof(T)))
// simd: A slice as As[m*MK_LDA + k], B slice as Bs[k*MK_LDB + n]
#define MK_LDA(T) (MK_BK + MK_PAD(T))
#define MK_LDB(T) (MK_BN + MK_PAD(T))
#define MK_SIMD_A(T) (MK_BM * MK_LDA(T))
#define MK_SIMD_B(T) (MK_BK * MK_LDB(T))
// tiled: A slice as As[k*MK_TLDA + m], B slice as Bs[k*MK_LDB + n]
#define MK_TLDA(T) (MK_BM + MK_PAD(T))
#define MK_TILED_A(T) (MK_BK * MK_TLDA(T))
// bytes of staging at float (the larger type): what the tile space's memory rule counts
#define MK_STAGE_BYTES (4 * (MK_BM * (MK_BK + 4) + MK_BK * (MK_BN + 4)))
#define MK_TILED_STAGE_BYTES (4 * (MK_BK * (MK_BM + 4) + MK_BK * (MK_BN + 4)))

// The divisibility both variants need (8-row fragments imply the tiled kernel's 4 x 8 lanes).
static_assert(MK_BM % (8 * MK_WM) == 0, "MK_BM must be a multiple of 8*MK_WM");
static_assert(MK_BN % (8 * MK_WN) == 0, "MK_BN must be a multiple of 8*MK_WN");
static_assert(MK_BK % 8 == 0, "MK_BK must be a multiple of 8");
static_assert(MK_NT <= 1024, "at most 1024 threads per threadgroup");
static_assert(MK_TILED_STAGE_BYTES <= 32768, "at most 32 KiB of threadgroup memory");
// MK_NO_SIMDGROUP_MATRIX (the Metal shim defines it on GPUs without simdgroup matrices,
// family Apple6 and older): no simd kernels at all.
#if defined(MK_NO_SIMDGROUP_MATRIX)
#define MK_SIMD_FITS 0
#else
#define MK_SIMD_FITS (MK_STAGE_BYTES <= 32768)
#endif

// MK_VEC_LOADS 0 turns the unchecked vector loads of interior tiles off (every load checked).
#ifndef MK_VEC_LOADS
#define MK_VEC_LOADS 1
#endif

// The 2- and 4-wide vector types of an element type (float2/float4, half2/half4).
template <typename T> struct mk_vec;
template <> struct mk_vec<float> { typedef float2 v2; typedef float4 v4; };
template <> struct mk_vec<half> { typedef half2 v2; typedef half4 v4; };

// ---------------------------------------------------------------- staging (both variants)
// Copy a ROWS x COLS tile of a logical matrix into threadgroup memory as dst[r*RS + c*CS].
// Matrix element (r, c) lives at src[r*ld + c], or src[c*ld + r] when `trans`; the tile
// starts at (r0, c0). `vec` (the caller's per-tile test: the whole tile's memory inside the
// source, ld and the tile's start multiples of 4, CS == 1) takes unchecked 4-wide loads
// (transposed: mk_stage_trans_vec, whole tiles only); not transposed, 4-wide stores too,
// and columns from C on and rows from R on still read as 0 (conv2d's
// channel slices and output channels: logical edges inside memory; vectors wholly past C
// and rows past R are not read, so a slice may reach past the end of its rows when ld
// leaves room for the vector holding column C-1). Otherwise every element is checked and reads 0 outside the R x C
// matrix (edge tiles), one element per thread per step along the source's contiguous
// dimension (rows when transposed), so loads still coalesce. All MK_NT threads take part
// (thread `tid`).
template <bool TRANS, int ROWS, int COLS, int RS, int CS, typename T>
inline void mk_stage_checked(threadgroup T* dst, const device T* src, int ld, int r0, int c0,
                             int R, int C, int tid)
{
    constexpr int INNER = TRANS ? ROWS : COLS;      // the source's contiguous extent
    for (int i = tid; i < ROWS * COLS; i += MK_NT) {
        const int o = i / INNER;
        const int n = i - o * INNER;
        const int r = TRANS ? n : o;
        const int c = TRANS ? o : n;
        const int gr = r0 + r;
        const int gc = c0 + c;
        dst[r * RS + c * CS] = gr < R && gc < C ? src[TRANS ? gc * ld + gr : gr * ld + gc] : T(0);
    }
}

// The vector path of a transposed source (element (r, c) at src[c*ld + r]; the whole tile
// inside it, ld and r0 multiples of 4): 4-wide loads along r, the source's contiguous
// dimension, each stored as 4 elements of one column of dst. Consecutive lanes take
// consecutive columns c (dst's contiguous dimension), so each of the 4 stores of an
// instruction touches 32 consecutive words of dst (COLS >= 32), or 16 of two rows 4*RS
// apart (COLS = 16: RS = BK + 4 floats / + 8 halves, 16 banks apart): no bank conflict.
template <int ROWS, int COLS, int RS, typename T>
inline void mk_stage_trans_vec(threadgroup T* dst, const device T* src, int ld, int r0,
                               int c0, int tid)
{
    typedef typename mk_vec<T>::v4 V;
    for (int i = tid; i < ROWS / 4 * COLS; i += MK_NT) {
        const int r = i / COLS * 4;
        const int c = i - i / COLS * COLS;
        const V val = *reinterpret_cast<const device V*>(src + (c0 + c) * ld + r0 + r);
        for (int e = 0; e < 4; ++e) {
            dst[(r + e) * RS + c] = val[e];
        }
    }
}

template <int ROWS, int COLS, int RS, int CS, typename T>
inline void mk_stage(threadgroup T* dst, const device T* src, int ld, bool trans, bool vec,
                     int r0, int c0, int R, int C, int tid)
{
    if (vec && CS == 1 && trans) {
        mk_stage_trans_vec<ROWS, COLS, RS>(dst, src, ld, r0, c0, tid);
    } else if (vec && CS == 1) {
        constexpr int CV = COLS / 4;                  // 4-wide vectors per row
        const bool cut = c0 + COLS > C;
        for (int i = tid; i < ROWS * CV; i += MK_NT) {
            const int r = i / CV;
            const int c = (i - r * CV) * 4;
            typename mk_vec<T>::v4 val = typename mk_vec<T>::v4(T(0));
            if ((cut && c0 + c >= C) || r0 + r >= R) {
                // wholly past C or past R: not loaded (it may lie past the memory)
            } else {
                val = *reinterpret_cast<const device typename mk_vec<T>::v4*>(
                    src + (r0 + r) * ld + c0 + c);
            }
            if (cut) {
                for (int e = 0; e < 4; ++e) {
                    val[e] = c0 + c + e < C ? val[e] : T(0);
                }
            }
            *reinterpret_cast<threadgroup typename mk_vec<T>::v4*>(dst + r * RS + c) = val;
        }
    } else if (trans) {
        mk_stage_checked<true, ROWS, COLS, RS, CS>(dst, src, ld, r0, c0, R, C, tid);
    } else {
        mk_stage_checked<false, ROWS, COLS, RS, CS>(dst, src, ld, r0, c0, R, C, tid);
    }
}

// ---------------------------------------------------------------- tiled (scalar) variant
// A slice staged as As[k*TLDA + m], B slice as Bs[k*LDB + n].
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
template <typename T>
inline void mk_tiled_step(const threadgroup T* As, const threadgroup T* Bs,
                          thread mk_acc_tiled& acc, int tr, int tc)
{
    for (int k = 0; k < MK_BK; ++k) {
        float a[MK_TM];
        float b[MK_TN];
        for (int i = 0; i < MK_TM; ++i) {
            a[i] = float(As[k * MK_TLDA(T) + tr + 4 * i]);
        }
        for (int j = 0; j < MK_TN; ++j) {
            b[j] = float(Bs[k * MK_LDB(T) + tc + 8 * j]);
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
// Float accumulators; operand fragments in the staged type (half x half -> float
// multiply-accumulates for float16). Lane l holds row fr, columns fc and fc+1 of every 8x8
// fragment (the hardware layout thread_elements() exposes, which MLX relies on too): the
// epilogue stores them from there.
struct mk_acc_simd {
    simdgroup_matrix<float, 8, 8> v[MK_FM][MK_FN];
};

struct mk_frag_pos {
    int fr, fc;
};

inline mk_frag_pos mk_frag_coord(uint lane)
{
    mk_frag_pos p;
    const int q = int(lane) / 4;
    p.fr = (q & 4) + (int(lane) / 2) % 4;
    p.fc = (q & 2) * 2 + (int(lane) % 2) * 2;
    return p;
}

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
template <typename T>
inline void mk_simd_step(const threadgroup T* As, const threadgroup T* Bs,
                         thread mk_acc_simd& acc, int sr, int sc)
{
    // (the fragment loops unrolled, as Apple's compiler does: no loop counters or
    // variable fragment indices per multiply)
    for (int k = 0; k < MK_BK; k += 8) {
        simdgroup_matrix<T, 8, 8> a[MK_FM];
        simdgroup_matrix<T, 8, 8> b[MK_FN];
#pragma unroll
        for (int i = 0; i < MK_FM; ++i) {
            simdgroup_load(a[i], As + (sr + 8 * i) * MK_LDA(T) + k, MK_LDA(T));
        }
#pragma unroll
        for (int j = 0; j < MK_FN; ++j) {
            simdgroup_load(b[j], Bs + k * MK_LDB(T) + sc + 8 * j, MK_LDB(T));
        }
#pragma unroll
        for (int i = 0; i < MK_FM; ++i) {
#pragma unroll
            for (int j = 0; j < MK_FN; ++j) {
                simdgroup_multiply_accumulate(acc.v[i][j], a[i], b[j], acc.v[i][j]);
            }
        }
    }
}

#endif  // !MK_NO_SIMDGROUP_MATRIX

#endif
