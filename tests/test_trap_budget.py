"""The trap budget (fixtures/plugins/run_control/trap_budget.py): each sweep level runs each
distinct trap condition once, within its budget; ``--traps=all`` collects every trap case
the level generates, with the ids they always had; the other cases are the same either
way; a case named by its whole id always runs. The classes of the conditions
(fixtures/tma_box/trap_classes.py) are checked on their own."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.plugins.run_control.trap_budget import BUDGET
from fixtures.tensormap.enums import Interleave, Swizzle
from fixtures.tma_box import tiled_cases, trap_classes

ROOT = Path(__file__).resolve().parent.parent
TILED_PLACEMENT = "suites/test_tma_load.py::test_tma_load_smem_misaligned"


@lru_cache(maxsize=None)
def node_known_issues() -> str:
    """known_issues.toml with every entry's node conditions (driver, compute capability,
    arch) removed: each applies here as on the node it was measured on, so a collection on
    this CPU machine sees the known issues' traps as a GPU node of that driver does."""
    text = (ROOT / "known_issues.toml").read_text()
    text = re.sub(r"(?m)^(driver_min|driver_max|compute_capability|arch) = .*\n", "", text)
    path = Path(tempfile.mkdtemp(prefix="tmac-budget-")) / "known_issues.toml"
    path.write_text(text)
    return str(path)


@lru_cache(maxsize=None)
def collect(sweep: str, expr: str, *more: str, node: bool = True) -> tuple[str, ...]:
    """The ids collected; ``node``: as on a GPU node where the known issues apply."""
    ki = (f"--known-issues={node_known_issues()}",) if node else ()
    cp = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
                         "--collect-only", "-q", f"--sweep={sweep}", "-m", expr, *ki, *more],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    return tuple(ln for ln in cp.stdout.splitlines() if "::" in ln)


def functions_of(ids) -> set[str]:
    return {i.split("[")[0] for i in ids}


@pytest.mark.parametrize("sweep", ["smoke", "standard", "full"])
def test_each_level_stays_within_its_budget_and_keeps_every_trap_test(sweep):
    """At most BUDGET[level] trap cases; every one of them a case ``--traps=all`` runs; at
    standard and full every test with trap cases keeps at least one, at smoke most do."""
    kept, every = collect(sweep, "trap"), collect(sweep, "trap", "--traps=all")
    assert 0 < len(kept) <= BUDGET[sweep], f"{sweep}: {len(kept)} trap cases, budget {BUDGET[sweep]}"
    assert set(kept) < set(every), sorted(set(kept) - set(every))[:5]
    if sweep == "smoke":
        assert len(functions_of(kept)) >= 8, sorted(functions_of(kept))
    else:
        assert functions_of(kept) == functions_of(every), sorted(functions_of(every) - functions_of(kept))
    print(f"{sweep}: {len(kept)} of {len(every)} trap cases, {len(functions_of(kept))} tests")


def _placement(cid: str) -> tuple[str, int]:
    m = re.search(r"-swz(\d+)-.*-(?:dst|src)\+(\d+)\]$", cid)
    assert m, cid
    return m.group(1), int(m.group(2)) % 128


def test_full_runs_the_tiled_destination_at_each_residue_and_the_others_once_per_mode():
    """The issue's classes: the tiled load's destination at each residue mod 128 per
    swizzle mode; each other operation one misplacement per swizzle mode its grid has;
    the tiled load's inner-coordinate traps once per element size and map origin."""
    kept, every = collect("full", "trap"), collect("full", "trap", "--traps=all")
    tiled = {_placement(i) for i in kept if i.startswith(TILED_PLACEMENT)}
    assert tiled == {(s, r) for s in ("0", "32", "64", "128") for r in range(16, 128, 16)}, sorted(tiled)
    assert len([i for i in kept if i.startswith(TILED_PLACEMENT)]) == 28
    for test in {t for t in functions_of(every) if t.endswith("_smem_misaligned") and t != TILED_PLACEMENT}:
        modes = lambda ids: {_placement(i)[0] for i in ids if i.startswith(test + "[")}  # noqa: E731
        assert modes(kept) == modes(every), test
        assert len([i for i in kept if i.startswith(test + "[")]) == len(modes(every)), test
    sizes = {("dev-template" in i, re.search(r"trap-([a-z]+\d*)-", i).group(1))
             for i in kept if i.startswith("suites/test_tma_load.py::test_tma_load_trap[")}
    assert {dev for dev, _ in sizes} == {False, True}
    assert len(sizes) >= 8, sorted(sizes)


