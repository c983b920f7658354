// sched.cc: how a dispatch runs. Threadgroups are spread over a pool of OS threads
// (workers); inside a worker the lanes of one threadgroup are fibers that run until they
// block (threadgroup barrier, SIMD collective, simdgroup barrier) or finish. After every
// lane had its turn (one "round", in forward / reverse / seeded random order):
//   1. a SIMD-group with lanes waiting at a collective resolves one call site: the lanes
//      waiting there are the participants (exited or diverged lanes are inactive), which
//      gives MSL's active-lane semantics;
//   2. otherwise, when every live lane waits at a barrier, the barrier opens (checking
//      mode reports lanes that exited early or wait at different barriers).
// Kernels without barriers or collectives run their lanes as a plain loop in one fiber.
#include <signal.h>
#include <ucontext.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "sim.h"

namespace mksim {

static thread_local Worker *tl_worker;

void Job::set_error(mk_status st, const std::string &msg) {
    std::lock_guard<std::mutex> g(err_mu);
    if (err_status == MK_OK) {
        err_status = st;
        err = msg;
    }
    failed.store(true);
}

Worker::~Worker() {
    for (auto &l : lanes) fiber_free_stack(&l.fiber);
    fiber_free_stack(&sched);
    free(arena);
}

/* ------------------------------------------------------------------ thread pool */
Pool::~Pool() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto &t : threads_) t.join();
}

void Pool::loop(int i) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int)> *fn;
        {
            std::unique_lock<std::mutex> g(mu_);
            cv_.wait(g, [&] { return stop_ || gen_ != seen; });
            if (stop_) return;
            seen = gen_;
            if (i >= n_) continue;
            fn = fn_;
        }
        (*fn)(i);
        {
            std::lock_guard<std::mutex> g(mu_);
            if (--pending_ == 0) done_cv_.notify_all();
        }
    }
}

void Pool::run(int n, const std::function<void(int)> &fn) {
    if (pid_ != getpid()) {
        // A forked child inherits the thread objects but not the threads: forget them
        // (never joined or destroyed) and start new ones.
        new std::vector<std::thread>(std::move(threads_));
        threads_.clear();
        new (&mu_) std::mutex();
        new (&cv_) std::condition_variable();
        new (&done_cv_) std::condition_variable();
        pending_ = 0;
        pid_ = getpid();
    }
    if (n > 1) {
        std::unique_lock<std::mutex> g(mu_);
        while ((int)threads_.size() < n - 1) {
            int i = (int)threads_.size() + 1;
            threads_.emplace_back([this, i] { loop(i); });
        }
        fn_ = &fn;
        n_ = n;
        pending_ = n - 1;
        gen_++;
        cv_.notify_all();
    }
    fn(0);
    if (n > 1) {
        std::unique_lock<std::mutex> g(mu_);
        done_cv_.wait(g, [&] { return pending_ == 0; });
    }
}

/* ------------------------------------------------------------------ runtime table */
[[noreturn]] static void abandon_lane(Worker *w) {
    // Back to the scheduler for good: the fiber's stack is simply reused later.
    fiber_abandon(&w->lanes[w->plain ? 0 : w->cur].fiber, &w->sched);
    abort();
}

static void block(Worker *w, int state) {
    Lane &l = w->lanes[w->cur];
    l.state = state;
    fiber_switch(&l.fiber, &w->sched);
    if (w->job->failed.load(std::memory_order_relaxed)) abandon_lane(w);
}

static void plain_sync_misuse(Worker *w, const char *what, const char *file, int line) {
    w->job->set_error(MK_ERR_RUNTIME,
                      std::string("simulator: kernel '") + w->job->k->name + "' reached " + what +
                          " at " + (file ? file : "?") + ":" + std::to_string(line) +
                          " but its library was built as barrier-free (front-end bug)");
    abandon_lane(w);
}

// The current lane waits at a barrier (`what`, for the barrier-free build's error) of `file`:`line`.
static void barrier_at(const char *what, int state, const char *file, int line) {
    Worker *w = tl_worker;
    RtGuard guard(w);
    if (w->plain) plain_sync_misuse(w, what, file, line);
    Lane &l = w->lanes[w->cur];
    l.bar_file = file;
    l.bar_line = line;
    block(w, state);
}

