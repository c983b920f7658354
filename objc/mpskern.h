// mpskern.h: the one C ABI behind the Python package.
//
//   CPU kernels      objc/cpu/*.c        mk_cpu_*           (every platform)
//   device routing   objc/mk_device.c    mk_device_* etc.   (to the provider owning the handle)
//   Metal device     objc/mk_metal*.m    its provider       (macOS only; elsewhere there is none,
//                                                            so Metal devices count 0 and say why)
//   simulator device objc/sim/*.cc       its provider       (every platform; kernels need a C++ compiler)
//   MPS primitives   objc/mk_mps*.m      mk_mps_*           (macOS; objc/stub/mk_mps_stub.c elsewhere)
//
// Conventions: opaque handles with _create/_free pairs, every call returns an mk_status,
// and on failure a thread-local message is left for mk_last_error(). No exceptions and no
// Python cross this boundary. Argument structs live in metal/mk_args.h, shared with the
// kernels so the two sides cannot disagree on a layout.
#ifndef MPSKERN_H
#define MPSKERN_H

#include <stddef.h>
#include <stdint.h>
#include "mk_args.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MK_ABI_VERSION 1

typedef enum mk_status {
    MK_OK = 0,
    MK_ERR_INVALID = 1,       // bad argument (the Python layer should have caught it)
    MK_ERR_UNAVAILABLE = 2,   // backend / device / feature not on this machine
    MK_ERR_COMPILE = 3,       // kernel compilation failed; message carries the compiler log
    MK_ERR_RUNTIME = 4,       // command buffer / dispatch failed
    MK_ERR_NOMEM = 5,
    MK_ERR_CHECK = 6,         // simulator checking mode found a race / divergence / OOB
    MK_ERR_UNSUPPORTED = 7,   // valid request this implementation does not do (e.g. an MPS quirk)
    MK_ERR_INTERRUPTED = 8,   // a run stopped by SIGINT (mk_run_control.interruptible)
} mk_status;

// Thread-local message of the last failing call on this thread ("" if none).
const char *mk_last_error(void);
// Used by implementations: printf-style, returns `st`.
mk_status mk_set_error(mk_status st, const char *fmt, ...);

/* ---------------------------------------------------------------- CPU kernels */
// Pointers are host memory, C-contiguous, dtype MK_F32 or MK_F16 (`dtype`) unless noted;
// small per-channel vectors (bias, weights, running stats) are always float32.
// Threads: MPSKERN_NUM_THREADS or mk_cpu_set_num_threads (0 = all cores).
void mk_cpu_set_num_threads(int n);
int mk_cpu_get_num_threads(void);

// One entry point per kernel family of metal/mk_args.h's MK_KERNELS list:
//   mk_status mk_cpu_<name>(const mk_<name>_args *a, int dtype, <its arrays>);
// e.g. mk_cpu_gemm(a, dtype, const void *A, const void *B, const void *C, void *out). Arrays
// the list types `void` are in `dtype`; NULL for an absent optional one (gemm's C, conv2d's
// bias, ...); what each array holds: beside the family's struct in mk_args.h.
#define MK_CPU_IN(T, name) , const T *name
#define MK_CPU_OUT(T, name) , T *name
#define MK_CPU_ENTRY(name, mps, arrays) \
    mk_status mk_cpu_##name(const mk_##name##_args *a, int dtype arrays);
MK_KERNELS(MK_CPU_ENTRY, MK_CPU_IN, MK_CPU_OUT)

/* ---------------------------------------------------------------- GPU devices */
typedef enum mk_device_kind { MK_DEVICE_METAL = 1, MK_DEVICE_SIM = 2 } mk_device_kind;

typedef struct mk_device mk_device;
typedef struct mk_buffer mk_buffer;
typedef struct mk_library mk_library;
typedef struct mk_pipeline mk_pipeline;

