// profile.cc: the simulator's profiling mode (docs/profiling.md). Kernel libraries built
// with profile=True (mpskern/sim/profile_build.py) call two runtime hooks: every device or
// threadgroup memory access, with the IR access site that made it, and every basic block a
// lane executes. From those this file counts, per dispatch:
//   - SIMD-group memory instructions: the k-th execution of an access site by each lane of
//     a SIMD-group since the threadgroup's last barrier is one instruction (lanes that skip
//     it are inactive), so a site's lanes
//     are gathered and the instruction's footprint measured when the SIMD-group's lanes have
//     all contributed (or at the next barrier / end of the threadgroup);
//       device memory: distinct L-byte lines touched vs the fewest that could hold the bytes
//       (coalescing), bytes, per-lane access width;
//       threadgroup memory: bank-conflict degree under a B-bank x W-byte model: the cycles
//       the most-loaded bank needs (distinct words in it) vs the conflict-free minimum;
//   - per-lane access width: the element accesses one MSL vector expression makes (the
//     build marks them "may merge" and gives them one key) are joined into one access of up
//     to 16 bytes when they are contiguous and naturally aligned, as the GPU loads a vector;
//   - basic-block executions (mpskern/sim/profile.py turns them into FLOPs, integer
//     divisions, simdgroup_matrix multiplies, ... from the build's table);
//   - barriers, threads, threadgroup memory, device bytes and lines touched per buffer.
// Big grids are sampled: per grid dimension the first and last threadgroups and evenly
// spaced interior ones, each standing for the groups it represents (weights), so counts
// are scaled estimates (the report says how many groups were profiled). Profiled dispatches
// run on one worker (deterministic; no locking).
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "sim.h"

