# _native_mps.pxi (included by _native.pyx): Apple's primitives through mk_mps_*. Buffers are
# Buffer objects of the same Metal device; returns (gpu_ms, wall_ms).

cdef inline mk_buffer* _bp(object b) except? NULL:
    return NULL if b is None else (<Buffer>b).ptr


def mps_gemm(Device d, mk_gemm_args args, int dtype, A, B, C, out):
    cdef mk_timing t
    cdef mk_buffer* a = _bp(A)
    cdef mk_buffer* b = _bp(B)
    cdef mk_buffer* c = _bp(C)
    cdef mk_buffer* o = _bp(out)
    cdef mk_status st
    with nogil:
        st = mk_mps_gemm(d.ptr, &args, dtype, a, b, c, o, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_conv2d(Device d, mk_conv2d_args args, int dtype, x, w, bias, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* pw = _bp(w)
    cdef mk_buffer* pb = _bp(bias)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_conv2d(d.ptr, &args, dtype, px, pw, pb, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_pool2d(Device d, mk_pool2d_args args, int dtype, x, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_pool2d(d.ptr, &args, dtype, px, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_softmax(Device d, mk_softmax_args args, int dtype, x, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_softmax(d.ptr, &args, dtype, px, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_rownorm(Device d, mk_rownorm_args args, int dtype, x, weight, bias, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* pw = _bp(weight)
    cdef mk_buffer* pb = _bp(bias)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_rownorm(d.ptr, &args, dtype, px, pw, pb, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_group_norm(Device d, mk_group_norm_args args, int dtype, x, weight, bias, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* pw = _bp(weight)
    cdef mk_buffer* pb = _bp(bias)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_group_norm(d.ptr, &args, dtype, px, pw, pb, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_batch_norm(Device d, mk_batch_norm_args args, int dtype, x, running_mean, running_var,
                   weight, bias, y):
    cdef mk_timing t
    cdef mk_buffer* px = _bp(x)
    cdef mk_buffer* rm = _bp(running_mean)
    cdef mk_buffer* rv = _bp(running_var)
    cdef mk_buffer* pw = _bp(weight)
    cdef mk_buffer* pb = _bp(bias)
    cdef mk_buffer* py = _bp(y)
    cdef mk_status st
    with nogil:
        st = mk_mps_batch_norm(d.ptr, &args, dtype, px, rm, rv, pw, pb, py, &t)
    check(st)
    return t.gpu_ms, t.wall_ms


def mps_attention(Device d, mk_attention_args args, int dtype, q, k, v, mask, out):
    cdef mk_timing t
    cdef mk_buffer* pq = _bp(q)
    cdef mk_buffer* pk = _bp(k)
    cdef mk_buffer* pv = _bp(v)
    cdef mk_buffer* pm = _bp(mask)
    cdef mk_buffer* po = _bp(out)
    cdef mk_status st
    with nogil:
        st = mk_mps_attention(d.ptr, &args, dtype, pq, pk, pv, pm, po, &t)
    check(st)
    return t.gpu_ms, t.wall_ms
