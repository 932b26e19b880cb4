"""A worker's case messages travel together (fixtures/plugins/run_control/worker_messages.py):
what the worker holds and sends, that the controller unfolds every message xdist sent in
its order, two threads sending at once, a real ``-n 2`` run whose controller sees every
report while a passed case crosses in three messages, and a run stopped in a teardown
that keeps the case's verdict. CPU only."""
from __future__ import annotations

import json
import pickle

from fixtures.plugins.run_control import worker_messages as wm

import nested_run
from nested_run import pytest_run


def _report(nodeid: str, when: str, outcome: str) -> dict:
    return {"data": {"nodeid": nodeid, "when": when, "outcome": outcome, "longrepr": None,
                     "$report_type": "TestReport", "item_index": 0}}


def _case(nodeid: str, index: int, outcomes=("passed", "passed", "passed")) -> list:
    loc = {"nodeid": nodeid, "location": ("t.py", 1, nodeid)}
    return ([("logstart", loc)]
            + [("testreport", _report(nodeid, w, o)) for w, o in zip(("setup", "call", "teardown"), outcomes)]
            + [("logfinish", loc), ("runtest_protocol_complete", {"item_index": index, "duration": 0.1})])


def _send_all(events: list) -> list:
    sent = []
    held = wm.CaseMessages(lambda name, **kw: sent.append((name, kw)))
    for name, kw in events:
        held.sendevent(name, **kw)
    return sent


def _unfold_all(sent: list) -> list:
    got = []
    process = wm.unfold(got.append)
    for message in sent:
        process(message)
    return got


def test_a_passed_case_crosses_in_three_messages_and_unfolds_as_sent():
    events = _case("t.py::a", 0) + _case("t.py::b", 1)
    sent = _send_all(events)
    # logstart; setup and call (the verdict, at once); teardown, logfinish and the end
    assert [name for name, _ in sent] == ["logstart", wm.EVENT, wm.EVENT] * 2
    assert [n for n, _ in pickle.loads(sent[1][1]["messages"])] == ["testreport"] * 2
    assert _unfold_all(sent) == events


def test_a_failure_a_skip_and_a_warning_go_at_once_after_what_is_held():
    failing = _case("t.py::f", 0, ("passed", "failed", "passed"))
    warning = ("warning_recorded", {"warning_message_data": {}, "when": "runtest", "nodeid": "t.py::f",
                                    "location": None})
    skipped = _case("t.py::s", 1, ("skipped", "passed", "passed"))
    del skipped[2]                       # skipped in its setup: no call report
    events = failing[:2] + [warning] + failing[2:] + skipped
    sent = _send_all(events)
    # logstart; the setup report, held until the warning, alone as itself; the warning;
    # the failure at once; the rest at the case's end. The skip goes at once too.
    assert [name for name, _ in sent] == ["logstart", "testreport", "warning_recorded", "testreport",
                                          wm.EVENT, "logstart", "testreport", wm.EVENT]
    assert sent[3][1]["data"]["outcome"] == "failed" and sent[6][1]["data"]["outcome"] == "skipped"
    assert _unfold_all(sent) == events


def test_a_stop_in_the_teardown_finds_the_verdict_sent():
    """A worker stopped in a case's teardown (Ctrl-C, a stop signal) has sent the call's
    report already; what it held goes before its ``workerfinished``."""
    events = _case("t.py::a", 0)[:4] + [("workerfinished", {"workeroutput": {}})]
    sent = _send_all(events)
    assert [name for name, _ in sent] == ["logstart", wm.EVENT, "testreport", "workerfinished"]
    assert _unfold_all(sent) == events


def test_an_unreadable_message_is_an_internal_error_not_a_lost_case():
    got = []
    wm.unfold(got.append)((wm.EVENT, {"messages": b"not a pickle"}))
    assert len(got) == 1 and got[0][0] == "internal_error"
    assert "could not be read" in got[0][1]["formatted_error"]


