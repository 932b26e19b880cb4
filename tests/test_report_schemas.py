"""The reports' JSON Schemas (reports/schemas): each is a valid draft 2020-12 schema whose
``$id`` is the ``schema`` value the code writes, and each rejects a report a script could
not rely on. That every report the self-tests read is valid is checked where they read it
(tests/nested_run.py ``report``). CPU only."""
from __future__ import annotations

import copy

import jsonschema
import pytest

from reports import merge, model, schemas

RESULTS = {
    "schema": model.RESULTS_SCHEMA, "run_id": "20261128T000000Z-node1-1", "host": "node1",
    "started": "2026-11-28T00:00:00+00:00", "finished": "2026-11-28T00:01:00+00:00",
    "duration_s": 60.0, "exitstatus": 0, "junit": None,
    "counts": {"passed": 1, "failed": 0, "known-issue": 0, "skipped": 0, "could-not-build": 0,
               "harness-error": 0},
    "known_issues": {"file": None, "entries": []}, "end": {"kind": "completed"},
    "collected": 1, "not_reported": 0, "not_reported_ids": [],
    "gpu": {"usable": 1, "reason": "", "run": [{"ordinal": 0, "name": "NVIDIA H100 80GB HBM3",
                                               "uuid": "GPU-0", "pci_bus_id": "0000:00:06.0"}]},
    "verdict": "PASS: 1 passed", "status": "PASS",
    "messages": ["no GPU: x"], "case_known_issues": [],
    "case_defaults": {"state": "passed", "gpus": {"0": "passed"}},
    "cases": [{"id": "suites/test_x.py::test_x[a]", "duration": 0.1, "t": [0.5, 0.6, 0.01, 0.08, 0.01]},
              {"id": "suites/test_x.py::test_x[b]", "state": "skipped", "message": 0, "skip_kind": "no-gpu",
               "phase": "setup", "gpus": {"0": "skipped"}}],
}


def test_each_schema_is_valid_and_names_the_version_the_code_writes():
    written = {"results.json": model.RESULTS_SCHEMA, "environment.json": model.ENV_SCHEMA,
               "fleet.json": merge.SCHEMA}
    assert set(written) == set(schemas.FILES)
    for name, version in written.items():
        s = schemas.schema(name)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["$id"] == version and s["properties"]["schema"] == {"const": version}, name


def test_a_valid_results_file_passes():
    assert schemas.errors("results.json", RESULTS) == []


@pytest.mark.parametrize("break_it, where", [
    (lambda d: d.update(status="OK"), "status"),
    (lambda d: d["cases"][0].update(state="ok"), "cases/0/state"),
    (lambda d: d["cases"][1]["gpus"].update({"0": "fine"}), "cases/1/gpus/0"),
    (lambda d: d["cases"][0].update(colour="red"), "cases/0"),
    (lambda d: d["cases"][1].update(message="no GPU: x"), "cases/1/message"),
    (lambda d: d["case_defaults"].update(id="x"), "case_defaults"),
    (lambda d: d.pop("messages"), "(top)"),
    (lambda d: d["counts"].pop("harness-error"), "counts"),
    (lambda d: d.update(schema="tmac-results/0"), "schema"),
    (lambda d: d.pop("verdict"), "(top)"),
    (lambda d: d.update(started="yesterday"), "started"),
], ids=["status", "state", "gpu-state", "unknown-field", "message-text", "default-id", "no-messages",
        "counts", "version", "no-verdict", "date"])
def test_a_broken_results_file_is_named_where_it_breaks(break_it, where):
    d = copy.deepcopy(RESULTS)
    break_it(d)
    got = schemas.errors("results.json", d)
    assert got and got[0].startswith(f"results.json {where}: "), got


def test_a_broken_fleet_and_environment_are_rejected():
    assert schemas.errors("fleet.json", {"schema": merge.SCHEMA, "nodes": [{"node": "n1"}]})
    assert schemas.errors("environment.json", {"schema": "tmac-environment/2"})