namespace mksim {

enum { R_DEVICE = 0, R_TG = 1, R_CONST = 2 };

struct PRegion {
    unsigned char *lo, *hi;
    int kind, binding;
    std::vector<uint8_t> lines;     // device: lines touched (footprint)
    double read = 0, written = 0;   // device: bytes requested (weighted)
};

struct SiteStat {      // weighted sums over the SIMD-group instructions of one access site
    double instr = 0, lanes = 0, bytes = 0, lines = 0, min_lines = 0, bank_cycles = 0, bank_ideal = 0;
    double width[5] = {};          // lane accesses of 1, 2, 4, 8, 16 bytes
    int region = -1, binding = -1, write = 0;
};

struct ClassStat {     // device loads of one sample class (edge / interior threadgroups)
    double instr = 0, vec_instr = 0, bytes = 0, vec_bytes = 0, lines = 0, min_lines = 0;
};

struct Entry {         // one SIMD-group memory instruction being gathered
    uint32_t site = 0, mask = 0;
    int region = -1;
    bool write = false;
    uint64_t addr[32];
    uint8_t size[32];
};

struct Run {           // a lane's open vector access (element accesses being joined)
    bool open = false, write = false;
    int region = -1;
    uint32_t key = 0, site = 0, size = 0;
    uint64_t lo = 0;
};

constexpr int RUNS_PER_LANE = 4;

struct Profiler {
    Job *job;
    ProfileSettings s;
    uint32_t nkeys = 1;
    // sample plan
    bool all = true;
    std::unordered_map<uint64_t, std::pair<double, bool>> plan;   // group -> (weight, interior)
    std::vector<uint64_t> run_list;
    // the threadgroup being run
    bool active = false, interior = false;
    double w = 0;
    int last_lane = -1, nlanes = 0;
    std::vector<uint32_t> counts;        // per lane x key: logical accesses emitted
    std::vector<int> sg_lanes;
    std::vector<Run> runs;
    std::unordered_map<uint64_t, Entry> entries;
    std::vector<PRegion> regions;
    unsigned char *arena = nullptr;
    // results
    std::vector<SiteStat> sites;
    std::vector<double> blocks;
    ClassStat cls[2];
    double threads = 0, barriers = 0, simd_barriers = 0, const_reads = 0, const_bytes = 0;
    std::unordered_set<uint64_t> group_line_set;   // device lines this threadgroup touched
    double group_lines = 0;                         // their sum over threadgroups (weighted)
    uint64_t profiled = 0;
    size_t tg_memory = 0;
};

static int width_index(unsigned size) {
    int i = 0;
    while (i < 4 && (2u << i) <= size) i++;
    return i;                          // 1 -> 0, 2-3 -> 1, 4-7 -> 2, 8-15 -> 3, 16+ -> 4
}

// Per grid dimension: the positions sampled, what each stands for, whether it is an edge.
struct Axis {
    std::vector<uint32_t> pos;
    std::vector<double> weight;
    std::vector<bool> edge;
};

static Axis axis(uint32_t n, uint32_t interior) {
    Axis a;
    if (n <= interior + 2) {
        for (uint32_t i = 0; i < n; i++) {
            a.pos.push_back(i);
            a.weight.push_back(1.0);
            a.edge.push_back(n > 1 && (i == 0 || i == n - 1));
        }
        return a;
    }
    a.pos.push_back(0);
    a.weight.push_back(1.0);
    a.edge.push_back(true);
    for (uint32_t k = 0; k < interior; k++) {   // evenly spaced over 1 .. n-2
        uint32_t p = 1 + (uint32_t)(((uint64_t)(2 * k + 1) * (n - 2)) / (2 * interior));
        a.pos.push_back(p);
        a.weight.push_back((double)(n - 2) / interior);
        a.edge.push_back(false);
    }
    a.pos.push_back(n - 1);
    a.weight.push_back(1.0);
    a.edge.push_back(true);
    return a;
}

static void make_plan(Profiler *p, const Job &j) {
    uint64_t total = j.ngroups;
    if (p->s.max_groups == 0 || total <= p->s.max_groups) return;   // every group, weight 1
    p->all = false;
    // interior samples per dimension: as many as the budget allows (at least one where a
    // dimension has interior groups), the largest dimensions first
    uint32_t m[3];
    for (int d = 0; d < 3; d++) m[d] = j.groups[d] > 2 ? j.groups[d] - 2 : 0;
    auto count = [&] {
        uint64_t c = 1;
        for (int d = 0; d < 3; d++) c *= (uint64_t)std::min<uint64_t>(j.groups[d], m[d] + 2);
        return c;
    };
    while (count() > p->s.max_groups) {
        int big = -1;
        for (int d = 0; d < 3; d++)
            if (m[d] > 1 && (big < 0 || m[d] > m[big])) big = d;
        if (big < 0) break;
        m[big] -= std::max<uint32_t>(1, m[big] / 8);
    }
    Axis ax[3] = {axis(j.groups[0], m[0]), axis(j.groups[1], m[1]), axis(j.groups[2], m[2])};
    for (size_t z = 0; z < ax[2].pos.size(); z++)
        for (size_t y = 0; y < ax[1].pos.size(); y++)
            for (size_t x = 0; x < ax[0].pos.size(); x++) {
                uint64_t g = ax[0].pos[x] + (uint64_t)j.groups[0] * (ax[1].pos[y] + (uint64_t)j.groups[1] * ax[2].pos[z]);
                bool edge = ax[0].edge[x] || ax[1].edge[y] || ax[2].edge[z];
                p->plan[g] = {ax[0].weight[x] * ax[1].weight[y] * ax[2].weight[z], !edge};
                p->run_list.push_back(g);
            }
    std::sort(p->run_list.begin(), p->run_list.end());
}

Profiler *profiler_create(Job &j, const ProfileSettings &s) {
    Profiler *p = new Profiler();
    p->job = &j;
    p->s = s;
    const mk_sim_module *mod = j.lib->mod;
    p->nkeys = mod->nsites + 1;
    p->sites.resize(mod->nsites + 1);
    p->blocks.resize(mod->nblocks + 1);
    for (int i = 0; i < MK_MAX_BINDINGS; i++) {
        if (!j.buffers[i]) continue;
        if (j.is_bytes[i]) {
            unsigned char *b = (unsigned char *)j.buffers[i];
            p->regions.push_back({b, b + j.sizes[i], R_CONST, i, {}});
            continue;
        }
        bool have = false;
        for (int k = 0; k < i; k++) have = have || (j.bufs[k] == j.bufs[i] && !j.is_bytes[k]);
        if (have) continue;
        unsigned char *b = j.bases[i];      // the run's copy (guard.cc mirrors) or the host bytes
        PRegion r{b, b + j.bufs[i]->nbytes, R_DEVICE, i, {}};
        r.lines.resize((j.bufs[i]->nbytes + s.line_bytes - 1) / s.line_bytes);
        p->regions.push_back(std::move(r));
    }
    make_plan(p, j);
    if (!p->all && s.sampled_only) {
        j.run_list = p->run_list.data();
        j.nrun = p->run_list.size();
    }
    return p;
}

void profiler_free(Profiler *p) { delete p; }

static bool edge_group(const Job &j, uint64_t g) {
    uint64_t pos[3] = {g % j.groups[0], g / j.groups[0] % j.groups[1], g / ((uint64_t)j.groups[0] * j.groups[1])};
    for (int d = 0; d < 3; d++)
        if (j.groups[d] > 1 && (pos[d] == 0 || pos[d] == j.groups[d] - 1)) return true;
    return false;
}

void profiler_begin_group(Profiler *p, Worker *w) {
    const Job &j = *p->job;
    p->active = false;
    if (p->all) {
        p->active = true;
        p->w = 1.0;
        p->interior = !edge_group(j, w->group);
    } else {
        auto it = p->plan.find(w->group);
        if (it != p->plan.end()) {
            p->active = true;
            p->w = it->second.first;
            p->interior = it->second.second;
        }
    }
    if (!p->active) return;
    p->nlanes = w->nlanes;
    p->counts.assign((size_t)w->nlanes * p->nkeys, 0);
    p->runs.assign((size_t)w->nlanes * RUNS_PER_LANE, Run());
    p->entries.clear();
    p->last_lane = -1;
    int nsg = (w->nlanes + 31) / 32;
    p->sg_lanes.assign(nsg, 32);
    if (w->nlanes % 32) p->sg_lanes[nsg - 1] = w->nlanes % 32;
    p->arena = w->arena;
}

// The footprint of one gathered instruction, added to its site's counters.
static void flush_entry(Profiler *p, const Entry &e) {
    SiteStat &st = p->sites[e.site < p->sites.size() ? e.site : 0];
    const double w = p->w;
    int lanes = __builtin_popcount(e.mask);
    double bytes = 0, vec_bytes = 0;
    bool all_vec = true;
    std::pair<uint64_t, uint64_t> rg[32];
    int n = 0;
    for (int l = 0; l < 32; l++) {
        if (!(e.mask >> l & 1)) continue;
        bytes += e.size[l];
        st.width[width_index(e.size[l])] += w;
        if (e.size[l] >= 8) vec_bytes += e.size[l];
        else all_vec = false;
        rg[n++] = {e.addr[l], e.addr[l] + e.size[l]};
    }
    st.instr += w;
    st.lanes += lanes * w;
    st.bytes += bytes * w;
    st.region = e.region >= 0 ? p->regions[e.region].kind : R_TG;
    st.write = e.write;
    std::sort(rg, rg + n);
    if (e.region >= 0) {               // device memory
        PRegion &r = p->regions[e.region];
        st.binding = r.binding;
        // lines relative to the buffer's start: a Metal buffer starts on a page, whatever
        // the alignment of the host memory the simulator runs it in
        const uint64_t L = p->s.line_bytes;
        uint64_t base = (uint64_t)r.lo;
        uint64_t lines = 0, uni = 0, last_line = 0, end = 0;
        for (int i = 0; i < n; i++) {
            uint64_t a = rg[i].first - base, b = rg[i].second - base;
            for (uint64_t ln = a / L; ln <= (b - 1) / L; ln++) {
                if (lines == 0 || ln > last_line) {
                    lines++;
                    last_line = ln;
                    if (ln < r.lines.size()) r.lines[ln] = 1;
                    p->group_line_set.insert((uint64_t)e.region << 48 | ln);
                }
            }
            a += base;
            b += base;
            if (b > end) {
                uni += b - std::max(a, end);
                end = b;
            }
        }
        uint64_t min_lines = (uni + L - 1) / L;
        st.lines += lines * w;
        st.min_lines += min_lines * w;
        (e.write ? r.written : r.read) += bytes * w;
        if (!e.write) {
            ClassStat &c = p->cls[p->interior ? 1 : 0];
            c.instr += w;
            c.vec_instr += all_vec ? w : 0;
            c.bytes += bytes * w;
            c.vec_bytes += vec_bytes * w;
            c.lines += lines * w;
            c.min_lines += min_lines * w;
        }
    } else {                           // threadgroup memory: bank conflicts
        const uint64_t W = p->s.bank_bytes, B = p->s.banks;
        uint64_t base = (uint64_t)p->arena;
        uint64_t words[32 * 5];
        int nw = 0;
        for (int i = 0; i < n && nw < 32 * 5 - 5; i++)
            for (uint64_t wd = (rg[i].first - base) / W; wd <= (rg[i].second - 1 - base) / W && nw < 32 * 5; wd++)
                words[nw++] = wd;
        std::sort(words, words + nw);
        nw = (int)(std::unique(words, words + nw) - words);
        uint32_t per_bank[64] = {};
        uint32_t worst = 0;
        for (int i = 0; i < nw; i++) worst = std::max(worst, ++per_bank[words[i] % B % 64]);
        st.bank_cycles += worst * w;
        st.bank_ideal += (double)((nw + B - 1) / B) * w;
    }
}

static void emit(Profiler *p, int lane, uint32_t key, uint32_t site, int region, uint64_t lo, uint32_t size,
                 bool write) {
    if (key >= p->nkeys) key = 0;
    uint32_t &n = p->counts[(size_t)lane * p->nkeys + key];
    int sg = lane / 32;
    uint64_t k = ((uint64_t)sg << 54) | ((uint64_t)key << 32) | n++;
    auto it = p->entries.find(k);
    if (it == p->entries.end()) {
        it = p->entries.emplace(k, Entry()).first;
        it->second.site = site;
        it->second.region = region;
        it->second.write = write;
    }
    Entry &e = it->second;
    e.addr[lane % 32] = lo;
    e.size[lane % 32] = (uint8_t)std::min<uint32_t>(size, 255);
    e.mask |= 1u << (lane % 32);
    if (__builtin_popcount(e.mask) >= p->sg_lanes[sg]) {
        flush_entry(p, e);
        p->entries.erase(it);
    }
}

static void close_run(Profiler *p, int lane, Run &r) {
    if (!r.open) return;
    r.open = false;
    emit(p, lane, r.key, r.site, r.region, r.lo, r.size, r.write);
}

static void flush_runs(Profiler *p, int lane) {
    for (int i = 0; i < RUNS_PER_LANE; i++) close_run(p, lane, p->runs[(size_t)lane * RUNS_PER_LANE + i]);
}

static void flush_all(Profiler *p) {
    for (int l = 0; l < p->nlanes; l++) flush_runs(p, l);
    for (auto &kv : p->entries) flush_entry(p, kv.second);
    p->entries.clear();
    p->last_lane = -1;
}

// Every lane reconverges at a threadgroup barrier: from there the lanes' k-th executions
// of a site pair up again (a lane that skipped executions before it, in a divergent branch,
// would otherwise pair its later ones with other lanes' different iterations).
void profiler_barrier(Profiler *p, Worker *) {
    if (!p->active) return;
    flush_all(p);
    std::fill(p->counts.begin(), p->counts.end(), 0);
}

void profiler_end_group(Profiler *p, Worker *w) {
    if (!p->active) return;
    flush_all(p);
    p->active = false;
    p->group_lines += p->group_line_set.size() * p->w;
    p->group_line_set.clear();
    p->profiled++;
    p->threads += w->nlanes * p->w;
    p->barriers += w->tg_epoch * p->w;
    int nsg = (w->nlanes + 31) / 32;
    for (int i = 0; i < nsg; i++) p->simd_barriers += w->sg_epoch[i] * p->w;
    if (w->nlanes) p->tg_memory = std::max(p->tg_memory, w->lanes[0].tg_used);
}

void profiler_access(Worker *w, const void *addr, uint32_t site, uint32_t key, uint32_t info) {
    Profiler *p = w->job->profiler;
    if (!p || !p->active) return;
    unsigned char *a = (unsigned char *)addr;
    uint32_t size = info & 255;
    bool write = (info >> 8) & 1, merge = (info >> 9) & 1;
    int region = -2;                   // -1: threadgroup memory; >= 0: a device/constant region
    if (a >= w->arena && a < w->arena + w->arena_cap) region = -1;
    else
        for (size_t i = 0; i < p->regions.size(); i++)
            if (a >= p->regions[i].lo && a < p->regions[i].hi) { region = (int)i; break; }
    if (region == -2) return;          // the lane's stack, the library's own data, ...
    if (region >= 0 && p->regions[region].kind == R_CONST) {
        p->const_reads += p->w;
        p->const_bytes += size * p->w;
        return;
    }
    int lane = w->cur;
    if (lane != p->last_lane) {        // another lane runs: the last one's vectors are complete
        if (p->last_lane >= 0) flush_runs(p, p->last_lane);
        p->last_lane = lane;
    }
    uint64_t lo = (uint64_t)a;
    if (!merge) {
        emit(p, lane, key, site, region, lo, size, write);
        return;
    }
    Run *rs = &p->runs[(size_t)lane * RUNS_PER_LANE];
    for (int i = 0; i < RUNS_PER_LANE; i++) {
        Run &r = rs[i];
        if (!r.open || r.key != key) continue;
        uint32_t total = r.size + size, align = 1;
        while (align < total) align <<= 1;
        if (r.region == region && r.write == write && lo == r.lo + r.size && total <= 16 && r.lo % align == 0) {
            r.size = total;
            if (total == 16) close_run(p, lane, r);
            return;
        }
        close_run(p, lane, r);
    }
    Run *slot = nullptr;
    for (int i = 0; i < RUNS_PER_LANE && !slot; i++)
        if (!rs[i].open) slot = &rs[i];
    if (!slot) {
        close_run(p, lane, rs[0]);
        slot = &rs[0];
    }
    *slot = Run{true, write, region, key, site, size, lo};
}

void profiler_block(Worker *w, uint32_t block) {
    Profiler *p = w->job->profiler;
    if (p && p->active && block < p->blocks.size()) p->blocks[block] += p->w;
}

// ---------------------------------------------------------------- the report (JSON)
static void num(std::string &o, const char *k, double v, bool comma = true) {
    char b[96];
    snprintf(b, sizeof b, "\"%s\": %.17g%s", k, v, comma ? ", " : "");
    o += b;
}

static std::string json_str(const char *s) {
    std::string o = "\"";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { o += '\\'; o += (char)c; }
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += (char)c;
    }
    return o + "\"";
}

