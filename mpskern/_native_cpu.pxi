# _native_cpu.pxi (included by _native.pyx): the mk_cpu_* calls. `args` are dicts whose keys
# are the fields of the matching struct in metal/mk_args.h (Cython converts dict -> struct).

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
    with nogil:
        st = mk_cpu_conv2d(&args, dtype, px, pw, pb, py)
    check(st)


def cpu_pool2d(mk_pool2d_args args, int dtype, x, y):
    cdef const void* px = addr(x)
    cdef void* py = addr(y, True)
    cdef mk_status st
    with nogil:
        st = mk_cpu_pool2d(&args, dtype, px, py)
    check(st)


def cpu_softmax(mk_softmax_args args, int dtype, x, y):
    cdef const void* px = addr(x)
    cdef void* py = addr(y, True)
    cdef mk_status st
    # tiny rows: the GIL round trip costs more than the work
    if <long>args.outer * args.n * args.inner < 4096:
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
    with nogil:
        st = mk_cpu_batch_norm(&args, dtype, px, rm, rv, pw, pb, py)
    check(st)
