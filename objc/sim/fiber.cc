// fiber.cc: stacks and context switches for the simulator's fibers (see fiber.h).
#include "fiber.h"

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MK_ASAN 1
#endif
#endif
#ifdef MK_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace mksim {

// Frames left on a stack keep ASan's poisoned red zones; a later, different frame there
// would be reported as a stack-use-after-scope.
static void unpoison(void *p, size_t n) {
#ifdef MK_ASAN
    __asan_unpoison_memory_region(p, n);
#else
    (void)p; (void)n;
#endif
}

#if defined(MK_ASAN) && !defined(MK_SIM_UCONTEXT)
// ASan must know which stack runs (__sanitizer_*_switch_fiber), or it takes a fiber's frames
// for a wild stack ("ignoring requested __asan_handle_no_return") and may report nonsense
static thread_local Fiber *tl_from;   // the fiber being left by the switch in progress
#endif

MK_NO_ASAN void fiber_abandon(Fiber *from, Fiber *to, bool in_handler) {
    from->abandoned = true;
    if (in_handler) {
        stack_t ss;
        if (sigaltstack(nullptr, &ss) == 0 && (ss.ss_flags & SS_ONSTACK)) unpoison(ss.ss_sp, ss.ss_size);
    }
    fiber_switch(from, to);
}

bool fiber_alloc_stack(Fiber *f, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size = (size + page - 1) / page * page;
    void *p = mmap(nullptr, size + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS
#ifdef MAP_NORESERVE
                       | MAP_NORESERVE
#endif
                   , -1, 0);
    if (p == MAP_FAILED) return false;
    mprotect(p, page, PROT_NONE);   // stack overflow faults instead of corrupting memory
    f->stack = (char *)p + page;
    f->stack_size = size;
    return true;
}

void fiber_free_stack(Fiber *f) {
    if (!f->stack) return;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    munmap(f->stack - page, f->stack_size + page);
    f->stack = nullptr;
}

#ifdef MK_SIM_UCONTEXT

void fiber_init(Fiber *f, FiberFn fn, void *arg, Fiber *ret) {
    if (f->abandoned) unpoison(f->stack, f->stack_size);
    f->abandoned = false;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = f->stack_size;
    f->ctx.uc_link = &ret->ctx;
    // makecontext passes ints: split the pointers in two halves.
    uintptr_t a = (uintptr_t)arg, g = (uintptr_t)fn;
    makecontext(&f->ctx, (void (*)())+[](unsigned fl, unsigned fh, unsigned al, unsigned ah) {
        FiberFn fn2 = (FiberFn)(((uintptr_t)fh << 32) | fl);
        fn2((void *)(((uintptr_t)ah << 32) | al));
    }, 4, (unsigned)g, (unsigned)((uint64_t)g >> 32), (unsigned)a, (unsigned)((uint64_t)a >> 32));
}

void fiber_switch(Fiber *from, Fiber *to) { swapcontext(&from->ctx, &to->ctx); }

#else

extern "C" void mk_sim_switch(void **save_sp, void *load_sp);
extern "C" void mk_sim_fiber_start();

// a fresh fiber's first code: tell ASan the switch is complete, then run fn
MK_NO_ASAN static void fiber_entry(void *p) {
    Fiber *f = (Fiber *)p;
#ifdef MK_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &tl_from->asan_bottom, &tl_from->asan_size);
#endif
    f->fn(f->arg);
}

// Resets f to run fn(arg) and returns its stack's 16-byte aligned top, where the
// architecture's fiber_init lays out the first switch's saved registers.
static void **fiber_prepare(Fiber *f, FiberFn fn, void *arg) {
    if (f->abandoned) unpoison(f->stack, f->stack_size);
    f->abandoned = false;
    f->fn = fn;
    f->arg = arg;
    f->asan_bottom = f->stack;
    f->asan_size = f->stack_size;
    return (void **)(((uintptr_t)(f->stack + f->stack_size)) & ~(uintptr_t)15);
}

// A global function symbol of the asm below: Mach-O's leading underscore; ELF's type and
// hidden visibility (the symbols stay inside _native.so).
#if defined(__APPLE__)
#define MK_SYM(x) "_" #x
#define MK_ASM_FUNCTION(x) ".globl _" #x "\n"
#else
#define MK_SYM(x) #x
#if defined(__x86_64__)
#define MK_ASM_FUNCTION(x) ".globl " #x "\n.type " #x ",@function\n.hidden " #x "\n"
#else
#define MK_ASM_FUNCTION(x) ".globl " #x "\n.type " #x ",%function\n.hidden " #x "\n"
#endif
#endif

#if defined(__x86_64__)
// Callee-saved: rbx rbp r12-r15 (System V). The first switch into a fresh fiber "returns"
// into mk_sim_fiber_start with fiber_entry in r12 and the Fiber in r13.
asm(".text\n"
    MK_ASM_FUNCTION(mk_sim_switch)
    MK_SYM(mk_sim_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    MK_ASM_FUNCTION(mk_sim_fiber_start)
    MK_SYM(mk_sim_fiber_start) ":\n"
    "  movq %r13, %rdi\n"
    "  callq *%r12\n"
    "  ud2\n");

void fiber_init(Fiber *f, FiberFn fn, void *arg, Fiber *) {
    void **sp = fiber_prepare(f, fn, arg);
    *--sp = (void *)mk_sim_fiber_start;    // ret target: leaves rsp % 16 == 0 before the call
    *--sp = nullptr;                       // rbp
    *--sp = nullptr;                       // rbx
    *--sp = (void *)fiber_entry;           // r12
    *--sp = f;                             // r13
    *--sp = nullptr;                       // r14
    *--sp = nullptr;                       // r15
    f->sp = sp;
}

#elif defined(__aarch64__)
// Callee-saved: x19-x28, fp (x29), lr (x30), d8-d15 (AAPCS64). A fresh fiber's lr points
// at mk_sim_fiber_start with fiber_entry in x19 and the Fiber in x20.
asm(".text\n"
    MK_ASM_FUNCTION(mk_sim_switch)
    ".p2align 2\n"
    MK_SYM(mk_sim_switch) ":\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #176\n"
    "  ret\n"
    MK_ASM_FUNCTION(mk_sim_fiber_start)
    ".p2align 2\n"
    MK_SYM(mk_sim_fiber_start) ":\n"
    "  mov x0, x20\n"
    "  blr x19\n"
    "  brk #0\n");

void fiber_init(Fiber *f, FiberFn fn, void *arg, Fiber *) {
    void **sp = fiber_prepare(f, fn, arg) - 176 / sizeof(void *);
    for (int i = 0; i < 22; i++) sp[i] = nullptr;
    sp[0] = (void *)fiber_entry;           // x19
    sp[1] = f;                             // x20
    sp[11] = (void *)mk_sim_fiber_start;   // x30 (lr)
    f->sp = sp;
}
#endif

MK_NO_ASAN void fiber_switch(Fiber *from, Fiber *to) {
#ifdef MK_ASAN
    void *fake = nullptr;
    tl_from = from;
    // an abandoned fiber's stack is dead to ASan (nullptr)
    __sanitizer_start_switch_fiber(from->abandoned ? nullptr : &fake, to->asan_bottom, to->asan_size);
    mk_sim_switch(&from->sp, to->sp);
    __sanitizer_finish_switch_fiber(fake, &tl_from->asan_bottom, &tl_from->asan_size);
#else
    mk_sim_switch(&from->sp, to->sp);
#endif
}

#endif

}  // namespace mksim
