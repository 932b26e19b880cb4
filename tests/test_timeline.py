"""The timeline: what results.json records of a run's time (fixtures/plugins/reporting/timeline.py),
end to end under -n 2, and what ``python -m reports timeline`` makes of it
(reports/timeline.py), on a hand-made run whose every second is known."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reports import timeline
from reports.__main__ import main as reports_main
from reports.model import CaseResult, NODE_CASE, ReportInputError, Run

import nested_run
from nested_run import pytest_run

TREE = '''
import time, pytest

@pytest.fixture
def slow_setup():
    time.sleep(0.2)

@pytest.mark.parametrize("case", [f"c{i}" for i in range(6)])
def test_case(case):
    time.sleep(0.05)

def test_slow_setup(slow_setup):
    pass

@pytest.fixture
def two_gpus():
    pytest.skip("needs 2 GPUs with tensor maps, found 1")

def test_skip(two_gpus):
    pass
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = nested_run.make_tree(tmp_path_factory.mktemp("tl"), TREE)
    out = root / "out"
    cp = pytest_run(root, "-n", "2", "--report-dir", str(out))
    assert cp.returncode == 0, cp.stdout[-3000:]
    return out


def test_every_case_has_its_start_end_phases_and_worker(run_dir):
    data = nested_run.results(run_dir)
    cases = {c["id"]: c for c in data["cases"] if c["id"] != NODE_CASE}
    assert len(cases) == 8
    for c in cases.values():
        assert 0 < c["start"] <= c["end"] <= data["duration_s"] + 1, c
        assert c["worker"] in ("gw0", "gw1"), c
        assert c["setup_s"] is not None and c["teardown_s"] is not None, c
    slow = cases["test_tiny.py::test_slow_setup"]
    assert slow["setup_s"] >= 0.2 and slow["end"] - slow["start"] >= 0.2
    assert all(c["call_s"] >= 0.05 for k, c in cases.items() if "[c" in k)
    assert "call_s" not in cases["test_tiny.py::test_skip"]      # skipped in its setup: no call


def test_the_run_records_its_phases(run_dir):
    tl = nested_run.results(run_dir)["timeline"]
    assert tl["t0"] > 0 and tl["controller"]["cpu_s"] > 0
    assert tl["controller"]["reports_start"] <= tl["controller"]["results_write"]
    assert set(tl["workers"]) == {"gw0", "gw1"}
    for w in tl["workers"].values():
        assert w["ready"] <= w["collection_sent"] <= w["down"], w
        assert w["collection_start"] <= w["collected"], w
        # the main thread's CPU while collecting: a duration, kept as one (not made
        # relative to t0), at most the collection's wall
        assert 0 <= w["collection_cpu_s"] <= w["collected"] - w["collection_start"] + 0.01, w
        if w.get("process_start") is not None:
            assert w["process_start"] <= w["configured"], w


def test_reports_timeline_reads_it_and_draws_it(run_dir, tmp_path, capsys):
    html = tmp_path / "t.html"
    assert reports_main(["timeline", str(run_dir), "--html", str(html), "--wall", "600"]) == 0
    out = capsys.readouterr().out
    assert "where the wall went:" in out and "unattributed" in out and "| tiny |" in out
    assert "<svg" in html.read_text() and "gw1" in html.read_text()


def test_a_run_without_a_timeline_is_one_line_and_exit_2(tmp_path, capsys):
    old = tmp_path / "results.json"
    old.write_text('{"schema": "tmac-results/1", "cases": [{"id": "t.py::a", "state": "passed"}]}')
    assert reports_main(["timeline", str(old)]) == 2
    err = capsys.readouterr().err
    assert "no timeline" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------- the analysis, by hand
def _case(i, suite, worker, start, end, call):
    return CaseResult(f"suites/test_{suite}.py::test[c{i}]", "passed", worker=worker, start=start,
                      end=end, setup_s=0.0, call_s=call, teardown_s=0.0)


def _run():
    """Two workers from t0: w0 runs a (1-3 s, 2 s in its call) and b (3.5-4 s); w1 runs
    c (2-6 s, 3 s in its call). The controller started 1 s before t0 and wrote
    results.json at 7 s."""
    cases = [_case(0, "a", "gw0", 1.0, 3.0, 2.0), _case(1, "b", "gw0", 3.5, 4.0, 0.5),
             _case(2, "a", "gw1", 2.0, 6.0, 3.0)]
    run = Run(source="hand", cases={c.id: c for c in cases})
    run.meta = {"timeline": {"t0": 1000.0, "controller": {"process_start": -1.0, "cpu_s": 3.5,
                                                          "reports_start": 6.5, "results_write": 7.0},
                             "workers": {"gw0": {"process_start": 0.1, "configured": 0.5,
                                                 "collection_start": 0.5, "collected": 0.8,
                                                 "collection_sent": 0.9},
                                         "gw1": {"process_start": 0.1, "configured": 0.6,
                                                 "collection_start": 0.6, "collected": 0.9,
                                                 "collection_sent": 0.9}}}}
    return run


def test_the_wall_is_cut_in_what_happened_one_after_the_other():
    a = timeline.analyze(_run())
    assert a["wall"] == {"controller start-up": 1.0, "workers' start-up": 1.0, "cases": 5.0,
                         "end (last case to the reports)": 1.0}
    assert a["wall_s"] == 8.0 and a["unattributed_s"] == 0.0
    ws = a["worker_seconds"]
    # 2 workers x 5 s = 10: 2 + 0.5 + 3 in calls, 1.5 + 1.5 + 0 outside the phases,
    # 0.5 between w0's cases, 1 before w1's first, 2 after w0's last
    assert ws["in cases"] == 5.5 and ws["report hooks inside a case"] == 1.0
    assert ws["between cases"] == 0.5 and ws["before the worker's first case"] == 1.0
    assert ws["after the worker's last case (tail)"] == 2.0
    assert sum(v for k, v in ws.items() if not k.startswith("  ")) == 10.0
    assert a["tail"]["seconds"] == 2.0 and a["suites"]["a"]["cases"] == 2
    assert a["suites"]["a"]["seconds"] == 5.0 and a["long_cases"]["count"] == 3
    assert a["controller"]["busy_pct"] == 50.0
    assert a["trap_cases"] == {"count": 0, "seconds": 0}
    # the workers' start-up, median of each step (w0, w1): 0.1/0.1, 0.4/0.5, 0.3/0.3,
    # 0.1/1.1 from the collection sent to the first case, and the first cases' setups
    assert a["startup_steps"] == {"process start": 0.1, "interpreter, imports, plugins": 0.45,
                                  "collection": 0.3, "waiting for every worker's collection": 0.6,
                                  "first case's setup (session fixtures)": 0.0}


def test_the_collection_says_how_much_of_it_ran_on_a_cpu():
    """A worker that collected for 0.3 s with its main thread 0.1 s on a CPU waited the
    rest (for the GIL or the disk): the start-up says so under its collection."""
    run = _run()
    for w in run.meta["timeline"]["workers"].values():
        w["collection_cpu_s"] = 0.1
    a = timeline.analyze(run)
    steps = list(a["startup_steps"])
    assert steps.index(timeline.COLLECTION_CPU) == steps.index("collection") + 1
    assert a["startup_steps"][timeline.COLLECTION_CPU] == 0.1
    assert "    of it, the main thread on a CPU" in timeline.text(a)


def test_the_start_up_says_when_cupys_import_began_and_how_long_it_took():
    """A worker's CuPy import, by the thread that opened its GPU ahead: counted from the
    collection's end (negative: during it) and its length, medians, under the collection;
    a timeline without those marks (an older run) has neither line."""
    run = _run()
    for k, w in enumerate(run.meta["timeline"]["workers"].values()):
        w["cupy_import_start"] = w["collected"] - 0.2 + 0.4 * k    # -0.2 and +0.2: median 0
        w["cupy_imported"] = w["cupy_import_start"] + 1.5
    a = timeline.analyze(run)
    steps = list(a["startup_steps"])
    assert steps[steps.index("collection") + 1:steps.index("collection") + 3] == [
        timeline.CUPY_BEGAN, timeline.CUPY_TOOK]
    assert a["startup_steps"][timeline.CUPY_BEGAN] == 0.0
    assert a["startup_steps"][timeline.CUPY_TOOK] == 1.5
    assert "    CuPy's import took" in timeline.text(a)
    assert timeline.CUPY_BEGAN not in timeline.analyze(_run())["startup_steps"]


def test_the_trap_cases_are_summed_apart():
    run = _run()
    run.meta["traps"] = [{"id": "suites/test_a.py::test[c2]", "start": "x", "stop": "y", "state": "passed"}]
    a = timeline.analyze(run)
    assert a["trap_cases"] == {"count": 1, "seconds": 4.0}
    assert "cases that trap the GPU (results.json 'traps'): 1, 4.00 worker-s" in timeline.text(a)


def test_a_stall_of_every_worker_at_once_is_named_with_the_traps_in_flight():
    """Every worker inside a long case at once, for 2 s or more, is a stall of the whole
    run (an H100 held every process 5.1-5.4 s when a trap's recovery timed out, Xid 109);
    the trap cases whose call overlaps it are named. One worker not held up, or a
    shorter overlap, is none; a run of one worker has none."""
    def stalled(extra=(), traps=()):
        cases = [_case(0, "a", "gw0", 1.0, 9.0, 8.0), _case(1, "b", "gw1", 2.0, 7.5, 5.0),
                 _case(2, "c", "gw2", 2.5, 8.0, 5.0), *extra]
        run = Run(source="hand", cases={c.id: c for c in cases})
        run.meta = {"timeline": {"t0": 1000.0}, "traps": list(traps)}
        return timeline.analyze(run)

    trap = {"id": "suites/test_b.py::test[c1]", "start": "1970-01-01T00:16:42+00:00",    # 1002.0
            "stop": "1970-01-01T00:16:47.500+00:00", "state": "passed"}
    far = {"id": "suites/test_x.py::test[c9]", "start": "1970-01-01T00:16:48+00:00",     # 1008.0
           "stop": "1970-01-01T00:16:49+00:00", "state": "passed"}
    a = stalled(traps=[trap, far, {"id": "odd", "start": "x", "stop": None}])
    assert a["stalls"] == [{"at": 2.5, "seconds": 5.0, "workers": 3, "traps": ["suites/test_b.py::test[c1]"]}]
    out = timeline.text(a)
    assert "stalls: 1 time(s) every worker was inside a case of 3 s or more at once" in out
    assert "  at 2.50 s for 5.00 s; trap cases in flight: suites/test_b.py::test[c1]" in out
    # a fourth worker held up too: a stall; one that went on with short cases: none
    assert stalled(extra=[_case(3, "d", "gw3", 2.0, 2.5, 0.5), _case(4, "d", "gw3", 2.6, 9.0, 6.4)])["stalls"]
    assert stalled(extra=[_case(3, "d", "gw3", 2.0, 4.0, 2.0), _case(4, "d", "gw3", 4.1, 6.0, 1.9)])["stalls"] == []
    # an overlap shorter than STALL_S: none
    assert stalled(extra=[_case(3, "d", "gw3", 6.0, 9.5, 3.5)])["stalls"] == []
    assert "stalls" not in timeline.text(timeline.analyze(_run()))
    one = Run(source="hand", cases={c.id: c for c in [_case(0, "a", "gw0", 1.0, 9.0, 8.0)]})
    one.meta = {"timeline": {"t0": 1000.0}}
    assert timeline.analyze(one)["stalls"] == []


def test_bench_counts_the_stalls_of_each_run():
    """``reports bench``'s line for a run says how many stalls it had and how long."""
    from reports import bench
    a = timeline.analyze(_run())
    assert "stall" not in bench._where({"timeline": a})
    a["stalls"] = [{"at": 2.5, "seconds": 5.2, "workers": 8, "traps": []},
                   {"at": 9.0, "seconds": 5.1, "workers": 8, "traps": ["x"]}]
    assert bench._where({"timeline": a}).endswith("; 2 stall(s) of every worker, 10.3 s")


def test_the_trap_lane_is_a_line_and_a_row_of_its_own():
    run = _run()
    run.meta["timeline"]["lane"] = {"start": 0.9, "end": 4.4, "jobs": 3, "ran": 3, "not_built": 0,
                                    "outcomes": {"cuda_error": 2, "returned": 1}, "children": 4,
                                    "child_starts": 6, "device": 0}
    a = timeline.analyze(run)
    assert ("trap lane: 3 of 3 jobs run ahead from 0.90 s to 4.40 s (3.50 s), 4 children in turn, "
            "6 started; outcomes: cuda_error 2, returned 1") in timeline.text(a)
    assert ">lane</text>" in timeline.svg(run, a) and "trap lane: 3 jobs" in timeline.svg(run, a)
    run.meta["traps"] = [{"id": "suites/test_a.py::test[c2]", "start": "x", "stop": "y", "state": "passed"}]
    assert "4.00 s each (most of them took their outcome from the trap lane, below)" in \
        timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"]["jobs_at"] = 1.4
    assert "run ahead from 1.40 s to 4.40 s (3.00 s), the lane started at 0.90 s, 4 children" in \
        timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"].update(service={"calls": {"batches": 9}}, libraries_at=1.1, children_at=1.3)
    assert ("the lane started at 0.90 s, its library runtimes imported by 1.10 s and its children for the "
            "batches open at 1.30 s, 4 children") in timeline.text(timeline.analyze(run))
    assert "lane" not in timeline.svg(_run(), timeline.analyze(_run()))


def test_the_lane_says_whether_it_ended_before_the_workers():
    run = _run()
    run.meta["timeline"]["lane"] = {"start": 0.9, "end": 4.4, "jobs": 3, "ran": 3}
    assert "the lane ended 1.60 s before the workers' last case" in timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"]["end"] = 6.5
    assert "the lane ended 0.50 s after the workers' last case" in timeline.text(timeline.analyze(run))


def test_the_fork_server_says_what_it_forked():
    """With ``--child-start fork`` the lane's summary carries how many of the workers'
    children it forked and how many requests it refused (trap_lane.stop reads it)."""
    run = _run()
    run.meta["timeline"]["lane"] = {"start": 0.9, "end": 4.4, "jobs": 3, "ran": 3}
    assert "forked by the lane" not in timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"]["forks"] = {"forked": 11, "refused": 1}
    assert ("the workers' children (--child-start fork): 11 forked by the lane, 1 requests refused"
            in timeline.text(timeline.analyze(run)))


def test_the_gpu_service_says_what_it_served():
    """With ``--gpu-service on`` the lane's summary carries what its service served (the
    controller reads it as the service ends): calls by runner, children, how long calls
    waited for one, the calls it made again; without, no line."""
    run = _run()
    run.meta["timeline"]["lane"] = {"start": 0.9, "end": 4.4, "jobs": 3, "ran": 3}
    assert "GPU service" not in timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"]["service"] = {"calls": {"batches": 2930, "alone": 29, "streams": 2},
                                               "children": 9, "child_starts": 35, "queued_s": 0.319,
                                               "peak_busy": 8, "connections": 14, "refused": 0}
    assert ("GPU service (--gpu-service on): calls alone 29, batches 2930, streams 2; 9 children, "
            "35 started, at most 8 busy; 0.32 s waiting for a child; 14 connections, 0 requests "
            "refused") in timeline.text(timeline.analyze(run))
    assert "one call that runs alone at a time" not in timeline.text(timeline.analyze(run))
    assert "made again" not in timeline.text(timeline.analyze(run))
    run.meta["timeline"]["lane"]["service"]["made_again"] = 2
    assert ("0 requests refused; 2 call(s) made again (faulted beside a call that may trap)"
            in timeline.text(timeline.analyze(run)))
    del run.meta["timeline"]["lane"]["service"]["made_again"]
    run.meta["timeline"]["lane"]["service"]["one_trap_at_a_time"] = True
    assert ("0 requests refused; one call that runs alone at a time (--traps-one-at-a-time)"
            in timeline.text(timeline.analyze(run)))
    run.meta["timeline"]["lane"]["service"].update(
        answered_once=7, busy_s={"batches": 41.25, "alone": 3.5},
        targets={"fixtures.engine.operation:run_batch": [2100, 30.0], "a.b:c": [3, 0.4]})
    text = timeline.text(timeline.analyze(run))
    assert "; 7 answered with another's call (asked once)" in text
    assert "  the service's children in calls (s): alone 3.50, batches 41.25; the most:" in text
    assert "       30.00 s    2100 calls  fixtures.engine.operation:run_batch" in text
    run.meta["timeline"]["gpu_service_given_up"] = {"gw3": [["batches", 0, "no answer within 360 s"]]}
    assert ("gw3 gave the GPU service up: batches on GPU 0: no answer within 360 s (its calls ran in "
            "its own children after)") in timeline.text(timeline.analyze(run))


