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

// Functions whose frames stay on a fiber's stack after it switches away for good (a
// finished lane): without ASan's red zones they leave no poisoning for later frames there.
#if defined(__GNUC__) || defined(__clang__)
#define MK_NO_ASAN __attribute__((no_sanitize_address))
#else
#define MK_NO_ASAN
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
    bool abandoned = false;       // left mid-call (fiber_abandon); reset by fiber_init
    FiberFn fn = nullptr;         // what a fresh fiber runs
    void *arg = nullptr;
    const void *asan_bottom = nullptr;   // the stack ASan is told about on a switch here:
    size_t asan_size = 0;                // its own, or (a thread's) learned on the first switch
};

// A stack of `size` bytes (mmap'd, pages touched lazily, guard page below). false on failure.
bool fiber_alloc_stack(Fiber *f, size_t size);
void fiber_free_stack(Fiber *f);
// Prepare `f` to run fn(arg) on its stack when first switched to; `ret` is where the
// fiber continues when fn returns (fn must switch away instead of returning normally).
void fiber_init(Fiber *f, FiberFn fn, void *arg, Fiber *ret);
// Save the current context in `from` and continue `to`.
void fiber_switch(Fiber *from, Fiber *to);
// Leave `from` for good, its frames never returned through (a lane stopped by an error).
// Under AddressSanitizer the poisoning those frames leave on its stack is cleared by the
// next fiber_init; from a signal handler (in_handler) that of the alternate signal stack
// the handler runs on, right away. Elsewhere the same as fiber_switch.
void fiber_abandon(Fiber *from, Fiber *to, bool in_handler = false);

}  // namespace mksim
#endif
