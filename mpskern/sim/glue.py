"""The launch glue the front-end (frontend.py) appends to a translated library: one function
per kernel that binds its buffers, threadgroup memory and built-ins (each parameter's type
read off the kernel's own function type), the module table the runtime reads
(objc/sim/include/mk_sim_abi.h), and in the checking and profiling modes the definitions
of the instrumentation's hooks, which forward to the runtime."""

BUILTINS3 = {
    "thread_position_in_grid", "threadgroup_position_in_grid", "thread_position_in_threadgroup",
    "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
    "dispatch_threads_per_threadgroup",
}
BUILTINS1 = {
    "thread_index_in_threadgroup": "thread_index_in_threadgroup",
    "simdgroup_index_in_threadgroup": "simdgroup_index_in_threadgroup",
    "thread_index_in_simdgroup": "thread_index_in_simdgroup",
    "threads_per_simdgroup": "threads_per_simdgroup",
    "thread_execution_width": "threads_per_simdgroup",
    "simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup": "simdgroups_per_threadgroup",
    "quadgroup_index_in_threadgroup": "quadgroup_index_in_threadgroup",
    "thread_index_in_quadgroup": "thread_index_in_quadgroup",
}
ALIASES3 = {"grid_size": "threads_per_grid"}


def _arg_expr(p, i):
    """The glue's argument for parameter i (role from `p`); its type is read off the
    kernel's own function type (F), so template parameters need no textual substitution."""
    t = f"__mk_arg<F, {i}>::type"
    if p.attr == "buffer":
        return f"__mk_bind<{t}>(B[{p.index}])"
    if p.attr == "threadgroup":
        return f"({t})(TG[{p.index}])"
    if p.attr == "grid_origin":
        return f"__mk_builtin3<{t}>(__mk_zero3)"
    name = ALIASES3.get(p.attr, p.attr)
    if name in BUILTINS3:
        return f"__mk_builtin3<{t}>(L->{name})"
    return f"__mk_builtin1<{t}>(L->{BUILTINS1[name]})"


# The type of parameter I of a function pointer type F.
_ARG_TRAIT = """template <class F, int I> struct __mk_arg;
template <class R, class H, class... A> struct __mk_arg<R (*)(H, A...), 0> { typedef H type; };
template <class R, class H, class... A, int I> struct __mk_arg<R (*)(H, A...), I> {
  typedef typename __mk_arg<R (*)(A...), I - 1>::type type; };"""


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def glue(kernels, needs_fibers, checked, profiled=False):
    out = ['\n# 1 "<mpskern glue>"',
           "static const uint32_t __mk_zero3[3] = {0, 0, 0};", _ARG_TRAIT]
    for i, k in enumerate(kernels):
        args = ",\n      ".join(_arg_expr(p, j) for j, p in enumerate(k.params))
        out.append(f'#line {k.line} {_c_string(k.file)}')
        out.append(f"static void __mk_glue_{i}(void *const *B, void *const *TG, const mk_sim_lane *L) {{"
                   f" (void)B; (void)TG; (void)L; typedef decltype(&{k.callee}) F;"
                   f" {k.callee}({args}); }}")
    out.append('# 1 "<mpskern glue>"')
    rows = []
    for i, k in enumerate(kernels):
        refs = [(j, p) for j, p in enumerate(k.params)
                if p.attr == "buffer" and p.type.rstrip().endswith("&")]
        bufs = sum(1 << p.index for p in k.params if p.attr == "buffer")
        byts = sum(1 << p.index for _, p in refs)
        tgs = sum(1 << p.index for p in k.params if p.attr == "threadgroup")
        sizes = ", ".join(f"{{{p.index}u, (uint32_t)sizeof(std::remove_reference<"
                          f"__mk_arg<decltype(&{k.callee}), {j}>::type>::type)}}"
                          for j, p in refs)
        out.append(f"static const mk_sim_bytes_param __mk_bytes_{i}[] = {{{sizes or '{0u, 0u}'}}};")
        rows.append(f"  {{{_c_string(k.host_name)}, __mk_glue_{i}, {_c_string(k.file)}, {k.line}, "
                    f"{bufs}u, {byts}u, {tgs}u, (uint32_t)({k.max_threads}), {len(refs)}u, __mk_bytes_{i}}},")
    if not rows:
        rows.append('  {"", 0, "", 0, 0u, 0u, 0u, 0u, 0u, 0},')
    out.append("static const mk_sim_kernel __mk_kernels[] = {\n" + "\n".join(rows) + "\n};")
    # profiling: the site and block counts are defined by mpskern/sim/profile_build.py
    # once it has instrumented the library's IR
    out.append(f"static {'' if profiled else 'const '}mk_sim_module __mk_module = {{MK_SIM_ABI_VERSION, "
               f"{len(kernels)}, __mk_kernels, {int(needs_fibers)}, {int(checked)}, {int(profiled)}, 0, 0}};")
    if profiled:
        out.append('extern "C" const uint32_t __mk_prof_nsites, __mk_prof_nblocks;')
    out.append('extern "C" __attribute__((visibility("default"), no_sanitize_thread)) const mk_sim_module *'
               "mk_sim_module_init(const mk_sim_rt *rt) {\n"
               "  if (!rt || rt->abi != MK_SIM_ABI_VERSION) return 0;\n"
               "  __mk_rt = rt;\n" +
               ("  __mk_module.nsites = __mk_prof_nsites;\n  __mk_module.nblocks = __mk_prof_nblocks;\n"
                if profiled else "") +
               "  return &__mk_module;\n}")
    if checked:
        out.append(TSAN_SHIM)
    elif profiled:
        out.append(PROFILE_SHIM + TSAN_SHIM.replace(
            "#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->check_access(a, n, w, __builtin_return_address(0))",
            "#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->profile_access(a, 0, 0, (n) | (w) << 8)"))
    return "\n".join(out) + "\n"


