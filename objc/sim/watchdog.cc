// watchdog.cc: stopping a simulator run that runs too long. A GPU ends a runaway command
// buffer with its watchdog; a simulated kernel is host code in a loop, which nothing
// preempts. So while a run is going on, each device's watchdog thread wakes every
// TICK and
//   - fails the dispatch (MK_ERR_RUNTIME) once the run is past its time limit
//     (mk_run_control.time_limit_s, else the device's mk_sim_options.time_limit_s);
//   - fails it (MK_ERR_INTERRUPTED) after a SIGINT, when the run is interruptible: for
//     the run's length SIGINT goes to a handler here that notes it and then calls the
//     handler it replaced (Python's, so KeyboardInterrupt follows as usual);
//   - once the dispatch has failed (for any reason), signals every worker thread still at
//     work (SIGURG, sched.cc's on_kick), which abandons its lane if it is executing
//     kernel code at that instant (never inside the runtime or a fiber switch: see
//     Worker::in_kernel), and again every tick until the dispatch is over.
// Lanes reaching a barrier, a SIMD collective or their end stop there by themselves.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

namespace mksim {

constexpr auto TICK = std::chrono::milliseconds(10);

/* ------------------------------------------------------------------ SIGINT */
static std::atomic<int> g_sigint{0};
static std::mutex g_int_mu;
static int g_int_users = 0;
static struct sigaction g_prev_int;

static void on_sigint(int sig, siginfo_t *si, void *ctx) {
    g_sigint.store(1);
    if (g_prev_int.sa_flags & SA_SIGINFO) g_prev_int.sa_sigaction(sig, si, ctx);
    else g_prev_int.sa_handler(sig);
}

static bool is_handler(const struct sigaction &a) {
    return (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != nullptr
                                     : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
}

// Only over a handler: SIGINT ignored stays ignored, and with the default action it ends
// the process as before.
static void hook_sigint() {
    std::lock_guard<std::mutex> g(g_int_mu);
    if (g_int_users++ > 0) return;
    g_sigint.store(0);
    struct sigaction cur;
    if (sigaction(SIGINT, nullptr, &cur) != 0 || !is_handler(cur)) return;
    g_prev_int = cur;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigint;
    sa.sa_mask = cur.sa_mask;
    sa.sa_flags = SA_SIGINFO | (cur.sa_flags & (SA_RESTART | SA_ONSTACK));
    sigaction(SIGINT, &sa, nullptr);
}

static void unhook_sigint() {
    std::lock_guard<std::mutex> g(g_int_mu);
    if (--g_int_users > 0) return;
    struct sigaction cur;
    // whoever replaced ours meanwhile keeps their handler
    if (sigaction(SIGINT, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
        cur.sa_sigaction == on_sigint)
        sigaction(SIGINT, &g_prev_int, nullptr);
}

/* ------------------------------------------------------------------ the thread */
static bool overdue(Watchdog *wd) {
    return wd->limit_s > 0 && std::chrono::steady_clock::now() >= wd->deadline;
}

// fail the job if the run must stop now (wd->mu held)
static void judge(Watchdog *wd, Job *j) {
    if (j->failed.load()) return;
    char msg[512];
    if (wd->interruptible && g_sigint.load()) {
        snprintf(msg, sizeof msg, "kernel '%s': interrupted (SIGINT)", j->k->name);
        j->set_error(MK_ERR_INTERRUPTED, msg);
    } else if (overdue(wd)) {
        snprintf(msg, sizeof msg, "kernel '%s' ran past the time limit of %g s and was stopped "
                 "(as Metal's watchdog stops a command buffer); buffers it wrote hold partial "
                 "results. The limit: time_limit= of the call, or set_sim_options(time_limit=...)",
                 j->k->name, wd->limit_s);
        j->set_error(MK_ERR_RUNTIME, msg);
    }
}

static void loop(Watchdog *wd) {
    std::unique_lock<std::mutex> g(wd->mu);
    while (!wd->stop) {
        if (!wd->job) {          // idle until watch() hands over a dispatch
            wd->idle = true;
            wd->cv.wait(g);
            wd->idle = false;
            continue;
        }
        wd->cv.wait_for(g, TICK);
        Job *j = wd->job;
        if (!j || wd->stop) continue;
        judge(wd, j);
        if (j->failed.load())
            for (auto &w : wd->dev->workers)
                if (w->busy.load()) pthread_kill(w->thread, SIGURG);
    }
}

Watchdog::~Watchdog() {
    {
        std::lock_guard<std::mutex> g(mu);
        stop = true;
    }
    cv.notify_all();
    if (thread.joinable()) {
        if (pid == (int)getpid()) thread.join();
        else new std::thread(std::move(thread));   // a forked child's copy: never started here
    }
}

static void ensure_thread(Device *dev) {
    Watchdog *wd = &dev->watchdog;
    if (wd->thread.joinable() && wd->pid == (int)getpid()) return;
    if (wd->thread.joinable()) {
        // a forked child inherits the object, not the thread (nor a usable lock state)
        new std::thread(std::move(wd->thread));
        new (&wd->mu) std::mutex();
        new (&wd->cv) std::condition_variable();
        wd->job = nullptr;
        wd->idle = false;
    }
    wd->dev = dev;
    wd->pid = (int)getpid();
    wd->thread = std::thread(loop, wd);
}

/* ------------------------------------------------------------------ runs */
void run_begin(Device *dev, const RunLimits &lim) {
    install_kick_handler();
    ensure_thread(dev);
    if (lim.interruptible) hook_sigint();
    std::lock_guard<std::mutex> g(dev->watchdog.mu);
    Watchdog *wd = &dev->watchdog;
    wd->limit_s = lim.limit_s;
    wd->deadline = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                       std::chrono::duration<double>(lim.limit_s > 0 ? lim.limit_s : 0));
    wd->interruptible = lim.interruptible;
}

void run_end(Device *dev, const RunLimits &lim) {
    {
        std::lock_guard<std::mutex> g(dev->watchdog.mu);
        dev->watchdog.job = nullptr;
        dev->watchdog.limit_s = 0;
        dev->watchdog.interruptible = false;
    }
    if (lim.interruptible) unhook_sigint();
}

bool watch(Device *dev, Job *job) {
    Watchdog *wd = &dev->watchdog;
    std::lock_guard<std::mutex> g(wd->mu);
    wd->job = job;
    if (!job) return true;
    judge(wd, job);              // a SIGINT or the limit between two dispatches
    if (wd->idle) wd->cv.notify_one();
    return !job->failed.load();
}

}  // namespace mksim