static void rt_barrier(unsigned, const char *file, int line) {
    barrier_at("threadgroup_barrier", L_BARRIER, file, line);
}

static void rt_simd_barrier(unsigned, const char *file, int line) {
    barrier_at("simdgroup_barrier", L_SIMD_BARRIER, file, line);
}

static const mk_sim_xchg *rt_simd_exchange(const void *value, unsigned size, const void *site) {
    Worker *w = tl_worker;
    RtGuard guard(w);
    if (w->plain) plain_sync_misuse(w, "a SIMD collective", nullptr, 0);
    Lane &l = w->lanes[w->cur];
    if (size > MK_SIM_XCHG_BYTES) size = MK_SIM_XCHG_BYTES;
    unsigned sg = l.b.simdgroup_index_in_threadgroup, lane = l.b.thread_index_in_simdgroup;
    memcpy(&w->xin[((size_t)sg * MK_SIM_SIMD_WIDTH + lane) * MK_SIM_XCHG_BYTES], value, size);
    l.site = site;
    l.xsize = size;
    block(w, L_SIMD);
    return &l.xres;
}

static void *rt_tg_alloc(size_t size, size_t align, const char *name, const char *file, int line) {
    Worker *w = tl_worker;
    RtGuard guard(w);
    Job *j = w->job;
    Lane &l = w->lanes[w->cur];
    if (align < 16) align = 16;
    size_t red = j->checker ? TG_RED_ZONE : 0;   // checking: a gap catches overruns
    size_t off = (l.tg_cursor + red + align - 1) / align * align;
    size_t end = off + size;
    size_t used = (l.tg_used + align - 1) / align * align + size;
    if (used > j->opt.max_tg_memory || end + red > w->arena_cap) {
        j->set_error(MK_ERR_INVALID,
                     std::string("kernel '") + j->k->name + "' needs at least " +
                         std::to_string(used) + " bytes of threadgroup memory ('" + name + "' at " + file +
                         ":" + std::to_string(line) + "); the simulated apple" +
                         std::to_string(j->opt.family) + " device allows " +
                         std::to_string(j->opt.max_tg_memory));
        abandon_lane(w);
    }
    if (end > w->poisoned) {   // NaN in every float / half, -1 in every integer
        memset(w->arena + w->poisoned, 0xFF, end - w->poisoned);
        w->poisoned = end;
    }
    if (j->checker) checker_tg_var(j->checker, off, size, name, file, line);
    l.tg_cursor = end;
    l.tg_used = used;
    return w->arena + off;
}

static const mk_sim_lane *rt_lane() {
    Worker *w = tl_worker;
    return &w->lanes[w->cur].b;
}

static void rt_check_access(const void *addr, unsigned size, int is_write, const void *pc) {
    Worker *w = tl_worker;
    if (w && w->job && w->job->checker) {
        RtGuard guard(w);
        checker_access(w, addr, size, is_write, pc);
    }
}

static void rt_profile_access(const void *addr, uint32_t site, uint32_t key, uint32_t info) {
    Worker *w = tl_worker;
    if (w && w->job && w->job->profiler) profiler_access(w, addr, site, key, info);
}

static void rt_profile_block(uint32_t block) {
    Worker *w = tl_worker;
    if (w && w->job && w->job->profiler) profiler_block(w, block);
}

[[noreturn]] static void rt_fail(const char *msg) {
    Worker *w = tl_worker;
    RtGuard guard(w);
    w->job->set_error(MK_ERR_RUNTIME, std::string("kernel '") + w->job->k->name + "': " + msg);
    abandon_lane(w);
}

static const mk_sim_rt RT = {MK_SIM_ABI_VERSION, rt_barrier,   rt_simd_barrier, rt_simd_exchange,
                             rt_tg_alloc,        rt_lane,      rt_check_access, rt_fail,
                             rt_profile_access,  rt_profile_block};

const mk_sim_rt *runtime_table() { return &RT; }