std::string profiler_report(Profiler *p) {
    const Job &j = *p->job;
    std::string o = "{\"kernel\": " + json_str(j.k->name) + ", \"library\": " + json_str(j.lib->path.c_str()) + ", ";
    char b[256];
    snprintf(b, sizeof b, "\"groups_per_grid\": [%u, %u, %u], \"threads_per_group\": [%u, %u, %u], "
             "\"threads_per_grid\": [%u, %u, %u], \"partial\": %s, ",
             j.groups[0], j.groups[1], j.groups[2], j.tg[0], j.tg[1], j.tg[2], j.threads_per_grid[0],
             j.threads_per_grid[1], j.threads_per_grid[2], j.partial ? "true" : "false");
    o += b;
    num(o, "groups", (double)j.ngroups);
    num(o, "groups_profiled", (double)p->profiled);
    o += std::string("\"sampled\": ") + (p->all ? "false" : "true") + ", ";
    o += std::string("\"sampled_only\": ") + (j.run_list ? "true" : "false") + ", ";
    num(o, "threads", p->threads);
    num(o, "tg_memory", (double)p->tg_memory);
    num(o, "barriers", p->barriers);
    num(o, "simd_barriers", p->simd_barriers);
    num(o, "const_reads", p->const_reads);
    num(o, "const_bytes", p->const_bytes);
    num(o, "group_lines", p->group_lines);
    num(o, "banks", p->s.banks);
    num(o, "bank_bytes", p->s.bank_bytes);
    num(o, "line_bytes", p->s.line_bytes);
    o += "\"classes\": {";
    for (int c = 0; c < 2; c++) {
        const ClassStat &s = p->cls[c];
        o += std::string(c ? ", \"interior\": {" : "\"edge\": {");
        num(o, "instr", s.instr);
        num(o, "vec_instr", s.vec_instr);
        num(o, "bytes", s.bytes);
        num(o, "vec_bytes", s.vec_bytes);
        num(o, "lines", s.lines);
        num(o, "min_lines", s.min_lines, false);
        o += "}";
    }
    o += "}, \"sites\": {";
    bool first = true;
    for (size_t i = 0; i < p->sites.size(); i++) {
        const SiteStat &s = p->sites[i];
        if (s.instr == 0) continue;
        snprintf(b, sizeof b, "%s\"%zu\": {", first ? "" : ", ", i);
        o += b;
        first = false;
        o += std::string("\"region\": \"") + (s.region == R_TG ? "threadgroup" : "device") + "\", ";
        num(o, "binding", s.binding);
        num(o, "write", s.write);
        num(o, "instr", s.instr);
        num(o, "lanes", s.lanes);
        num(o, "bytes", s.bytes);
        num(o, "lines", s.lines);
        num(o, "min_lines", s.min_lines);
        num(o, "bank_cycles", s.bank_cycles);
        num(o, "bank_ideal", s.bank_ideal);
        snprintf(b, sizeof b, "\"width\": [%.17g, %.17g, %.17g, %.17g, %.17g]}", s.width[0], s.width[1],
                 s.width[2], s.width[3], s.width[4]);
        o += b;
    }
    o += "}, \"blocks\": {";
    first = true;
    for (size_t i = 0; i < p->blocks.size(); i++) {
        if (p->blocks[i] == 0) continue;
        snprintf(b, sizeof b, "%s\"%zu\": %.17g", first ? "" : ", ", i, p->blocks[i]);
        o += b;
        first = false;
    }
    o += "}, \"buffers\": [";
    first = true;
    for (const PRegion &r : p->regions) {
        if (r.kind != R_DEVICE) continue;
        size_t touched = 0;
        for (uint8_t t : r.lines) touched += t;
        snprintf(b, sizeof b, "%s{\"binding\": %d, \"bytes\": %zu, \"read\": %.17g, \"written\": %.17g, "
                 "\"lines_touched\": %zu}", first ? "" : ", ", r.binding, (size_t)(r.hi - r.lo), r.read, r.written,
                 touched);
        o += b;
        first = false;
    }
    return o + "]}";
}

}  // namespace mksim

