// mk_sim.cc: the simulator device behind the C ABI (objc/mpskern.h): the ops table
// registered for MK_DEVICE_SIM, buffers (guarded, guard.cc), libraries (shared
// objects built by mpskern/sim/, loaded with dlopen and handed the runtime's function
// table), pipelines, dispatch validation and options. Execution: sched.cc.
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <chrono>

#include "sim.h"

namespace mksim {

static Device *dev_of(mk_device *d) { return (Device *)d->impl; }

static int family_from_env() {
    const char *e = getenv("MPSKERN_SIM_FAMILY");
    if (!e || !*e) return 8;
    if (!strncasecmp(e, "apple", 5)) e += 5;
    int f = atoi(e);
    return f >= 7 && f <= 10 ? f : -1;
}

static void set_family_limits(Options &o, int family) {
    o.family = family;
    // Apple7..Apple10 share these compute limits (Metal feature set tables).
    o.max_tg_memory = 32768;
    o.max_threads = 1024;
}

static void retain(mk_device *d) { dev_of(d)->refs.fetch_add(1); }
static void release(mk_device *d) {
    if (dev_of(d)->refs.fetch_sub(1) == 1) delete dev_of(d);
}
static void sim_device_free(mk_device *d) { release(d); }

static mk_status sim_get_info(mk_device *d, mk_device_info *out) {
    Device *dev = dev_of(d);
    snprintf(out->name, sizeof out->name, "mpskern simulator (apple%d)", dev->opt.family);
    out->architecture[0] = 0;
    out->family = dev->opt.family;
    out->is_simulator = 1;
    out->simd_width = MK_SIM_SIMD_WIDTH;
    out->max_threads_per_threadgroup = dev->opt.max_threads;
    out->max_threadgroup_memory = dev->opt.max_tg_memory;
    out->recommended_working_set = 0;
    out->unified_memory = 1;
    out->page_size = (uint32_t)sysconf(_SC_PAGESIZE);
    return MK_OK;
}

static mk_status sim_buffer_wrap(mk_device *d, void *host, size_t nbytes, int flags, mk_buffer **out) {
    if (!out) return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: out is NULL");
    if (!host && nbytes) return mk_set_error(MK_ERR_INVALID, "mk_buffer_wrap: NULL host memory");
    mk_buffer *b = (mk_buffer *)calloc(1, sizeof *b);
    if (!b) return mk_set_error(MK_ERR_NOMEM, "mk_buffer_wrap: out of memory");
    b->device = d;
    b->host = host;
    b->nbytes = nbytes;
    b->flags = flags;
    b->zero_copy = !nbytes || is_guarded(host, nbytes);   // else a run works on a guarded copy
    retain(d);
    *out = b;
    return MK_OK;
}

static mk_status sim_buffer_alloc(mk_device *d, size_t nbytes, mk_buffer **out) {
    void *p = nullptr;   // device scratch: guarded memory (zeroed), used in place
    if (mk_guarded_alloc(nbytes, &p) != MK_OK)
        return mk_set_error(MK_ERR_NOMEM, "mk_buffer_alloc: cannot allocate %zu bytes", nbytes);
    mk_status st = sim_buffer_wrap(d, p, nbytes, MK_BUFFER_READ | MK_BUFFER_WRITE, out);
    if (st != MK_OK) { mk_guarded_free(p); return st; }
    (*out)->impl = p;   // owned
    return MK_OK;
}

static mk_status sim_buffer_sync(mk_buffer *) { return MK_OK; }   // copied back by each run

static void sim_buffer_free(mk_buffer *b) {
    mk_device *d = b->device;
    mk_guarded_free(b->impl);
    free(b);
    release(d);
}

static mk_status sim_library_create(mk_device *, const char *, const char *const *, mk_library **) {
    return mk_set_error(MK_ERR_UNSUPPORTED,
                        "the simulator compiles MSL in Python (mpskern.sim.build_library) and "
                        "loads the result with mk_library_load");
}

static mk_status sim_library_load(mk_device *d, const char *path, mk_library **out) {
    if (!path || !out) return mk_set_error(MK_ERR_INVALID, "mk_library_load: NULL argument");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return mk_set_error(MK_ERR_COMPILE, "simulator: cannot load %s: %s", path, dlerror());
    auto init = (mk_sim_module_init_fn)dlsym(h, MK_SIM_MODULE_INIT);
    const mk_sim_module *mod = init ? init(runtime_table()) : nullptr;
    if (!mod || mod->abi != MK_SIM_ABI_VERSION) {
        dlclose(h);
        return mk_set_error(MK_ERR_COMPILE, "simulator: %s is not a kernel library of this "
                            "mpskern (ABI %d expected); clear the compile cache", path, MK_SIM_ABI_VERSION);
    }
    Library *lib = new Library{h, mod, path};   // refs = 1: the handle's
    mk_library *l = (mk_library *)calloc(1, sizeof *l);
    l->device = d;
    l->impl = lib;
    retain(d);
    *out = l;
    return MK_OK;
}

// Pipelines may outlive the library handle: the shared object is unloaded when the last
// of them goes (no run is using it then: a running dispatch holds its pipeline)
static void library_release(Library *lib) {
    if (lib->refs.fetch_sub(1) != 1) return;
    dlclose(lib->handle);
    delete lib;
}

static void sim_library_free(mk_library *l) {
    mk_device *d = l->device;
    library_release((Library *)l->impl);
    free(l);
    release(d);
}

static mk_status sim_pipeline_create(mk_device *d, mk_library *l, const char *name, mk_pipeline **out) {
    Library *lib = (Library *)l->impl;
    const mk_sim_module *m = lib->mod;
    for (int i = 0; i < m->nkernels; i++) {
        if (strcmp(m->kernels[i].name, name) != 0) continue;
        mk_pipeline *p = (mk_pipeline *)calloc(1, sizeof *p);
        p->device = d;
        p->impl = new Pipeline{lib, &m->kernels[i]};
        lib->refs.fetch_add(1);
        p->max_threads = dev_of(d)->opt.max_threads;
        if (m->kernels[i].max_threads && m->kernels[i].max_threads < p->max_threads)
            p->max_threads = m->kernels[i].max_threads;
        p->exec_width = MK_SIM_SIMD_WIDTH;
        p->name = m->kernels[i].name;
        for (uint32_t j = 0; j < m->kernels[i].nbytes_params; j++) {
            const mk_sim_bytes_param &bp = m->kernels[i].bytes_params[j];
            if (bp.index < MK_MAX_BINDINGS) p->min_bytes[bp.index] = bp.size;
        }
        retain(d);
        *out = p;
        return MK_OK;
    }
    std::string names;
    for (int i = 0; i < m->nkernels; i++) names += std::string(i ? ", " : "") + m->kernels[i].name;
    return mk_set_error(MK_ERR_INVALID, "no kernel named '%s' in the library; it has: %s", name,
                        names.empty() ? "(none)" : names.c_str());
}

static void sim_pipeline_free(mk_pipeline *p) {
    mk_device *d = p->device;
    Library *lib = ((Pipeline *)p->impl)->lib;
    delete (Pipeline *)p->impl;
    library_release(lib);
    free(p);
    release(d);
}

// Turn one mk_dispatch into a Job, with the checks Metal's validation layer would make.
static mk_status prepare(Device *dev, const mk_dispatch &ds, const Mirrors &ms, Job &j) {
    Pipeline *p = (Pipeline *)ds.pipeline->impl;
    const mk_sim_kernel *k = p->k;
    j.k = k;
    j.lib = p->lib;
    j.opt = dev->opt;
    uint64_t nthreads = (uint64_t)ds.threadgroup[0] * ds.threadgroup[1] * ds.threadgroup[2];
    if (nthreads == 0)
        return mk_set_error(MK_ERR_INVALID, "kernel '%s': threadgroup size (%u,%u,%u) has a zero",
                            k->name, ds.threadgroup[0], ds.threadgroup[1], ds.threadgroup[2]);
    if (nthreads > dev->opt.max_threads)
        return mk_set_error(MK_ERR_INVALID, "kernel '%s': threadgroup (%u,%u,%u) has %llu threads; "
                            "the simulated apple%d device allows %u", k->name, ds.threadgroup[0],
                            ds.threadgroup[1], ds.threadgroup[2], (unsigned long long)nthreads,
                            dev->opt.family, dev->opt.max_threads);
    if (k->max_threads && nthreads > k->max_threads)
        return mk_set_error(MK_ERR_INVALID, "kernel '%s' (%s:%d) declares [[max_total_threads_per_threadgroup(%u)]]; "
                            "threadgroup (%u,%u,%u) has %llu threads", k->name, k->file, k->line, k->max_threads,
                            ds.threadgroup[0], ds.threadgroup[1], ds.threadgroup[2], (unsigned long long)nthreads);
    j.partial = ds.grid_units == MK_GRID_THREADS;
    for (int d = 0; d < 3; d++) {
        // 64-bit: 2^32 - 1 threads in groups of 1024 overflow uint32, which once made a grid
        // of no threadgroups at all (mk_run refused grids of 2^32 threads or more)
        uint64_t tg = ds.threadgroup[d];
        uint64_t groups = j.partial ? (ds.grid[d] + tg - 1) / tg : ds.grid[d];
        uint64_t threads = j.partial ? ds.grid[d] : ds.grid[d] * tg;
        j.tg[d] = (uint32_t)tg;
        j.groups[d] = (uint32_t)groups;
        j.threads_per_grid[d] = (uint32_t)threads;
    }
    j.ngroups = (uint64_t)j.groups[0] * j.groups[1] * j.groups[2];
    for (uint32_t i = 0; i < MK_MAX_BINDINGS; i++) {
        bool declared = (k->buffer_mask >> i) & 1;
        const mk_binding *b = i < ds.nbindings ? &ds.bindings[i] : nullptr;
        bool bound = b && (b->buffer || b->bytes);
        if (declared && !bound)
            return mk_set_error(MK_ERR_INVALID, "kernel '%s' (%s:%d): [[buffer(%u)]] is not bound",
                                k->name, k->file, k->line, i);
        if (!bound) continue;
        if (b->buffer) {
            if (b->buffer->device != ds.pipeline->device)
                return mk_set_error(MK_ERR_INVALID, "kernel '%s': buffer %u belongs to another device", k->name, i);
            if (b->offset > b->buffer->nbytes)
                return mk_set_error(MK_ERR_INVALID, "kernel '%s': offset %llu of buffer %u is past its "
                                    "%zu bytes", k->name, (unsigned long long)b->offset, i, b->buffer->nbytes);
            j.bases[i] = mirrors_translate(ms, b->buffer);
            j.buffers[i] = j.bases[i] + b->offset;
            j.bufs[i] = b->buffer;
            j.offsets[i] = b->offset;
            j.sizes[i] = b->buffer->nbytes - b->offset;
        } else {
            // setBytes: a private, aligned copy (the kernel sees it as constant memory)
            // +128: the checking mode's red zone after a value stays inside this allocation
            j.bytes_copies.emplace_back(new unsigned char[((size_t)b->nbytes + 15) / 16 * 16 + 16 + 128]);
            unsigned char *c = j.bytes_copies.back().get();
            c = (unsigned char *)(((uintptr_t)c + 15) & ~(uintptr_t)15);
            memcpy(c, b->bytes, b->nbytes);
            j.buffers[i] = c;
            j.sizes[i] = b->nbytes;
            j.is_bytes[i] = true;
        }
    }
    // checking mode: red zones around each [[threadgroup(i)]] block catch overruns
    size_t red = p->lib->mod->checked ? TG_RED_ZONE : 0, off = red, used = 0;
    for (int i = 0; i < 4; i++) {
        bool declared = (k->tg_param_mask >> i) & 1;
        if (declared && ds.threadgroup_memory[i] == 0)
            return mk_set_error(MK_ERR_INVALID, "kernel '%s' (%s:%d): [[threadgroup(%d)]] has no "
                                "threadgroup_memory length", k->name, k->file, k->line, i);
        j.tg_param_off[i] = (uint32_t)off;
        j.tg_param_size[i] = ds.threadgroup_memory[i];
        size_t sz = ((size_t)ds.threadgroup_memory[i] + 15) / 16 * 16;
        off += sz + (sz ? red : 0);
        used += sz;
    }
    j.tg_dynamic_end = off;
    j.tg_dynamic_used = used;
    if (used > dev->opt.max_tg_memory)
        return mk_set_error(MK_ERR_INVALID, "kernel '%s': %zu bytes of [[threadgroup(i)]] memory; the "
                            "simulated apple%d device allows %u", k->name, used, dev->opt.family,
                            dev->opt.max_tg_memory);
    return MK_OK;
}

static mk_status run_list(Device *dev, const mk_dispatch *list, uint32_t n, const Mirrors &ms,
                          mk_timing *t) {
    auto t0 = std::chrono::steady_clock::now();
    double compute_ms = 0;
    for (uint32_t i = 0; i < n; i++) {
        Job j;
        j.mirrors = &ms;
        mk_status st = prepare(dev, list[i], ms, j);
        if (st != MK_OK) return st;
        if (j.ngroups == 0) continue;
        // A library built for checking always runs checked; check mode without one is an error.
        if (j.opt.check && !j.lib->mod->checked)
            return mk_set_error(MK_ERR_INVALID, "kernel '%s': checking mode needs a library built "
                                "with check=True", j.k->name);
        j.opt.check = j.lib->mod->checked;
        if (j.opt.check) j.checker = checker_create(j);
        if (dev->prof.on) {   // profiling mode (profile.cc)
            if (!j.lib->mod->profiled) {
                if (j.checker) checker_free(j.checker);
                return mk_set_error(MK_ERR_INVALID, "kernel '%s': profiling needs a library built with "
                                    "profile=True", j.k->name);
            }
            j.profiler = profiler_create(j, dev->prof);
        }
        auto c0 = std::chrono::steady_clock::now();
        st = run_dispatch(dev, j);
        compute_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
        if (j.checker) checker_free(j.checker);
        if (j.profiler) {
            if (st == MK_OK) dev->prof_reports.push_back(profiler_report(j.profiler));
            profiler_free(j.profiler);
        }
        if (st == MK_OK) st = mirrors_check(ms, j);
        if (st != MK_OK) return st;
    }
    t->gpu_ms = compute_ms;
    t->wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return MK_OK;
}

// The time limit covers the whole run (a command buffer); SIGINT stops it when asked to.
static mk_status sim_run_ex(mk_device *d, const mk_dispatch *list, uint32_t n,
                            const mk_run_control *c, mk_timing *t) {
    Device *dev = dev_of(d);
    std::lock_guard<std::mutex> g(dev->run_mu);
    RunLimits lim;
    lim.limit_s = c && c->time_limit_s > 0 ? c->time_limit_s : dev->opt.time_limit_s;
    lim.interruptible = c && c->interruptible;
    if (!(lim.limit_s >= 0) || lim.limit_s > 1e9)
        return mk_set_error(MK_ERR_INVALID, "mk_run: time limit %g s: expected 0 (none) or a "
                            "positive number of seconds", lim.limit_s);
    // the run's buffers where a stray access faults (guard.cc); whatever the kernels wrote,
    // also before a failure, goes back to the host memory
    Mirrors ms;
    mk_status st = mirrors_create(list, n, ms);
    if (st != MK_OK) return st;
    run_begin(dev, lim);
    st = run_list(dev, list, n, ms, t);
    run_end(dev, lim);
    mirrors_finish(ms, true);
    return st;
}

static mk_status sim_run(mk_device *d, const mk_dispatch *list, uint32_t n, mk_timing *t) {
    return sim_run_ex(d, list, n, nullptr, t);
}

static mk_status sim_set_options(mk_device *d, const mk_sim_options *o) {
    Device *dev = dev_of(d);
    if (o->order < MK_ORDER_FORWARD || o->order > MK_ORDER_RANDOM)
        return mk_set_error(MK_ERR_INVALID, "simulator order %d is not forward/reverse/random", o->order);
    if (o->family && (o->family < 7 || o->family > 10))
        return mk_set_error(MK_ERR_INVALID, "simulated GPU family %d: expected 7..10 (apple7..apple10)", o->family);
    if (o->workers < 0) return mk_set_error(MK_ERR_INVALID, "workers must be >= 0");
    if (o->max_threads_per_threadgroup > 1024 || (o->max_threads_per_threadgroup % 32))
        return mk_set_error(MK_ERR_INVALID, "max_threads_per_threadgroup must be a multiple of 32, at most 1024");
    if (!(o->time_limit_s >= 0) || o->time_limit_s > 1e9)
        return mk_set_error(MK_ERR_INVALID, "time_limit %g: expected 0 (none) or a positive number "
                            "of seconds", o->time_limit_s);
    std::lock_guard<std::mutex> g(dev->run_mu);
    Options &p = dev->opt;
    p.check = o->check;
    p.order = o->order;
    p.seed = o->seed;
    p.workers = o->workers;
    p.time_limit_s = o->time_limit_s;
    // Every call sets all options: 0 means the default (the environment's family, the
    // family's limits), so set_sim_options() with no arguments restores the defaults.
    int fam = o->family ? o->family : family_from_env();
    set_family_limits(p, fam > 0 ? fam : 8);
    if (o->max_threadgroup_memory) p.max_tg_memory = o->max_threadgroup_memory;
    if (o->max_threads_per_threadgroup) p.max_threads = o->max_threads_per_threadgroup;
    return MK_OK;
}

static const mk_device_ops OPS = {
    MK_DEVICE_SIM,     sim_device_free,     sim_get_info,     sim_buffer_wrap,
    sim_buffer_alloc,  sim_buffer_sync,     sim_buffer_free,  sim_library_create,
    sim_library_load,  sim_library_free,    sim_pipeline_create, sim_pipeline_free,
    sim_run,           sim_set_options,     sim_run_ex,
};

// The simulator compiles kernels with the host C++ compiler (mpskern/sim/compiler.py
// looks for the same names): without one it cannot run anything.
static bool have_compiler() {
    const char *cxx = getenv("CXX");
    const char *names[] = {cxx && *cxx ? cxx : "clang++", "clang++", "g++", "c++"};
    const char *path = getenv("PATH");
    for (const char *n : names) {
        if (strchr(n, '/')) {
            if (access(n, X_OK) == 0) return true;
            continue;
        }
        std::string p = path ? path : "/usr/bin:/bin";
        size_t start = 0;
        while (start <= p.size()) {
            size_t end = p.find(':', start);
            if (end == std::string::npos) end = p.size();
            std::string f = p.substr(start, end - start) + "/" + n;
            if (access(f.c_str(), X_OK) == 0) return true;
            start = end + 1;
        }
    }
    return false;
}

static int sim_count(char *why, size_t why_len) {
    if (!have_compiler()) {
        if (why) snprintf(why, why_len, "the simulator needs a C++17 compiler (clang++ or g++ on PATH, or CXX)");
        return 0;
    }
    if (family_from_env() < 0) {
        if (why) snprintf(why, why_len, "MPSKERN_SIM_FAMILY=%s is not apple7..apple10", getenv("MPSKERN_SIM_FAMILY"));
        return 0;
    }
    return 1;
}

static mk_status sim_create(int, mk_device **out) {
    Device *dev = new Device();
    set_family_limits(dev->opt, family_from_env());
    dev->handle.ops = &OPS;
    dev->handle.impl = dev;
    *out = &dev->handle;
    return MK_OK;
}

static const mk_device_provider PROVIDER = {sim_count, sim_create};

__attribute__((constructor)) static void register_sim() { mk_register_provider(MK_DEVICE_SIM, &PROVIDER); }

}  // namespace mksim
