"""The one error for importing mpskern from a source checkout whose compiled extension is
not built. After `pip install .`, Python run from the checkout's root (a REPL, `python -c`,
a script there) still imports the checkout's mpskern/ folder first: sys.path starts with
the current folder. That copy has no _native, and the bare ModuleNotFoundError named
neither the cause nor the fix."""
import os


def require_native():
    try:
        import mpskern._native  # noqa: F401  (the submodule itself, not an attribute)
    except ModuleNotFoundError as e:
        if e.name != "mpskern._native":
            raise
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.dirname(here)
        why = ("it is in the current folder" if os.path.abspath(os.getcwd()) == root else
               f"{root} comes first on sys.path (PYTHONPATH?)")
        raise ImportError(
            f"mpskern: {here} is a source checkout without its compiled extension "
            f"(mpskern._native); Python found it first because {why}. To use the installed "
            "mpskern (pip install .), run Python from another folder; to use this checkout, "
            "build it in place: python setup.py build_ext --inplace",
            name="mpskern._native") from None