def test_the_contexts_per_gpu_are_counted_and_shown(monkeypatch):
    """The sampler counts each GPU's processes while the run runs (a stand-in for NVML
    here; ``gpu_contexts.Nvml`` is the real one, which says why where there is no NVML),
    and ``reports timeline`` prints the highest count per GPU."""
    from fixtures.cuda_layer import gpu_contexts
    counts = {0: iter([3, 9, 4, 4, 4, 4, 4, 4, 4, 4] + [4] * 1000), 1: iter([2] * 1000)}
    closed = []
    sampler = gpu_contexts.Sampler(lambda: ((lambda k: next(counts[k])), lambda: closed.append(1)),
                                   [0, 1], interval=0.001).start()
    import time
    time.sleep(0.05)
    rec = sampler.stop(t0=time.time())
    assert rec["gpus"]["0"]["max"] == 9 and rec["gpus"]["0"]["median"] == 4 and closed == [1]
    assert rec["gpus"]["1"]["max"] == 2 and rec["gpus"]["0"]["samples"] > 5 and "stopped" not in rec
    broken = gpu_contexts.Sampler(lambda: ((lambda k: 1 / 0), None), [0], interval=0.001).start()
    time.sleep(0.02)
    assert broken.stop(0.0)["stopped"].startswith("ZeroDivisionError")
    run = _run()
    run.meta["timeline"]["contexts"] = rec
    text = timeline.text(timeline.analyze(run))
    assert "contexts per GPU (NVML compute processes, sampled every 0.001 s):" in text
    assert "  GPU 0: at most 9 at " in text and "  GPU 1: at most 2 at " in text
    # the real library, absent: one line saying why, and nothing counted
    monkeypatch.setattr(gpu_contexts, "LIBRARY", "libnvidia-ml-absent.so.1")
    why = gpu_contexts.start([]).stop(0.0)
    assert why["unmeasured"].startswith("OSError") and "gpus" not in why, why
    assert timeline.contexts_lines(why)[1].startswith("contexts per GPU: not measured (OSError")


