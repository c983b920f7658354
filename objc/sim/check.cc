// check.cc: the simulator's checking mode. Kernel libraries built with check=True are
// compiled with -fsanitize=thread for its instrumentation only: every load and store calls
// a __tsan_* hook, which the library forwards to rt->check_access (no libtsan is linked).
//
// Memory the kernel can reach is classified by address:
//   threadgroup arena   shadow word per 4 bytes: last write / last read (lane, barrier
//                       epoch, simdgroup-barrier epoch, pc) and a written bit. Two lanes
//                       touching a word in one epoch, one of them writing, is a race; a
//                       read of a never-written word reads uninitialised (NaN-poisoned) memory.
//   device buffers      each mk_buffer is mirrored into a private mapping with red zones
//                       before and after it (copied back after the dispatch, to where the
//                       run keeps the buffer: guard.cc's guarded copy), so accesses
//                       just out of bounds land in the red zone and are reported instead of
//                       silently reading a neighbour. Shadow words record the threadgroup:
//                       two threadgroups touching a word in one dispatch, one writing, is a
//                       cross-threadgroup race (threadgroups are unordered). Same-group lanes
//                       follow the threadgroup rules above.
//   constant bytes      (setBytes bindings) writes and out-of-bounds reads are reported.
//   anything else       (the lane's stack, the library's constants, runtime state) ignored.
// The first finding aborts the dispatch with MK_ERR_CHECK. Checked dispatches run on one
// worker, so the shadow needs no locking and findings are deterministic.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "sim.h"

namespace mksim {

struct Access {
    const void *pc = nullptr;
    int32_t lane = -1;          // thread index in its threadgroup
    uint32_t group = 0;         // linear threadgroup index
    uint32_t epoch = 0, sg_epoch = 0;
    uint32_t sg = 0;
    uint16_t tpos[3] = {};      // for the message
    uint32_t gpos[3] = {};
};

// Per 4-byte word; byte masks keep neighbouring half / char elements of different
// threads apart (only the last writer and reader are kept: a missed race, never a false one).
struct Word {
    Access w, r;
    uint32_t gen = 0;           // threadgroup serial this entry belongs to (threadgroup memory)
    uint8_t wmask = 0, rmask = 0, written = 0;
};

struct Region {
    enum Kind { TG, DEVICE, BYTES } kind;
    unsigned char *lo, *hi;     // including red zones
    unsigned char *base;        // the buffer proper
    size_t size;
    int binding;                // first binding (DEVICE / BYTES)
    std::vector<Word> shadow;
    // DEVICE mirror bookkeeping
    mk_buffer *buf = nullptr;
    unsigned char *src = nullptr;   // where the run keeps the buffer (guard.cc's copy, or host)
    unsigned char *map = nullptr;
    size_t map_len = 0;
};

struct TgVar {
    size_t off, size;
    std::string what;           // "'tile' (gemm.metal:12)" or "[[threadgroup(0)]]"
};

struct Checker {
    Job *job;
    std::vector<Region> regions;
    std::vector<TgVar> tg_vars;
    const Library *lib;
    uint32_t group_serial = 0;
    // The first read of never-written threadgroup memory in this barrier interval. Not
    // reported at once: another thread may write the word later in the same interval
    // (a missing barrier, reported as such by the write); at the next barrier or at the
    // threadgroup's end nobody has, and it is reported as an uninitialised read.
    std::string uninit;
};

static size_t page_size() { return (size_t)sysconf(_SC_PAGESIZE); }

Checker *checker_create(Job &j) {
    Checker *c = new Checker();
    c->job = &j;
    c->lib = j.lib;
    size_t pg = page_size();
    // One mirror per distinct buffer, so aliasing bindings stay aliased.
    for (int i = 0; i < MK_MAX_BINDINGS; i++) {
        if (!j.buffers[i]) continue;
        if (j.is_bytes[i]) {
            Region r{Region::BYTES, (unsigned char *)j.buffers[i], (unsigned char *)j.buffers[i] + 64 + j.sizes[i],
                     (unsigned char *)j.buffers[i], j.sizes[i], i, {}};
            c->regions.push_back(std::move(r));
            continue;
        }
        Region *have = nullptr;
        for (auto &r : c->regions)
            if (r.kind == Region::DEVICE && r.buf == j.bufs[i]) have = &r;
        if (!have) {
            mk_buffer *b = j.bufs[i];
            size_t red = std::max<size_t>(64 * 1024, (b->nbytes + pg - 1) / pg * pg);
            size_t body = (b->nbytes + pg - 1) / pg * pg;
            size_t len = red + body + red + pg;
            void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) continue;   // unchecked rather than failing the run
            Region r{Region::DEVICE, nullptr, nullptr, nullptr, b->nbytes, i, {}};
            r.buf = b;
            r.map = (unsigned char *)m;
            r.map_len = len;
            // the buffer's end abuts the trailing red zone (page-aligned start otherwise)
            r.base = r.map + red + (body - b->nbytes) / 16 * 16;
            r.lo = r.map;
            r.hi = r.map + len;
            r.src = j.bases[i];
            memcpy(r.base, r.src, b->nbytes);
            r.shadow.resize((b->nbytes + 3) / 4);
            c->regions.push_back(std::move(r));
            have = &c->regions.back();
        }
        j.buffers[i] = have->base + j.offsets[i];
    }
    for (int i = 0; i < 4; i++)
        if (j.tg_param_size[i])
            c->tg_vars.push_back({j.tg_param_off[i], j.tg_param_size[i],
                                  "[[threadgroup(" + std::to_string(i) + ")]]"});
    return c;
}

