// mk_shim_host.h: the host logic of the macOS shim (objc/mk_metal*.m, objc/mk_mps*.m) in
// plain C, so that it compiles and is unit-tested off macOS (tests/test_shim_host.py): the
// .m files are glue between these functions and Apple's API. Nothing here includes an
// Apple header; Metal objects appear only as opaque identities (const void *).
#ifndef MK_SHIM_HOST_H
#define MK_SHIM_HOST_H
#include <stddef.h>
#include <stdint.h>
#include "mk_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- handles (mk_shim_device.c) */

// An output handle argument: MK_OK and *out = NULL, or the error naming `op` when out is NULL.
mk_status mk_shim_out(void *out, const char *op);
// New handles; the caller then stores its implementation object in ->impl (a retained
// bridge, once the handle exists: nothing to undo on failure). Freed with free()
// (pipelines: mk_shim_pipeline_free).
mk_status mk_shim_device_new(const mk_device_ops *ops, mk_device **out);
mk_status mk_shim_buffer_new(mk_device *d, void *host, size_t nbytes, int flags, int zero_copy,
                             mk_buffer **out);
mk_status mk_shim_library_new(mk_device *d, mk_library **out);
mk_status mk_shim_pipeline_new(mk_device *d, uint32_t max_threads, uint32_t exec_width, const char *name,
                               mk_pipeline **out);
void mk_shim_pipeline_free(mk_pipeline *p);
// The arguments of buffer wraps, library sources and pipeline requests.
mk_status mk_shim_wrap_check(const void *host, size_t nbytes);
mk_status mk_shim_library_check(const char *source);
mk_status mk_shim_pipeline_check(const mk_device *d, const mk_library *l, const char *name);
// mk_device_info of a Metal device from what Metal says (architecture: filled apart).
void mk_shim_fill_info(mk_device_info *out, const char *name, int family, uint32_t max_threads,
                       uint32_t max_tg_memory, uint64_t working_set, int unified, uint32_t page);

/* ---------------------------------------------------------------- devices (mk_shim_device.c) */

// The oldest GPU family mpskern uses: Apple7 (simdgroup matrices, 32 KiB threadgroup
// memory), or what MPSKERN_METAL_MIN_FAMILY says (5 or 6: e.g. the paravirtual Apple5 GPU
// of hosted CI runners; the kernels then leave out simdgroup matrices).
int mk_shim_min_family(void);
// The newest Apple GPU family (10 .. `lowest`) `supports(ctx, family)` answers yes for, else 0.
int mk_shim_newest_family(int (*supports)(void *ctx, int family), void *ctx, int lowest);
// The preprocessor macro kernels compile with on a GPU of `family` ("NAME=VALUE"), or NULL:
// MK_NO_SIMDGROUP_MATRIX=1 below Apple7.
const char *mk_shim_family_macro(int family);
// Why no device is usable: the Metal devices there are (none when n == 0) are `names`.
void mk_shim_no_device_why(char *why, size_t why_len, int n, const char *const *names);

/* ---------------------------------------------------------------- buffers (mk_shim_buffer.c) */