/* ------------------------------------------------------------------ faults in kernels */
// A kernel that dereferences a wild pointer, overflows its fiber stack or divides an
// integer by zero must not kill the Python process: while lanes run, SIGSEGV/SIGBUS/SIGFPE
// on a worker thread abandons the lane (the fault is synchronous, in kernel code, so
// switching to the scheduler fiber from the handler is safe in practice) and fails the
// dispatch with MK_ERR_RUNTIME. Faults anywhere else go to the previous handler (Python's
// faulthandler, or the default action).
static struct sigaction old_segv, old_bus, old_fpe;
static std::once_flag handlers_once;
static thread_local bool tl_altstack;

// ", byte offset 320 of [[buffer(1)]] (64 bytes)" for an address near a bound buffer (in
// its guard regions, guard.cc), else ""
static void near_buffer(const Job *j, const char *addr, char *out, size_t n) {
    out[0] = 0;
    long long best = -1;
    for (int i = 0; i < MK_MAX_BINDINGS; i++) {
        if (!j->bufs[i] || !j->bases[i]) continue;
        const char *lo = (const char *)j->bases[i], *hi = lo + j->bufs[i]->nbytes;
        long long d = addr < lo ? lo - addr : addr >= hi ? addr - hi + 1 : 0;
        if (d > (1ll << 37) || (best >= 0 && d >= best)) continue;
        best = d;
        snprintf(out, n, ", byte offset %lld of [[buffer(%d)]] (%zu bytes)", (long long)(addr - lo),
                 i, j->bufs[i]->nbytes);
    }
}

static const char *access_kind(void *ctx) {
#if defined(__linux__) && defined(__x86_64__)
    return (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) ? "write" : "read";
#else
    (void)ctx;
    return "access";
#endif
}

static void on_fault(int sig, siginfo_t *si, void *ctx) {
    Worker *w = tl_worker;
    if (w && w->job && w->in_lane) {
        Job *j = w->job;
        Lane &l = w->lanes[w->plain ? 0 : w->cur];
        char msg[512];
        const char *base = (const char *)si->si_addr;
        bool overflow = false;
        for (int i = 0; i < w->nlanes && !overflow; i++) {
            const char *st = w->lanes[i].fiber.stack;
            size_t page = (size_t)sysconf(_SC_PAGESIZE);
            overflow = st && base >= st - page && base < st;
        }
        const mk_sim_lane &b = w->lanes[w->cur].b;
        char lane_at[96];    // the faulting lane
        snprintf(lane_at, sizeof lane_at, "thread (%u,%u,%u) of threadgroup (%u,%u,%u)",
                 b.thread_position_in_threadgroup[0], b.thread_position_in_threadgroup[1],
                 b.thread_position_in_threadgroup[2], b.threadgroup_position_in_grid[0],
                 b.threadgroup_position_in_grid[1], b.threadgroup_position_in_grid[2]);
        if (sig == SIGFPE)
            snprintf(msg, sizeof msg, "kernel '%s' divided an integer by zero (or INT_MIN by -1) in %s",
                     j->k->name, lane_at);
        else if (overflow)
            snprintf(msg, sizeof msg, "kernel '%s' overflowed a GPU thread's stack of %zu KiB "
                     "(large per-thread arrays?); set MPSKERN_SIM_STACK_KB to raise it",
                     j->k->name, l.fiber.stack_size / 1024);
        else {
            char where[160];
            near_buffer(j, base, where, sizeof where);
            snprintf(msg, sizeof msg, "kernel '%s' made an invalid memory access (%s, %s) at %p%s in "
                     "%s; run it with check=True to find the line",
                     j->k->name, access_kind(ctx), sig == SIGBUS ? "SIGBUS" : "SIGSEGV", si->si_addr, where,
                     lane_at);
        }
        j->set_error(MK_ERR_RUNTIME, msg);
        w->in_kernel = 0;
        fiber_abandon(&l.fiber, &w->sched, true);   // never resumed
    }
    // not ours: restore the previous handler; returning re-executes the faulting access
    sigaction(sig, sig == SIGBUS ? &old_bus : sig == SIGFPE ? &old_fpe : &old_segv, nullptr);
    (void)ctx;
}

