// mk_cpu_threads.c: a small portable pthread pool behind mk_parallel_for (no OpenMP:
// Apple's clang has none). Workers are created lazily; the calling thread takes part.
// One job at a time: a caller that finds the pool busy (nested call, or another
// application thread) runs its range inline, which is always correct.
// Work is handed out dynamically: a job is cut into chunks (several per thread) that the
// caller and the workers claim one at a time from one atomic word, and the caller waits
// for the CHUNKS to be done, not for every worker to turn up. A worker that is late (a
// descheduled vCPU, a slow wake-up, an efficiency core on a Mac) takes fewer chunks or
// none; before, every op waited for the last worker to arrive and count itself off: a
// 200 K-float bias fill took ~2 ms a call at 16 threads on a 16-core VM: a worker's wake-up.
// Waiting spins briefly before it blocks, on both sides (workers for the next job, the
// caller for the chunks): waking a thread blocked on a condition variable took 0.15-0.8 ms
// on our virtualised 2-core machine (a halted vCPU), more than a whole 512^2 matmul's
// share. The spin is short (MK_SPIN_NS), so idle workers stop using the CPU within ~1 ms:
// far less than OpenBLAS (~0.1 s) or OpenMP runtimes spin after their calls. Nobody spins
// when a job has more threads than the machine has cores: a spinning thread would hold a
// core that a thread with work needs (4 threads on 2 cores: 2.2 ms instead of 0.34 ms for
// a 4 x 80 us job; sched_yield in the spin loop made the 2-thread handoff slow again).
// The hand-off takes no lock unless someone sleeps: a job is published by atomic stores
// of its claim word and of (generation, participants), and workers that spin see it and
// start. With a mutex taken by every worker at every job start and end, 16 workers queued
// on it and some slept in the kernel: tens of microseconds of skew per job on a 16-core VM.
#include "mk_cpu.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MK_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define MK_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define MK_CPU_RELAX() ((void)0)
#endif

#define MK_SPIN_NS 1000000L          // spin up to 1 ms before blocking
#define MK_CHUNKS_PER_THREAD 8       // chunks a job is cut into, per thread taking part

#define MK_MAX_THREADS 256
#define JOB(gen, parts) ((gen) << 16 | (unsigned long)(parts))
#define JOB_GEN(j) ((j) >> 16)
#define JOB_PARTS(j) ((int)((j) & 0xffff))
// The claim word: (generation, chunks, next chunk), 24 + 20 + 20 bits. A chunk is claimed
// by one compare-and-swap from next to next + 1 while next < chunks; the job's fields are
// read only after a claim succeeds, so a worker late for one job can never run its chunks
// with the next job's fields (a job ends only when all its claimed chunks are done).
#define MK_MAX_CHUNKS ((1L << 20) - 1)
#define CLAIM(gen, total, next) \
    (((unsigned long long)(gen) & 0xffffff) << 40 | (unsigned long long)(total) << 20 | (next))
#define CLAIM_TOTAL(c) ((long)((c) >> 20 & 0xfffff))
#define CLAIM_NEXT(c) ((long)((c) & 0xfffff))

static pthread_mutex_t g_busy = PTHREAD_MUTEX_INITIALIZER;   // held by the job's caller
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;     // for sleeping and waking only
static pthread_cond_t g_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_done = PTHREAD_COND_INITIALIZER;
static int g_nworkers;                 // workers started (they never exit); the caller's
static unsigned long g_born[MK_MAX_THREADS];   // generation current when worker i was created
static int g_ncores = 1;               // online cores (read once)
// The job: its fields are written by the caller (holding g_busy) before g_claim and g_job
// are stored, and read by a thread only after it has claimed one of its chunks. They stay
// valid until every chunk is done (g_chunks_done), which the caller waits for.
static atomic_ulong g_job;             // JOB(generation, participants): workers 0..parts-1 wake
static atomic_ullong g_claim;          // CLAIM(generation, chunks, next chunk)
static mk_range_fn g_fn;
static void *g_ctx;
static long g_n, g_chunk;
static atomic_int g_spin;              // the current job's threads fit the cores: spin, then block
static atomic_long g_chunks_done;      // chunks of the current job finished
static atomic_int g_sleepers;          // workers blocked (or about to block) on g_work
static atomic_int g_caller_sleeps;     // the caller is blocked (or about to block) on g_done
static atomic_int g_gang;              // the current job is a gang: one chunk per thread

