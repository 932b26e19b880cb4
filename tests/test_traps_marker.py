"""The marker ``trap`` (fixtures/plugins/run_control/trap_marks.py): a health check's ``-m "not trap"``
leaves out every case that traps the GPU on purpose or as a known issue and keeps the
others; results.json lists the trap cases that ran with the window of their call."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from datetime import datetime
from pathlib import Path

import pytest

from nested_run import make_tree, pytest_run, results

ROOT = Path(__file__).resolve().parent.parent

# The suites' expected traps, read from the suites rather than from the plugin: the tests
# whose every case must trap (their docstrings: "must trap", rule tma-load.trap) and the ones
# that trap on purpose.
EXPECTED_TRAP_TESTS = (
    "suites/test_tma_load.py::test_tma_load_trap",
    "suites/test_im2col_load.py::test_im2col_load_trap",
    "suites/test_tma_store.py::test_tma_store_trap",
    "suites/test_tma_prefetch.py::test_tma_prefetch_trap",
    "suites/test_toolchain.py::test_unaligned_inner_coordinate_trap_is_contained",
    "suites/test_host_encode.py::test_encode_in_poisoned_context",
    "suites/test_tma_reduce.py::test_tma_reduce_trap",
    "suites/test_tma_load.py::test_tma_load_smem_misaligned",
    "suites/test_im2col_load.py::test_im2col_load_smem_misaligned",
    "suites/test_multicast.py::test_multicast_smem_misaligned",
    "suites/test_tma_store.py::test_tma_store_smem_misaligned",
    "suites/test_tma_reduce.py::test_tma_reduce_smem_misaligned",
    "suites/test_fence_scopes.py::test_pdl_no_wait",      # may trap (an H200 did, once in three)
    "suites/test_tma_prefetch.py::test_prefetch_tensormap_of_a_global_map",   # trapped on an H100
)
# Cases that run alone in the isolated child and do not trap: report-only fence runs (a
# CUDA error or a timeout is recorded, not expected), the bounded wait (the kernel
# exits), the large-dimension controls (those beyond 2^31 trap: a known issue).
ISOLATED_NOT_TRAPS = (
    "suites/test_fence_scopes.py::test_across_blocks_no_acquire",
    "suites/test_fence_scopes.py::test_across_kernels",
    "suites/test_fence_scopes.py::test_across_kernels_no_acquire",
    "suites/test_fence_scopes.py::test_host_pinned",
    "suites/test_fence_scopes.py::test_in_flight_no_drain",        # report-only, as no_acquire
    "suites/test_fence_scopes.py::test_in_flight_ring_no_drain",
    "suites/test_library_maps.py::test_triton_device_map_reused",   # loads in bounds, fence or not
    "suites/test_library_maps.py::test_cute_device_map_reused",     # the same, in the CuTe DSL
    "suites/test_library_maps.py::test_mosaic_refusal",    # abort() on the host, before any GPU work
    "suites/test_toolchain.py::test_bounded_wait_reports_timeout",
    "suites/test_tma_load.py::test_large_global_dim",
)


def _glob(pattern: str) -> re.Pattern:
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern))


def _known_trap_patterns() -> list[re.Pattern]:
    """known_issues.toml's entries whose signature admits a trap (its facts' outcome is a
    trap, or it names no outcome: a map whose loads trap), read with tomllib."""
    data = tomllib.loads((ROOT / "known_issues.toml").read_text())
    out = []
    for e in data["issue"]:
        outcome = e.get("facts", {}).get("outcome", ["trap"])
        if "trap" in ([outcome] if isinstance(outcome, str) else outcome):
            out.append(_glob(e["pattern"]))
    return out


def _without_loads() -> set[str]:
    """Device-encoding TF32-template cases that run no load (the bits only): their known
    issue traps only on load, so they cannot trap."""
    from fixtures.device_encode.cases import tf32_flag_cases
    return {f"suites/test_device_encode.py::test_elemtype_replace_from_tf32_template[{c.id}]"
            for c in tf32_flag_cases(90) if not c.loads}


def _collect(sweep: str, expr: str) -> tuple[list[str], int]:
    """Every trap case of the sweep (``--traps=all``: the budget's choice is
    tests/test_trap_budget.py's)."""
    cp = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                         f"--sweep={sweep}", "--traps=all", "-m", expr], cwd=ROOT, capture_output=True,
                        text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    m = re.search(r"(\d+)/(\d+) tests collected", cp.stdout)
    assert m, cp.stdout[-2000:]
    ids = [ln for ln in cp.stdout.splitlines() if "::" in ln]
    assert len(ids) == int(m.group(1)), cp.stdout[-2000:]
    return ids, int(m.group(2))