// The watchdog's kick (watchdog.cc): a failed dispatch's lane that is executing kernel code
// (a loop that never reaches a barrier, say) is abandoned here, as a fault would be. At any
// other instant (the runtime, a fiber switch, a thread between jobs) nothing happens: the
// lane stops at its next runtime call, or the watchdog kicks again.
static struct sigaction old_kick;
static std::once_flag kick_once;

static void on_kick(int sig, siginfo_t *si, void *ctx) {
    Worker *w = tl_worker;
    if (w && w->in_kernel && w->job && w->job->failed.load(std::memory_order_relaxed)) {
        w->in_kernel = 0;
        fiber_abandon(&w->lanes[w->plain ? 0 : w->cur].fiber, &w->sched, true);   // never resumed
    }
    if (old_kick.sa_flags & SA_SIGINFO) {
        if (old_kick.sa_sigaction) old_kick.sa_sigaction(sig, si, ctx);
    } else if (old_kick.sa_handler != SIG_DFL && old_kick.sa_handler != SIG_IGN) {
        old_kick.sa_handler(sig);
    }
}

void install_kick_handler() {
    std::call_once(kick_once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_kick;
        // NODEFER: the handler never returns when it abandons a lane, so SIGURG must not
        // stay blocked on this thread afterwards
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGURG, &sa, &old_kick);
    });
}

static void install_fault_handlers() {
    std::call_once(handlers_once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &old_segv);
        sigaction(SIGBUS, &sa, &old_bus);
        sigaction(SIGFPE, &sa, &old_fpe);
    });
    if (!tl_altstack) {   // the handler needs a stack when the fault is a stack overflow
        // A thread that has one keeps it (Python's faulthandler, a sanitizer's runtime: they
        // free their own at thread exit and would free ours instead)
        stack_t ss, old;
        if (sigaltstack(nullptr, &old) == 0 && !(old.ss_flags & SS_DISABLE) && old.ss_size >= 16384) {
            tl_altstack = true;
            return;
        }
        ss.ss_size = 64 * 1024;
        ss.ss_sp = malloc(ss.ss_size);
        ss.ss_flags = 0;
        if (ss.ss_sp && sigaltstack(&ss, nullptr) == 0) tl_altstack = true;
        else free(ss.ss_sp);
    }
}

/* ------------------------------------------------------------------ lanes */
static uint64_t splitmix(uint64_t &s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}


MK_NO_ASAN static void lane_entry(void *arg) {
    Worker *w = (Worker *)arg;
    Job *j = w->job;
    void *tgp[4];
    for (int i = 0; i < 4; i++) tgp[i] = w->arena + j->tg_param_off[i];
    w->in_kernel = 1;
    if (w->plain) {
        // Barrier-free: every lane in turn, on this one fiber (order: w->order).
        for (int k = 0; k < w->nlanes && !j->failed.load(std::memory_order_relaxed); k++) {
            int idx = w->order[k];
            w->cur = idx;
            j->k->glue(j->buffers, tgp, &w->lanes[idx].b);
            w->lanes[idx].state = L_DONE;
        }
        w->in_kernel = 0;
        fiber_switch(&w->lanes[0].fiber, &w->sched);
    } else {
        Lane &l = w->lanes[w->cur];
        j->k->glue(j->buffers, tgp, &l.b);
        l.state = L_DONE;
        w->in_kernel = 0;
        fiber_switch(&l.fiber, &w->sched);
    }
    abort();   // a finished fiber is never resumed
}