static atomic_int g_threads;           // configured count, 0 = not yet read

static int n_cores(void) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : (c > MK_MAX_THREADS ? MK_MAX_THREADS : (int)c);
}

static int clamp_threads(int n) {
    if (n <= 0) return n_cores();
    return n > MK_MAX_THREADS ? MK_MAX_THREADS : n;
}

int mk_cpu_threads(void) {
    int t = atomic_load(&g_threads);
    if (t == 0) {
        const char *e = getenv("MPSKERN_NUM_THREADS");
        t = clamp_threads(e ? atoi(e) : 0);
        int expected = 0;
        if (!atomic_compare_exchange_strong(&g_threads, &expected, t)) t = expected;
    }
    return t;
}

void mk_cpu_set_num_threads(int n) { atomic_store(&g_threads, clamp_threads(n)); }

int mk_cpu_get_num_threads(void) { return mk_cpu_threads(); }

// claims and runs chunks of the current job until none is left (the caller and workers)
static void run_chunks(void) {
    unsigned long long c = atomic_load_explicit(&g_claim, memory_order_acquire);
    for (;;) {
        long next = CLAIM_NEXT(c), total = CLAIM_TOTAL(c);
        if (next >= total) return;
        if (!atomic_compare_exchange_weak_explicit(&g_claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;                  // c reloaded: someone else claimed, or a new job
        long b = next * g_chunk, e = b + g_chunk < g_n ? b + g_chunk : g_n;
        int gang = atomic_load_explicit(&g_gang, memory_order_relaxed);
        g_fn(g_ctx, b, e);
        if (atomic_fetch_add(&g_chunks_done, 1) + 1 == total && atomic_load(&g_caller_sleeps)) {
            pthread_mutex_lock(&g_mu);
            pthread_cond_signal(&g_done);
            pthread_mutex_unlock(&g_mu);
        }
        if (gang) return;              // a gang's chunks wait for each other: never two in a row
        c = atomic_load_explicit(&g_claim, memory_order_acquire);
    }
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

// spins until the job's generation is no longer `gen` (returns 1) or MK_SPIN_NS has
// passed (returns 0)
static int spin_for_job(unsigned long gen) {
    long end = now_ns() + MK_SPIN_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (JOB_GEN(atomic_load_explicit(&g_job, memory_order_acquire)) != gen) return 1;
            MK_CPU_RELAX();
        }
        if (now_ns() > end) return 0;
    }
}

static int spin_until_done(long total) {
    long end = now_ns() + MK_SPIN_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&g_chunks_done, memory_order_acquire) == total) return 1;
            MK_CPU_RELAX();
        }
        if (now_ns() > end) return 0;
    }
}

// Sleeping and waking: the sleeper counts itself (g_sleepers, g_caller_sleeps) before it
// checks the condition under g_mu; the waker changes the condition before it reads the
// count (all sequentially consistent). So either the waker sees the sleeper and signals
// under g_mu, or the sleeper sees the change and does not sleep: no lost wake-up.
static void *worker_main(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned long seen = g_born[id];   // not g_job: the job that created us may be posted already
    for (;;) {
        unsigned long job = atomic_load_explicit(&g_job, memory_order_acquire);
        if (JOB_GEN(job) == seen) {    // no new job: spin a little, then block
            if (atomic_load_explicit(&g_spin, memory_order_relaxed) && spin_for_job(seen)) continue;
            pthread_mutex_lock(&g_mu);
            atomic_fetch_add(&g_sleepers, 1);
            while (JOB_GEN(atomic_load(&g_job)) == seen) pthread_cond_wait(&g_work, &g_mu);
            atomic_fetch_sub(&g_sleepers, 1);
            pthread_mutex_unlock(&g_mu);
            continue;
        }
        seen = JOB_GEN(job);
        if (id < JOB_PARTS(job)) run_chunks();   // (a chunk left may be a later job's: fine)
    }
    return NULL;
}

// called by the job's caller (holding g_busy); returns the number of workers available
// (may be fewer on failure)
static int ensure_workers(int want) {
    while (g_nworkers < want) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        g_born[g_nworkers] = JOB_GEN(atomic_load(&g_job));
        int rc = pthread_create(&t, &at, worker_main, (void *)(intptr_t)g_nworkers);
        pthread_attr_destroy(&at);
        if (rc != 0) break;
        g_nworkers++;
    }
    return g_nworkers < want ? g_nworkers : want;
}

