// guard.cc: where a simulated kernel's buffers live, so that a stray access faults (a
// KernelError naming the kernel and the buffer) instead of reaching Python's heap.
//
//   mk_guarded_alloc   page-aligned memory between inaccessible (PROT_NONE) reservations;
//                      mpskern.empty's arrays and the simulator's scratch buffers. Used in
//                      place by a run (zero-copy).
//   Mirrors            any other host memory a run binds is copied, for the run, into such
//                      a mapping with far larger guards (GUARD_RUN each side), its end
//                      against the trailing guard; afterwards the buffers the kernel may
//                      write (MK_BUFFER_WRITE) are copied back. Bindings whose host memory
//                      overlaps share one mirror, so aliasing stays aliasing.
// The page slack around a buffer's bytes (a mirror's: up to a page before them, under 16
// after; a guarded allocation's: after its bytes) is filled with SLACK and checked after
// each dispatch: a write there is reported as the kernel's error too, a read there reads
// NaN. Reads past the slack fault as writes do. A guard is address space only (no memory, no page tables):
// GUARD_RUN covers any 32-bit index into elements of up to 16 bytes (float4, half8); an
// access farther away (64-bit index arithmetic) can still land elsewhere, as it could on
// no GPU: check=True reports those. Guards shrink (down to a page) where the address space
// is limited (RLIMIT_AS).
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "sim.h"

namespace mksim {

constexpr size_t GUARD_RUN = (size_t)1 << 36;    // 64 GiB each side of a run's mirror
constexpr size_t GUARD_USER = (size_t)1 << 30;   // 1 GiB each side of a guarded allocation
constexpr unsigned char SLACK = 0xFF;   // NaN in every float and half, as the threadgroup arena

static size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

// [guard | body | guard] with body read-write; the guard shrinks (/64 per try, down to
// one page) until the address space takes it. false when not even that fits. populate:
// fault the body in at once (a run's copy is written whole right away: one populate costs
// less than a fault per page, 134-162 vs 174-238 ms for 64 MiB here)
static bool map_guarded(size_t body, size_t guard, GuardedMap *m, bool populate = false) {
    size_t pg = page_size();
    body = std::max(pg, (body + pg - 1) / pg * pg);
    for (size_t g = guard;; g /= 64) {
        g = std::max(g, pg);
        size_t len = body + 2 * g;
        void *p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS
#ifdef MAP_NORESERVE
                           | MAP_NORESERVE
#endif
                       , -1, 0);
        bool ok = p != MAP_FAILED;
        // the body is a mapping of its own, without MAP_NORESERVE: the OS's overcommit
        // policy refuses it as it refuses numpy.empty's malloc (an mprotect of the reserved
        // range would hand out 4 TiB of a 16 GiB machine and fail only when touched)
        int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
#ifdef MAP_POPULATE
        if (populate) flags |= MAP_POPULATE;
#endif
        if (ok) ok = mmap((char *)p + g, body, PROT_READ | PROT_WRITE, flags, -1, 0) != MAP_FAILED;
        if (ok) {
            m->map = (unsigned char *)p;
            m->len = len;
            m->body = (unsigned char *)p + g;
            m->body_len = body;
            m->guard = g;
            return true;
        }
        if (p != MAP_FAILED) munmap(p, len);
        if (g == pg) return false;
    }
}

static void unmap_guarded(GuardedMap *m) {
    if (m->map) munmap(m->map, m->len);
    *m = GuardedMap();
}

// the first byte of [lo, hi) that is not SLACK, or nullptr
static const unsigned char *touched(const unsigned char *lo, const unsigned char *hi) {
    for (; lo < hi; lo++)
        if (*lo != SLACK) return lo;
    return nullptr;
}

/* ------------------------------------------------------------------ guarded allocations */
static std::mutex g_mu;
static std::map<uintptr_t, GuardedMap> g_allocs;   // by body address

bool is_guarded(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return false;
    --it;
    const GuardedMap &m = it->second;
    return a >= (uintptr_t)m.body && a + n <= (uintptr_t)m.body + m.body_len;
}

