"""Session-wide test setup.

Subprocesses (`python -m mpskern.cli.main ...`, `python -c ...`) must import the same
mpskern this session imported. `python -m` puts the working directory first on sys.path,
and from a checkout root that is the source tree, which has no compiled extension when
mpskern was installed (CI). So tests run from a scratch directory, with PYTHONPATH
pointing at wherever mpskern was imported from (the checkout with an in-place build, or
site-packages)."""
import os

import pytest

import mpskern


@pytest.fixture(autouse=True, scope="session")
def _subprocesses_see_this_mpskern(tmp_path_factory):
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