# Checking mode: the library is compiled with -fsanitize=thread for its instrumentation
# only; these definitions (not instrumented themselves) forward to the runtime.
TSAN_SHIM = r'''
#define MK_NS __attribute__((no_sanitize_thread, visibility("hidden")))
extern "C" {
#define MK_HOOK(a, n, w) if (__mk_rt) __mk_rt->check_access(a, n, w, __builtin_return_address(0))
#define MK_RW(n) \
  MK_NS void __tsan_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_write##n(void *a) { MK_HOOK(a, n, 1); } \
  MK_NS void __tsan_unaligned_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_unaligned_write##n(void *a) { MK_HOOK(a, n, 1); } \
  MK_NS void __tsan_volatile_read##n(void *a) { MK_HOOK(a, n, 0); } \
  MK_NS void __tsan_volatile_write##n(void *a) { MK_HOOK(a, n, 1); }
MK_RW(1) MK_RW(2) MK_RW(4) MK_RW(8) MK_RW(16)
MK_NS void __tsan_read_range(void *a, unsigned long n) { MK_HOOK(a, (unsigned)n, 0); }
MK_NS void __tsan_write_range(void *a, unsigned long n) { MK_HOOK(a, (unsigned)n, 1); }
// clang instruments memcpy/memset/memmove through these (gcc calls the libc functions)
MK_NS void *__tsan_memcpy(void *d, const void *s, unsigned long n) {
  MK_HOOK((void *)s, (unsigned)n, 0); MK_HOOK(d, (unsigned)n, 1); return __builtin_memcpy(d, s, n); }
MK_NS void *__tsan_memmove(void *d, const void *s, unsigned long n) {
  MK_HOOK((void *)s, (unsigned)n, 0); MK_HOOK(d, (unsigned)n, 1); return __builtin_memmove(d, s, n); }
MK_NS void *__tsan_memset(void *d, int c, unsigned long n) {
  MK_HOOK(d, (unsigned)n, 1); return __builtin_memset(d, c, n); }
MK_NS void __tsan_func_entry(void *) {}
MK_NS void __tsan_func_exit(void) {}
MK_NS void __tsan_init(void) {}
MK_NS void __tsan_vptr_update(void **, void *) {}
MK_NS void __tsan_vptr_read(void **) {}
MK_NS void __tsan_atomic_thread_fence(int) {}
MK_NS void __tsan_atomic_signal_fence(int) {}
#define MK_AT(n, T) \
  MK_NS T __tsan_atomic##n##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_RELAXED); } \
  MK_NS void __tsan_atomic##n##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_and(volatile T *a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_or(volatile T *a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_xor(volatile T *a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_fetch_nand(volatile T *a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_RELAXED); } \
  MK_NS int __tsan_atomic##n##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) { \
    return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); } \
  MK_NS int __tsan_atomic##n##_compare_exchange_weak(volatile T *a, T *c, T v, int, int) { \
    return __atomic_compare_exchange_n(a, c, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED); } \
  MK_NS T __tsan_atomic##n##_compare_exchange_val(volatile T *a, T c, T v, int, int) { \
    __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return c; }
MK_AT(8, unsigned char) MK_AT(16, unsigned short) MK_AT(32, unsigned int) MK_AT(64, unsigned long long)
}
'''


# Profiling mode: profile_build.py replaces the instrumentation's __tsan_* calls with
# these (site, merge key, size/direction as arguments) and calls __mk_prof_bb at the start of
# every basic block; accesses it leaves to the __tsan_* hooks count as site 0.
PROFILE_SHIM = r'''
#define MK_PNS __attribute__((no_sanitize_thread, visibility("hidden"), used, noinline))
extern "C" {
MK_PNS void __mk_prof_acc(void *a, uint32_t site, uint32_t key, uint32_t info) {
  __mk_rt->profile_access(a, site, key, info); }
MK_PNS void __mk_prof_bb(uint32_t block) { __mk_rt->profile_block(block); }
}
'''