/* ------------------------------------------------------------------ a run's mirrors */
mk_status mirrors_create(const mk_dispatch *list, uint32_t n, Mirrors &out) {
    // the host ranges to mirror: every bound buffer not already in guarded memory
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < list[i].nbindings && k < MK_MAX_BINDINGS; k++) {
            mk_buffer *b = list[i].bindings[k].buffer;
            if (!b || b->zero_copy || !b->host || !b->nbytes) continue;
            ranges.push_back({(uintptr_t)b->host, (uintptr_t)b->host + b->nbytes});
            if ((b->flags & MK_BUFFER_WRITE) &&
                std::find(out.written.begin(), out.written.end(), b) == out.written.end())
                out.written.push_back(b);
        }
    std::sort(ranges.begin(), ranges.end());
    for (auto &r : ranges) {                 // overlapping host memory: one mirror
        if (!out.maps.empty() && r.first < out.maps.back().host_end) {
            out.maps.back().host_end = std::max(out.maps.back().host_end, r.second);
            continue;
        }
        out.maps.emplace_back();
        out.maps.back().host = r.first;
        out.maps.back().host_end = r.second;
    }
    for (auto &m : out.maps) {
        size_t len = m.host_end - m.host;
        if (!map_guarded(len, GUARD_RUN, &m.g, true)) {
            mirrors_finish(out, false);
            return mk_set_error(MK_ERR_NOMEM, "simulator: cannot map %zu bytes for a buffer's "
                                "guarded copy", len);
        }
        // the end against the trailing guard (a 16-byte aligned start): overruns fault at once
        m.base = m.g.body + (m.g.body_len - len) / 16 * 16;
        memcpy(m.base, (const void *)m.host, len);
        memset(m.g.body, SLACK, m.base - m.g.body);
        memset(m.base + len, SLACK, m.g.body + m.g.body_len - (m.base + len));
    }
    return MK_OK;
}

// a guarded allocation holding [p, p + n) whose slack a kernel wrote: the first such byte
static const unsigned char *alloc_slack_touched(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> g(g_mu);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    GuardedMap &m = (--it)->second;
    if (a + n > (uintptr_t)m.body + m.body_len) return nullptr;
    const unsigned char *t = touched(m.body + m.used, m.body + m.body_len);
    if (t) memset(m.body + m.used, SLACK, m.body_len - m.used);   // reported once
    return t;
}

static mk_status slack_error(const Job &j, int i, const unsigned char *t) {
    return mk_set_error(MK_ERR_RUNTIME, "kernel '%s' wrote outside its buffers: byte offset %lld of "
                        "[[buffer(%d)]] (%zu bytes) changed (on a GPU a fault, or another "
                        "allocation's memory); run it with check=True to find the line",
                        j.k->name, (long long)(t - j.bases[i]), i, j.bufs[i]->nbytes);
}

mk_status mirrors_check(const Mirrors &ms, const Job &j) {
    for (int i = 0; i < MK_MAX_BINDINGS; i++) {
        mk_buffer *b = j.bufs[i];
        if (!b || !b->zero_copy || !b->nbytes) continue;
        if (const unsigned char *t = alloc_slack_touched(b->host, b->nbytes)) return slack_error(j, i, t);
    }
    for (const auto &m : ms.maps) {
        const unsigned char *end = m.base + (m.host_end - m.host);
        const unsigned char *t = touched(m.g.body, m.base);
        if (!t) t = touched(end, m.g.body + m.g.body_len);
        if (!t) continue;
        for (int i = 0; i < MK_MAX_BINDINGS; i++)          // name a binding of this mirror
            if (j.bufs[i] && j.bases[i] >= m.base && j.bases[i] <= end) return slack_error(j, i, t);
    }
    return MK_OK;
}

unsigned char *mirrors_translate(const Mirrors &ms, const mk_buffer *b) {
    uintptr_t h = (uintptr_t)b->host;
    if (h && !b->zero_copy)
        for (const auto &m : ms.maps)
            if (h >= m.host && h < m.host_end) return m.base + (h - m.host);
    return (unsigned char *)b->host;         // in place (guarded memory, or no bytes)
}

void mirrors_finish(Mirrors &ms, bool copy_back) {
    if (copy_back)
        for (mk_buffer *b : ms.written) memcpy(b->host, mirrors_translate(ms, b), b->nbytes);
    for (auto &m : ms.maps) unmap_guarded(&m.g);
    ms.maps.clear();
    ms.written.clear();
}

}  // namespace mksim

extern "C" mk_status mk_guarded_alloc(size_t nbytes, void **out) {
    if (!out) return mk_set_error(MK_ERR_INVALID, "mk_guarded_alloc: out is NULL");
    mksim::GuardedMap m;
    if (!mksim::map_guarded(nbytes, mksim::GUARD_USER, &m))
        return mk_set_error(MK_ERR_NOMEM, "mk_guarded_alloc: cannot map %zu bytes", nbytes);
    m.used = nbytes;
    memset(m.body + nbytes, mksim::SLACK, m.body_len - nbytes);
    std::lock_guard<std::mutex> g(mksim::g_mu);
    mksim::g_allocs[(uintptr_t)m.body] = m;
    *out = m.body;
    return MK_OK;
}

extern "C" void mk_guarded_free(void *p) {
    if (!p) return;
    mksim::GuardedMap m;
    {
        std::lock_guard<std::mutex> g(mksim::g_mu);
        auto it = mksim::g_allocs.find((uintptr_t)p);
        if (it == mksim::g_allocs.end()) return;
        m = it->second;
        mksim::g_allocs.erase(it);
    }
    mksim::unmap_guarded(&m);
}