void checker_tg_var(Checker *c, size_t off, size_t size, const char *name, const char *file, int line) {
    for (auto &v : c->tg_vars)
        if (v.off == off) return;
    c->tg_vars.push_back({off, size, "'" + std::string(name) + "' (" + file + ":" + std::to_string(line) + ")"});
}

void checker_free(Checker *c) {
    for (auto &r : c->regions)
        if (r.kind == Region::DEVICE) {
            // read-only host memory (a read-only numpy array may be an immutable mapping)
            // is never written back; the kernel's writes to it are lost, as they should be
            if (r.buf->flags & MK_BUFFER_WRITE) memcpy(r.src, r.base, r.size);
            munmap(r.map, r.map_len);
        }
    delete c;
}

void checker_begin_group(Checker *c, Worker *w) {
    c->group_serial++;
    // (re)register the arena of this worker, with red zones beyond its usable size
    Region *tg = nullptr;
    for (auto &r : c->regions)
        if (r.kind == Region::TG) tg = &r;
    if (!tg) {
        c->regions.push_back(Region{Region::TG, nullptr, nullptr, nullptr, 0, -1, {}});
        tg = &c->regions.back();
    }
    // the whole arena: variables sit between red zones, so with exactly the device's 32 KiB
    // in use the last one ends past byte 32768 (rt_tg_alloc enforces the limit itself, on
    // the bytes without red zones); accesses outside every variable are reported below
    tg->base = w->arena;
    tg->lo = w->arena;
    tg->hi = w->arena + w->arena_cap;
    tg->size = w->arena_cap;
    if (tg->shadow.size() < (w->arena_cap + 3) / 4) tg->shadow.resize((w->arena_cap + 3) / 4);
}

static bool uninit_pending(Checker *c) {
    if (c->uninit.empty()) return false;
    c->job->set_error(MK_ERR_CHECK, c->uninit);
    return true;
}

bool checker_barrier(Checker *c, Worker *) { return !uninit_pending(c); }

void checker_end_group(Checker *c, Worker *) { uninit_pending(c); }

