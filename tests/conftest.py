"""Session-wide test setup.

Subprocesses (`python -m mpskern.cli.main ...`, `python -c ...`) must import the same
mpskern this session imported. `python -m` puts the working directory first on sys.path,
and from a checkout root that is the source tree, which has no compiled extension when
mpskern was installed (CI). So tests run from a scratch directory, with PYTHONPATH
pointing at wherever mpskern was imported from (the checkout with an in-place build, or
site-packages)."""
import os

import pytest


def pytest_sessionstart(session):
    """Before collection: a checkout without its compiled extension stops here with what
    to run, not at every test module's import."""
    try:
        import mpskern  # noqa: F401
    except ImportError as e:
        where = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if e.name == "mpskern._native" or "'_native'" in str(e):
            pytest.exit(f"mpskern's compiled extension is not built in {where}: run "
                        "`python setup.py build_ext --inplace` there first (or `pip install "
                        ".` and run pytest from another folder)", returncode=4)
        if e.name == "mpskern":
            pytest.exit(f"mpskern is not importable: `pip install .` in {where}, or build it "
                        "in place (`python setup.py build_ext --inplace`) and run "
                        "`python -m pytest` from there", returncode=4)
        raise


@pytest.fixture(autouse=True, scope="session")
def _subprocesses_see_this_mpskern(tmp_path_factory):
    import mpskern
    home = os.path.dirname(os.path.dirname(os.path.abspath(mpskern.__file__)))
    old_cwd, old_pp = os.getcwd(), os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = home + (os.pathsep + old_pp if old_pp else "")
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(old_cwd)
    if old_pp is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old_pp


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """The CPU kernels' thread count for one test, 1 and 2 (the single-thread path and a
    split), restored after. A module may define its own (tests/test_cpu_partitions.py)."""
    from mpskern import _native
    old = _native.cpu_get_num_threads()
    _native.cpu_set_num_threads(request.param)
    yield request.param
    _native.cpu_set_num_threads(old)