@pytest.mark.parametrize("sweep", ["smoke", "standard"])
def test_health_check_leaves_out_every_trap(sweep):
    """``-m "not trap"`` leaves out every expected trap (the suites' trap tests and
    on-purpose traps, and the cases of the known issues whose signature is a trap) and
    keeps every other case; every other isolated case is known not to trap."""
    some, total = _collect(sweep, "trap or isolated")
    kept, total2 = _collect(sweep, "not trap")
    assert total == total2
    kept_set = set(some) & set(kept)
    marked = {i for i in some if i not in set(kept)}
    known = _known_trap_patterns()
    assert len(known) >= 5, "known_issues.toml: fewer trap entries than expected"
    no_tma = _without_loads()
    expected = set()
    for cid in set(some) | set(kept):
        base = cid.split("[")[0]
        if base in EXPECTED_TRAP_TESTS or (any(p.fullmatch(cid) for p in known) and cid not in no_tma):
            expected.add(cid)
    assert expected & set(kept) == set(), f"-m 'not trap' keeps traps: {sorted(expected & set(kept))[:10]}"
    assert marked == expected, (f"marked, not expected: {sorted(marked - expected)[:10]}; "
                                f"expected, not marked: {sorted(expected - marked)[:10]}")
    assert len(kept) == total - len(expected), "-m 'not trap' left out cases that do not trap"
    stray = sorted(i for i in kept_set if i.split("[")[0] not in ISOLATED_NOT_TRAPS)
    assert not stray, f"isolated cases neither marked trap nor known not to trap: {stray[:10]}"
    # each source gave some: the suites' trap tests, the known issues, the device encoding
    bases = {i.split("[")[0] for i in marked}
    assert {"suites/test_tma_load.py::test_tma_load_trap", "suites/test_tma_store.py::test_tma_store_negative_coordinates",
            "suites/test_tma_load.py::test_large_global_dim",
            "suites/test_device_encode.py::test_elemtype_replace_from_tf32_template"} <= bases
    print(f"{sweep}: {len(marked)} trap cases of {total}")


TREE = '''
import time
from dataclasses import dataclass

import pytest


@dataclass
class Case:
    id: str
    expect: str


CASES = [Case("ok", "data"), Case("must-trap", "trap")]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_load(case):
    time.sleep(0.05)


@pytest.mark.trap
def test_on_purpose():
    time.sleep(0.05)


def test_known():
    raise AssertionError("did not complete: it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION")


@pytest.mark.trap
@pytest.mark.skip(reason="no GPU: none here")
def test_skipped_trap():
    pass


def test_plain():
    pass
'''

KNOWN = '''schema = 1

[[issue]]
id = "T-STORE-TRAP"
pattern = "test_tiny.py::test_known"
reason = "traps"
evidence = "here"
mode = "xfail"
match = "did not complete: it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION"
'''


@pytest.mark.parametrize("workers", ["0", "2"])
def test_results_list_the_traps_that_ran(tmp_path, workers):
    """Each trap case whose call ran is in results.json's ``traps`` with its call's
    start and stop (UTC) and its state, also from xdist workers; a trap case that did not
    run (skipped) and the other cases are not."""
    root = make_tree(tmp_path / "t", TREE, known=KNOWN)
    out = tmp_path / "out"
    cp = pytest_run(root, f"--report-dir={out}", "-n", workers, "--require-gpus=0")
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    traps = results(out)["traps"]
    by_id = {t["id"]: t for t in traps}
    assert set(by_id) == {"test_tiny.py::test_load[must-trap]", "test_tiny.py::test_on_purpose",
                          "test_tiny.py::test_known"}, traps
    assert by_id["test_tiny.py::test_known"]["state"] == "known-issue"
    assert by_id["test_tiny.py::test_on_purpose"]["state"] == "passed"
    for t in traps:
        start, stop = datetime.fromisoformat(t["start"]), datetime.fromisoformat(t["stop"])
        assert start.utcoffset().total_seconds() == 0 and start <= stop, t
    assert (datetime.fromisoformat(by_id["test_tiny.py::test_on_purpose"]["stop"])
            - datetime.fromisoformat(by_id["test_tiny.py::test_on_purpose"]["start"])).total_seconds() >= 0.04
    assert [t["start"] for t in traps] == sorted(t["start"] for t in traps)


def test_not_trap_selects_the_others(tmp_path):
    root = make_tree(tmp_path / "t", TREE, known=KNOWN)
    cp = pytest_run(root, "--collect-only", "-q", "-m", "not trap")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert sorted(ln for ln in cp.stdout.splitlines() if "::" in ln) == [
        "test_tiny.py::test_load[ok]", "test_tiny.py::test_plain"], cp.stdout
    assert "trap:" in pytest_run(root, "--markers").stdout
