"""``python -m reports merge`` on hand-made run folders (CPU only)."""
from __future__ import annotations

import json

import pytest

from reports.__main__ import main
from reports.model import NODE_CASE

from reports_helpers import env, run_dir, set_meta
from nested_run import report

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
    m = report(tmp_path / "fleet", "fleet.json")
    node = {n["node"]: n for n in m["nodes"]}["intr"]
    assert status == 1 and node["failing"] and not node["flagged"]
    assert node["verdict"]["status"] == "INTERRUPTED"
    assert "**3 nodes: 0 differ from the fleet, 1 do not pass (1 INTERRUPTED)**" in md
    assert "| intr | **INTERRUPTED** |" in md and "INTERRUPTED: the run was interrupted" in md


def test_merge_unwritable_out_exits_2_with_one_line(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    status, _, err = run_merge(capsys, n1, "--out", blocker / "fleet")
    lines = [x for x in err.splitlines() if "nothing to compare" not in x]
    assert status == 2 and len(lines) == 1 and "cannot write" in lines[0] and str(blocker) in lines[0]
    assert "Traceback" not in err


# ---------------------------------------------------------------- coverage, settings, duplicates

TOOLCHAIN = [f"suites/test_toolchain.py::test_kernel_builds[k{i}]" for i in range(3)]
FULL = {**{cid: "passed" for cid in TOOLCHAIN}, **{f"suites/test_load.py::test_load[c{i}]": "passed"
                                                   for i in range(40)}, NODE_CASE: "passed"}
CUT = {k: v for k, v in FULL.items() if k in TOOLCHAIN or k == NODE_CASE}


def by_node(out: str) -> dict:
    return {n["node"]: n for n in json.loads(out)["nodes"]}


def test_a_node_that_ran_fewer_cases_is_flagged_with_counts_and_examples(tmp_path, capsys):
    a = run_dir(tmp_path / "a", FULL, env(host="a"))
    g = run_dir(tmp_path / "g", CUT, env(host="g"))
    status, out, _ = run_merge(capsys, a, g, "--format", "json")
    m, nodes = json.loads(out), by_node(out)
    assert status == 1 and m["exit_status"] == 1
    assert m["case_reference"] == {"basis": "union", "cases": len(FULL)}     # two nodes: no majority set
    assert nodes["g"]["flagged"] and nodes["g"]["missing_cases"] == 40 and nodes["g"]["extra_cases"] == 0
    assert len(nodes["g"]["missing_examples"]) == 10          # a few, sorted; the count says how many
    assert nodes["g"]["missing_examples"][0] == "suites/test_load.py::test_load[c0]"
    assert not nodes["a"]["flagged"] and nodes["a"]["missing_cases"] == 0
    assert m["verdict"] == "2 nodes: 1 differ from the fleet (1 missing cases), 0 do not pass"
    status, md, _ = run_merge(capsys, a, g)
    assert "40 case(s) missing" in md and "`suites/test_load.py::test_load[c0]`" in md
    assert "all alike" not in md


def test_the_majority_case_set_flags_the_node_with_extra_cases_and_another_sweep(tmp_path, capsys):
    nodes = [run_dir(tmp_path / h, CUT, env(host=h)) for h in ("n1", "n2", "n3")]
    full_env = dict(env(host="big"), sweep="full")
    big = run_dir(tmp_path / "big", FULL, full_env)
    status, out, _ = run_merge(capsys, *nodes, big, "--format", "json")
    m, by = json.loads(out), by_node(out)
    assert status == 1 and m["case_reference"] == {"basis": "majority", "cases": len(CUT)}
    assert [n for n in by if by[n]["flagged"]] == ["big"]
    assert by["big"]["extra_cases"] == 40 and by["big"]["missing_cases"] == 0
    assert by["big"]["settings_differ"] == {"sweep": "full"}
    assert "1 extra cases, 1 other settings" in m["verdict"]


@pytest.mark.parametrize("field,value,differ", [
    ("sweep", "full", {"sweep": "full"}),
    ("arch_option", "sm_90a", {"arch": "sm_90a"}),
    ("invocation_args", ["-n", "auto", "-m", "not trap", "--report-dir=/r/x"], {"options": "-m not trap"}),
    ("invocation_args", ["-n", "8", "--report-dir", "/r/y", "--prom-file=/p/y.prom", "-q"], {}),
])
def test_nodes_run_at_other_settings_are_flagged(tmp_path, capsys, field, value, differ):
    envs = [env(host=h) for h in ("n1", "n2", "odd")]
    if field == "invocation_args":
        envs[2]["command"] = dict(envs[2]["command"], invocation_args=value)
    else:
        envs[2][field] = value
    runs = [run_dir(tmp_path / e["host"], SAME, e) for e in envs]
    status, out, _ = run_merge(capsys, *runs, "--format", "json")
    odd = by_node(out)["odd"]
    assert odd["settings_differ"] == differ and odd["flagged"] == bool(differ) and status == int(bool(differ))
    # two nodes, same cases, another sweep: no majority, both flagged; exit 1
    status, out, _ = run_merge(capsys, runs[0], runs[2], "--format", "json")
    assert status == int(bool(differ))


def test_selection_options():
    from reports.merge import selection_options
    assert selection_options(["-n", "auto", "-k", "tiled and f16", "--report-dir", "/x", "-x"]) == \
        "-k tiled and f16 -x"
    assert selection_options(["-mnot trap", "--deselect=a::b", "--junitxml=/j.xml"]) == "--deselect=a::b -m not trap"
    assert selection_options([]) == ""


def test_the_same_folder_or_run_twice_is_refused(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", SAME, env(host="n2"))
    for args in ([n1, n2, n1], [n1, f"{n1}/", n2], [n1, n1 / "results.json"], [n1, tmp_path / "x" / ".." / "n1"]):
        status, out, err = run_merge(capsys, *args)
        assert status == 2 and out == "" and len(err.splitlines()) == 1, args
        assert err.startswith("python -m reports merge: the same run folder given twice") and "Traceback" not in err
    copy = run_dir(tmp_path / "copy", SAME, env(host="n1"))
    set_meta(copy, run_id="n1")                   # a copied folder: another path, the same run id
    status, _, err = run_merge(capsys, n1, n2, copy)
    assert status == 2 and err.strip() == (f"python -m reports merge: the same run given twice: {n1} and {copy} "
                                           "have run id n1")


def test_expect_nodes(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", SAME, env(host="n2"))
    status, out, err = run_merge(capsys, n1, n2, "--expect-nodes", "3", "--format", "json")
    m = json.loads(out)
    assert status == 1 and m["exit_status"] == 1 and m["expect_nodes"] == 3
    assert m["verdict"] == "2 of 3 expected nodes came; 2 nodes: 0 differ from the fleet, 0 do not pass"
    assert "2 node(s) came, --expect-nodes 3" in err
    assert run_merge(capsys, n1, n2, "--expect-nodes", "2")[0] == 0
    status, md, _ = run_merge(capsys, n1, n2, "--expect-nodes=1")
    assert status == 0 and "2 nodes, more than the 1 expected; 2 nodes, all alike and passing" in md
    assert run_merge(capsys, n1, "--expect-nodes", "2")[0] == 1
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as e:
            main(["merge", str(n1), "--expect-nodes", bad])
        assert e.value.code == 2


def test_a_verdict_this_tool_does_not_know_does_not_pass(tmp_path, capsys):
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", SAME, env(host="n2"))
    lost = set_meta(run_dir(tmp_path / "lost", SAME, env(host="lost")), exitstatus=6,
                    verdict="GPU LOST: GPU 0 fell off the bus (Xid 79) after 12 cases")
    status, out, _ = run_merge(capsys, n1, n2, lost, "--format", "json")
    node = by_node(out)["lost"]
    assert status == 1 and node["failing"] and node["verdict"]["status"] == "GPU LOST"
    assert "1 do not pass (1 GPU LOST)" in json.loads(out)["verdict"]
    # no recorded verdict, but pytest exited 6: never PASS
    code6 = set_meta(run_dir(tmp_path / "code6", SAME, env(host="code6")), exitstatus=6)
    status, out, _ = run_merge(capsys, n1, n2, code6, "--format", "json")
    assert status == 1 and by_node(out)["code6"]["verdict"]["status"] == "EXIT 6"
    # a recorded PASS agrees: passes
    ok = set_meta(run_dir(tmp_path / "ok", SAME, env(host="ok")), verdict="PASS: 2 passed (1 known issues)")
    assert run_merge(capsys, n1, n2, ok)[0] == 0


def test_the_fleet_summary_per_node(tmp_path, capsys):
    n1 = set_meta(run_dir(tmp_path / "n1", SAME, env(host="n1", kmv="580.95.05", gpu="NVIDIA H100")),
                  duration_s=321.4)
    n2 = run_dir(tmp_path / "n2", {**SAME, B: "failed"}, env(host="n2"))
    status, md, _ = run_merge(capsys, n1, n2)
    header = next(line for line in md.splitlines() if line.startswith("| node |"))
    assert header.startswith("| node | verdict | cases | duration | driver |") and "| GPU |" in header
    row = next(line for line in md.splitlines() if line.startswith("| n1 |"))
    assert "| PASS | 2P 1K | 321 s | **580.95.05** |" in row and "**1 x NVIDIA H100**" in row
    row = next(line for line in md.splitlines() if line.startswith("| n2 |"))
    assert "| **FAIL** | 1P 1F 1K | - |" in row
    node = by_node(run_merge(capsys, n1, n2, "--format", "json")[1])["n1"]
    assert node["duration_s"] == 321.4 and node["counts"]["passed"] == 2 and node["cases"] == 3
    assert node["versions"]["driver"] == "580.95.05" and node["versions"]["GPU"] == "1 x NVIDIA H100"


def _gpus(*counts):
    """results.json's gpu.run of a node of len(counts) GPUs."""
    return {"usable": len(counts), "reason": "", "run": [
        {"ordinal": k, "uuid": f"GPU-{k}", "pci_bus_id": f"0000:{k:02}:00.0"} for k in range(len(counts))]}


def test_each_gpu_of_each_node_is_listed_and_uneven_or_fewer_gpus_flag_the_node(tmp_path, capsys):
    """Every GPU of a node runs every case: a node whose GPUs ran different numbers of
    cases, or that ran on fewer GPUs than the others, is flagged; a failing GPU is named in
    its node's verdict."""
    def cases(n, fail_on=None, short=None):
        out = {}
        for cid in (A, B):
            g = {str(k): "passed" for k in range(n) if not (short is not None and k == short and cid == B)}
            if fail_on is not None and cid == A:
                g[str(fail_on)] = "failed"
            out[cid] = {"state": "failed" if fail_on is not None and cid == A else "passed", "gpus": g}
        return out
    nodes = []
    for host, kw in (("n1", {}), ("n2", {}), ("n3", {"fail_on": 2}), ("n4", {"short": 1}), ("n5", {})):
        nodes.append(set_meta(run_dir(tmp_path / host, cases(4, **kw), env(host=host)), gpu=_gpus(*range(4))))
    n6 = set_meta(run_dir(tmp_path / "n6", cases(2), env(host="n6")), gpu=_gpus(0, 1))
    status = main(["merge", *map(str, nodes + [n6]), "--out", str(tmp_path / "fleet"), "--format", "json"])
    m = json.loads(capsys.readouterr().out)
    by = {n["node"]: n for n in m["nodes"]}
    assert status == 1
    assert [g["gpu"] for g in by["n1"]["gpus"]] == [f"GPU {k} (GPU-{k}, 0000:{k:02}:00.0)" for k in range(4)]
    assert by["n3"]["failing"] and "GPU 2 (GPU-2, 0000:02:00.0) 1 failed; GPUs 0, 1, 3 passed" in \
        by["n3"]["verdict"]["text"]
    assert by["n4"]["uneven_gpus"] == "GPU 0 ran 2, GPU 1 ran 1, GPU 2 ran 2, GPU 3 ran 2" and by["n4"]["flagged"]
    assert by["n6"]["settings_differ"] == {"gpus": "2"} and by["n6"]["flagged"]
    assert not by["n1"]["flagged"] and not by["n5"]["flagged"]
    md = (tmp_path / "fleet" / "fleet.md").read_text()
    assert "uneven GPUs" in md and "| n3 | GPU 2 (GPU-2, 0000:02:00.0) | 2 | **1P 1F** |" in md


def test_a_node_without_a_readable_report_is_flagged_and_the_rest_merged(tmp_path, capsys):
    """A folder holding only the run lock (a node that crashed, a run stopped by a setup
    error) and one with a truncated results.json: each is a node NO REPORT, with what its
    folder holds; the others are merged and the fleet files written; exit 1 (it was exit
    2, "unreadable input", and no fleet files: one dead node hid the others)."""
    n1 = run_dir(tmp_path / "n1", SAME, env(host="n1"))
    n2 = run_dir(tmp_path / "n2", SAME, env(host="n2"))
    dead = tmp_path / "node3"
    dead.mkdir()
    (dead / ".tmac-run.lock").write_text("")
    torn = tmp_path / "node4"
    torn.mkdir()
    (torn / "results.json").write_text('{"schema": "tmac-results/1", "cases": [')
    fleet = tmp_path / "fleet"
    status, out, err = run_merge(capsys, n1, n2, dead, torn, "--expect-nodes", "4", "--out", fleet,
                                 "--format", "json")
    m = json.loads(out)
    assert status == 1 and m["exit_status"] == 1
    by = {n["node"]: n for n in m["nodes"]}
    assert set(by) == {"n1", "n2", "node3", "node4"}
    assert not by["n1"]["flagged"] and not by["n1"]["failing"]
    for name in ("node3", "node4"):
        n = by[name]
        assert n["verdict"]["status"] == "NO REPORT" and n["flagged"] and n["failing"]
    assert by["node3"]["no_report"] == (
        "no readable report (no results.json and no JUnit XML in this folder); the folder holds: "
        ".tmac-run.lock")
    assert by["node4"]["no_report"].endswith("the folder holds: results.json")
    assert m["verdict"] == "4 nodes: 2 differ from the fleet (2 no report), 2 do not pass (2 NO REPORT)"
    assert f"{dead}: no readable report (no results.json and no JUnit XML in this folder)" in err
    for name in ("fleet.md", "fleet.html", "fleet.json"):
        assert (fleet / name).is_file()
    md = (fleet / "fleet.md").read_text()
    assert "node3" in md and "NO REPORT" in md and ".tmac-run.lock" in md
    # every node dead: still a fleet of nodes that do not pass, exit 1
    status, out, _ = run_merge(capsys, dead, torn, "--format", "json")
    assert status == 1 and [n["verdict"]["status"] for n in json.loads(out)["nodes"]] == ["NO REPORT"] * 2
    # a path that is not there is bad input, not a node: exit 2, one line
    status, out, err = run_merge(capsys, n1, tmp_path / "typo")
    assert status == 2 and out == "" and err.strip().endswith("typo: no such file or folder")