// newBufferWithBytesNoCopy takes whole pages: the page range enclosing [host, host+nbytes)
// starts at `base`, the data at `offset` inside it, `length` bytes in all. 0, or -1 when
// the range does not fit the address space or `page` is not a power of two.
typedef struct mk_page_span { uintptr_t base; size_t offset, length; } mk_page_span;
int mk_shim_page_span(const void *host, size_t nbytes, size_t page, mk_page_span *out);
// The same for mk_buffer_wrap: an error naming the range when it cannot be wrapped, and a
// zero span for nbytes == 0 (Metal has no empty buffers: the caller makes a tiny one).
mk_status mk_shim_page_span_of(const void *host, size_t nbytes, size_t page, mk_page_span *out);
// Bytes to allocate for `nbytes` of device memory (Metal has no empty buffers: 16 for 0).
size_t mk_shim_alloc_length(size_t nbytes);
// Whether zero-copy is allowed (MPSKERN_ZERO_COPY=0 turns it off).
int mk_shim_zero_copy_allowed(void);
// Copy-mode buffers mirror their host memory: MK_BUFFER_READ data goes to the device
// before a run, MK_BUFFER_WRITE data comes back after it. 1 if it copied.
int mk_shim_upload(const mk_buffer *b, int copied, void *device_view);
int mk_shim_download(const mk_buffer *b, int copied, const void *device_view);
// 1 if the host ranges of a and b intersect (or `same_storage`: they share a Metal buffer).
int mk_shim_overlap(const mk_buffer *a, const mk_buffer *b, int same_storage);
// MK_OK if `d` is a Metal device; else an error naming `op`.
mk_status mk_shim_check_device(const mk_device *d, const char *op);
// MK_OK if `b` belongs to `d` and holds at least `need` bytes; else an error naming `what`.
mk_status mk_shim_check_buffer(const mk_device *d, const mk_buffer *b, size_t need, const char *op,
                               const char *what);

/* ---------------------------------------------------------------- libraries and dispatch (mk_shim_run.c) */

// One "NAME=VALUE" preprocessor macro ("NAME" alone is NAME=1, as -DNAME). `is_int`: VALUE
// is a decimal integer (Metal gets an NSNumber), else a string. 0, 1 to skip an empty
// entry, -1 for a malformed one (no name, or longer than the fields).
typedef struct mk_shim_macro { char name[128]; char value[512]; int is_int; long long ival; } mk_shim_macro;
int mk_shim_macro_parse(const char *s, mk_shim_macro *m);
// Every macro of a NULL-terminated list, parsed, handed to add(ctx, m) (nonzero: the
// caller could not take it, e.g. not UTF-8); the first malformed one is an error.
mk_status mk_shim_each_macro(const char *const *macros, int (*add)(void *ctx, const mk_shim_macro *m),
                             void *ctx);
// Metal's fast math: off (IEEE, as the simulator), unless MPSKERN_METAL_FAST_MATH=1.
int mk_shim_fast_math(void);

// Metal's validation for one dispatch, with our messages: threadgroup size within the
// pipeline's maximum, threadgroup memory (the pipeline's static plus the dispatch's, each
// rounded to 16 bytes) within the device's, bindings of this device and in range.
mk_status mk_shim_check_dispatch(const mk_device *d, const mk_dispatch *x, uint32_t i,
                                 uint64_t static_tg_memory, uint64_t device_tg_memory);
// Every dispatch of a list checked; `static_tg(ctx, p)` is a pipeline's own threadgroup memory.
mk_status mk_shim_check_dispatches(const mk_device *d, const mk_dispatch *list, uint32_t n,
                                   uint64_t (*static_tg)(void *ctx, const mk_pipeline *p), void *ctx,
                                   uint64_t device_tg_memory);
// How binding j is encoded: nothing, setBuffer, setBytes (<= 4 KiB), or a temporary buffer.
typedef enum { MK_BIND_NONE, MK_BIND_BUFFER, MK_BIND_BYTES, MK_BIND_TEMP } mk_bind_kind;
#define MK_SETBYTES_MAX 4096
mk_bind_kind mk_shim_bind_kind(const mk_binding *b);
// setThreadgroupMemoryLength needs a multiple of 16 bytes.
uint32_t mk_shim_tg_length(uint32_t nbytes);
// A dispatch with an empty grid runs nothing (Metal refuses it).
int mk_shim_dispatch_empty(const mk_dispatch *x);
// What encoding a dispatch list asks of a compute encoder, in order (mk_metal_run.m's are
// Metal's; the tests record them): per non-empty dispatch its pipeline, each binding
// (buffer, setBytes or a temporary buffer), each [[threadgroup(i)]] length, the dispatch.
typedef struct mk_shim_encoder {
    void *ctx;
    void (*pipeline)(void *ctx, const mk_pipeline *p);
    void (*buffer)(void *ctx, uint32_t index, mk_buffer *b, uint64_t offset);
    void (*bytes)(void *ctx, uint32_t index, const void *bytes, uint32_t nbytes);
    int (*temp)(void *ctx, uint32_t index, const void *bytes, uint32_t nbytes);    // 0, or -1: no memory
    void (*tg_memory)(void *ctx, uint32_t index, uint32_t length);
    void (*dispatch)(void *ctx, const uint32_t *grid, const uint32_t *threadgroup, int grid_units);
} mk_shim_encoder;
mk_status mk_shim_encode(const mk_dispatch *list, uint32_t n, const mk_shim_encoder *e);
// f(buffer) for every buffer bound by the list / in b[0..n).
void mk_shim_each_bound_buffer(const mk_dispatch *list, uint32_t n, void (*f)(mk_buffer *));
void mk_shim_each(mk_buffer *const *b, int n, void (*f)(mk_buffer *));
// t->wall_ms since t0_ms (t may be NULL).
void mk_shim_set_wall(mk_timing *t, double t0_ms);

