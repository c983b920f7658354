// mk_cpu_attention_tiles.h: the block steps of the cpu attention kernel (mk_cpu_attention.c)
// as register-blocked micro-kernels, compiled per vector width like mk_cpu_rowvec.h (16 floats
// for AVX-512, 8 for AVX2 / SSE / NEON; mk_attn_tiles() picks the set once). A score block is
// held TRANSPOSED, St[key][query] (rows of ld floats, ld a multiple of `nr`): the softmax over
// a query's keys is then a column, reduced lane-wise with no horizontal steps; the weights
// are written packed per tile of the P V micro-kernel's queries. Q is packed
// once per query block into panels of nr queries (Qp[panel][e][nr], zero past the block);
// K and V are read in place (keys are the broadcast side of S^T = K Q^T; V's rows are the
// vector side of O = P V), so nothing is re-packed per key block. Not part of the public ABI.
#ifndef MK_CPU_ATTENTION_TILES_H
#define MK_CPU_ATTENTION_TILES_H
#include "mk_cpu.h"

typedef struct {
    // Qp = Q^T in panels of nr queries: Q is nq rows of E floats, ldq floats apart; ld (>= nq,
    // a multiple of nr) columns, the ones past nq zero. Qp holds E * ld floats.
    void (*pack_q)(const float *Q, long ldq, int nq, int E, float *Qp, long ld);
    // St[j][c] = scale * sum_e K[j][e] Qp[e][c] for keys j < nk (rows of E floats at K, ldk
    // floats apart) and columns c < ld (every panel of Qp)
    void (*scores)(const float *K, long ldk, int nk, int E, const float *Qp, long ld, float scale,
                   float *St);
    // The online-softmax step of one key block, column c = query c (all ld columns): m, l are
    // the running max and sum; the weights exp(s - m_new) (0 for a query whose keys so far
    // are all hidden) go to Pp, packed per tile of `pmr` queries (Pp[c / pmr][j][c % pmr]:
    // nk * ld floats); alpha[c] is the factor for the query's output sums (exp(m_old - m_new);
    // 1 when nothing is visible yet). norm: the weights are also divided by the new l and
    // alpha is l_old exp(m_old - m_new) / l_new (the rows stay normalised). NaN scores
    // propagate through m and l. tmp: ld floats.
    void (*softmax)(const float *St, int nk, long ld, float *Pp, float *m, float *l,
                    float *alpha, int norm, float *tmp);
    // O[i][d] = alpha[i] O[i][d] + sum_j P[i][j] V[j][d] for i < nq, d < Ev (P as packed by
    // softmax); O rows of ldo floats, V rows of ldv; vtail: nk * nr floats (V's last columns,
    // when Ev % nr != 0)
    void (*pv)(const float *Pp, int nq, int nk, const float *V, long ldv, int Ev, float *O,
               long ldo, const float *alpha, float *vtail);
    int nr;      // queries per panel (two vectors)
    int width;   // floats per vector of this set
} mk_attn_tiles_t;

const mk_attn_tiles_t *mk_attn_tiles(void);

#endif