typedef struct mk_device_info {
    char name[128];              // "Apple M2 Pro", "mpskern simulator (apple8)"
    char architecture[64];       // "applegpu_g14s" where the OS says, else ""
    int family;                  // 7..10 for Apple7..Apple10, 0 if unknown
    int is_simulator;
    int simd_width;              // 32
    uint32_t max_threads_per_threadgroup;
    uint32_t max_threadgroup_memory;      // bytes
    uint64_t recommended_working_set;     // bytes (0 if unknown)
    int unified_memory;
    uint32_t page_size;                   // for zero-copy wrapping
} mk_device_info;

// Number of devices of a kind (0 where unavailable; then `why` says why).
int mk_device_count(mk_device_kind kind, char *why, size_t why_len);
mk_status mk_device_create(mk_device_kind kind, int index, mk_device **out);
void mk_device_free(mk_device *d);
mk_status mk_device_get_info(mk_device *d, mk_device_info *out);

/* buffers: host memory seen by the device. Metal wraps page-aligned memory without a copy
   (newBufferWithBytesNoCopy on the enclosing pages) and copies otherwise; the simulator
   uses guarded memory (mk_guarded_alloc) directly and runs on a guarded copy of any other
   (copied back after the run when MK_BUFFER_WRITE), so a kernel's stray access faults. */
#define MK_BUFFER_READ 1          // device reads it
#define MK_BUFFER_WRITE 2         // device writes it: mk_buffer_sync copies back if not zero-copy
mk_status mk_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out);
mk_status mk_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out);   // device scratch
int mk_buffer_is_zero_copy(const mk_buffer *b);
mk_status mk_buffer_sync(mk_buffer *b);   // make device writes visible in the host memory
void mk_buffer_free(mk_buffer *b);
/* host memory between inaccessible guard regions (1 GiB each side where the address space
   allows): page-aligned, a whole number of pages (zero-copy on Metal and the simulator).
   mpskern.empty's arrays. */
mk_status mk_guarded_alloc(size_t nbytes, void **out);
void mk_guarded_free(void *p);

/* libraries and pipelines.
   Metal: mk_library_create compiles MSL source at run time (newLibraryWithSource:options:)
   with "NAME=VALUE" preprocessor macros (NULL-terminated list); the pipeline cache is keyed
   by (kernel, macros) in the Python layer.
   Simulator: the source-to-C++ front-end and host compiler run in Python
   (mpskern/sim/), which hands the built shared object to mk_library_load. */
mk_status mk_library_create(mk_device *d, const char *source, const char *const *macros,
                            mk_library **out);
mk_status mk_library_load(mk_device *d, const char *compiled_path, mk_library **out);
void mk_library_free(mk_library *l);
mk_status mk_pipeline_create(mk_device *d, mk_library *l, const char *kernel_name,
                             mk_pipeline **out);
// maxTotalThreadsPerThreadgroup and threadExecutionWidth of the pipeline
mk_status mk_pipeline_limits(mk_pipeline *p, uint32_t *max_threads, uint32_t *exec_width);
void mk_pipeline_free(mk_pipeline *p);

/* dispatch: a list of dispatches encoded in one command buffer, run in order. */
#define MK_MAX_BINDINGS 31          // Metal's buffer argument table: [[buffer(0)]] .. [[buffer(30)]]
typedef struct mk_binding {
    mk_buffer *buffer;           // a buffer at [[buffer(i)]], or
    uint64_t offset;             // (byte offset into it)
    const void *bytes;           // small constant data (setBytes) when buffer == NULL
    uint32_t nbytes;
} mk_binding;

#define MK_GRID_THREADGROUPS 0    // grid counts threadgroups (dispatchThreadgroups)
#define MK_GRID_THREADS 1         // grid counts threads (dispatchThreads, partial groups)
typedef struct mk_dispatch {
    mk_pipeline *pipeline;
    uint32_t grid[3];
    uint32_t threadgroup[3];
    int grid_units;                           // MK_GRID_THREADGROUPS / MK_GRID_THREADS
    uint32_t threadgroup_memory[4];           // bytes for [[threadgroup(i)]] parameters
    uint32_t nbindings;
    mk_binding bindings[MK_MAX_BINDINGS];     // bindings[i] -> [[buffer(i)]]
} mk_dispatch;

