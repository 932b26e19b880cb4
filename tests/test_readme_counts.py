"""The case counts the READMEs state are the suite's: README.md's sweeps line (smoke,
standard, full), its health check (smoke without the trap cases) and its trap counts;
reports/README.md's full sweep and its table of cases and trap cases per sweep; and the
trap counts docs/running.md repeats. Each is found by a pattern and compared with a real
collection of the checkout (``--collect-only -m "not trap"`` per sweep: pytest's last
line gives the cases, those kept and the trap cases it deselected), so a count left
stale by a change of the suites fails here. One nested collection per sweep (full:
~8 s on two cores), with its report folder under tmp_path. CPU only."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nested_run import REPO, pytest_run

SWEEPS = ("smoke", "standard", "full")
N = r"(\d{1,3}(?:,\d{3})*|\d+)"          # 82,077 or 82077

# (file, what the count is, sweep, which number of the collection, pattern): the pattern
# is searched in the file's text with its white space collapsed to single spaces, each
# ``{N}`` a number as the READMEs write it; its named group ``n`` (or the group named
# after the sweep) is the stated count. Which number: "total" (every case of the sweep,
# the node's included), "kept" (without the trap cases, as the health check runs),
# "trap" (the cases marked trap).
STATEMENTS = [
    *[("README.md", f"the sweeps line, {s}", s, "total",
       r"Sweeps: `--sweep smoke` \((?P<smoke>{N}) cases\), `standard` \((?P<standard>{N})[^)]*\), "
       r"`full` \((?P<full>{N})\)") for s in SWEEPS],
    ("README.md", "the health check (smoke, -m \"not trap\")", "smoke", "kept",
     r"\*\*Health checks\.\*\* The smoke sweep without the cases that trap the GPU on purpose "
     r"\((?P<n>{N}) cases\)"),
    *[("README.md", f"the trap cases, {s}", s, "trap",
       r"marked `trap` \(full (?P<full>{N}), standard (?P<standard>{N}), smoke (?P<smoke>{N})\)")
      for s in SWEEPS],
    ("reports/README.md", "a full sweep without a GPU", "full", "total",
     r"\(a full sweep: (?P<n>{N}) cases\)"),
    *[("reports/README.md", f"the trap table's cases, {s}", s, "total",
       rf"\| {s} \| (?P<n>{{N}}) \| {{N}} \|") for s in SWEEPS],
    *[("reports/README.md", f"the trap table's trap cases, {s}", s, "trap",
       rf"\| {s} \| {{N}} \| (?P<n>{{N}}) \|") for s in SWEEPS],
    *[("docs/running.md", f"the health check section's trap cases, {s}", s, "trap",
       r"A full run has (?P<full>{N}) such cases \(standard (?P<standard>{N}), smoke (?P<smoke>{N})\)")
      for s in SWEEPS],
    *[("docs/running.md", f"the cost model's trap cases, {s}", s, "trap",
       r"per case that traps \(smoke (?P<smoke>{N}), standard (?P<standard>{N}), full (?P<full>{N});")
      for s in SWEEPS],
]


def stated(text: str, sweep: str, pattern: str) -> list[int]:
    """The counts ``pattern`` finds in ``text`` (white space collapsed): one per match."""
    flat = " ".join(text.split())
    found = []
    for m in re.finditer(pattern.replace("{N}", N), flat):
        group = "n" if "n" in m.groupdict() else sweep
        found.append(int(m.group(group).replace(",", "")))
    return found


def collected(sweep: str, report_dir: Path) -> dict[str, int]:
    """The checkout's cases at ``sweep``: every case, those ``-m "not trap"`` keeps, and
    the trap cases it deselects, from pytest's last line."""
    cp = pytest_run(REPO, "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                    f"--sweep={sweep}", "-m", "not trap", f"--report-dir={report_dir}",
                    timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    last = cp.stdout.strip().splitlines()[-1]
    m = re.match(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", last)
    if m:
        kept, total, trap = (int(g) for g in m.groups())
    else:
        m = re.match(r"(\d+) tests? collected", last)
        assert m, f"pytest's last line is not a collection count: {last!r}"
        kept = total = int(m.group(1))
        trap = 0
    assert kept + trap == total, last
    return {"total": total, "kept": kept, "trap": trap}


@pytest.mark.parametrize("sweep", SWEEPS)
def test_the_readmes_state_the_collected_counts(sweep, tmp_path):
    counts = collected(sweep, tmp_path / "reports")
    wrong = []
    for name, what, s, which, pattern in STATEMENTS:
        if s != sweep:
            continue
        found = stated((REPO / name).read_text(encoding="utf-8"), sweep, pattern)
        if not found:
            wrong.append(f"{name}: {what}: not found (pattern {pattern!r}); if the text was "
                         f"reworded, update tests/test_readme_counts.py")
        for n in found:
            if n != counts[which]:
                wrong.append(f"{name}: {what}: states {n:,}, the {sweep} sweep collects "
                             f"{counts[which]:,} ({which})")
    assert not wrong, "\n".join(wrong)


def test_a_stale_count_is_read_as_stated():
    """The patterns read the number the text holds: a README whose count changed is read
    as the changed count (which the collection then contradicts), never as a match
    missed or a constant."""
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    sweeps = next(p for _, w, _, _, p in STATEMENTS if w.startswith("the sweeps line"))
    [smoke] = stated(text, "smoke", sweeps)
    stale = text.replace(f"({smoke:,} cases)", f"({smoke + 1:,} cases)", 1)
    assert stated(stale, "smoke", sweeps) == [smoke + 1]
    health = next(p for _, w, _, _, p in STATEMENTS if w.startswith("the health check"))
    [kept] = stated(text, "smoke", health)
    assert stated(text.replace(f"({kept:,} cases)", "(2,680 cases)", 1), "smoke", health) == [2680]