def test_the_real_nvml_counts_or_says_why():
    from fixtures.cuda_layer import cuda_env, gpu_contexts
    state = cuda_env.probe()
    import time
    got = gpu_contexts.start(state.tma_devices if state.available else ())
    time.sleep(0.3)
    rec = got.stop(time.time())
    if not state.available:
        assert rec.get("unmeasured") or rec.get("gpus") == {}, rec
    else:
        assert set(rec["gpus"]) == {str(d.ordinal) for d in state.tma_devices}, rec
        assert all(g["samples"] >= 1 and g["max"] >= 0 for g in rec["gpus"].values()), rec


def test_what_the_timeline_does_not_cover_of_the_wall_is_unattributed():
    a = timeline.analyze(_run(), wall=10.0)
    assert a["unattributed_s"] == 2.0 and a["unattributed_pct"] == 20.0
    outside = {"spawn": 998.5, "exit": 1008.0, "written": [1007.5]}
    b = timeline.analyze(_run(), outside=outside)
    assert b["wall"]["controller start-up"] == 1.5 and b["wall"]["the report files written"] == 0.5
    assert b["wall"]["process exit"] == 0.5 and b["wall_s"] == 9.5 and b["unattributed_s"] == 0.0


def test_a_run_without_times_is_refused():
    run = _run()
    run.meta = {}
    with pytest.raises(ReportInputError, match="no timeline"):
        timeline.analyze(run)