std::string describe_pc(const Library *lib, const void *pc) {
    static std::mutex mu;
    static std::map<std::pair<std::string, uintptr_t>, std::string> cache;
    Dl_info info;
    if (!pc || !dladdr(pc, &info) || !info.dli_fbase) return "";
    uintptr_t off = (uintptr_t)pc - (uintptr_t)info.dli_fbase - 1;   // pc is a return address
    std::lock_guard<std::mutex> g(mu);
    auto key = std::make_pair(lib->path, off);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    std::string result;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "addr2line -i -e '%s' 0x%lx 2>/dev/null", lib->path.c_str(), (unsigned long)off);
    if (FILE *f = popen(cmd, "r")) {
        char line[2048];
        // innermost frame first: the first one outside the compatibility headers and glue
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            char *colon = strrchr(line, ':');
            if (!colon || line[0] == '?') continue;
            *colon = 0;
            const char *base = strrchr(line, '/') ? strrchr(line, '/') + 1 : line;
            char *disc = strchr(colon + 1, ' ');   // " (discriminator N)"
            if (disc) *disc = 0;
            if (!strncmp(base, "metal_", 6) || !strncmp(base, "mk_sim_", 7) || !strcmp(base, "<mpskern glue>"))
                continue;
            if (!strcmp(colon + 1, "0") || !strcmp(colon + 1, "?")) continue;
            if (result.empty()) result = std::string(base) + ":" + (colon + 1);
        }
        pclose(f);
    }
    if (result.empty()) {
        snprintf(cmd, sizeof cmd, "%s+0x%lx", lib->path.c_str(), (unsigned long)off);
        result = cmd;
    }
    cache[key] = result;
    return result;
}

static std::string who(const Access &a) {
    char s[160];
    snprintf(s, sizeof s, "thread (%u,%u,%u) of threadgroup (%u,%u,%u)", a.tpos[0], a.tpos[1], a.tpos[2],
             a.gpos[0], a.gpos[1], a.gpos[2]);
    return s;
}

[[noreturn]] static void report(Worker *w, const std::string &msg) {
    Job *j = w->job;
    j->set_error(MK_ERR_CHECK, msg);
    fiber_abandon(&w->lanes[w->plain ? 0 : w->cur].fiber, &w->sched);
    abort();
}

static std::string at(Checker *c, const void *pc) { return describe_pc(c->lib, pc); }

static const char *buf_desc(Region &r, char *tmp, size_t n, size_t off) {
    if (r.kind == Region::TG) snprintf(tmp, n, "threadgroup memory (byte %zu)", off);
    else snprintf(tmp, n, "%s [[buffer(%d)]] (byte %zu of %zu)", r.kind == Region::BYTES ? "constant" : "device",
                  r.binding, off, r.size);
    return tmp;
}

