// sim.h: the simulator runtime's internal types (objc/sim/*.cc).
//   mk_sim.cc     the device behind the C ABI (ops table, buffers, libraries, options)
//   sched.cc      threadgroups on a pool of OS threads; lanes as fibers; the runtime table
//   check.cc      checking mode: shadow memory, races, bounds, uninitialised reads
//   watchdog.cc   stopping a run: time limits, Ctrl-C (SIGINT), lanes stuck in kernel code
//   guard.cc      buffers between inaccessible guard regions (stray accesses fault)
//   profile.cc    profiling mode: counters per dispatch (docs/profiling.md)
//   fiber.cc      stacks and context switches
#ifndef MK_SIM_H
#define MK_SIM_H
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "fiber.h"
#include "include/mk_sim_abi.h"
#include "mk_internal.h"

namespace mksim {

struct Options {
    int check = 0, order = MK_ORDER_FORWARD;
    uint64_t seed = 0;
    int workers = 0;
    int family = 8;
    uint32_t max_tg_memory = 32768, max_threads = 1024;
    double time_limit_s = 0;   // > 0: runs stop after this long
};

// A loaded kernel library: its handle and each pipeline made from it hold a reference;
// the last one dlcloses it (a program compiling many distinct kernels keeps a bounded set
// loaded: mpskern's Context caches a bounded number of libraries).
struct Library {
    void *handle = nullptr;
    const mk_sim_module *mod = nullptr;
    std::string path;
    std::atomic<int> refs{1};
};

struct Pipeline {
    Library *lib;
    const mk_sim_kernel *k;
};

struct Checker;   // check.cc
struct Profiler;  // profile.cc

// What the profiling mode counts with (mk_sim_profile_begin).
struct ProfileSettings {
    bool on = false;
    uint32_t max_groups = 0;          // threadgroups sampled per dispatch (0 = all)
    bool sampled_only = false;        // run only the sampled threadgroups
    uint32_t banks = 32, bank_bytes = 4, line_bytes = 128;   // threadgroup / device models
};

// guard.cc: memory between PROT_NONE guards, and a run's guarded copies of host buffers
struct GuardedMap {
    unsigned char *map = nullptr, *body = nullptr;   // the whole reservation, the usable pages
    size_t len = 0, body_len = 0, guard = 0;
    size_t used = 0;                                  // bytes asked for (the rest: slack)
};
struct Mirror {
    uintptr_t host = 0, host_end = 0;         // host bytes it copies (overlaps merged)
    GuardedMap g;
    unsigned char *base = nullptr;            // where host's first byte lives for the run
};
struct Mirrors {
    std::vector<Mirror> maps;
    std::vector<mk_buffer *> written;         // copied back after the run (MK_BUFFER_WRITE)
};
bool is_guarded(const void *p, size_t n);    // inside one mk_guarded_alloc block
mk_status mirrors_create(const mk_dispatch *list, uint32_t n, Mirrors &out);
unsigned char *mirrors_translate(const Mirrors &ms, const mk_buffer *b);
void mirrors_finish(Mirrors &ms, bool copy_back);
// MK_ERR_RUNTIME naming the kernel if a dispatch wrote into a mirror's page slack
mk_status mirrors_check(const Mirrors &ms, const struct Job &j);

// One dispatch being run: shared by the workers.
struct Job {
    const mk_sim_kernel *k = nullptr;
    const Library *lib = nullptr;
    Options opt;
    void *buffers[MK_MAX_BINDINGS] = {};
    size_t sizes[MK_MAX_BINDINGS] = {};
    bool is_bytes[MK_MAX_BINDINGS] = {};
    mk_buffer *bufs[MK_MAX_BINDINGS] = {};  // the binding's buffer (NULL for bytes)
    uint64_t offsets[MK_MAX_BINDINGS] = {};
    unsigned char *bases[MK_MAX_BINDINGS] = {};   // where the buffer's byte 0 is for the run
    const Mirrors *mirrors = nullptr;
    std::vector<std::unique_ptr<unsigned char[]>> bytes_copies;
    uint32_t tg[3], groups[3], threads_per_grid[3];
    bool partial = false;                 // grid counts threads: edge groups may be partial
    uint32_t tg_param_off[4] = {}, tg_param_size[4] = {};
    size_t tg_dynamic_end = 0;            // static threadgroup variables start here
    size_t tg_dynamic_used = 0;           // [[threadgroup(i)]] bytes (without red zones)
    uint64_t ngroups = 0;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex err_mu;
    mk_status err_status = MK_OK;
    std::string err;
    Checker *checker = nullptr;
    Profiler *profiler = nullptr;
    const uint64_t *run_list = nullptr;   // profiling, sampled only: the groups to run
    uint64_t nrun = 0;                    // groups to run (ngroups without a run list)
    void set_error(mk_status st, const std::string &msg);
};

enum LaneStateKind { L_RUN, L_BARRIER, L_SIMD, L_SIMD_BARRIER, L_DONE };

struct Lane {
    Fiber fiber;
    mk_sim_lane b;
    int state = L_DONE;
    const char *bar_file = nullptr;       // barrier call site
    int bar_line = 0;
    const void *site = nullptr;           // SIMD collective call site
    unsigned xsize = 0;
    size_t tg_cursor = 0;                 // next static threadgroup variable
    size_t tg_used = 0;                   // bytes of threadgroup memory (without red zones)
    mk_sim_xchg xres;
};

// Per OS thread: fibers, threadgroup memory arena, SIMD exchange space.
struct Worker {
    int index = 0;
    std::vector<Lane> lanes;
    Fiber sched;
    unsigned char *arena = nullptr;
    size_t arena_cap = 0, poisoned = 0;
    std::vector<unsigned char> xin, xsnap;    // per SIMD-group: 32 lanes x MK_SIM_XCHG_BYTES
    int cur = 0, nlanes = 0;
    Job *job = nullptr;
    uint32_t tg_epoch = 0;                    // barriers passed in this threadgroup
    std::vector<uint32_t> sg_epoch;           // simdgroup barriers per SIMD-group
    uint64_t group = 0;                       // linear threadgroup index
    bool plain = false;                       // barrier-free kernel: lanes in one fiber
    std::vector<int> order;                   // lane order of the current round
    bool in_lane = false;                     // a lane's fiber is running (fault handler)
    // this thread is executing kernel code right now (not the runtime, not a fiber switch):
    // only then may the watchdog's signal abandon the lane (watchdog.cc)
    volatile sig_atomic_t in_kernel = 0;
    std::atomic<bool> busy{false};            // working on a job, on thread `thread`
    pthread_t thread{};
    ~Worker();
};

// Entered by every runtime function a kernel calls: kernel code is not running meanwhile.
struct RtGuard {
    Worker *w;
    explicit RtGuard(Worker *w_) : w(w_) { w->in_kernel = 0; }
    ~RtGuard() { w->in_kernel = 1; }
};

// The watchdog of a device (watchdog.cc): one thread, idle unless a run is going on, that
// stops a run past its time limit or after a SIGINT and kicks lanes stuck in kernel code.
struct Watchdog {
    std::mutex mu;
    std::condition_variable cv;
    std::thread thread;
    int pid = 0;
    bool stop = false, idle = false;          // idle: waiting for a dispatch, no timeout
    struct Job *job = nullptr;                // the dispatch being run (nullptr: idle)
    double limit_s = 0;                       // its run's time limit (0: none)
    std::chrono::steady_clock::time_point deadline;
    bool interruptible = false;
    struct Device *dev = nullptr;
    ~Watchdog();
};

class Pool {
  public:
    ~Pool();
    // Run fn(i) for i in [0, n): i == 0 on the calling thread, the others on pool threads.
    void run(int n, const std::function<void(int)> &fn);
  private:
    void loop(int i);
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(int)> *fn_ = nullptr;
    int n_ = 0, pending_ = 0;
    uint64_t gen_ = 0;
    bool stop_ = false;
    int pid_ = (int)getpid();
};

// Refcounted: buffers, libraries and pipelines keep their device alive, whatever order
// the caller frees handles in (Python's GC at interpreter exit frees them in any order).
struct Device {
    mk_device handle;
    std::atomic<int> refs{1};
    Options opt;
    std::mutex run_mu;
    Pool pool;
    std::vector<std::unique_ptr<Worker>> workers;
    ProfileSettings prof;
    std::vector<std::string> prof_reports;    // one JSON object per profiled dispatch
    Watchdog watchdog;   // destroyed before the pool and the workers it kicks
};

// watchdog.cc. A run: run_begin (SIGINT hooked when interruptible), per dispatch
// watch(job) ... watch(nullptr), run_end.
struct RunLimits {
    double limit_s = 0;                       // 0: none
    bool interruptible = false;
};
void run_begin(Device *dev, const RunLimits &lim);
void run_end(Device *dev, const RunLimits &lim);
// false (and the job's error set) when the run is to stop before this dispatch
bool watch(Device *dev, Job *job);
void install_kick_handler();

// sched.cc
const mk_sim_rt *runtime_table();
mk_status run_dispatch(Device *dev, Job &job);

// check.cc
Checker *checker_create(Job &job);
void checker_free(Checker *c);
void checker_begin_group(Checker *c, Worker *w);
void checker_end_group(Checker *c, Worker *w);
bool checker_barrier(Checker *c, Worker *w);   // false: a finding (the job's error is set)
void checker_access(Worker *w, const void *addr, unsigned size, int is_write, const void *pc);
// a threadgroup variable at `off` in the arena (registered once per dispatch)
void checker_tg_var(Checker *c, size_t off, size_t size, const char *name, const char *file, int line);
// profile.cc (hooks return at once for threadgroups that are not sampled)
Profiler *profiler_create(Job &job, const ProfileSettings &s);
std::string profiler_report(Profiler *p);        // JSON of the finished dispatch
void profiler_free(Profiler *p);
void profiler_begin_group(Profiler *p, Worker *w);
void profiler_end_group(Profiler *p, Worker *w);
void profiler_barrier(Profiler *p, Worker *w);   // a threadgroup barrier opened
void profiler_access(Worker *w, const void *addr, uint32_t site, uint32_t key, uint32_t info);
void profiler_block(Worker *w, uint32_t block);
// checking mode leaves this many unused bytes around every threadgroup variable
constexpr size_t TG_RED_ZONE = 64;
// "file:line" of a code address in the kernel library (addr2line), or "" if unknown.
std::string describe_pc(const Library *lib, const void *pc);
std::string lane_name(const Lane &l);

}  // namespace mksim
#endif