def test_the_other_cases_do_not_change_with_the_budget():
    assert collect("standard", "not trap") == collect("standard", "not trap", "--traps=all")


def test_the_budget_takes_what_the_selection_left():
    """-k first, then one case per condition of what it left: a selection never empties a
    condition the budget would have run another case of."""
    every = collect("standard", "trap", "--traps=all", "-k", "smem_misaligned and swz64")
    kept = collect("standard", "trap", "-k", "smem_misaligned and swz64")
    assert every and functions_of(kept) == functions_of(every), (kept, every)


@pytest.mark.parametrize("spelled", ["{id}", "./{id}", "suites/../{id}"])
def test_a_case_named_by_its_id_runs_beyond_the_budget(spelled):
    left_out = sorted(set(collect("standard", "trap", "--traps=all")) - set(collect("standard", "trap")))
    assert len(left_out) >= 2
    args = [spelled.format(id=i) for i in left_out[:2]]
    cp = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                         f"--known-issues={node_known_issues()}", *args],
                        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0 and set(left_out[:2]) <= set(cp.stdout.splitlines()), cp.stdout[-2000:]
    assert "deselected" not in cp.stdout, cp.stdout[-500:]


def test_a_known_issue_of_another_driver_is_no_trap_here():
    """Where a trap known issue does not apply (here: no driver), its cases are ordinary
    cases: outside the budget, every one of them run (a health check still leaves them out)."""
    ordinary = [i for i in collect("standard", "trap", node=False)
                if i.startswith("suites/test_tma_store.py::test_tma_store_negative_coordinates[")]
    every = [i for i in collect("standard", "trap", "--traps=all", node=False)
             if i.startswith("suites/test_tma_store.py::test_tma_store_negative_coordinates[")]
    assert len(every) > 1 and ordinary == every
    assert len([i for i in collect("standard", "trap")
                if i.startswith("suites/test_tma_store.py::test_tma_store_negative_coordinates[")]) == 1


def test_a_bad_traps_value_is_a_usage_error():
    cp = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--traps=some"],
                        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 4 and "--traps" in cp.stderr and "Traceback" not in cp.stderr, cp.stderr


# ------------------------------------------------------------------ the classes
def _case(**box):
    base = dict(swizzle=Swizzle.B64, smem_offset=0, interleave=Interleave.NONE, coords=(0, 0), esize=4)
    return SimpleNamespace(id="c", load=SimpleNamespace(**{**base, **box}), built=None)


def test_the_classes_of_a_trap():
    assert trap_classes.condition(_case(smem_offset=400)) == ("shared-memory-placement", ("B64",), (16,))
    assert trap_classes.condition(_case(smem_offset=384, coords=(1, 0)))[0] == "inner-coordinate"
    assert trap_classes.condition(_case(coords=(3, 0), esize=2)) == ("inner-coordinate", (2,), (6,))
    assert trap_classes.condition(_case(coords=(4, 0)))[0] == "other"
    assert trap_classes.origin(_case()) == "host"
    assert trap_classes.origin(SimpleNamespace(built="template")) == "device-template"
    assert trap_classes.operation(SimpleNamespace(op="add", mode="tile")) == ("add", "tile")
    # a real tiled placement case and a prefetch's source case read the same
    misplaced = [c for c in tiled_cases.placement_cases("standard") if c.expect == "trap"]
    assert misplaced and all(trap_classes.condition(c)[0] == "shared-memory-placement" for c in misplaced)
    assert trap_classes.box_of(SimpleNamespace(id="p", source=misplaced[0])) is misplaced[0].load
