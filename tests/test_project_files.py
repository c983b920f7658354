"""The files a user of the repository expects beside the code: a LICENSE that is the license
pyproject.toml declares, a CITATION.cff in step with the package, and README's "how to cite
results" naming only columns the results schema has."""
import re
from pathlib import Path

import mpskern
from mpskern.bench.schema import COLUMNS

ROOT = Path(__file__).resolve().parent.parent


def test_license_file_is_the_declared_license():
    declared = re.search(r'^license = \{ text = "([^"]+)" \}', (ROOT / "pyproject.toml").read_text(),
                         re.M).group(1)
    text = (ROOT / "LICENSE").read_text()
    assert declared == "MIT" and text.startswith("MIT License")
    assert "Permission is hereby granted, free of charge" in text and "WITHOUT WARRANTY" in text


def test_citation_file_matches_the_package():
    cff = (ROOT / "CITATION.cff").read_text()
    fields = dict(re.findall(r'^([\w-]+): "?([^"\n]*)"?$', cff, re.M))
    assert fields["cff-version"].startswith("1.2")
    assert fields["version"] == mpskern.__version__, "bump CITATION.cff's version with the package"
    assert fields["license"] == "MIT" and fields["title"].startswith("mpskern")
    assert re.search(r"^authors:\n  - name: ", cff, re.M)


def test_readme_cites_results_by_columns_the_schema_has():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Citing mpskern and its results", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z][a-z0-9_]*)`", section)
    named = [n for n in named if n not in ("mpskern", "sim")]
    assert len(named) >= 15, named
    unknown = [n for n in named if n not in COLUMNS]
    assert not unknown, f"README's citing section names columns the schema lacks: {unknown}"
    assert "CITATION.cff" in section and "LICENSE" in section
