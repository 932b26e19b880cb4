"""A worker's case messages travel together (fixtures/plugins/run_control/worker_messages.py):
what the worker holds and sends, that the controller unfolds every message xdist sent in
its order, and a real ``-n 2`` run whose controller sees every report while a passed
case crosses in two messages. CPU only."""
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


def test_a_passed_case_crosses_in_two_messages_and_unfolds_as_sent():
    events = _case("t.py::a", 0) + _case("t.py::b", 1)
    sent = _send_all(events)
    assert [name for name, _ in sent] == ["logstart", wm.EVENT, "logstart", wm.EVENT]
    assert _unfold_all(sent) == events


def test_a_failure_and_a_warning_go_at_once_after_what_is_held():
    failing = _case("t.py::f", 0, ("passed", "failed", "passed"))
    warning = ("warning_recorded", {"warning_message_data": {}, "when": "runtest", "nodeid": "t.py::f",
                                    "location": None})
    skipped = _case("t.py::s", 1, ("skipped", "passed", "passed"))
    del skipped[2]                       # skipped in its setup: no call report
    events = failing[:2] + [warning] + failing[2:] + skipped
    sent = _send_all(events)
    # logstart; the setup report held until the warning; the failure itself, at once; the
    # rest at the case's end. The skipped case: logstart, then one message.
    assert [name for name, _ in sent] == ["logstart", wm.EVENT, "warning_recorded", "testreport",
                                          wm.EVENT, "logstart", wm.EVENT]
    assert sent[3][1]["data"]["outcome"] == "failed"
    assert _unfold_all(sent) == events


def test_the_end_of_a_worker_sends_what_is_held_first():
    """A worker stopped within a case (Ctrl-C, a stop signal) still reports what it had
    finished: its ``workerfinished`` comes after the held messages."""
    events = _case("t.py::a", 0)[:3] + [("workerfinished", {"workeroutput": {}})]
    sent = _send_all(events)
    assert [name for name, _ in sent] == ["logstart", wm.EVENT, "workerfinished"]
    assert _unfold_all(sent) == events


def test_an_unreadable_message_is_an_internal_error_not_a_lost_case():
    got = []
    wm.unfold(got.append)((wm.EVENT, {"messages": b"not a pickle"}))
    assert len(got) == 1 and got[0][0] == "internal_error"
    assert "could not be read" in got[0][1]["formatted_error"]


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
    # eight cases: each a logstart and its held messages; the failure's report on its own
    assert raw.count("logstart") == 8
    assert raw.count(wm.EVENT) == 8 + 1          # the failed case: before and after its failure
    assert raw.count("testreport") == 1          # the failed call, sent as it came
    assert "logfinish" not in raw and "runtest_protocol_complete" not in raw


def test_the_messages_pickle_as_xdist_sends_them():
    """What a worker holds is what xdist sends: plain data that pickles both ways."""
    events = _case("t.py::a", 0)
    assert pickle.loads(pickle.dumps(events, pickle.HIGHEST_PROTOCOL)) == events
