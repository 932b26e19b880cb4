"""``python -m reports diff`` on hand-made inputs (CPU only); merge: test_reports_merge.py."""
from __future__ import annotations

import json

import pytest

from reports.__main__ import main
from reports.model import load_run, nodeid_from_junit

from reports_helpers import collection_error, env, junit, junit_add_collection_error, run_dir

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
    assert [r["id"] for r in d["regressions"]["failed"]] == [B]
    assert d["regressions"]["failed"][0]["rule"] == "R-9"
    assert d["still_failing"] == [C]
    assert d["exit_status"] == 1 and d["schema"] == "tmac-diff/2"
    assert d["verdict"] == "1 regression: 1 failed" and "**1 regression: 1 failed**" in md and B in md
    assert d["environment"] == []


def test_could_not_build_after_pass_is_a_regression(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"})
    new = run_dir(tmp_path / "new", {A: "could-not-build"})
    assert run_diff(capsys, old, new)[0] == 1


def test_fixes_new_vanished_and_skips(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "failed", B: "passed", C: "passed", D: "known-issue"})
    new = run_dir(tmp_path / "new", {A: "passed", B: {"state": "skipped", "message": "no GPU: x"},
                                     D: "passed", "suites/test_new.py::test_x": "passed"})
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    assert status == 1                          # coverage lost and a vanished case are regressions
    d = json.loads(out)
    assert {r["id"] for r in d["fixes"]} == {A, D}
    assert [r["id"] for r in d["regressions"]["skipped"]] == [B]
    assert d["regressions"]["vanished"] == [{"id": C, "old": "passed"}]
    assert d["new_cases"] == [{"id": "suites/test_new.py::test_x", "state": "passed"}]
    assert d["verdict"] == "2 regressions: 1 skipped, 1 vanished"
    assert run_diff(capsys, old, new, "--accept", "skipped")[0] == 1
    status, md, _ = run_diff(capsys, old, new, "--accept", "skipped,vanished")
    assert status == 0 and "**2 regressions: 1 skipped (accepted), 1 vanished (accepted)**" in md
    assert run_diff(capsys, old, new, "--accept", "vanished", "--accept", "skipped")[0] == 0
    # --strict: every loss of verdict exits 1 anyway; it adds the harness (unknown here: no
    # environment.json), which fails even when every class is accepted
    assert run_diff(capsys, old, new, "--strict")[0] == 1
    status, md, _ = run_diff(capsys, old, new, "--strict", "--accept", "skipped,vanished")
    assert status == 1 and "harness unknown: no harness section in the environment of OLD and NEW (--strict)" in md


NEWFILE = "suites/test_new.py"
CLASSES = ("failed", "could-not-build", "harness-error", "known-issue", "skipped", "vanished", "collection-error",
           "failed-on-gpu", "gpu-missing")


def on(state, **gpus):
    """A case in ``state`` whose state on GPU N is ``gpus["gN"]``."""
    return {"state": state, "gpus": {k[1:]: v for k, v in gpus.items()}}


