// mk_mps_stub.c: Apple's MPS primitives exist only on macOS; elsewhere every entry point
// (one per kernel family of metal/mk_args.h's MK_KERNELS) says so. (Compiled off-darwin
// only; on macOS objc/mk_mps*.m define these.)
#include "mpskern.h"

#define MK_NO_MPS(name, mps, arrays)                                                        \
    mk_status mk_mps_##name(mk_device *d, const mk_##name##_args *a, int dtype arrays,     \
                            mk_timing *t) {                                                 \
        return mk_set_error(MK_ERR_UNAVAILABLE,                                             \
                            "mps needs macOS on Apple silicon (Metal Performance Shaders)"); \
    }
MK_KERNELS(MK_NO_MPS, MK_MPS_BUFFER, MK_MPS_BUFFER)
