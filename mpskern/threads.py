"""How many threads the cpu backend uses: MPSKERN_NUM_THREADS when the first op runs (unset
or 0: one per core), or set_num_threads() at any time. One pool serves every op; BLAS runs
single-threaded inside it (objc/cpu/mk_cpu_threads.c, mk_cpu_blas.c)."""
import os
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
        0: one per core; more than 256 is taken as 256.

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
    _native.cpu_set_num_threads(min(n, MAX_THREADS))


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


def _check_env():
    """The C side reads the variable with atoi(), which would take 'abc' or '-2' as 0
    (one thread per core) without a word: say so here instead."""
    v = os.environ.get(ENV)
    if v is None or v.strip() == "":
        return
    try:
        ok = int(v) >= 0
    except ValueError:
        ok = False
    if not ok:
        warnings.warn(f"mpskern: {ENV}={v!r} is not a whole number >= 0; give a thread count "
                      f"such as {ENV}=4 (0 or unset: one thread per core)", RuntimeWarning,
                      stacklevel=3)


_check_env()
