"""Every case id a run's reports give reruns as ``python -m pytest ID``: the ids of a tree's
own tests from that tree, and the ids the harness itself reports (the node's own case,
``suites/test_node.py::test_usable_gpus``, which every run reports whatever it selected,
and which suites before it named ``node::usable-gpus``, an id pytest could not run) from
the checkout. Each collects exactly one test; the node's case runs (on a CPU it skips,
saying why). CPU only."""
from __future__ import annotations

import subprocess
import sys

import pytest

from reports import model
from nested_run import REPO, child_env, make_tree, pytest_run, results

TESTS = '''
import pytest

@pytest.mark.parametrize("case", ["a-1", "b-2"])
def test_param(case):
    pass

class TestGroup:
    def test_member(self):
        pytest.skip("a reason")

def test_fails():
    assert False, "it fails"
'''


def collect(where, *ids: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider", *ids], cwd=where, env=child_env(),
                          capture_output=True, text=True, timeout=240)


def collected(cp: subprocess.CompletedProcess) -> list[str]:
    return [line for line in cp.stdout.splitlines() if "::" in line and " " not in line]


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The case ids of two nested runs' reports (results.json and junit.xml): a plain run,
    and one stopped before its cases (--require-gpus=99: the controller reports the node's
    case itself)."""
    root = make_tree(tmp_path_factory.mktemp("ids"), TESTS)
    ids = set()
    for name, args in (("plain", ()), ("stopped", ("--require-gpus=99",))):
        out = root / name
        cp = pytest_run(root, "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", *args)
        assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-2000:]
        from_results = {c["id"] for c in results(out)["cases"]}
        from_junit = set(model.read_junit(out / "junit.xml").cases)
        assert from_results == from_junit, (name, from_results ^ from_junit)
        ids |= from_results
    own = collected(collect(root))
    assert len(own) == 4, own
    return root, sorted(ids - set(own)), sorted(ids & set(own))


def test_the_ids_of_a_trees_own_tests_rerun_there(reported):
    root, _, own = reported
    assert len(own) == 4, own
    for cid in own:
        cp = collect(root, cid)
        assert cp.returncode == 0 and collected(cp) == [cid], cid + "\n" + cp.stdout[-2000:] + cp.stderr[-2000:]


def test_the_ids_the_harness_reports_rerun_from_the_checkout(reported, tmp_path):
    _, harness, _ = reported
    assert harness, "the reports gave no id of the harness's own (the node's case)"
    for cid in harness:
        cp = collect(REPO, cid)
        assert cp.returncode == 0 and collected(cp) == [cid], cid + "\n" + cp.stdout[-2000:] + cp.stderr[-2000:]
        out = tmp_path / "rerun"
        cp = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
                             f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", cid], cwd=REPO, env=child_env(),
                            capture_output=True, text=True, timeout=240)
        assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]      # never 5: no tests collected
        (case,) = results(out)["cases"]
        assert case["id"] == cid and case["state"] in ("passed", "skipped"), case
        if case["state"] == "skipped":
            assert case["message"].startswith("no GPU: ") and case["skip_kind"] == "no-gpu", case
    assert harness == [model.NODE_CASE], harness


def test_a_report_of_an_older_suite_gives_the_node_case_its_id(tmp_path):
    """results.json schema 1 and JUnit files of suites before test_node.py name the node's
    case node::usable-gpus: the tools read it under the id that reruns (a fleet of mixed
    suite versions, a diff across the upgrade: no case vanished, none new)."""
    (tmp_path / "results.json").write_text(
        '{"schema": "tmac-results/1", "cases": [{"id": "node::usable-gpus", "state": "passed"}]}')
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest" tests="1" failures="0" errors="0">'
        '<testcase classname="node" name="usable-gpus" time="0.000" /></testsuite></testsuites>')
    for run in (model.read_results_json(tmp_path / "results.json"), model.read_junit(tmp_path / "junit.xml")):
        assert list(run.cases) == [model.NODE_CASE], run.source