// Posts a job of `total` chunks of `chunk` items to `workers` workers (the caller holds
// g_busy), runs chunks itself and waits for all of them.
static void run_job(long n, long chunk, long total, int nt, int workers, int gang,
                    mk_range_fn fn, void *ctx) {
    int spin = nt <= g_ncores;
    g_fn = fn; g_ctx = ctx; g_n = n; g_chunk = chunk;
    atomic_store_explicit(&g_spin, spin, memory_order_relaxed);
    atomic_store_explicit(&g_gang, gang, memory_order_relaxed);
    atomic_store_explicit(&g_chunks_done, 0, memory_order_relaxed);
    unsigned long gen = JOB_GEN(atomic_load_explicit(&g_job, memory_order_relaxed)) + 1;
    atomic_store_explicit(&g_claim, CLAIM(gen, total, 0), memory_order_release);
    atomic_store(&g_job, JOB(gen, workers));              // wakes the spinning workers
    if (atomic_load(&g_sleepers) > 0) {
        pthread_mutex_lock(&g_mu);
        pthread_cond_broadcast(&g_work);
        pthread_mutex_unlock(&g_mu);
    }

    run_chunks();

    if (!(spin && spin_until_done(total))) {
        pthread_mutex_lock(&g_mu);
        atomic_store(&g_caller_sleeps, 1);
        while (atomic_load(&g_chunks_done) < total) pthread_cond_wait(&g_done, &g_mu);
        atomic_store(&g_caller_sleeps, 0);
        pthread_mutex_unlock(&g_mu);
    }
}

void mk_parallel_for(long n, long grain, mk_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int threads = mk_cpu_threads();
    long max_parts = (n + grain - 1) / grain;
    if (threads <= 1 || max_parts <= 1 || pthread_mutex_trylock(&g_busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    int nt = max_parts < threads ? (int)max_parts : threads;
    // many chunks per thread: a thread slowed by other load (or a slower core) takes fewer
    long parts = (long)nt * MK_CHUNKS_PER_THREAD;
    if (parts > MK_MAX_CHUNKS) parts = MK_MAX_CHUNKS;
    long chunk = (n + parts - 1) / parts;
    if (chunk < grain) chunk = grain;
    long total = (n + chunk - 1) / chunk;
    run_job(n, chunk, total, nt, ensure_workers(nt - 1), 0, fn, ctx);
    pthread_mutex_unlock(&g_busy);
}

// Holding the pool: the holder's own jobs run (mk_pool_gang); everyone else's run inline.
int mk_pool_hold(void) { return mk_cpu_threads() > 1 && pthread_mutex_trylock(&g_busy) == 0; }

void mk_pool_release(void) { pthread_mutex_unlock(&g_busy); }

// n tasks that wait for each other (a threaded BLAS call's jobs), so each needs its own
// thread: one chunk per thread, never two in a row on one thread. The caller and n - 1
// workers each claim at most one chunk of the job, so all n run at once (a worker late for
// an earlier job that claims one of these is one of the n). The caller holds the pool.
// 0 when done; -1 (nothing run) when n - 1 workers cannot be started.
int mk_pool_gang(int n, mk_range_fn fn, void *ctx) {
    if (n <= 1) { if (n == 1) fn(ctx, 0, 1); return 0; }
    if (n > MK_MAX_THREADS || ensure_workers(n - 1) < n - 1) return -1;
    run_job(n, 1, n, n, n - 1, 1, fn, ctx);
    return 0;
}

// After fork() only the forking thread exists in the child: start the pool afresh there.
static void after_fork_child(void) {
    pthread_mutex_init(&g_busy, NULL);
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_work, NULL);
    pthread_cond_init(&g_done, NULL);
    g_nworkers = 0;
    atomic_store(&g_claim, 0);
    atomic_store(&g_chunks_done, 0);
    atomic_store(&g_sleepers, 0);
    atomic_store(&g_caller_sleeps, 0);
    atomic_store(&g_gang, 0);
}

__attribute__((constructor)) static void mk_threads_init(void) {
    g_ncores = n_cores();
    pthread_atfork(NULL, NULL, after_fork_child);
}

void *mk_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, (bytes + 63) & ~(size_t)63) != 0) return NULL;
    return p;
}

void mk_free(void *p) { free(p); }
