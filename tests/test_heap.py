"""The end of a run stays cheap: fixtures.plugins.run_control.heap freezes what survives a full
garbage collection, and a worker's test report travels without the fields the
controller's TestReport would default (fixtures.plugins.reporting.case_record)."""
from __future__ import annotations

import gc
import types

import pytest

from _pytest.reports import TestReport
from _pytest.reports import pytest_report_to_serializable as pytest_serialized

from fixtures.plugins.reporting import case_record
from fixtures.plugins.run_control import heap


def _with_callback(body) -> None:
    """Run ``body`` with the heap plugin's callback installed and no automatic collection
    (so that only the test's own collections count); the callback is left as it was."""
    installed = heap._freeze_after_full_collection in gc.callbacks
    enabled = gc.isenabled()
    gc.disable()
    heap.pytest_configure(None)
    try:
        body()
    finally:
        if not installed:
            heap.pytest_unconfigure(None)
        if enabled:
            gc.enable()


def _frozen(obj) -> bool:
    """Tracked by the collector but in none of its three generations: in the permanent one.
    (The number of frozen objects is no measure: a frozen object still dies when its last
    reference goes.)"""
    return gc.is_tracked(obj) and not any(o is obj for g in range(3) for o in gc.get_objects(generation=g))


def test_a_full_collection_freezes_what_survived_it():
    def body():
        kept = [[i] for i in range(1000)]            # tracked containers, alive
        assert not _frozen(kept)
        gc.collect()
        assert _frozen(kept) and _frozen(kept[-1])
    _with_callback(body)


def test_a_young_collection_freezes_nothing():
    def body():
        young = [[i] for i in range(1000)]
        gc.collect(0)
        gc.collect(1)
        assert not _frozen(young), "only a full collection freezes"
        assert any(o is young for o in gc.get_objects(generation=2))
    _with_callback(body)


def test_unconfigure_removes_the_callback():
    installed = heap._freeze_after_full_collection in gc.callbacks
    heap.pytest_configure(None)
    heap.pytest_configure(None)                       # once, however often configured
    assert gc.callbacks.count(heap._freeze_after_full_collection) == 1
    heap.pytest_unconfigure(None)
    assert heap._freeze_after_full_collection not in gc.callbacks
    if installed:
        heap.pytest_configure(None)


def _serialized_on_worker(report: TestReport) -> dict:
    config = types.SimpleNamespace(workerinput={})
    hook = case_record.pytest_report_to_serializable(config, report)
    next(hook)
    try:
        hook.send(pytest_serialized(report))
    except StopIteration as done:
        return done.value
    raise AssertionError("the hook yielded twice")


def test_a_worker_report_leaves_out_empty_fields_the_controller_defaults():
    report = TestReport("t.py::test_x[a]", ("t.py", 1, "test_x[a]"), {"test_x[a]": 1, "gpu": 1}, "passed",
                        None, "setup", sections=[], user_properties=[], duration=0.5, start=1.0, stop=1.5)
    data = _serialized_on_worker(report)
    assert data["keywords"] == {}
    assert "sections" not in data and "user_properties" not in data
    back = TestReport._from_json(data)
    assert back.sections == [] and back.user_properties == []
    assert (back.nodeid, back.location, back.outcome, back.when, back.duration, back.start, back.stop) == (
        "t.py::test_x[a]", ("t.py", 1, "test_x[a]"), "passed", "setup", 0.5, 1.0, 1.5)


def test_a_worker_report_keeps_its_sections_and_properties():
    report = TestReport("t.py::test_x[a]", ("t.py", 1, "test_x[a]"), {}, "failed", "boom", "call",
                        sections=[("Captured stdout call", "hello\n")], user_properties=[("k", "v")])
    data = _serialized_on_worker(report)
    back = TestReport._from_json(data)
    assert back.sections == [("Captured stdout call", "hello\n")]
    assert back.user_properties == [("k", "v")]


def test_collection_runs_without_the_garbage_collector_and_freezes(monkeypatch):
    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    assert gc.isenabled()
    hook = heap.pytest_collection(types.SimpleNamespace())
    next(hook)                                  # collection runs now
    try:
        assert not gc.isenabled()
    finally:
        with pytest.raises(StopIteration):
            hook.send(None)
    assert gc.isenabled() and frozen == [1]