static bool ensure_worker(Worker *w, int nlanes, const Job &j) {
    size_t stack_kb = 128;
    if (const char *e = getenv("MPSKERN_SIM_STACK_KB")) stack_kb = std::max(16, atoi(e));
    if (!w->sched.stack && !fiber_alloc_stack(&w->sched, 16 * 1024)) return false;
    int have = (int)w->lanes.size();
    if (have < nlanes) {
        w->lanes.resize(nlanes);
        for (int i = have; i < nlanes; i++)
            if (!fiber_alloc_stack(&w->lanes[i].fiber, stack_kb * 1024)) return false;
    }
    size_t cap = std::max<size_t>(j.opt.max_tg_memory, j.tg_dynamic_end) + (j.opt.check ? 65536 : 256);
    if (w->arena_cap < cap) {
        free(w->arena);
        w->arena = (unsigned char *)aligned_alloc(64, (cap + 63) / 64 * 64);
        if (!w->arena) return false;
        w->arena_cap = cap;
        w->poisoned = 0;
    }
    size_t nsg = (nlanes + MK_SIM_SIMD_WIDTH - 1) / MK_SIM_SIMD_WIDTH;
    size_t xbytes = nsg * MK_SIM_SIMD_WIDTH * MK_SIM_XCHG_BYTES;
    if (w->xin.size() < xbytes) {
        w->xin.resize(xbytes);
        w->xsnap.resize(xbytes);
    }
    if (w->sg_epoch.size() < nsg) w->sg_epoch.resize(nsg);
    return true;
}

// Resolve one waiting call site of one SIMD-group; true if lanes became runnable.
static bool resolve_simd(Worker *w, int nsg) {
    bool any = false;
    for (int sg = 0; sg < nsg; sg++) {
        int lo = sg * MK_SIM_SIMD_WIDTH, hi = std::min(w->nlanes, lo + MK_SIM_SIMD_WIDTH);
        int first = -1;
        for (int i = lo; i < hi; i++)
            if (w->lanes[i].state == L_SIMD || w->lanes[i].state == L_SIMD_BARRIER) {
                first = i;
                break;
            }
        if (first < 0) continue;
        any = true;
        Lane &f = w->lanes[first];
        if (f.state == L_SIMD_BARRIER) {
            for (int i = lo; i < hi; i++)
                if (w->lanes[i].state == L_SIMD_BARRIER) w->lanes[i].state = L_RUN;
            w->sg_epoch[sg]++;
            continue;
        }
        uint32_t mask = 0;
        unsigned char *snap = &w->xsnap[(size_t)lo * MK_SIM_XCHG_BYTES];
        const unsigned char *in = &w->xin[(size_t)lo * MK_SIM_XCHG_BYTES];
        for (int i = first; i < hi; i++) {
            Lane &l = w->lanes[i];
            if (l.state == L_SIMD && l.site == f.site) mask |= 1u << (i - lo);
        }
        for (int i = first; i < hi; i++) {
            Lane &l = w->lanes[i];
            if (!(mask >> (i - lo) & 1)) continue;
            size_t o = (size_t)(i - lo) * MK_SIM_XCHG_BYTES;
            memcpy(snap + o, in + o, l.xsize);
            l.xres.slots = snap;
            l.xres.mask = mask;
            l.xres.lane = (uint32_t)(i - lo);
            l.xres.width = (uint32_t)(hi - lo);
            l.state = L_RUN;
        }
    }
    return any;
}

static std::string site_name(const char *file, int line) {
    return std::string(file ? file : "?") + ":" + std::to_string(line);
}

// Every live lane waits at a barrier (or all lanes are done): open it. false = finished.
static bool resolve_barrier(Worker *w) {
    Job *j = w->job;
    int first = -1, ndone = 0;
    bool same = true;
    for (int i = 0; i < w->nlanes; i++) {
        Lane &l = w->lanes[i];
        if (l.state == L_DONE) {
            ndone++;
            continue;
        }
        if (first < 0) first = i;
        else if (l.bar_line != w->lanes[first].bar_line ||
                 strcmp(l.bar_file, w->lanes[first].bar_file) != 0)
            same = false;
    }
    if (first < 0) return false;
    if (j->opt.check && (ndone || !same)) {
        Lane &f = w->lanes[first];
        std::string msg = "barrier divergence in kernel '" + std::string(j->k->name) + "': ";
        if (!same) {
            int other = -1;
            for (int i = first + 1; i < w->nlanes; i++)
                if (w->lanes[i].state != L_DONE &&
                    (w->lanes[i].bar_line != f.bar_line || strcmp(w->lanes[i].bar_file, f.bar_file)))
                    { other = i; break; }
            msg += "thread " + lane_name(f) + " waits at the barrier at " +
                   site_name(f.bar_file, f.bar_line) + " while thread " +
                   lane_name(w->lanes[other]) + " waits at the barrier at " +
                   site_name(w->lanes[other].bar_file, w->lanes[other].bar_line);
        } else {
            int done = -1;
            for (int i = 0; i < w->nlanes; i++)
                if (w->lanes[i].state == L_DONE) { done = i; break; }
            msg += std::to_string(ndone) + " of " + std::to_string(w->nlanes) +
                   " threads (e.g. thread " + lane_name(w->lanes[done]) +
                   ") returned before the barrier at " + site_name(f.bar_file, f.bar_line) +
                   " that thread " + lane_name(f) + " (and " +
                   std::to_string(w->nlanes - ndone - 1) + " others) wait at";
        }
        j->set_error(MK_ERR_CHECK, msg);
        return false;
    }
    if (j->checker && !checker_barrier(j->checker, w)) return false;   // (an uninitialised read)
    if (j->profiler) profiler_barrier(j->profiler, w);
    for (int i = 0; i < w->nlanes; i++)
        if (w->lanes[i].state == L_BARRIER) w->lanes[i].state = L_RUN;
    w->tg_epoch++;
    return true;
}