// Errors of every command buffer of one run: each is added (failed or not, with Metal's
// message and its GPU start/end in seconds); finish() fails with all messages, in order,
// or fills t->gpu_ms (first start .. last end) and t->wall_ms.
typedef struct mk_cb_errors {
    int count, failed;
    double gpu_start, gpu_end;      // seconds; gpu_start < 0: none seen
    char msg[1024];
} mk_cb_errors;
void mk_cb_errors_init(mk_cb_errors *e);
void mk_cb_errors_add(mk_cb_errors *e, int failed, const char *message, double gpu_start, double gpu_end);
mk_status mk_cb_errors_finish(const mk_cb_errors *e, const char *op, double t0_ms, mk_timing *t);
// Monotonic host clock in milliseconds.
double mk_shim_now_ms(void);

/* ---------------------------------------------------------------- graphs (mk_shim_graph.c) */

// Bytes of a tensor of `n` dims (esize bytes each); SIZE_MAX for a negative dim or overflow.
size_t mk_shim_tensor_bytes(int n, const int64_t *shape, size_t esize);
// Where a graph's data lives: MPSGraphTensorData reads a whole MTLBuffer from offset 0.
typedef struct mk_graph_io {
    const mk_buffer *buffer;
    size_t offset;                  // where the data starts inside its MTLBuffer
    const void *storage;            // the MTLBuffer's identity
} mk_graph_io;
// Which inputs and outputs go through a scratch buffer: data not at offset 0, and outputs
// overlapping any input (running stats read and written by one graph).
void mk_shim_graph_staging(const mk_graph_io *in, int nin, const mk_graph_io *out, int nout,
                           int *in_scratch, int *out_scratch);
// Before a graph runs: every buffer of this device and as large as its tensor (`*_bytes`),
// at most MK_GRAPH_IO_MAX of each, and which go through scratch (mk_shim_graph_staging).
#define MK_GRAPH_IO_MAX 8
mk_status mk_shim_graph_prepare(const mk_device *d, const mk_graph_io *in, const size_t *in_bytes, int nin,
                                const mk_graph_io *out, const size_t *out_bytes, int nout,
                                int *in_scratch, int *out_scratch, const char *op);
// After it: the staged outputs' results copied from their scratch memory.
void mk_shim_graph_copy_back(void *const *dst, const void *const *scratch, const size_t *bytes,
                             const int *staged, int n);
// A graph cache key naming every byte of the op's argument struct: "op:dtype:hex..."
// (a key built by hand can forget a field and hand back another shape's graph). MK_OK, or
// an error when `len` is too short (never a cut key).
mk_status mk_shim_graph_key(char *key, size_t len, const char *op, int dtype, const void *args, size_t nbytes);
#define MK_GRAPH_KEY_MAX 512
// v[i] = i for i < n (int32 index vectors graph constants are made of).
void mk_shim_iota(int32_t *v, int n);

#ifdef __cplusplus
}
#endif
#endif