def test_bench_table_keeps_every_run_in_its_table():
    """The one-GPU-against-all rows of a several-GPU node are rows of the runs' table, with
    its columns, before the per-run breakdowns."""
    from reports import bench
    run = {"wall_s": 10.0, "cases": 100, "summary": "100 passed in 10.0s", "timeline": None, "suites": {}}
    result = {"gpus": 2, "cpus": 16, "compile": [], "collection_s": {}, "startup": [], "peer": None,
              "sweeps": [{"sweep": "smoke", "cache": "cold", **run}], "scaling": [],
              "gpu_split": [{"visible": "0", "sweep": "standard", **run},
                            {"visible": "0,1", "sweep": "standard", **run}]}
    lines = bench.table(result).splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| sweep | cache |"))
    rows = lines[head + 2:lines.index("", head)]
    assert [r.split(" | ")[0] for r in rows] == ["| smoke", "| standard on GPUs 0", "| standard on GPUs 0,1"]
    assert {r.count("|") for r in rows} == {lines[head].count("|")}


def test_bench_times_sweeps_cold_and_warm_and_a_peer(tmp_path):
    """``python -m reports bench`` on one small suite: the sweep cold then warm, each with
    where its wall went (nothing unattributed on this machine either), a peer file in the
    same call, per case, and the pictures."""
    peer = tmp_path / "peer" / "test_peer.py"
    peer.parent.mkdir()
    peer.write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    out = tmp_path / "bench"
    cp = subprocess.run([sys.executable, "-m", "reports", "bench", "--no-parts", "--sweeps", "smoke",
                         "--caches", "cold,warm", "--workers", "", "--peer", str(peer), "--peer-workers", "1",
                         "--out", str(out), "suites/test_host_encode.py"],
                        cwd=nested_run.REPO, capture_output=True, text=True, timeout=400,
                        env=nested_run.child_env())
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    data = json.loads((out / "bench.json").read_text())
    assert [(r["sweep"], r["cache"]) for r in data["sweeps"]] == [("smoke", "cold"), ("smoke", "warm")]
    for r in data["sweeps"]:
        assert r["cases"] > 500 and r["timeline"]["unattributed_pct"] < 5, r["timeline"]
        assert (out / f"timeline-smoke-{r['cache']}.html").exists()
    assert data["peer"]["cases"] == 2 and "2 passed" in data["peer"]["summary"]
    assert "per case: smoke" in (out / "bench.md").read_text()
