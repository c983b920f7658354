# _native_cpu.pxi (included by _native.pyx): the mk_cpu_* calls. `args` are dicts whose keys
# are the fields of the matching struct in metal/mk_args.h (Cython converts dict -> struct).

# Below this many element-operations a call keeps the GIL: releasing and re-taking it costs
# more than the work (the C side then also runs it inline, without waking the pool).
cdef enum:
    _CPU_SMALL_WORK = 16384


def cpu_set_num_threads(int n):
    mk_cpu_set_num_threads(n)


def cpu_get_num_threads():
    return mk_cpu_get_num_threads()


def cpu_gemm(mk_gemm_args args, int dtype, A, B, C, out):
    cdef const void* a = addr(A)
    cdef const void* b = addr(B)
    cdef const void* c = addr(C)
    cdef void* o = addr(out, True)
    cdef mk_status st
    with nogil:
        st = mk_cpu_gemm(&args, dtype, a, b, c, o)
    check(st)


def cpu_conv2d(mk_conv2d_args args, int dtype, x, w, bias, y):
    cdef const void* px = addr(x)
    cdef const void* pw = addr(w)
    cdef const float* pb = <const float*>addr(bias)
    cdef void* py = addr(y, True)
    cdef mk_status st
    cdef long work = <long>args.N * args.K * args.P * args.Q * (args.C // max(args.groups, 1)) \
        * args.R * args.S
    if work < _CPU_SMALL_WORK:
        st = mk_cpu_conv2d(&args, dtype, px, pw, pb, py)
    else:
        with nogil:
            st = mk_cpu_conv2d(&args, dtype, px, pw, pb, py)
    check(st)


def cpu_pool2d(mk_pool2d_args args, int dtype, x, y):
    cdef const void* px = addr(x)
    cdef void* py = addr(y, True)
    cdef mk_status st
    cdef long work = <long>args.N * args.C * (args.H * args.W + args.P * args.Q * args.kh * args.kw)
    if work < _CPU_SMALL_WORK:
        st = mk_cpu_pool2d(&args, dtype, px, py)
    else:
        with nogil:
            st = mk_cpu_pool2d(&args, dtype, px, py)
    check(st)


def cpu_softmax(mk_softmax_args args, int dtype, x, y):
    cdef const void* px = addr(x)
    cdef void* py = addr(y, True)
    cdef mk_status st
    # tiny rows: the GIL round trip costs more than the work
    if <long>args.outer * args.n * args.inner < _CPU_SMALL_WORK // 4:
        st = mk_cpu_softmax(&args, dtype, px, py)
    else:
        with nogil:
            st = mk_cpu_softmax(&args, dtype, px, py)
    check(st)


def cpu_rownorm(mk_rownorm_args args, int dtype, x, weight, bias, y):
    cdef const void* px = addr(x)
    cdef const float* pw = <const float*>addr(weight)
    cdef const float* pb = <const float*>addr(bias)
    cdef void* py = addr(y, True)
    cdef mk_status st
    with nogil:
        st = mk_cpu_rownorm(&args, dtype, px, pw, pb, py)
    check(st)


def cpu_group_norm(mk_group_norm_args args, int dtype, x, weight, bias, y):
    cdef const void* px = addr(x)
    cdef const float* pw = <const float*>addr(weight)
    cdef const float* pb = <const float*>addr(bias)
    cdef void* py = addr(y, True)
    cdef mk_status st
    with nogil:
        st = mk_cpu_group_norm(&args, dtype, px, pw, pb, py)
    check(st)


def cpu_batch_norm(mk_batch_norm_args args, int dtype, x, running_mean, running_var,
                   weight, bias, y):
    cdef const void* px = addr(x)
    cdef float* rm = <float*>addr(running_mean, True)
    cdef float* rv = <float*>addr(running_var, True)
    cdef const float* pw = <const float*>addr(weight)
    cdef const float* pb = <const float*>addr(bias)
    cdef void* py = addr(y, True)
    cdef mk_status st
    if <long>args.N * args.C * args.HW < _CPU_SMALL_WORK:
        st = mk_cpu_batch_norm(&args, dtype, px, rm, rv, pw, pb, py)
    else:
        with nogil:
            st = mk_cpu_batch_norm(&args, dtype, px, rm, rv, pw, pb, py)
    check(st)


def cpu_attention(mk_attention_args args, int dtype, q, k, v, mask, out):
    cdef const void* pq = addr(q)
    cdef const void* pk = addr(k)
    cdef const void* pv = addr(v)
    cdef const void* pm = addr(mask)
    cdef void* po = addr(out, True)
    cdef mk_status st
    with nogil:
        st = mk_cpu_attention(&args, dtype, pq, pk, pv, pm, po)
    check(st)