static void run_group(Worker *w, uint64_t g) {
    Job *j = w->job;
    uint32_t gp[3] = {(uint32_t)(g % j->groups[0]), (uint32_t)(g / j->groups[0] % j->groups[1]),
                      (uint32_t)(g / ((uint64_t)j->groups[0] * j->groups[1]))};
    uint32_t n[3];
    for (int d = 0; d < 3; d++) {
        n[d] = j->tg[d];
        if (j->partial) n[d] = std::min(j->tg[d], j->threads_per_grid[d] - gp[d] * j->tg[d]);
    }
    int nl = (int)(n[0] * n[1] * n[2]);
    int nsg = (nl + MK_SIM_SIMD_WIDTH - 1) / MK_SIM_SIMD_WIDTH;
    w->nlanes = nl;
    w->group = g;
    w->tg_epoch = 0;
    std::fill(w->sg_epoch.begin(), w->sg_epoch.end(), 0);
    memset(w->arena, 0xFF, std::max(w->poisoned, j->tg_dynamic_end));
    w->poisoned = std::max(w->poisoned, j->tg_dynamic_end);
    for (int i = 0; i < nl; i++) {
        Lane &l = w->lanes[i];
        mk_sim_lane &b = l.b;
        uint32_t p[3] = {(uint32_t)i % n[0], (uint32_t)i / n[0] % n[1], (uint32_t)i / (n[0] * n[1])};
        for (int d = 0; d < 3; d++) {
            b.thread_position_in_threadgroup[d] = p[d];
            b.threadgroup_position_in_grid[d] = gp[d];
            b.thread_position_in_grid[d] = gp[d] * j->tg[d] + p[d];
            b.threads_per_threadgroup[d] = n[d];
            b.dispatch_threads_per_threadgroup[d] = j->tg[d];
            b.threadgroups_per_grid[d] = j->groups[d];
            b.threads_per_grid[d] = j->threads_per_grid[d];
        }
        b.thread_index_in_threadgroup = i;
        b.simdgroup_index_in_threadgroup = i / MK_SIM_SIMD_WIDTH;
        b.thread_index_in_simdgroup = i % MK_SIM_SIMD_WIDTH;
        b.threads_per_simdgroup = std::min(MK_SIM_SIMD_WIDTH, nl - (i / MK_SIM_SIMD_WIDTH) * MK_SIM_SIMD_WIDTH);
        b.simdgroups_per_threadgroup = nsg;
        b.quadgroup_index_in_threadgroup = i / 4;
        b.thread_index_in_quadgroup = i % 4;
        l.state = L_RUN;
        l.tg_cursor = j->tg_dynamic_end;
        l.tg_used = j->tg_dynamic_used;
    }
    if (j->checker) checker_begin_group(j->checker, w);
    if (j->profiler) profiler_begin_group(j->profiler, w);
    std::vector<int> &order = w->order;
    order.resize(nl);
    for (int i = 0; i < nl; i++) order[i] = j->opt.order == MK_ORDER_REVERSE ? nl - 1 - i : i;
    uint64_t rng = j->opt.seed * 0x2545F4914F6CDD1Dull + g;
    auto shuffle = [&] {
        if (j->opt.order == MK_ORDER_RANDOM)
            for (int i = nl - 1; i > 0; i--) std::swap(order[i], order[splitmix(rng) % (i + 1)]);
    };
    if (w->plain) {
        shuffle();
        fiber_init(&w->lanes[0].fiber, lane_entry, w, &w->sched);
        w->in_lane = true;
        fiber_switch(&w->sched, &w->lanes[0].fiber);
        w->in_lane = false;
        if (j->checker && !j->failed.load()) checker_end_group(j->checker, w);
        if (j->profiler && !j->failed.load()) profiler_end_group(j->profiler, w);
        return;
    }
    for (int i = 0; i < nl; i++) fiber_init(&w->lanes[i].fiber, lane_entry, w, &w->sched);
    for (;;) {
        shuffle();
        for (int k = 0; k < nl; k++) {
            int i = order[k];
            if (w->lanes[i].state != L_RUN) continue;
            w->cur = i;
            w->in_lane = true;
            fiber_switch(&w->sched, &w->lanes[i].fiber);
            w->in_lane = false;
            if (j->failed.load(std::memory_order_relaxed)) return;
        }
        if (resolve_simd(w, nsg)) continue;
        if (!resolve_barrier(w)) break;
    }
    if (j->checker && !j->failed.load()) checker_end_group(j->checker, w);
    if (j->profiler && !j->failed.load()) profiler_end_group(j->profiler, w);
}

