// mk_sim_abi.h: the contract between the simulator runtime (objc/sim/*.cc, inside
// mpskern._native) and a kernel library it loads (a shared object the front-end in
// mpskern/sim/ generates from .metal source). Plain C so both sides agree on layout.
//
// The library exports one function, mk_sim_module_init, which receives the runtime's
// function table (so the library never depends on symbols exported by the Python
// extension) and returns the list of kernels it contains.
#ifndef MK_SIM_ABI_H
#define MK_SIM_ABI_H
#include <stddef.h>
#include <stdint.h>

#define MK_SIM_ABI_VERSION 4
#define MK_SIM_SIMD_WIDTH 32
#define MK_SIM_XCHG_BYTES 64      // largest value a SIMD collective exchanges per lane

#ifdef __cplusplus
extern "C" {
#endif

// Built-in values of one GPU thread ([[thread_position_in_grid]] etc.), by the runtime.
typedef struct mk_sim_lane {
    uint32_t thread_position_in_grid[3];
    uint32_t threadgroup_position_in_grid[3];
    uint32_t thread_position_in_threadgroup[3];
    uint32_t threads_per_threadgroup[3];          // actual size (edge groups may be partial)
    uint32_t dispatch_threads_per_threadgroup[3]; // requested size
    uint32_t threadgroups_per_grid[3];
    uint32_t threads_per_grid[3];
    uint32_t thread_index_in_threadgroup;
    uint32_t simdgroup_index_in_threadgroup;
    uint32_t thread_index_in_simdgroup;
    uint32_t threads_per_simdgroup;
    uint32_t simdgroups_per_threadgroup;
    uint32_t quadgroup_index_in_threadgroup;
    uint32_t thread_index_in_quadgroup;
} mk_sim_lane;

// What a SIMD collective sees once it resolves: the values of the participating lanes.
typedef struct mk_sim_xchg {
    const unsigned char *slots;   // lane i's value at slots + i * MK_SIM_XCHG_BYTES
    uint32_t mask;                // participating (active) lanes
    uint32_t lane;                // the calling lane's index in its SIMD-group
    uint32_t width;               // lanes in this SIMD-group (the last one may be partial)
} mk_sim_xchg;

#if defined(__OPENCL_CPP_VERSION__)
// The strict check (mpskern/sim/strict.py) type-checks a library as C++ for OpenCL and
// never runs it: the runtime's entry points are plain declarations there (OpenCL has no
// function pointers) and call sites name string literals in the constant address space.
typedef struct mk_sim_rt {
    int abi;
    void barrier(unsigned flags, const __constant char *file, int line) const;
    void simd_barrier(unsigned flags, const __constant char *file, int line) const;
    const struct mk_sim_xchg *simd_exchange(const void *value, unsigned size, const void *site) const;
    void *tg_alloc(size_t size, size_t align, const __constant char *name, const __constant char *file,
                   int line) const;
    const struct mk_sim_lane *lane(void) const;
} mk_sim_rt;
#else
typedef struct mk_sim_rt {
    int abi;
    // threadgroup_barrier / simdgroup_barrier; `file`/`line` name the call site.
    void (*barrier)(unsigned flags, const char *file, int line);
    void (*simd_barrier)(unsigned flags, const char *file, int line);
    // SIMD collective: publish `size` bytes, wait for the active lanes at the same `site`.
    const mk_sim_xchg *(*simd_exchange)(const void *value, unsigned size, const void *site);
    // threadgroup variables declared in a kernel body (same order in every lane).
    void *(*tg_alloc)(size_t size, size_t align, const char *name, const char *file, int line);
    const mk_sim_lane *(*lane)(void);
    // checking mode: every instrumented load/store (pc: return address in the library)
    void (*check_access)(const void *addr, unsigned size, int is_write, const void *pc);
    // abort the dispatch with a message (never returns)
    void (*fail)(const char *msg);
    // profiling mode (libraries built with profile=True; objc/sim/profile.cc): one memory
    // access at IR access site `site` (merge key `key`), info = bytes | write << 8 |
    // may-merge << 9; and one execution of basic block `block` by the calling lane
    void (*profile_access)(const void *addr, uint32_t site, uint32_t key, uint32_t info);
    void (*profile_block)(uint32_t block);
} mk_sim_rt;
#endif

#if !defined(__OPENCL_CPP_VERSION__)
// One [[kernel]] entry point: the generated launch glue binds buffers and built-ins.
typedef void (*mk_sim_glue)(void *const *buffers, void *const *tg_params,
                            const mk_sim_lane *lane);
// A `constant T& x [[buffer(i)]]` parameter: a binding shorter than sizeof(T) is refused.
typedef struct mk_sim_bytes_param {
    uint32_t index;               // i of [[buffer(i)]]
    uint32_t size;                // sizeof(T)
} mk_sim_bytes_param;

typedef struct mk_sim_kernel {
    const char *name;             // host name
    mk_sim_glue glue;
    const char *file;             // .metal file and line of the kernel's declaration
    int line;
    uint32_t buffer_mask;         // [[buffer(i)]] parameters it declares
    uint32_t bytes_mask;          // of those, `constant T&` (bound by value / setBytes)
    uint32_t tg_param_mask;       // [[threadgroup(i)]] parameters
    uint32_t max_threads;         // [[max_total_threads_per_threadgroup(N)]], 0 if none
    uint32_t nbytes_params;
    const mk_sim_bytes_param *bytes_params;
} mk_sim_kernel;

typedef struct mk_sim_module {
    int abi;
    int nkernels;
    const mk_sim_kernel *kernels;
    int needs_fibers;             // barriers / SIMD collectives present: run lanes as fibers
    int checked;                  // compiled with access instrumentation (checking mode)
    int profiled;                 // built for the profiling mode (mpskern/sim/profile_build.py)
    uint32_t nsites, nblocks;     // profiling: access sites and basic blocks (ids below these)
} mk_sim_module;

typedef const mk_sim_module *(*mk_sim_module_init_fn)(const mk_sim_rt *rt);
#define MK_SIM_MODULE_INIT "mk_sim_module_init"
#endif

#ifdef __cplusplus
}
#endif
#endif