typedef struct mk_timing {
    double gpu_ms;     // GPUEndTime - GPUStartTime (simulator: CPU time of the run)
    double wall_ms;    // commit to completion as seen by the host
} mk_timing;

mk_status mk_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *timing);

/* a run that can be stopped (the simulator; Metal runs ignore `interruptible`, and refuse
   a time limit: there the GPU's own watchdog ends a runaway command buffer) */
typedef struct mk_run_control {
    double time_limit_s;     // > 0: stop the run after this long (MK_ERR_RUNTIME, as Metal's
                             // command-buffer watchdog); 0: the device's (mk_sim_options)
    int interruptible;       // SIGINT stops the run (MK_ERR_INTERRUPTED); the process's own
                             // SIGINT handler still runs (Python's raises KeyboardInterrupt)
} mk_run_control;
mk_status mk_run_ex(mk_device *d, const mk_dispatch *list, uint32_t n, const mk_run_control *c,
                    mk_timing *timing);

/* simulator options (ignored by Metal devices) */
#define MK_ORDER_FORWARD 0
#define MK_ORDER_REVERSE 1
#define MK_ORDER_RANDOM 2
typedef struct mk_sim_options {
    int check;          // races, barrier divergence, out-of-bounds, uninitialised reads
    int order;          // fiber order per round
    uint64_t seed;      // for MK_ORDER_RANDOM
    int workers;        // OS threads running threadgroups (0 = all cores)
    int family;         // 7..10: the family (and limits) the simulated device claims
    uint32_t max_threadgroup_memory;      // 0 = the family's (32 KiB)
    uint32_t max_threads_per_threadgroup; // 0 = the family's (1024)
    double time_limit_s;  // > 0: every run stops after this long (mk_run_control overrides)
    uint32_t pipeline_max_threads;        // 0 = none; else every pipeline allows at most this many
                                          // threads per threadgroup (as register pressure lowers a
                                          // Metal pipeline's maxTotalThreadsPerThreadgroup)
} mk_sim_options;
mk_status mk_sim_set_options(mk_device *d, const mk_sim_options *o);

/* simulator profiling mode (objc/sim/profile.cc, docs/profiling.md): from begin to end,
   every dispatch of a library built for profiling is counted (memory instructions,
   coalescing, bank conflicts, basic blocks, barriers); end returns the reports as one JSON
   array (needed: its size with the NUL; call again with cap >= needed; the reports are
   kept until a call with room takes them) and turns profiling off. */
typedef struct mk_sim_profile_options {
    uint32_t max_groups;      // threadgroups sampled per dispatch (0 = every one)
    int32_t sampled_only;     // run only the sampled threadgroups (outputs are then partial)
    uint32_t banks;           // threadgroup memory bank model: banks x bank_bytes
    uint32_t bank_bytes;
    uint32_t line_bytes;      // device memory: cache line for coalescing
} mk_sim_profile_options;
mk_status mk_sim_profile_begin(mk_device *d, const mk_sim_profile_options *o);
mk_status mk_sim_profile_end(mk_device *d, char *json, size_t cap, size_t *needed);

/* ---------------------------------------------------------------- MPS primitives
   Apple's kernels on a Metal device (MPSMatrixMultiplication, MPSGraph). Elsewhere they
   return MK_ERR_UNAVAILABLE. Buffers come from mk_buffer_wrap on the same device. */
// One per kernel family (MK_KERNELS), its arrays as buffers in the same order:
//   mk_status mk_mps_<name>(mk_device *d, const mk_<name>_args *a, int dtype, <mk_buffer *
//                           per array>, mk_timing *t);
// NULL buffers as for mk_cpu_<name>.
#define MK_MPS_BUFFER(T, name) , mk_buffer *name
#define MK_MPS_ENTRY(name, mps, arrays) \
    mk_status mk_mps_##name(mk_device *d, const mk_##name##_args *a, int dtype arrays, mk_timing *t);
MK_KERNELS(MK_MPS_ENTRY, MK_MPS_BUFFER, MK_MPS_BUFFER)

#ifdef __cplusplus
}
#endif
#endif
