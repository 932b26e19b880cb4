"""docs/bugs-2026.md names, for each public report, the tests that cover it: every test it
names is a test of the suite file its row names (a renamed or removed test makes the
table untrue)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bugs-2026.md"


def _rows():
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= {"-"} and cells[0] != "report":
            yield cells


def test_every_test_the_table_names_is_in_the_suite_file_its_row_names():
    rows = list(_rows())
    assert len(rows) >= 10, "docs/bugs-2026.md: its table was not read"
    named = 0
    for report, _, cases in rows:
        files = re.findall(r"`(test_\w+\.py)", cases)
        tests = set(re.findall(r"(?:::|`)(test_\w+)(?=[\[`])", cases)) - {f[:-3] for f in files}
        if not files:
            assert cases.startswith("not yet"), f"{report}: names no suite file: {cases!r}"
            continue
        defined = set()
        for f in files:
            path = ROOT / "suites" / f
            assert path.is_file(), f"{report}: suites/{f} does not exist"
            defined |= set(re.findall(r"^def (test_\w+)\(", path.read_text(), re.M))
        missing = tests - defined
        assert not missing, f"{report}: {sorted(missing)} are not tests of {files}"
        named += len(tests)
    assert named >= 8
