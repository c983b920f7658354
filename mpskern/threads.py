"""How many threads the cpu backend uses: MPSKERN_NUM_THREADS when the first op runs (unset
or 0: one per core), or set_num_threads() at any time. One pool serves every op; BLAS runs
single-threaded inside it (objc/cpu/mk_cpu_threads.c, mk_cpu_blas.c)."""
from mpskern import _args, _native, env

ENV = "MPSKERN_NUM_THREADS"          # checked with the others at import (mpskern/env.py)
MAX_THREADS = env.VARS[ENV].most     # objc/cpu/mk_cpu_threads.c MK_MAX_THREADS


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
