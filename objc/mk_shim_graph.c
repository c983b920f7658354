// mk_shim_graph.c: MPSGraph runs, the host half (see mk_shim_host.h): tensor sizes, which
// buffers are staged through scratch memory, cache keys.
#include "mk_shim_host.h"

#include <stdio.h>
#include <string.h>

size_t mk_shim_tensor_bytes(int n, const int64_t *shape, size_t esize) {
    size_t total = esize;
    for (int i = 0; i < n; i++) {
        if (shape[i] < 0) return SIZE_MAX;
        if (shape[i] && total > SIZE_MAX / (size_t)shape[i]) return SIZE_MAX;
        total *= (size_t)shape[i];
    }
    return total;
}

void mk_shim_graph_staging(const mk_graph_io *in, int nin, const mk_graph_io *out, int nout,
                           int *in_scratch, int *out_scratch) {
    for (int i = 0; i < nin; i++) in_scratch[i] = in[i].offset != 0;
    for (int j = 0; j < nout; j++) {
        int s = out[j].offset != 0;
        for (int i = 0; i < nin && !s; i++)
            s = mk_shim_overlap(out[j].buffer, in[i].buffer,
                                out[j].storage && out[j].storage == in[i].storage);
        out_scratch[j] = s;
    }
}

mk_status mk_shim_graph_prepare(const mk_device *d, const mk_graph_io *in, const size_t *in_bytes, int nin,
                                const mk_graph_io *out, const size_t *out_bytes, int nout,
                                int *in_scratch, int *out_scratch, const char *op) {
    if (nin > MK_GRAPH_IO_MAX || nout > MK_GRAPH_IO_MAX)
        return mk_set_error(MK_ERR_INVALID, "%s: more than %d graph inputs or outputs", op, MK_GRAPH_IO_MAX);
    char what[32];
    for (int i = 0; i < nin; i++) {
        snprintf(what, sizeof what, "input %d", i);
        mk_status st = mk_shim_check_buffer(d, in[i].buffer, in_bytes[i], op, what);
        if (st != MK_OK) return st;
    }
    for (int j = 0; j < nout; j++) {
        snprintf(what, sizeof what, "output %d", j);
        mk_status st = mk_shim_check_buffer(d, out[j].buffer, out_bytes[j], op, what);
        if (st != MK_OK) return st;
    }
    mk_shim_graph_staging(in, nin, out, nout, in_scratch, out_scratch);
    return MK_OK;
}

void mk_shim_graph_copy_back(void *const *dst, const void *const *scratch, const size_t *bytes,
                             const int *staged, int n) {
    for (int j = 0; j < n; j++)
        if (staged[j] && dst[j] && scratch[j]) memcpy(dst[j], scratch[j], bytes[j]);
}

mk_status mk_shim_graph_key(char *key, size_t len, const char *op, int dtype, const void *args, size_t nbytes) {
    int n = snprintf(key, len, "%s:%d:", op, dtype);
    if (n < 0 || (size_t)n + 2 * nbytes >= len)      // a cut key could name two graphs
        return mk_set_error(MK_ERR_INVALID, "%s: arguments too large for a graph cache key", op);
    const unsigned char *p = (const unsigned char *)args;
    for (size_t i = 0; i < nbytes; i++) n += snprintf(key + n, len - (size_t)n, "%02x", p[i]);
    return MK_OK;
}

void mk_shim_iota(int32_t *v, int n) {
    for (int i = 0; i < n; i++) v[i] = i;
}
