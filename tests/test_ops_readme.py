"""The README's op examples run as written (on backend "auto", which is cpu here)."""
import os
import re

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def test_readme_examples_run():
    text = open(README, encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no ```python example"
    for code in blocks:
        ns = {}
        exec(compile(code, "README.md", "exec"), ns)
        if "mean" in ns:  # batch_norm training updated the running stats in place
            assert not (ns["mean"] == 0).all()
