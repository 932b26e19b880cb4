"""The reporting plugin end to end: a tiny generated test tree run by pytest under ``-n 2``.

Checks the JUnit (one testcase per case id, environment as testsuite properties,
messages naming state, rule and case), the fingerprint written once by the
controller, results.json, the matrix files, and the known-issues behaviour
(strict xfail, skip mode, unmatched warning, usage error on a bad file). CPU only.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports import model
from reports.model import load_run, NODE_CASE

import nested_run
from nested_run import pytest_run, report


TESTS = '''
import pytest
from fixtures.cuda_layer.build import BuildError
from fixtures.rules.registry import fail, fail_all, register, Rule

register(*(Rule(r, "a test document", "a quoted sentence") for r in ("tiled.box", "R-1", "R-9")))

def test_pass():
    pass

@pytest.mark.rule("R-7")
def test_fail_rule():
    assert 1 == 2, "box 384 > 256"

def test_fail_message_rule():
    fail("tiled.box", "box-case", "box too big")

def test_skip_nogpu():
    pytest.skip("no GPU: no CUDA driver")

def test_skip_two():
    pytest.skip("needs 2 GPUs with tensor maps, found 1")

def test_skip_arch():
    pytest.skip("architecture sm_90a lacks the 128B_ATOM swizzles")

def test_build():
    raise BuildError("k.cu", "sm_90a", ["-arch=sm_90a"], "k.cu(3): error: boom", "NVRTC_ERROR_COMPILATION")

def test_known_fails():
    assert False, "still broken"

def test_known_passes():
    pass

def test_known_fails_otherwise():
    fail("R-9", "other", "an unrelated failure")

def test_known_one_of_two_errors():
    fail_all("two", [("R-1", "the known bits differ"), ("R-1", "and the tile is wrong")])

def test_known_skip():
    raise RuntimeError("would hang")

@pytest.mark.parametrize("p", ["f16-rank2-swz128", "f32-rank3-swz0"])
def test_param(p):
    pass
'''

KNOWN = '''
schema = 1

[[issue]]
id = "KI-1"
pattern = "test_tiny.py::test_known_fails"
reason = "fails on this stack"
evidence = "https://example.invalid/issue/1"
match = "still broken"

[[issue]]
id = "KI-2"
pattern = "test_tiny.py::test_known_passes"
reason = "was broken"
evidence = "measured"
rule = "R-2"

[[issue]]
id = "KI-3"
pattern = "test_tiny.py::test_known_skip"
reason = "hangs the GPU"
evidence = "measured"
mode = "skip"

[[issue]]
id = "KI-4"
pattern = "test_tiny.py::test_gone*"
reason = "stale"
evidence = "x"
match = "x"

[[issue]]
id = "KI-5"
pattern = "test_tiny.py::test_pass"
reason = "only on a future driver"
evidence = "x"
match = "x"
driver_min = 999999

[[issue]]
id = "KI-6"
pattern = "test_other_file.py::x"
reason = "another file, not collected here"
evidence = "x"
match = "x"

[[issue]]
id = "KI-7"
pattern = "test_tiny.py::test_only_in_the_full_sweep"
reason = "a case of the full sweep; this run is the standard one"
evidence = "x"
match = "x"
sweeps = ["full"]

[[issue]]
id = "KI-8"
pattern = "test_tiny.py::test_known_fails_otherwise"
reason = "the known bits differ"
evidence = "x"
rule = "R-1"

[[issue]]
id = "KI-9"
pattern = "test_tiny.py::test_known_one_of_two_errors"
reason = "the known bits differ"
evidence = "x"
rule = "R-1"
match = "known bits"
'''

EXPECTED = {
    "test_tiny.py::test_pass": "passed",
    "test_tiny.py::test_fail_rule": "failed",
    "test_tiny.py::test_fail_message_rule": "failed",
    "test_tiny.py::test_skip_nogpu": "skipped",
    "test_tiny.py::test_skip_two": "skipped",
    "test_tiny.py::test_skip_arch": "skipped",
    "test_tiny.py::test_build": "could-not-build",
    "test_tiny.py::test_known_fails": "known-issue",
    "test_tiny.py::test_known_passes": "failed",
    "test_tiny.py::test_known_skip": "known-issue",
    "test_tiny.py::test_known_fails_otherwise": "failed",
    "test_tiny.py::test_known_one_of_two_errors": "failed",
    "test_tiny.py::test_param[f16-rank2-swz128]": "passed",
    "test_tiny.py::test_param[f32-rank3-swz0]": "passed",
}


NODE = NODE_CASE     # the node's own case, which every run reports (fixtures.plugins.run_control.harness)


def cases_only(states: dict) -> dict:
    return {k: v for k, v in states.items() if k != NODE}


def make_tree(root: Path, tests: str = TESTS, known: str | None = KNOWN) -> Path:
    return nested_run.make_tree(root, tests, known)


@pytest.fixture(scope="module")
def xdist_run(tmp_path_factory):
    root = make_tree(tmp_path_factory.mktemp("tiny"))
    out = root / "out"
    # "--report-dir PATH" (space form) on purpose: workers must still find their conftest.
    cp = pytest_run(root, "-n", "2", "--report-dir", str(out), f"--junitxml={out / 'junit.xml'}")
    return root, out, cp


def test_exit_status_and_files(xdist_run):
    root, out, cp = xdist_run
    assert cp.returncode == 1, cp.stdout + cp.stderr
    for name in ("junit.xml", "environment.json", "results.json", "matrix.md", "matrix.html"):
        assert (out / name).is_file(), name
    assert "crashed" not in cp.stdout


def test_one_testcase_per_case_id(xdist_run):
    _, out, _ = xdist_run
    root = ET.parse(out / "junit.xml").getroot()
    cases = [(tc.get("classname"), tc.get("name")) for tc in root.iter("testcase")]
    assert len(cases) == len(set(cases)) == len(EXPECTED) + 1
    assert ("suites.test_node", "test_usable_gpus") in cases
    # valid xunit2: no <properties> inside a <testcase>
    assert not any(tc.find("properties") is not None for tc in root.iter("testcase"))


def test_environment_as_suite_properties(xdist_run):
    _, out, cp = xdist_run
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    for key in ("tmac.driver.cuda_driver_version", "tmac.nvrtc.version", "tmac.cccl.version", "tmac.sweep",
                "tmac.gpu_count", "tmac.os.kernel", "tmac.python", "tmac.package.pytest", "tmac.run_id",
                "tmac.results_schema", "tmac.count.failed"):
        assert key in props, key
    assert props["tmac.count.could-not-build"] == "1"
    assert "incompatible with junit_family" not in cp.stdout + cp.stderr


def test_messages_name_state_rule_and_case(xdist_run):
    _, out, _ = xdist_run
    msgs, short = {}, {}
    root = ET.parse(out / "junit.xml").getroot()
    reasons = {p.get("name")[len(model.REASON_PROPERTY):]: p.get("value")
               for p in root.iter("property") if p.get("name").startswith(model.REASON_PROPERTY)}
    for tc in root.iter("testcase"):
        el = next((e for e in tc if e.tag in ("failure", "error", "skipped")), None)
        msgs[tc.get("name")] = (el.tag, el.get("type"), el.get("message")) if el is not None else None
        if el is not None and el.tag == "skipped":      # a long reason: written once, as tmac.reason.N
            short[tc.get("name")] = el.get("message")
            msgs[tc.get("name")] = (el.tag, el.get("type"), model.full_reason(el.get("message"), reasons))
    assert msgs["test_pass"] is None
    tag, _, m = msgs["test_fail_rule"]
    assert tag == "failure" and m.startswith("[rule R-7] [case test_fail_rule]") and "box 384 > 256" in m
    # a RuleFailure's own message is the one shape: [rule R] [case id]
    assert msgs["test_fail_message_rule"][2].startswith("[rule tiled.box] [case box-case] box too big")
    tag, _, m = msgs["test_build"]
    assert tag == "failure" and m.startswith("could-not-build: [case test_build]") and "NVRTC could not build k.cu" in m
    tag, typ, m = msgs["test_known_fails"]
    assert (tag, typ) == ("skipped", "pytest.xfail")
    assert m == "known-issue KI-1: fails on this stack [evidence: https://example.invalid/issue/1]"
    assert short["test_known_fails"].startswith("known-issue KI-1: … [tmac.reason."), short
    tag, _, m = msgs["test_known_passes"]
    assert tag == "failure" and "[XPASS(strict)]" in m and "known-issue KI-2" in m and "no longer" in m
    assert msgs["test_known_skip"][2].startswith("known-issue KI-3: hangs the GPU")
    assert msgs["test_skip_two"] == ("skipped", "pytest.skip", "needs 2 GPUs with tensor maps, found 1")
    # a known issue absorbs only the failure it describes, and says so when it does not
    tag, _, m = msgs["test_known_fails_otherwise"]
    assert tag == "failure" and m.startswith("[rule R-9] [case other] an unrelated failure"), m
    assert "an unrelated failure" in m and "not known issue KI-8" in m and "rule R-1" in m
    tag, _, m = msgs["test_known_one_of_two_errors"]
    assert tag == "failure" and "not known issue KI-9" in m and "'known bits'" in m, m


def test_results_json_states(xdist_run):
    _, out, _ = xdist_run
    data = report(out)
    assert data["schema"] == "tmac-results/2"
    cases = {c["id"]: c for c in data["cases"]}
    assert cases_only({k: c["state"] for k, c in cases.items()}) == EXPECTED
    assert cases[NODE]["state"] in ("passed", "skipped")    # no --require-gpus: never failed
    assert cases["test_tiny.py::test_fail_rule"]["rule"] == "R-7"
    # results.json keeps the one message shape too, a plain assert included
    assert cases["test_tiny.py::test_fail_rule"]["message"].startswith("[rule R-7] [case test_fail_rule] ")
    assert cases["test_tiny.py::test_fail_message_rule"]["rule"] == "tiled.box"
    assert cases["test_tiny.py::test_known_passes"]["known_issue"]["id"] == "KI-2"
    assert cases["test_tiny.py::test_known_skip"]["known_issue"]["mode"] == "skip"
    kinds = {k: c.get("skip_kind") for k, c in cases.items() if c["state"] == "skipped" and k != NODE}
    assert kinds == {"test_tiny.py::test_skip_nogpu": "no-gpu", "test_tiny.py::test_skip_two": "needs-2-gpus",
                     "test_tiny.py::test_skip_arch": "arch-lacks-feature"}
    assert {c.get("worker") for k, c in cases.items() if k != NODE} <= {"gw0", "gw1"}   # under xdist
    entries = {e["id"]: e for e in data["known_issues"]["entries"]}
    assert entries["KI-5"]["not_applied"].startswith("driver")
    assert entries["KI-4"]["not_applied"] == "matched no case in this run"


def test_junit_and_results_agree(xdist_run):
    _, out, _ = xdist_run
    from_junit = load_run(out / "junit.xml")
    assert cases_only({k: c.state for k, c in from_junit.cases.items()}) == EXPECTED
    assert from_junit.cases["test_tiny.py::test_known_fails"].known_issue["evidence"] == \
        "https://example.invalid/issue/1"


def test_fingerprint_written_once_by_the_controller(xdist_run):
    _, out, cp = xdist_run
    env = report(out, "environment.json")
    assert env["schema"] == "tmac-environment/4" and env["role"] == "controller"
    assert env["command"]["xdist_workers"] == 2
    for key in ("driver", "cuda_runtime", "toolchain", "nvrtc", "cccl", "cuda_headers", "builds", "nvcc",
                "packages", "gpus", "peer_access", "os", "python", "map_layout", "sweep", "known_issues",
                "harness", "environment_variables"):
        assert key in env, key
    drv = env["driver"]["cuda_driver_version"]
    assert isinstance(drv, int) or drv.startswith("unavailable: ")
    assert sorted(p.name for p in out.glob("environment*.json")) == ["environment.json"]
    assert "tmac driver" in cp.stdout and "tmac harness: " in cp.stdout   # pytest_report_header
    assert set(env["harness"]) >= {"packages", "sources_sha256", "constraints", "git_commit"}


# The start's environment.json, held back until the end's is written (at most 3 s): each
# write of environment.json logged with the thread that made it.
LATE_START = '''
import json, threading, time
from pathlib import Path
from fixtures.plugins.run_control import controller

_write = controller.write_report_json


def _logged(path, data, indent=2):
    path = Path(path)
    if path.name == "environment.json":
        start = threading.current_thread().name == "tmac-fingerprint"
        deadline = time.monotonic() + 3
        while start and not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(path.parent.parent / "writes.log", "a") as f:
            f.write(threading.current_thread().name + "\\n")
    return _write(path, data, indent=indent)


controller.write_report_json = _logged
'''


def test_the_start_s_environment_is_written_before_the_end_s(tmp_path):
    """The fingerprint the controller writes as the session starts (in a thread, beside the
    workers' start) is written before the end's, never after it (which replaced the end's)
    nor cut off by the process's exit (which left its temporary file in the report
    folder: the interrupt stress, SIGTERM 1.2 s into a run)."""
    root = nested_run.make_tree(tmp_path / "t", "def test_quick():\n    pass\n")
    (root / "latestart.py").write_text(LATE_START)
    out = tmp_path / "run" / "out"
    import subprocess
    cp = subprocess.run(nested_run.pytest_argv("-n", "1", "-p", "latestart", f"--report-dir={out}"),
                        cwd=root, env=nested_run.plugin_env(root), capture_output=True, text=True,
                        timeout=240)
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    writes = (tmp_path / "run" / "writes.log").read_text().split()
    assert writes == ["tmac-fingerprint", "MainThread"], writes
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == [], list(out.iterdir())
    assert "builds" in report(out, "environment.json")


def test_unmatched_entry_is_warned_once(xdist_run):
    _, _, cp = xdist_run
    text = cp.stdout
    assert "known issue KI-4" in text and "matches no collected test" in text
    assert text.count("known issue KI-4 (") == 1
    warned = text.split("warnings summary")[-1].split("tmac conformance")[0]
    assert "KI-6" not in warned and "KI-7" not in warned


def test_a_case_rerun_by_its_id_warns_of_no_entry(tmp_path):
    """A run of one case by its id collects that case alone: the entries of the file's
    other tests match nothing there, and are no stale entries to warn of (KI-4 is, in a
    run of the whole file)."""
    root = make_tree(tmp_path / "tiny")
    cp = pytest_run(root, "-p", "no:randomly", f"--report-dir={tmp_path / 'out'}", "test_tiny.py::test_pass")
    assert "matches no collected test" not in cp.stdout + cp.stderr, cp.stdout[-3000:]
    cp = pytest_run(root, "-p", "no:randomly", f"--report-dir={tmp_path / 'out2'}", "test_tiny.py",
                    "-k", "test_pass")
    assert "known issue KI-4" in cp.stdout and "matches no collected test" in cp.stdout


def test_matrix_lists_known_issues_and_failures(xdist_run):
    _, out, _ = xdist_run
    md = (out / "matrix.md").read_text()
    assert "KI-1" in md and "https://example.invalid/issue/1" in md
    assert "R-7" in md and "tiled.box" in md
    assert "needs 2 GPUs" in md


def test_default_report_folder_and_bad_known_issues(tmp_path):
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n", known=None)
    cp = pytest_run(root)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    runs = [p for p in (root / "reports" / "out").iterdir() if p.is_dir() and not p.is_symlink()]
    assert len(runs) == 1 and (runs[0] / "results.json").is_file() and (runs[0] / "matrix.html").is_file()
    assert (root / "reports" / "out" / "latest").resolve() == runs[0].resolve()
    # JUnit only where --junitxml names it, as with pytest alone (results.json holds
    # every case and reason; a full sweep's JUnit was half of its folder)
    assert not list(runs[0].glob("*.xml")), list(runs[0].iterdir())
    cp = pytest_run(root, f"--junitxml={tmp_path / 'mine.xml'}")
    assert cp.returncode == 0 and (tmp_path / "mine.xml").is_file()
    assert f"JUnit: {tmp_path / 'mine.xml'}" in cp.stdout
    # a bad known-issues file: usage error naming the file and the problem
    bad = tmp_path / "bad.toml"
    bad.write_text('schema = 1\n[[issue]]\nid = "X"\npattern = "*"\nreason = "r"\n')
    cp = pytest_run(root, f"--known-issues={bad}")
    assert cp.returncode == 4
    assert str(bad) in cp.stderr and "missing required key 'evidence'" in cp.stderr


def test_junit_read_back_tells_a_harness_error_by_phase(tmp_path):
    """A harness error reads back as one from each of the JUnit shapes that carry it: the
    call's <error> (the controller's), pytest's wrapped setup <error>, and a <failure>
    (older reports); a rule's failure in an <error> stays a failure of its phase."""
    from reports.model import HARNESS, FAILED, read_junit
    cases = {
        "call": '<error message="harness-error: [case c] harness: fill failed: X">t</error>',
        "setup": '<error message=\'failed on setup with "harness-error: [case s] harness: open GPU 0 failed"\'>t</error>',
        "old": '<failure message="harness-error: [case o] harness: copy failed">t</failure>',
        "rule": '<error message=\'failed on teardown with "[rule R-1] [case r] bytes differ"\'>t</error>',
    }
    body = "".join(f'<testcase classname="test_x" name="test_{k}" file="test_x.py" time="0">{v}</testcase>'
                   for k, v in cases.items())
    path = tmp_path / "junit.xml"
    path.write_text(f'<testsuites><testsuite name="pytest" tests="4">{body}</testsuite></testsuites>')
    got = {cid.split("::")[-1]: (c.state, c.phase) for cid, c in read_junit(path).cases.items()}
    assert got == {"test_call": (HARNESS, "call"), "test_setup": (HARNESS, "setup"),
                   "test_old": (HARNESS, "call"), "test_rule": (FAILED, "teardown")}, got


ODD_PROPERTY = '''
class Version(str):          # torch's TorchVersion is one: a str subclass
    pass

def test_odd_property(request):
    request.node.user_properties.append(("torch", Version("2.11.0")))
    request.node.user_properties.append(("nested", {"a": [Version("x"), 1.5, None]}))
'''


def test_a_property_xdist_cannot_send_is_sent_as_plain_text(tmp_path):
    """A case's user property of a type xdist cannot serialize (a str subclass) ended a
    whole run in an internal error (exit 3); it travels as plain text now."""
    root = make_tree(tmp_path / "tree", ODD_PROPERTY, None)
    out = tmp_path / "rep"
    cp = pytest_run(root, "-n", "2", "--report-dir", str(out))
    assert cp.returncode == 0 and "INTERNALERROR" not in cp.stdout, cp.stdout[-3000:]