// ---------------------------------------------------------------- C ABI (objc/mpskern.h)
using namespace mksim;

extern "C" mk_status mk_sim_profile_begin(mk_device *d, const mk_sim_profile_options *o) {
    if (!d || d->ops->kind != MK_DEVICE_SIM)
        return mk_set_error(MK_ERR_UNSUPPORTED, "profiling is the simulator's (backend 'sim')");
    if (!o) return mk_set_error(MK_ERR_INVALID, "mk_sim_profile_begin: NULL options");
    if (o->banks < 1 || o->banks > 64 || (o->bank_bytes != 2 && o->bank_bytes != 4 && o->bank_bytes != 8))
        return mk_set_error(MK_ERR_INVALID, "bank model %u banks x %u bytes: expected 1..64 banks of 2, 4 or 8 bytes",
                            o->banks, o->bank_bytes);
    if (o->line_bytes < 16 || (o->line_bytes & (o->line_bytes - 1)))
        return mk_set_error(MK_ERR_INVALID, "cache line of %u bytes: expected a power of two >= 16", o->line_bytes);
    Device *dev = (Device *)d->impl;
    std::lock_guard<std::mutex> g(dev->run_mu);
    dev->prof.on = true;
    dev->prof.max_groups = o->max_groups;
    dev->prof.sampled_only = o->sampled_only != 0;
    dev->prof.banks = o->banks;
    dev->prof.bank_bytes = o->bank_bytes;
    dev->prof.line_bytes = o->line_bytes;
    dev->prof_reports.clear();
    return MK_OK;
}

extern "C" mk_status mk_sim_profile_end(mk_device *d, char *json, size_t cap, size_t *needed) {
    if (!d || d->ops->kind != MK_DEVICE_SIM)
        return mk_set_error(MK_ERR_UNSUPPORTED, "profiling is the simulator's (backend 'sim')");
    Device *dev = (Device *)d->impl;
    std::lock_guard<std::mutex> g(dev->run_mu);
    std::string all = "[";
    for (size_t i = 0; i < dev->prof_reports.size(); i++) all += (i ? ", " : "") + dev->prof_reports[i];
    all += "]";
    if (needed) *needed = all.size() + 1;
    if (!json || cap < all.size() + 1) return MK_OK;     // the caller asks again with room
    memcpy(json, all.c_str(), all.size() + 1);
    dev->prof.on = false;
    dev->prof_reports.clear();
    return MK_OK;
}