@pytest.mark.parametrize("cls,old,new", [
    ("failed", {A: "passed"}, {A: "failed"}),
    ("failed", {A: "skipped"}, {A: "failed"}),
    ("failed", {A: "known-issue"}, {A: "failed"}),
    ("failed", {A: "could-not-build"}, {A: "failed"}),
    ("failed", {A: "passed"}, {A: "passed", B: "failed"}),                      # a new failed case
    ("could-not-build", {A: "passed"}, {A: "could-not-build"}),
    ("could-not-build", {A: "failed"}, {A: "could-not-build"}),
    ("could-not-build", {A: "passed"}, {A: "passed", B: "could-not-build"}),
    ("known-issue", {A: "passed"}, {A: "known-issue"}),
    ("skipped", {A: "passed"}, {A: "skipped"}),
    ("skipped", {A: "known-issue"}, {A: "skipped"}),
    ("vanished", {A: "passed", B: "failed"}, {A: "passed"}),                    # whatever its old state
    ("collection-error", {A: "passed"}, {A: "passed", NEWFILE: collection_error()}),
    ("harness-error", {A: "passed"}, {A: "harness-error"}),
    ("harness-error", {A: "passed"}, {A: "passed", B: "harness-error"}),
    # per GPU: failed on GPU 2 before, on GPUs 2 and 3 now (the case failed in both)
    ("failed-on-gpu", {A: on("failed", g0="passed", g2="failed", g3="passed")},
     {A: on("failed", g0="passed", g2="failed", g3="failed")}),
    ("failed-on-gpu", {A: on("harness-error", g0="passed", g1="harness-error")},
     {A: on("harness-error", g0="harness-error", g1="harness-error")}),
    ("gpu-missing", {A: on("passed", g0="passed", g1="passed")}, {A: on("passed", g0="passed")}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_each_regression_class_alone_exits_1_unless_accepted(tmp_path, capsys, cls, old, new):
    o, n = run_dir(tmp_path / "old", old), run_dir(tmp_path / "new", new)
    status, out, _ = run_diff(capsys, o, n, "--format", "json")
    d = json.loads(out)
    assert status == 1 and d["exit_status"] == 1
    assert {c for c in CLASSES if d["regressions"][c]} == {cls}
    assert d["verdict"] == f"1 regression: 1 {cls}"
    status, md, _ = run_diff(capsys, o, n)
    assert status == 1 and f"**1 regression: 1 {cls}**" in md and f"### Regressions, {cls}: 1" in md
    status, md, _ = run_diff(capsys, o, n, "--accept", cls, "--json", tmp_path / "d.json")
    d = json.loads((tmp_path / "d.json").read_text())
    assert status == 0 and d["exit_status"] == 0 and d["accepted"] == [cls]
    assert f"**1 regression: 1 {cls} (accepted)**" in md and f"Accepted (--accept {cls})" in md
    others = ",".join(c for c in CLASSES if c != cls)
    assert run_diff(capsys, o, n, "--accept", others)[0] == 1


def test_a_file_that_stops_collecting(tmp_path, capsys):
    other = "suites/test_load.py::test_other"
    old = run_dir(tmp_path / "old", {A: "passed", B: "passed", C: "passed"})
    new = run_dir(tmp_path / "new", {C: "passed", "suites/test_load.py": collection_error()})
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and d["verdict"] == "3 regressions: 2 vanished, 1 collection-error"
    assert [r["id"] for r in d["regressions"]["collection-error"]] == ["suites/test_load.py"]
    assert {r["id"] for r in d["regressions"]["vanished"]} == {A, B}
    assert not d["regressions"]["failed"]
    assert run_diff(capsys, old, new, "--accept", "collection-error")[0] == 1
    assert run_diff(capsys, old, new, "--accept", "collection-error,vanished")[0] == 0
    # the same from JUnit files
    j_old = junit(tmp_path / "old.xml", {A: "passed", B: "passed", C: "passed"})
    j_new = junit_add_collection_error(junit(tmp_path / "new.xml", {C: "passed"}), "suites/test_load.py")
    d = json.loads(run_diff(capsys, j_old, j_new, "--format", "json")[1])
    assert d["verdict"] == "3 regressions: 2 vanished, 1 collection-error"
    # and back: the file collects again, with a new case
    status, out, _ = run_diff(capsys, new, run_dir(tmp_path / "fixed", {A: "passed", B: "passed", C: "passed",
                                                                        other: "passed"}), "--format", "json")
    d = json.loads(out)
    assert status == 0 and d["verdict"] == "No regressions"
    assert d["collection_errors_gone"] == ["suites/test_load.py"]
    assert {c["id"] for c in d["new_cases"]} == {A, B, other}


def test_nothing_worse_exits_0(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed", B: "failed", C: "failed", D: "skipped"}, env(driver=13000))
    new = run_dir(tmp_path / "new", {A: "passed", B: "skipped", C: "known-issue", D: "known-issue",
                                     "suites/test_new.py::test_x": "skipped"}, env(driver=13010))
    status, md, _ = run_diff(capsys, old, new)
    assert status == 0 and "**No regressions**" in md and "exit status 0" in md
    d = json.loads(run_diff(capsys, old, new, "--format", "json")[1])
    assert d["verdict"] == "No regressions" and d["exit_status"] == 0
    assert [r["id"] for r in d["other_changes"]] == [B]
    assert {r["id"] for r in d["newly_known"]} == {C, D}
    assert d["environment"]


def test_fixes_only_exit_0(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "failed", B: "could-not-build", C: "known-issue", D: "skipped"})
    new = run_dir(tmp_path / "new", {A: "passed", B: "passed", C: "passed", D: "passed",
                                     "suites/test_new.py::test_x": "passed"})
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert status == 0 and d["verdict"] == "No regressions"
    assert {r["id"] for r in d["fixes"]} == {A, B, C}
    assert [r["id"] for r in d["coverage_gained"]] == [D]


@pytest.mark.parametrize("option", ["--json", "--markdown"])
def test_unwritable_output_exits_2_with_one_line(tmp_path, capsys, option):
    old = run_dir(tmp_path / "old", {A: "passed"})
    new = run_dir(tmp_path / "new", {A: "passed"})
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "d.out"                  # a path under a regular file
    status, _, err = run_diff(capsys, old, new, option, target)
    assert status == 2
    assert err.count("\n") == 1 and str(target) in err and "cannot write" in err
    assert "Traceback" not in err


def test_unknown_accept_class_is_bad_usage(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"})
    with pytest.raises(SystemExit) as e:
        main(["diff", str(old), str(old), "--accept", "vanished,flaky"])
    assert e.value.code == 2 and "flaky" in capsys.readouterr().err


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
    assert [r["id"] for r in d["regressions"]["failed"]] == [C]   # class in the id survives the JUnit round trip
    assert d["regressions"]["failed"][0]["rule"] == "R-1"
    assert [r["id"] for r in d["newly_known"]] == [D]
    assert d["environment"][0]["key"] == "tmac.driver.cuda_driver_version"
    # a run folder (node ids) against a JUnit file (classname/name) still lines up
    folder = run_dir(tmp_path / "f", {A: "passed", C: "passed", D: "skipped"})
    status, out, _ = run_diff(capsys, folder, j_new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and len(d["regressions"]["failed"]) == 1
    assert not d["new_cases"] and not d["regressions"]["vanished"]


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


def test_load_run_prefers_results_and_reads_env(tmp_path):
    d = run_dir(tmp_path / "r", {A: "passed"}, env(host="hx"))
    run = load_run(d)
    assert run.node == "hx" and run.cases[A].state == "passed"


# ---------------------------------------------------------------- known-issue entries, harness

def ki_case(entry_id: str | None) -> dict:
    c = {"state": "known-issue", "message": "known-issue: rejected"}
    if entry_id:
        c["known_issue"] = {"id": entry_id, "reason": "rejected", "evidence": "https://e.x/1", "mode": "xfail"}
    return c


def entry(entry_id: str, pattern: str, **kw) -> dict:
    return dict({"id": entry_id, "pattern": pattern, "reason": "rejected", "evidence": "https://e.x/1",
                 "mode": "xfail", "rule": ["box_dim.range"], "cases": {"known-issue": 1}}, **kw)


def test_a_case_that_moves_to_another_known_issue_entry(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: ki_case("KI-1"), B: ki_case("KI-1"), C: ki_case(None)})
    new = run_dir(tmp_path / "new", {A: ki_case("KI-2"), B: ki_case("KI-1"), C: ki_case("KI-3")})
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and d["verdict"] == "2 regressions: 2 known-issue-moved"
    moved = {r["id"]: (r["old_known"], r["new_known"]) for r in d["regressions"]["known-issue-moved"]}
    assert moved == {A: ("KI-1", "KI-2"), C: ("(xfail in the suite)", "KI-3")}
    assert d["by_axis"]["dtype"]["f16"]["regressions"] == 1
    status, md, _ = run_diff(capsys, old, new)
    assert "### Regressions, known-issue-moved: 2" in md and "| KI-1 | KI-2 |" in md
    assert run_diff(capsys, old, new, "--accept", "known-issue-moved")[0] == 0


def test_a_changed_known_issue_entry_is_its_own_class(tmp_path, capsys):
    old_e = [entry("KI-1", "suites/test_load.py::test_load[f16-*]"), entry("KI-2", "x", match="A"),
             entry("KI-3", "y"), entry("KI-4", "z")]
    new_e = [entry("KI-1", "suites/test_load.py::test_load[*]"),               # widened
             entry("KI-2", "x", match="A|B", compute_capability=["9.0"]),    # signature and a condition
             entry("KI-3", "y", reason="reworded", evidence="other link"),   # text only: not a change
             entry("KI-5", "w")]                                             # KI-4 removed, KI-5 added
    old = run_dir(tmp_path / "old", {A: ki_case("KI-1")}, known=old_e)
    new = run_dir(tmp_path / "new", {A: ki_case("KI-1")}, known=new_e)
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and d["verdict"] == "2 regressions: 2 known-issue-changed"
    rows = {r["id"]: r for r in d["regressions"]["known-issue-changed"]}
    assert set(rows) == {"KI-1", "KI-2"}
    assert rows["KI-1"]["fields"] == ["pattern"] and rows["KI-1"]["new"] == {"pattern": "suites/test_load.py::test_load[*]"}
    assert rows["KI-2"]["fields"] == ["match", "compute_capability"]
    assert d["known_issues"] == {"compared": True, "added": ["KI-5"], "removed": ["KI-4"]}
    assert d["by_axis"] == {}                           # entries are not cases
    status, md, _ = run_diff(capsys, old, new)
    assert "pattern: 'suites/test_load.py::test_load[f16-*]' -> 'suites/test_load.py::test_load[*]'" in md
    assert "2 changed (the class known-issue-changed), 1 added (KI-5), 1 removed (KI-4)." in md
    assert run_diff(capsys, old, new, "--accept", "known-issue-changed")[0] == 0
    # JUnit keeps no entries: not compared, said so
    d = json.loads(run_diff(capsys, old, junit(tmp_path / "n.xml", {A: "known-issue"}), "--format", "json")[1])
    assert not d["known_issues"]["compared"] and "NEW" in d["known_issues"]["why"]


def harness(packages=None, sources="a" * 64, constraints="constraints/cu13.txt") -> dict:
    return {"packages": packages or {"pytest": "9.0.1", "numpy": "2.3.0", "cuda-core": "0.4.0"},
            "sources_sha256": sources, "constraints": constraints}


def test_harness_drift_and_strict(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, dict(env(), harness=harness()))
    same = run_dir(tmp_path / "same", {A: "passed"}, dict(env(), harness=harness()))
    status, md, _ = run_diff(capsys, old, same, "--strict")
    assert status == 0 and "The same harness" in md
    drift = run_dir(tmp_path / "drift", {A: "passed"}, dict(env(), harness=harness(
        {"pytest": "9.1.0", "numpy": "2.3.0", "filelock": "3.20"}, sources="b" * 64,
        constraints="differs: pytest 9.1.0 (constraints/cu13.txt: 9.0.1)")))
    status, out, _ = run_diff(capsys, old, drift, "--format", "json")
    h = json.loads(out)["harness"]
    assert status == 0 and h["known"] and h["differs"]             # listed; exit 1 only with --strict
    assert h["packages"] == [{"name": "cuda-core", "old": "0.4.0", "new": None},
                             {"name": "filelock", "old": None, "new": "3.20"},
                             {"name": "pytest", "old": "9.0.1", "new": "9.1.0"}]
    assert h["sources"] == {"old": "a" * 64, "new": "b" * 64}
    status, md, _ = run_diff(capsys, old, drift, "--strict")
    assert status == 1
    assert ("**No regressions; different harnesses: packages cuda-core 0.4.0 -> -, filelock - -> 3.20, pytest "
            "9.0.1 -> 9.1.0; sources differ (sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb); constraints "
            "'constraints/cu13.txt' -> 'differs: pytest 9.1.0 (constraints/cu13.txt: 9.0.1)' (--strict)**") in md
    # only the sources differ
    src = run_dir(tmp_path / "src", {A: "passed"}, dict(env(), harness=harness(sources="c" * 64)))
    assert run_diff(capsys, old, src)[0] == 0 and run_diff(capsys, old, src, "--strict")[0] == 1
    # a folder without the section: the harness is unknown, and --strict fails, saying so
    bare = run_dir(tmp_path / "bare", {A: "passed"}, env())
    status, md, _ = run_diff(capsys, old, bare)
    assert status == 0 and "Harness unknown: no harness section in the environment of NEW." in md
    status, out, _ = run_diff(capsys, old, bare, "--strict", "--format", "json")
    d = json.loads(out)
    assert status == 1 and d["exit_status"] == 1 and d["strict"]
    assert d["verdict"] == "No regressions; harness unknown: no harness section in the environment of NEW (--strict)"


def test_per_gpu_regressions_name_the_gpu_and_count_no_case_twice(tmp_path, capsys):
    """A case that got worse overall is a regression of its class once, not per GPU too;
    a GPU replaced under an ordinal is named."""
    run_gpus = lambda uuid1: {"usable": 2, "reason": "", "run": [
        {"ordinal": 0, "uuid": "GPU-a", "pci_bus_id": "0000:18:00.0"},
        {"ordinal": 1, "uuid": uuid1, "pci_bus_id": "0000:19:00.0"}]}
    from reports_helpers import set_meta
    old = set_meta(run_dir(tmp_path / "old", {A: on("passed", g0="passed", g1="passed"),
                                              B: on("failed", g0="failed", g1="passed")}), gpu=run_gpus("GPU-b"))
    new = set_meta(run_dir(tmp_path / "new", {A: on("failed", g0="passed", g1="failed"),
                                              B: on("failed", g0="failed", g1="failed")}), gpu=run_gpus("GPU-c"))
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert status == 1 and [r["id"] for r in d["regressions"]["failed"]] == [A]
    assert [(r["id"], r["gpu"], r["old"], r["new"]) for r in d["regressions"]["failed-on-gpu"]] == \
        [(B, "1", "passed", "failed")]
    assert d["gpus"]["replaced"] == [{"gpu": "1", "old": "GPU-b", "new": "GPU-c"}]
    status, md, _ = run_diff(capsys, old, new)
    assert "GPU 1 is another GPU in NEW: GPU-b -> GPU-c." in md
    assert "### Regressions, failed-on-gpu: 1" in md


# ---------------------------------------------------------------- the driver, the environment variables

def env4(variables: dict[str, str] | None = None, **kw) -> dict:
    """A schema-4 environment.json: ``env``'s, with the user's variables as the survey records
    them (``run_environment``: the prefixes, secrets masked)."""
    from fixtures.plugins.environment.survey import run_environment
    return dict(env(**kw), schema="tmac-environment/4",
                environment_variables=run_environment(variables or {}))


def headings(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("## ") or line.startswith("### ")]


def test_a_driver_change_comes_first_and_is_no_regression(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed", B: "passed"}, env4(driver=13000, kmv="580.95.05"))
    new = run_dir(tmp_path / "new", {A: "passed", B: "failed"}, env4(driver=13000, kmv="580.159.04"))
    status, md, _ = run_diff(capsys, old, new)
    assert status == 1                                  # B's failure, not the driver
    assert headings(md)[0] == "## Driver: 580.95.05 -> 580.159.04 (CUDA 13.0 -> 13.0)"
    assert md.index("Driver: 580.95.05") < md.index("## Counts") < md.index("### Regressions, failed")
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    assert list(d)[:2] == ["schema", "driver"]
    assert d["driver"] == {"old": {"kernel_module_version": "580.95.05", "cuda_driver_version": 13000},
                           "new": {"kernel_module_version": "580.159.04", "cuda_driver_version": 13000},
                           "changed": True, "line": "Driver: 580.95.05 -> 580.159.04 (CUDA 13.0 -> 13.0)",
                           "unavailable": []}
    # the driver alone changed: nothing got worse
    fine = run_dir(tmp_path / "fine", {A: "passed", B: "passed"}, env4(driver=13010, kmv="580.159.04"))
    status, md, _ = run_diff(capsys, old, fine)
    assert status == 0 and headings(md)[0] == "## Driver: 580.95.05 -> 580.159.04 (CUDA 13.0 -> 13.1)"


def test_an_unchanged_or_unknown_driver_says_so(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, env4(kmv="580.95.05"))
    same = run_dir(tmp_path / "same", {A: "passed"}, env4(kmv="580.95.05"))
    status, md, _ = run_diff(capsys, old, same)
    assert status == 0 and headings(md)[0] == "## Driver: unchanged, 580.95.05 (CUDA 13.0)"
    no_gpu = "unavailable: no CUDA driver (libcuda not loadable)"
    lost = run_dir(tmp_path / "lost", {A: "passed"}, env4(driver=no_gpu, kmv=no_gpu))
    status, md, _ = run_diff(capsys, old, lost)
    assert status == 0 and headings(md)[0] == "## Driver: 580.95.05 -> unavailable (CUDA 13.0 -> unavailable)"
    assert f"Not known: NEW kernel_module_version: {no_gpu}; NEW cuda_driver_version: {no_gpu}." in md
    d = json.loads(run_diff(capsys, old, lost, "--format", "json")[1])
    assert d["driver"]["changed"] is None and d["driver"]["new"]["kernel_module_version"] == no_gpu
    bare_old, bare_new = run_dir(tmp_path / "b1", {A: "passed"}), run_dir(tmp_path / "b2", {A: "passed"})
    status, md, _ = run_diff(capsys, bare_old, bare_new)
    assert status == 0 and headings(md)[0] == "## Driver: unavailable in OLD and NEW"
    # JUnit files: their tmac.driver.* properties
    j_old = junit(tmp_path / "old.xml", {A: "passed"}, {"tmac.driver.cuda_driver_version": "12080",
                                                        "tmac.driver.kernel_module_version": "570.86.10"})
    status, md, _ = run_diff(capsys, j_old, old)
    assert status == 0 and headings(md)[0] == "## Driver: 570.86.10 -> 580.95.05 (CUDA 12.8 -> 13.0)"


def test_a_change_of_the_users_variables_shows_in_both_outputs(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, env4(
        {"XLA_FLAGS": "--a", "NCCL_DEBUG": "INFO", "CUDA_API_KEY": "key-old-9f2", "TRITON_Token": "tok-3c1",
         "PATH": "/old/bin"}))
    new = run_dir(tmp_path / "new", {A: "passed"}, env4(
        {"XLA_FLAGS": "--b", "JAX_PLATFORMS": "cuda", "CUDA_API_KEY": "key-new-7e4",
         "NCCL_PASSWORD": "pw-5d8", "PATH": "/new/bin"}))
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    assert status == 0                                  # a variable is no regression
    d = json.loads(out)
    rows = [(e["key"], e["old"], e["new"]) for e in d["environment"] if e["group"] == "environment variables"]
    assert rows == [("tmac.env.JAX_PLATFORMS", None, "cuda"),    # came
                    ("tmac.env.NCCL_DEBUG", "INFO", None),       # went
                    ("tmac.env.NCCL_PASSWORD", None, "<set>"),   # a secret that came
                    ("tmac.env.TRITON_Token", "<set>", None),
                    ("tmac.env.XLA_FLAGS", "--a", "--b")]        # changed
    # CUDA_API_KEY: "<set>" in both (its values differ, and are never recorded); PATH: not recorded
    status, md, _ = run_diff(capsys, old, new)
    assert status == 0
    assert "| environment variables | tmac.env.XLA_FLAGS | --a | --b |" in md
    assert "| environment variables | tmac.env.JAX_PLATFORMS | (not set) | cuda |" in md
    assert "| environment variables | tmac.env.NCCL_PASSWORD | (not set) | \\<set> |" in md
    for text in (md, out):
        assert "CUDA_API_KEY" not in text and "PATH" not in text
        assert not any(secret in text for secret in ("key-old-9f2", "key-new-7e4", "tok-3c1", "pw-5d8"))


def test_variables_are_compared_only_where_both_runs_recorded_them(tmp_path, capsys):
    old = run_dir(tmp_path / "old", {A: "passed"}, env())           # schema 2: no variables
    new = run_dir(tmp_path / "new", {A: "passed"}, env4({"XLA_FLAGS": "--b", "NCCL_DEBUG": "INFO"}))
    status, out, _ = run_diff(capsys, old, new, "--format", "json")
    d = json.loads(out)
    rows = [(e["key"], e["old"], e["new"]) for e in d["environment"] if e["group"] == "environment variables"]
    assert status == 0 and rows == [("tmac.env", "unavailable: not recorded (environment schema 2)",
                                     "2 variables recorded")]
    # both recorded, neither has any: no row at all
    a = run_dir(tmp_path / "a", {A: "passed"}, env4({}))
    b = run_dir(tmp_path / "b", {A: "passed"}, env4({"PATH": "/x"}))
    d = json.loads(run_diff(capsys, a, b, "--format", "json")[1])
    assert [e for e in d["environment"] if e["group"] == "environment variables"] == []
