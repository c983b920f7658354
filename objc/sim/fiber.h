// fiber.h: cooperative user-space threads for the simulator's GPU threads.
// A hand-written context switch (x86-64, aarch64: callee-saved registers and the stack
// pointer, ~10 ns) with ucontext as the fallback elsewhere (~25x slower: it makes a
// signal-mask system call per switch). MK_SIM_UCONTEXT=1 forces the fallback.
#ifndef MK_SIM_FIBER_H
#define MK_SIM_FIBER_H
#include <stddef.h>

#if !defined(MK_SIM_UCONTEXT) && !(defined(__x86_64__) || defined(__aarch64__))
#define MK_SIM_UCONTEXT 1
#endif
#ifdef MK_SIM_UCONTEXT
#include <ucontext.h>
#endif

namespace mksim {

typedef void (*FiberFn)(void *arg);

struct Fiber {
#ifdef MK_SIM_UCONTEXT
    ucontext_t ctx;
#else
    void *sp = nullptr;           // saved stack pointer while switched out
#endif
    char *stack = nullptr;        // lowest usable address (a guard page lies below)
    size_t stack_size = 0;
};

// A stack of `size` bytes (mmap'd, pages touched lazily, guard page below). false on failure.
bool fiber_alloc_stack(Fiber *f, size_t size);
void fiber_free_stack(Fiber *f);
// Prepare `f` to run fn(arg) on its stack when first switched to; `ret` is where the
// fiber continues when fn returns (fn must switch away instead of returning normally).
void fiber_init(Fiber *f, FiberFn fn, void *arg, Fiber *ret);
// Save the current context in `from` and continue `to`.
void fiber_switch(Fiber *from, Fiber *to);

}  // namespace mksim
#endif
