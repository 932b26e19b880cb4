"""``python -m reports merge`` on hand-made run folders (CPU only)."""
from __future__ import annotations

import json

from reports.__main__ import main

from reports_helpers import env, run_dir, set_meta

A = "suites/test_load.py::test_load[f16-rank2-swz128]"
B = "suites/test_load.py::test_load[f32-rank3-swz0]"
C = "suites/test_host_encode.py::TestRules::test_rule[box-384]"
SAME = {A: "passed", B: "passed", C: "known-issue"}
NO_GPU = {"state": "skipped", "skip_kind": "no-gpu", "message": "no GPU: CUDA_ERROR_NO_DEVICE"}


def run_merge(capsys, *args):
    status = main(["merge", *map(str, args)])
    out = capsys.readouterr()
    return status, out.out, out.err


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


def test_merge_rerun_leaves_out_its_own_out_folder(tmp_path, capsys):
    day = tmp_path / "2026-11-23"
    for h in ("n1", "n2", "n3"):
        run_dir(day / h, SAME, env(host=h))
    fleet = day / "fleet"
    results = []
    for _ in range(2):                          # python3 -m reports merge DAY/* --out DAY/fleet, twice
        status, out, err = run_merge(capsys, *sorted(day.glob("*")), "--out", fleet, "--format", "json")
        results.append((status, out, (fleet / "fleet.json").read_text()))
    assert results[0][0] == 0 and results[1] == results[0]
    assert len(json.loads(results[1][1])["nodes"]) == 3
    assert f"left out {fleet}: it is the --out folder" in err and "Traceback" not in err
    # the same folder given as a plain input (no --out): a merge's output, not a run
    status, out, err = run_merge(capsys, *sorted(day.glob("*")), "--format", "json")
    assert status == 0 and len(json.loads(out)["nodes"]) == 3
    assert f"left out {fleet}: it holds a merge's output (fleet.json), not a run" in err
    # a file inside the --out folder is left out too; with nothing left: exit 2, one line
    status, _, err = run_merge(capsys, fleet / "fleet.json", "--out", fleet)
    assert status == 2 and "no run folder left to merge" in err.splitlines()[-1]


def test_merge_of_one_node(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    status, out, err = run_merge(capsys, n1, "--format", "json")
    m = json.loads(out)
    assert status == 0 and m["exit_status"] == 0
    assert m["verdict"] == "1 node only: nothing to compare it with"
    assert m["nodes"][0]["verdict"]["status"] == "PASS" and not m["nodes"][0]["flagged"]
    assert "1 node only: nothing to compare it with" in err
    status, md, _ = run_merge(capsys, n1)
    assert "**1 node only: nothing to compare it with**" in md and "all alike" not in md
    bad = run_dir(tmp_path / "bad", {**SAME, B: "failed"}, env(host="bad"))
    status, md, _ = run_merge(capsys, bad)
    assert status == 1 and "**1 node only: nothing to compare it with; it does not pass (1 FAIL)**" in md


def test_merge_flags_nodes_whose_verdict_is_not_pass(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", SAME, env(host="n2"))
    n3 = run_dir(tmp_path / "n3", SAME, env(host="n3"))
    assert run_merge(capsys, n1, n2, n3)[0] == 0
    # no usable GPU: one GPU case skipped (no-gpu), nothing failed -> NOT MEASURED
    nogpu = run_dir(tmp_path / "nogpu", {**SAME, A: NO_GPU}, env(host="nogpu"))
    status, out, _ = run_merge(capsys, n1, n2, n3, nogpu, "--format", "json")
    m = json.loads(out)
    node = {n["node"]: n for n in m["nodes"]}["nogpu"]
    assert status == 1 and node["failing"] and node["verdict"]["status"] == "NOT MEASURED"
    assert "1 do not pass (1 NOT MEASURED)" in m["verdict"]
    # interrupted (pytest exit status 2), every case it reported passed and alike
    intr = set_meta(run_dir(tmp_path / "intr", SAME, env(host="intr")), exitstatus=2)
    status, md, _ = run_merge(capsys, n1, n2, intr, "--out", tmp_path / "fleet")
    m = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    node = {n["node"]: n for n in m["nodes"]}["intr"]
    assert status == 1 and node["failing"] and not node["flagged"]
    assert node["verdict"]["status"] == "INTERRUPTED"
    assert "**3 nodes: 0 differ from the majority, 1 do not pass (1 INTERRUPTED)**" in md
    assert "| intr | **INTERRUPTED** |" in md and "INTERRUPTED: the run was interrupted" in md


def test_merge_unwritable_out_exits_2_with_one_line(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    status, _, err = run_merge(capsys, n1, "--out", blocker / "fleet")
    lines = [x for x in err.splitlines() if "nothing to compare" not in x]
    assert status == 2 and len(lines) == 1 and "cannot write" in lines[0] and str(blocker) in lines[0]
    assert "Traceback" not in err