mk_status run_dispatch(Device *dev, Job &j) {
    int nw = j.opt.workers > 0 ? j.opt.workers : (int)std::thread::hardware_concurrency();
    if (nw < 1) nw = 1;
    if (j.checker || j.profiler) nw = 1;   // shadow memory, counters: not thread-safe; deterministic
    const uint64_t total = j.run_list ? j.nrun : j.ngroups;   // profiling may run a sample
    if ((uint64_t)nw > total) nw = (int)total;
    while ((int)dev->workers.size() < nw) {
        dev->workers.emplace_back(new Worker());
        dev->workers.back()->index = (int)dev->workers.size() - 1;
    }
    int nl = (int)(j.tg[0] * j.tg[1] * j.tg[2]);
    bool plain = !j.lib->mod->needs_fibers;
    std::function<void(int)> fn = [&](int wi) {
        Worker *w = dev->workers[wi].get();
        if (!ensure_worker(w, nl, j)) {
            j.set_error(MK_ERR_NOMEM, "simulator: cannot allocate fiber stacks / threadgroup memory");
            return;
        }
        install_fault_handlers();
        tl_worker = w;
        w->job = &j;
        w->plain = plain;
        w->thread = pthread_self();
        w->busy.store(true);              // the watchdog may kick this thread from now on

        for (;;) {
            if (j.failed.load(std::memory_order_relaxed)) break;
            uint64_t g = j.next.fetch_add(1);
            if (g >= total) break;
            run_group(w, j.run_list ? j.run_list[g] : g);
        }
        w->busy.store(false);
        w->job = nullptr;
        tl_worker = nullptr;
    };
    if (watch(dev, &j)) dev->pool.run(nw, fn);
    watch(dev, nullptr);
    if (j.failed.load()) return mk_set_error(j.err_status, "%s", j.err.c_str());
    return MK_OK;
}

std::string lane_name(const Lane &l) {
    const mk_sim_lane &b = l.b;
    char s[160];
    snprintf(s, sizeof s, "(%u,%u,%u) of threadgroup (%u,%u,%u) [simdgroup %u lane %u]",
             b.thread_position_in_threadgroup[0], b.thread_position_in_threadgroup[1],
             b.thread_position_in_threadgroup[2], b.threadgroup_position_in_grid[0],
             b.threadgroup_position_in_grid[1], b.threadgroup_position_in_grid[2],
             b.simdgroup_index_in_threadgroup, b.thread_index_in_simdgroup);
    return s;
}

}  // namespace mksim
