"""``python -m reports diff`` and ``merge`` on hand-made inputs (CPU only)."""
from __future__ import annotations

import json

import pytest

from reports.__main__ import main
from reports.model import load_run, nodeid_from_junit

from reports_helpers import env, junit, run_dir

A = "suites/test_load.py::test_load[f16-rank2-swz128]"
B = "suites/test_load.py::test_load[f32-rank3-swz0]"
C = "suites/test_host_encode.py::TestRules::test_rule[box-384]"
D = "suites/test_fence.py::test_fence[scope-sys]"


def run_diff(capsys, *args):
    status = main(["diff", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_regression_exits_1_and_names_the_case(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed", B: "passed", C: "failed"}, env())
    new = run_dir(tmp_path / "new", {A: "passed", B: {"state": "failed", "rule": "R-9", "message": "bytes differ"},
                                     C: "failed"}, env())
    status, md, _ = run_diff(capsys, old, new, "--json", tmp_path / "d.json")
    assert status == 1
    d = json.loads((tmp_path / "d.json").read_text())
    assert [r["id"] for r in d["regressions"]] == [B]
    assert d["regressions"][0]["rule"] == "R-9"
    assert d["still_failing"] == [C]
    assert d["exit_status"] == 1 and d["schema"] == "tmac-diff/1"
    assert "1 regression" in md and B in md
    assert d["environment"] == []


def test_could_not_build_after_pass_is_a_regression(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"})
    new = run_dir(tmp_path / "new", {A: "could-not-build"})
    assert run_diff(capsys, old, new)[0] == 1


def test_fixes_new_vanished_and_skips_exit_0(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "failed", B: "passed", C: "passed", D: "known-issue"})
    new = run_dir(tmp_path / "new", {A: "passed", B: {"state": "skipped", "message": "no GPU: x"},
                                     D: "passed", "suites/test_new.py::test_x": "passed"})
    status, md, _ = run_diff(capsys, old, new, "--format", "json")
    assert status == 0
    d = json.loads(md)
    assert {r["id"] for r in d["fixes"]} == {A, D}
    assert [r["id"] for r in d["coverage_lost"]] == [B]
    assert d["new_cases"] == [{"id": "suites/test_new.py::test_x", "state": "passed"}]
    assert d["vanished_cases"] == [{"id": C, "state": "passed"}]
    # --strict: lost coverage counts
    assert run_diff(capsys, old, new, "--strict")[0] == 1


def test_environment_and_map_layout_changes(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, env(driver=13000, kmv="580.65.06"),
                  layout={"schema": 1, "fields": {"box_dim": {"word": 8, "mask": "0xff"}}})
    new = run_dir(tmp_path / "new", {A: "passed"}, env(driver=13010, kmv="580.95.05", nvrtc="13.1"),
                  layout={"schema": 1, "fields": {"box_dim": {"word": 9, "mask": "0xff"}}})
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    assert status == 0
    d = json.loads(out)
    changed = {e["key"]: (e["group"], e["old"], e["new"]) for e in d["environment"]}
    assert changed["tmac.driver.cuda_driver_version"] == ("driver", "13000", "13010")
    assert changed["tmac.driver.kernel_module_version"] == ("driver", "580.65.06", "580.95.05")
    assert changed["tmac.nvrtc.version"] == ("toolkit", "13.0", "13.1")
    assert d["map_layout"]["compared"]
    assert d["map_layout"]["changed"] == [{"field": "fields.box_dim.word", "old": 8, "new": 9}]
    md = main(["diff", str(old), str(new)]) or capsys.readouterr().out
    assert "580.95.05" in md and "fields.box_dim.word" in md


def test_gpu_change_is_reported(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, env(gpu="NVIDIA H100"))
    new = run_dir(tmp_path / "new", {A: "passed"}, env(gpu="NVIDIA H200"))
    d = json.loads(run_diff(capsys, old, new, "--format", "json")[1])
    assert {"key": "tmac.gpu.0.name", "group": "GPU", "old": "NVIDIA H100", "new": "NVIDIA H200"} in d["environment"]


def test_junit_files_and_mixed_inputs(tmp_path, capsys):
    j_old = junit(tmp_path / "old.xml", {A: "passed", C: "passed", D: "skipped"},
                  {"tmac.driver.cuda_driver_version": "13000"})
    j_new = junit(tmp_path / "new.xml", {A: "passed", C: "failed", D: "known-issue"},
                  {"tmac.driver.cuda_driver_version": "13010"})
    status, out, _ = run_diff(capsys, j_old, j_new, "--format", "json")
    d = json.loads(out)
    assert status == 1
    assert [r["id"] for r in d["regressions"]] == [C]   # class in the id survives the JUnit round trip
    assert d["regressions"][0]["rule"] == "R-1"
    assert [r["id"] for r in d["newly_known"]] == [D]
    assert d["environment"][0]["key"] == "tmac.driver.cuda_driver_version"
    # a run folder (node ids) against a JUnit file (classname/name) still lines up
    folder = run_dir(tmp_path / "f", {A: "passed", C: "passed", D: "skipped"})
    status, out, _ = run_diff(capsys, folder, j_new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and len(d["regressions"]) == 1 and not d["new_cases"] and not d["vanished_cases"]


@pytest.mark.parametrize("content,why", [
    ("this is not xml", "not readable as JUnit XML"),
    ("<html><body/></html>", "not JUnit XML"),
])
def test_unreadable_input_exits_2(tmp_path, capsys, content, why):
    good = run_dir(tmp_path / "good", {A: "passed"})
    bad = tmp_path / "bad.xml"
    bad.write_text(content)
    status, _, err = run_diff(capsys, good, bad)
    assert status == 2
    assert "unreadable input" in err and str(bad) in err and why in err


def test_unreadable_folders_and_json_exit_2(tmp_path, capsys):
    good = run_dir(tmp_path / "good", {A: "passed"})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_diff(capsys, good, empty)[0] == 2
    assert run_diff(capsys, good, tmp_path / "missing")[0] == 2
    j = tmp_path / "x.json"
    j.write_text('{"schema": "tmac-results/99", "cases": []}')
    status, _, err = run_diff(capsys, good, j)
    assert status == 2 and "tmac-results/99" in err
    j.write_text("{broken")
    assert run_diff(capsys, good, j)[0] == 2


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["diff", "only-one"])
    assert e.value.code == 2


def test_nodeid_from_junit():
    assert nodeid_from_junit("suites.test_x.TestA", "test_b[p-q]") == "suites/test_x.py::TestA::test_b[p-q]"
    assert nodeid_from_junit("suites.test_x", "test_b[a.b]") == "suites/test_x.py::test_b[a.b]"


def test_merge_flags_the_odd_node(tmp_path, capsys):
    same = {A: "passed", B: "passed", C: "known-issue"}
    n1 = run_dir(tmp_path / "n1", same, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", same, env(host="n2"))
    n3 = run_dir(tmp_path / "n3", {**same, B: "failed"}, env(host="n3", kmv="575.1"))
    status = main(["merge", str(n1), str(n2), str(n3), "--out", str(tmp_path / "fleet"), "--format", "json"])
    m = json.loads(capsys.readouterr().out)
    assert status == 1
    flagged = {n["node"]: n for n in m["nodes"] if n["flagged"]}
    assert set(flagged) == {"n3"}
    assert flagged["n3"]["differs_from_majority"] == [{"id": B, "node": "failed", "majority": "passed"}]
    assert flagged["n3"]["versions_differ"] == {"driver": "575.1"}
    for name in ("fleet.md", "fleet.html", "fleet.json"):
        assert (tmp_path / "fleet" / name).is_file()
    assert "n3" in (tmp_path / "fleet" / "fleet.md").read_text()
    assert main(["merge", str(n1), str(n2)]) == 0


def test_load_run_prefers_results_and_reads_env(tmp_path):
    d = run_dir(tmp_path / "r", {A: "passed"}, env(host="hx"))
    run = load_run(d)
    assert run.node == "hx" and run.cases[A].state == "passed"
