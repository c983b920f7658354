"""Exceptions of mpskern (bad arguments raise the builtin ValueError / TypeError)."""


class MpskernError(RuntimeError):
    """A failure inside a backend (dispatch, command buffer, driver)."""


class Unsupported(MpskernError, NotImplementedError):
    """The arguments are valid, but this backend cannot run them (a documented limitation:
    a grid larger than Metal allows, an MPS semantics gap, ...); the message says why and
    what to use instead. A NotImplementedError too, so older handlers still catch it."""


class BackendUnavailable(MpskernError):
    """The requested backend cannot run on this machine; the message says why."""


class KernelCompileError(MpskernError):
    """A Metal kernel failed to compile; the message carries the compiler's log."""


class KernelCheckError(MpskernError):
    """The simulator's checking mode found a race, a barrier divergence, an out-of-bounds
    access or a read of uninitialised threadgroup memory. The message names the kernel,
    the .metal file and line, and the threads involved."""


class KernelError(MpskernError):
    """A kernel failed while it ran, as a GPU command buffer fails: an invalid memory
    access (in the simulator: outside its buffers' guard pages too), a run stopped past
    its time limit, an integer division by zero. The message names the kernel."""
