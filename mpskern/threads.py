"""How many threads the cpu backend uses: MPSKERN_NUM_THREADS when the first op runs (unset
or 0: one per core), or set_num_threads() at any time. One pool serves every op; BLAS runs
single-threaded inside it (objc/cpu/mk_cpu_threads.c, mk_cpu_blas.c)."""
import os
import re
import warnings

from mpskern import _args, _native

ENV = "MPSKERN_NUM_THREADS"
MAX_THREADS = 256   # objc/cpu/mk_cpu_threads.c MK_MAX_THREADS


def set_num_threads(n):
    """Use `n` threads for the cpu backend's ops from now on (MPSKERN_NUM_THREADS sets the
    count before the first op instead).

    Parameters
    ----------
    n : int
        0: one per core; at most 256 (the most threads the pool runs).

    Returns
    -------
    None

    Example
    -------
        mk.set_num_threads(2)
        assert mk.get_num_threads() == 2
        mk.set_num_threads(0)                # back to one per core
    """
    n = _args.whole(n, "n", "set_num_threads", 0, " (0: one thread per core)")
    if n > MAX_THREADS:
        raise ValueError(f"set_num_threads: n={n} is more than {MAX_THREADS}, the most threads "
                         f"mpskern's pool runs; pass at most {MAX_THREADS} (0: one per core)")
    _native.cpu_set_num_threads(n)


def get_num_threads():
    """The number of threads the cpu backend's ops use.

    Returns
    -------
    int
        At least 1.

    Example
    -------
        print(mk.get_num_threads())
    """
    return _native.cpu_get_num_threads()


_WHOLE = re.compile(r"[ \t]*\+?[0-9]+[ \t]*")   # what the C side's atoi() reads in full


def _check_env():
    """The C side reads the variable with atoi() when the first op runs, which would take
    'abc' or '-2' as 0 (one thread per core), '4abc' as 4 and 99999999999 as whatever its
    int wraps to, without a word. Where the value is not a count from 0 to MAX_THREADS,
    say so and set what the warning says instead."""
    v = os.environ.get(ENV)
    if v is None or v.strip() == "":
        return
    if not _WHOLE.fullmatch(v):
        use, why = 0, "is not a whole number >= 0"
    elif int(v) > MAX_THREADS:
        use, why = MAX_THREADS, f"is more than {MAX_THREADS}, the most threads the pool runs"
    else:
        return
    warnings.warn(f"mpskern: {ENV}={v!r} {why}; using "
                  f"{'one thread per core' if use == 0 else use}: give a thread count such as "
                  f"{ENV}=4 (0 or unset: one thread per core)", RuntimeWarning, stacklevel=3)
    _native.cpu_set_num_threads(use)


_check_env()
