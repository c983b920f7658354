// mps_host/attention.c: the host half of objc/mk_mps_attention.m, in plain C: the argument and
// layout checks (with the messages users see), the graph's shapes, when MPSGraph's fused op
// cannot differ from torch, and the no-keys case done on the host. The .m includes this file
// (so an op's MPS code is two files); tests/test_shim_host.py compiles it off macOS.
#include "mk_mps_host.h"

#include <string.h>

// The graph's shapes: operand batch sizes (1 where broadcast), heads per key / value head,
// the mask's (b, h, l, s), and the batch of the weights and of the output.
typedef struct mk_mps_attention_shapes {
    int64_t bq, bk, bv, gk, gv, mb, mh, ml, ms, batch, bw, bo;
} mk_mps_attention_shapes;

#define ATTN "mk_mps_attention"

// A dimension of an operand: full where its stride is nonzero, else 1 (broadcast).
static int64_t dim_of(int stride, int full) { return stride ? full : 1; }

// The C-contiguous strides of `shape` with 0 for its dimensions of 1, as the Python layer
// passes them; 1 when `given` matches.
static int strides_match(const int64_t *shape, const int *given, int n) {
    int64_t acc = 1;
    for (int i = n - 1; i >= 0; i--) {
        int64_t want = shape[i] == 1 ? 0 : acc;
        if (shape[i] != 1 && given[i] != want) return 0;
        acc *= shape[i];
    }
    return 1;
}

// Sizes, the layout contract (C-contiguous operands whose batch / head dimension is full or 1
// with stride 0; the mask likewise) and the mask buffer; *empty = 1 when out has no element.
mk_status mk_mps_attention_check(const mk_attention_args *a, const mk_buffer *mask, int *empty) {
    *empty = 0;
    if (!a) return mk_set_error(MK_ERR_INVALID, ATTN ": args is NULL");
    if (a->B < 0 || a->L < 0 || a->S < 0 || a->E < 0 || a->Ev < 0 || a->Hq < 1 || a->Hk < 1 || a->Hv < 1 ||
        a->Hq % a->Hk || a->Hq % a->Hv)
        return mk_set_error(MK_ERR_INVALID, ATTN ": invalid sizes (B %d, heads %d/%d/%d, L %d, S %d, E %d, Ev %d)",
                            a->B, a->Hq, a->Hk, a->Hv, a->L, a->S, a->E, a->Ev);
    if (a->mask < MK_ATTN_MASK_NONE || a->mask > MK_ATTN_MASK_ADD)
        return mk_set_error(MK_ERR_INVALID, ATTN ": mask kind %d is not MK_ATTN_MASK_*", a->mask);
    int64_t qs[4] = {dim_of(a->q_sb, a->B), a->Hq, a->L, a->E};
    int64_t ks[4] = {dim_of(a->k_sb, a->B), a->Hk, a->S, a->E};
    int64_t vs[4] = {dim_of(a->v_sb, a->B), a->Hv, a->S, a->Ev};
    int qg[4] = {a->q_sb, a->q_sh, a->E, 1}, kg[4] = {a->k_sb, a->k_sh, a->E, 1}, vg[4] = {a->v_sb, a->v_sh, a->Ev, 1};
    int ok = strides_match(qs, qg, 4) && strides_match(ks, kg, 4) && strides_match(vs, vg, 4);
    if (a->mask != MK_ATTN_MASK_NONE) {
        int64_t ms[4] = {dim_of(a->m_sb, a->B), dim_of(a->m_sh, a->Hq), dim_of(a->m_sl, a->L), dim_of(a->m_ss, a->S)};
        int mg[4] = {a->m_sb, a->m_sh, a->m_sl, a->m_ss};
        ok = ok && strides_match(ms, mg, 4);
    }
    if (!ok)
        return mk_set_error(MK_ERR_UNSUPPORTED, ATTN ": operands must be C-contiguous with broadcast dimensions of "
                            "size 1 (stride 0); got strides q %d,%d k %d,%d v %d,%d mask %d,%d,%d,%d",
                            a->q_sb, a->q_sh, a->k_sb, a->k_sh, a->v_sb, a->v_sh, a->m_sb, a->m_sh, a->m_sl, a->m_ss);
    *empty = (int64_t)a->B * a->L * a->Ev == 0;
    if (!*empty && a->S && a->mask != MK_ATTN_MASK_NONE && !mask)
        return mk_set_error(MK_ERR_INVALID, ATTN ": mask buffer is NULL");
    return MK_OK;
}

void mk_mps_attention_shapes_of(const mk_attention_args *a, mk_mps_attention_shapes *s) {
    s->bq = dim_of(a->q_sb, a->B);
    s->bk = dim_of(a->k_sb, a->B);
    s->bv = dim_of(a->v_sb, a->B);
    s->gk = a->Hq / a->Hk;
    s->gv = a->Hq / a->Hv;
    s->mb = dim_of(a->m_sb, a->B);
    s->mh = dim_of(a->m_sh, a->Hq);
    s->ml = dim_of(a->m_sl, a->L);
    s->ms = dim_of(a->m_ss, a->S);
    s->batch = s->bq > s->bk ? s->bq : s->bk;
    s->bw = a->mask != MK_ATTN_MASK_NONE && s->mb > s->batch ? s->mb : s->batch;   // a mask may carry the batch alone
    s->bo = s->bw > s->bv ? s->bw : s->bv;
}

// Where MPSGraph's fused op (macOS 15) cannot differ from torch: no user mask, one head
// count, one batch (or all full), E == Ev > 0. (The OS must also have it.)
int mk_mps_attention_fusable(const mk_attention_args *a) {
    return a->mask == MK_ATTN_MASK_NONE && a->Hk == a->Hq && a->Hv == a->Hq && a->E == a->Ev && a->E > 0 &&
           (a->B == 1 || (a->q_sb && a->k_sb && a->v_sb));
}

// No keys (S == 0): the output is zeros (torch); MPSGraph has no empty reductions. 1 when
// done (*st).
int mk_mps_attention_host(mk_device *d, const mk_attention_args *a, int dtype, mk_buffer *out, mk_status *st) {
    *st = MK_OK;
    if (a->S != 0) return 0;
    size_t n = (size_t)a->B * a->Hq * a->L * a->Ev * mk_mps_esize_of(dtype);
    if ((*st = mk_shim_check_buffer(d, out, n, ATTN, "out")) == MK_OK) memset(out->host, 0, n);
    return 1;
}
