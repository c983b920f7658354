"""Exceptions of mpskern (bad arguments raise the builtin ValueError / TypeError)."""
import re



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
    """The simulator's checking mode found a race, a missing barrier, a barrier divergence,
    an out-of-bounds access, a write to constant memory or a read of uninitialised
    threadgroup memory. The message names the kernel, the .metal file and line, and the
    threads involved; the same as fields (None where the finding has none):

      kind     "missing_barrier", "race" (between threadgroups), "out_of_bounds",
               "uninitialised_read", "constant_write", "barrier_divergence" or "other"
      kernel   the kernel's name
      file, line   the first place named (the access found; for a missing barrier the write)
      lines    every (file, line) named, in the message's order
      threads  every (thread_position_in_threadgroup, threadgroup_position_in_grid) named
      buffer   the [[buffer(i)]] index, or "threadgroup" for threadgroup memory
      offset   the byte offset of the access in that memory
    """

    KINDS = ("missing_barrier", "race", "out_of_bounds", "uninitialised_read", "constant_write",
             "barrier_divergence", "other")

    def __init__(self, message):
        super().__init__(message)
        self.message = message = str(message)
        self.kind = next((k for k, words in (
            ("missing_barrier", "no barrier between"), ("race", "data race"),
            ("out_of_bounds", "out-of-bounds"), ("uninitialised_read", "uninitialised"),
            ("constant_write", "write to constant memory"),
            ("barrier_divergence", "barrier divergence")) if words in message), "other")
        m = re.search(r"in kernel '([^']*)'", message)
        self.kernel = m.group(1) if m else None
        self.lines = [(f, int(n)) for f, n in re.findall(r"\bat (<[^>]*>|[^\s<>()]+?):(\d+)\b", message)]
        self.file, self.line = self.lines[0] if self.lines else (None, None)
        self.threads = [(tuple(map(int, t[:3])), tuple(map(int, t[3:]))) for t in re.findall(
            r"thread \((\d+),(\d+),(\d+)\) of threadgroup \((\d+),(\d+),(\d+)\)", message)]
        m = re.search(r"\[\[buffer\((\d+)\)\]\]", message)
        self.buffer = int(m.group(1)) if m else ("threadgroup" if "threadgroup memory" in message else None)
        m = re.search(r"\(byte (?:offset )?(-?\d+)", message)
        self.offset = int(m.group(1)) if m else None

    def __reduce__(self):            # picklable (multiprocessing) with its fields
        return (type(self), (self.message,))


class KernelError(MpskernError):
    """A kernel failed while it ran, as a GPU command buffer fails: an invalid memory
    access (in the simulator: outside its buffers' guard pages too), a run stopped past
    its time limit, an integer division by zero. The message names the kernel."""