void checker_access(Worker *w, const void *addr, unsigned size, int is_write, const void *pc) {
    Checker *c = w->job->checker;
    unsigned char *a = (unsigned char *)addr;
    Region *reg = nullptr;
    for (auto &r : c->regions)
        if (a >= r.lo && a < r.hi) { reg = &r; break; }
    if (!reg) return;
    Job *j = w->job;
    Lane &lane = w->lanes[w->cur];
    const char *kname = j->k->name;
    char tmp[160];
    uint32_t sg = lane.b.simdgroup_index_in_threadgroup;
    Access cur;
    cur.pc = pc;
    cur.lane = (int32_t)w->cur;
    cur.group = (uint32_t)w->group;
    cur.epoch = w->tg_epoch;
    cur.sg_epoch = w->sg_epoch[sg];
    cur.sg = sg;
    for (int d = 0; d < 3; d++) {
        cur.tpos[d] = (uint16_t)lane.b.thread_position_in_threadgroup[d];
        cur.gpos[d] = lane.b.threadgroup_position_in_grid[d];
    }
    if (a < reg->base || a + size > reg->base + reg->size) {
        long long off = (long long)(a - reg->base);
        std::string what = reg->kind == Region::TG
            ? "threadgroup memory (byte " + std::to_string(off) + "; the device allows " + std::to_string(reg->size) + ")"
            : std::string(reg->kind == Region::BYTES ? "constant" : "device") + " [[buffer(" +
                  std::to_string(reg->binding) + ")]] of " + std::to_string(reg->size) + " bytes (byte offset " +
                  std::to_string(off) + ")";
        report(w, "out-of-bounds " + std::string(is_write ? "write" : "read") + " in kernel '" + kname + "' at " +
                      at(c, pc) + ": " + who(cur) + " accessed " + what);
    }
    if (reg->kind == Region::TG) {
        size_t off = (size_t)(a - reg->base);
        const TgVar *in = nullptr, *before = nullptr;
        for (auto &v : c->tg_vars) {
            if (off >= v.off && off + size <= v.off + v.size) in = &v;
            if (v.off + v.size <= off && (!before || v.off > before->off)) before = &v;
        }
        if (!in) {
            std::string near = before ? ", " + std::to_string(off - before->off - before->size) +
                                            " bytes past the end of " + before->what
                                      : ", before the first threadgroup variable";
            report(w, "out-of-bounds " + std::string(is_write ? "write" : "read") + " of threadgroup memory in kernel '" +
                          kname + "' at " + at(c, pc) + " by " + who(cur) + ": outside every threadgroup variable" +
                          near);
        }
    }
    if (reg->kind == Region::BYTES) {
        if (is_write)
            report(w, "write to constant memory in kernel '" + std::string(kname) + "' at " + at(c, pc) + " by " +
                          who(cur));
        return;
    }
    size_t off = (size_t)(a - reg->base);
    // Does a recorded access conflict with the current one (no ordering between them)?
    auto conflicts = [&](const Access &p) {
        if (p.lane < 0) return false;
        if (p.group != cur.group) return reg->kind == Region::DEVICE;
        if (p.lane == cur.lane || p.epoch != cur.epoch) return false;
        bool same_sg = p.sg == sg;
        return !(same_sg && p.sg_epoch != cur.sg_epoch);
    };
    auto race = [&](const Access &p, const char *pk, const char *ck) {
        std::string head = "data race on " + std::string(buf_desc(*reg, tmp, sizeof tmp, off)) + " in kernel '" +
                           kname + "': ";
        if (p.group != cur.group)
            report(w, head + ck + " at " + at(c, pc) + " by " + who(cur) + " and " + pk + " at " + at(c, p.pc) +
                          " by " + who(p) + " by two threadgroups (threadgroups of a dispatch are unordered)");
        // one threadgroup: a barrier would order them; the write first, as a reader thinks of it
        bool cur_first = strcmp(pk, "read") == 0;
        const Access &a = cur_first ? cur : p, &b = cur_first ? p : cur;
        const char *ak = cur_first ? ck : pk, *bk = cur_first ? pk : ck;
        auto noun = [](const char *k) { return std::string(strcmp(k, "read") ? "write" : "read"); };
        report(w, head + "no barrier between the " + noun(ak) + " at " + at(c, a.pc) + " by " + who(a) +
                      " and the " + noun(bk) + " at " + at(c, b.pc) + " by " + who(b));
    };
    size_t w0 = off / 4, w1 = (off + size + 3) / 4;
    for (size_t k = w0; k < w1 && k < reg->shadow.size(); k++) {
        Word &s = reg->shadow[k];
        if (reg->kind == Region::TG && s.gen != c->group_serial) {   // left by an earlier threadgroup
            s = Word();
            s.gen = c->group_serial;
        }
        size_t b0 = std::max(off, k * 4), b1 = std::min(off + size, k * 4 + 4);
        uint8_t m = (uint8_t)(((1u << (b1 - b0)) - 1) << (b0 - k * 4));
        if (is_write) {
            if ((s.wmask & m) && conflicts(s.w)) race(s.w, "written", "written");
            if ((s.rmask & m) && conflicts(s.r)) race(s.r, "read", "written");
            s.wmask = (s.w.lane == cur.lane && s.w.group == cur.group && s.w.epoch == cur.epoch) ? (uint8_t)(s.wmask | m) : m;
            s.w = cur;
            s.written |= m;
        } else {
            if (reg->kind == Region::TG && (s.written & m) != m && c->uninit.empty())
                c->uninit = "read of uninitialised threadgroup memory in kernel '" + std::string(kname) + "' at " +
                            at(c, pc) + " by " + who(cur) + ": " + buf_desc(*reg, tmp, sizeof tmp, off) +
                            " was not written by any thread of this threadgroup before";
            if ((s.wmask & m) && conflicts(s.w)) race(s.w, "written", "read");
            s.rmask = (s.r.lane == cur.lane && s.r.group == cur.group && s.r.epoch == cur.epoch) ? (uint8_t)(s.rmask | m) : m;
            s.r = cur;
        }
    }
}

}  // namespace mksim