def test_two_threads_keep_each_case_whole():
    """xdist sends ``unscheduled`` from execnet's receiving thread (``--dist worksteal``)
    while the main thread sends a case's messages: each case still unfolds in its order."""
    import threading
    sent = []
    held = wm.CaseMessages(lambda name, **kw: sent.append((name, kw)))
    cases = [e for i in range(300) for e in _case(f"t.py::c{i}", i)]

    def other():
        for i in range(300):
            held.sendevent("unscheduled", indices=[i])
    t = threading.Thread(target=other)
    t.start()
    for name, kw in cases:
        held.sendevent(name, **kw)
    t.join()
    got = [e for e in _unfold_all(sent) if e[0] != "unscheduled"]
    assert got == cases


COUNT_PLUGIN = '''
import json, os, pytest

@pytest.hookimpl(trylast=True, optionalhook=True)
def pytest_configure_node(node):
    """After the harness's: count the messages as they arrive from the worker."""
    inner = node.process_from_remote
    def counting(eventcall):
        if isinstance(eventcall, tuple):
            node.config._tmac_raw.append(eventcall[0])
        inner(eventcall)
    node.process_from_remote = counting

def pytest_configure(config):
    config._tmac_raw = []

def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        with open(os.environ["COUNT_OUT"], "w") as f:
            json.dump({"raw": config._tmac_raw}, f)
'''

TESTS = '''
import pytest

@pytest.mark.parametrize("i", range(6))
def test_passes(i):
    pass

def test_fails():
    assert 1 == 2, "a broken rule"

def test_skips():
    pytest.skip("nothing to measure")
'''


def test_a_run_reports_every_case_with_fewer_messages(tmp_path):
    root = nested_run.make_tree(tmp_path / "tree", TESTS)
    (root / "countmsgs.py").write_text(COUNT_PLUGIN)
    out, counts = tmp_path / "out", tmp_path / "counts.json"
    junit = out / "junit.xml"
    cp = pytest_run(root, "-n", "2", "-p", "countmsgs", f"--report-dir={out}", f"--junitxml={junit}",
                    env=dict(nested_run.plugin_env(root), COUNT_OUT=str(counts)))
    assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert "1 failed, 6 passed, 2 skipped" in cp.stdout, cp.stdout[-3000:]
    states = nested_run.states(out)
    assert sum(s == "passed" for n, s in states.items() if "test_passes" in n) == 6
    assert states["test_tiny.py::test_fails"] == "failed"
    assert states["test_tiny.py::test_skips"] == "skipped"
    assert junit.read_text().count("<testcase ") >= 8
    raw = json.loads(counts.read_text())["raw"]
    # eight cases, three messages each: logstart, setup and call, the rest (a warning
    # during a case would split one of them in two)
    assert raw.count("logstart") == 8
    assert 24 <= sum(raw.count(m) for m in ("logstart", wm.EVENT, "testreport")) <= 24 + raw.count(
        "warning_recorded")
    assert "logfinish" not in raw and "runtest_protocol_complete" not in raw


SLOW_TEARDOWN = '''
import time, pytest

@pytest.fixture
def slow():
    yield
    time.sleep(60)

def test_quick():
    pass

def test_slow_teardown(slow):
    pass
'''


def test_a_run_stopped_in_a_teardown_keeps_the_cases_verdict(tmp_path):
    """--run-timeout lands in a case's teardown: its call passed, and the run says so."""
    root = nested_run.make_tree(tmp_path / "tree", SLOW_TEARDOWN)
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "1", "--run-timeout=6", f"--report-dir={out}", timeout=120)
    assert cp.returncode == 2, cp.stdout[-3000:] + cp.stderr[-2000:]
    states = nested_run.states(out)
    assert states["test_tiny.py::test_quick"] == "passed"
    assert states["test_tiny.py::test_slow_teardown"] == "passed", cp.stdout[-3000:]


def test_the_messages_pickle_as_xdist_sends_them():
    """What a worker holds is what xdist sends: plain data that pickles both ways."""
    events = _case("t.py::a", 0)
    assert pickle.loads(pickle.dumps(events, pickle.HIGHEST_PROTOCOL)) == events
