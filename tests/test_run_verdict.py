"""The verdict of a run when something goes wrong, seen as a user sees it: exit status,
report folder and verdict of a real pytest run on a small generated tree (CPU only).

A worker killed mid-run, a stuck run (--run-timeout), an interrupted run, no GPU,
--require-gpus, a node whose driver is installed but unusable, a reused report folder."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fixtures.cuda_layer import cuda_env
from fixtures.engine.units import bucket
from reports.model import NODE_CASE

from nested_run import make_tree, pytest_run, pytest_start, results, started_tree, states, wait_for

NODE = NODE_CASE
USABLE = len(cuda_env.probe().tma_devices) if cuda_env.probe().available else 0


def crash_tree(root: Path, crashes: dict[str, str]) -> Path:
    """Three test functions x 60 cases; ``crashes``: case -> how its worker dies."""
    return make_tree(root, f'''
        import os, signal, time, pytest
        CRASH = {crashes!r}
        CASES = [f"c{{i}}" for i in range(60)]

        def maybe_die(case):
            how = CRASH.get(case)
            if how == "late-exit3":       # the other worker has finished everything
                time.sleep(3)
            if how in ("exit3", "late-exit3"):
                os._exit(3)
            if how == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)

        @pytest.mark.parametrize("case", CASES)
        def test_a(case):
            maybe_die("a-" + case)

        @pytest.mark.parametrize("case", CASES)
        def test_b(case):
            maybe_die("b-" + case)

        @pytest.mark.parametrize("case", CASES)
        def test_c(case):
            maybe_die("c-" + case)
    ''')


def _ids_in_one_bucket(n: int) -> list[str]:
    """Cases of test_b whose bucket (the scheduling unit) is the same: a crash in the
    middle of a unit whose other cases must still run."""
    first = bucket("c0")
    return [f"c{i}" for i in range(60) if bucket(f"c{i}") == first][:n]


SAME_BUCKET = _ids_in_one_bucket(3)
CRASHES = {
    "exit-status": {"a-c7": "exit3"},
    "sigkill": {"b-c30": "sigkill"},
    "first-case": {"a-c0": "exit3"},
    "last-case": {"c-c59": "sigkill"},
    "two-workers": {"a-c11": "exit3", "c-c42": "sigkill"},
    "mid-bucket": {f"b-{SAME_BUCKET[1]}": "exit3"},
    "late": {"a-c7": "late-exit3"},
}


@pytest.mark.parametrize("repeat", range(2))
@pytest.mark.parametrize("crashes", CRASHES.values(), ids=CRASHES.keys())
def test_a_dead_worker_ends_the_run_with_every_case_reported(tmp_path, crashes, repeat):
    """A worker that dies (os._exit, SIGKILL) mid-run: the run ends (it used to wait
    forever), the case it died in fails naming the worker and how it ended, every other
    case runs and passes, the reports are complete, and the exit status is 1."""
    root = crash_tree(tmp_path / "t", crashes)
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")   # fails if it hangs (pytest_run's 240 s)
    assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-2000:]
    got = states(out)
    assert len(got) == 181, f"{len(got)} of 180 cases + the node case reported"
    crashed = {f"test_tiny.py::test_{k[0]}[{k[2:]}]": how for k, how in crashes.items()}
    data = {c["id"]: c for c in results(out)["cases"]}
    for cid, how in crashed.items():
        c = data[cid]
        assert c["state"] == "failed", c
        assert c["rule"] == "run.worker-alive" and "worker gw" in c["message"], c
        want = "killed by signal 9 (SIGKILL)" if how == "sigkill" else "exit status 3"
        assert want in c["message"], c["message"]
    others = {k: v for k, v in got.items() if k not in crashed and k != NODE}
    assert set(others.values()) == {"passed"}, {k: v for k, v in others.items() if v != "passed"}
    meta = results(out)
    assert meta["not_reported"] == 0 and meta["verdict"].startswith("FAIL")
    for name in ("junit.xml", "matrix.md", "environment.json"):
        assert (out / name).is_file(), name


@pytest.mark.parametrize("repeat", range(2))
def test_a_replacement_worker_alone_with_single_case_units_runs_them(tmp_path, repeat):
    """The worker dies last, after the other finished everything and left: its unfinished
    cases (one per unit here) go to a replacement alone. xdist gives it one unit, and a
    worker runs a case only once it holds the next: it waited forever (seen on the H100)."""
    root = make_tree(tmp_path / "t", '''
        import os, time, pytest
        @pytest.mark.parametrize("case", [f"c{i}" for i in range(40)])
        def test_x(case):
            if case == "c17":
                time.sleep(3)
                os._exit(9)
    ''')
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")      # fails if it hangs (240 s)
    assert cp.returncode == 1, cp.stdout[-3000:]
    got = states(out)
    assert got.pop("test_tiny.py::test_x[c17]") == "failed"
    assert {k: v for k, v in got.items() if k != NODE} == {
        f"test_tiny.py::test_x[c{i}]": "passed" for i in range(40) if i != 17}


def test_a_stuck_run_ends_at_its_run_timeout_with_partial_reports(tmp_path):
    """c5 hangs (600 s): the run ends at its --run-timeout, exit status 2, TIMED OUT, with
    the reports of what finished and c5 never reported (never "passed").

    The bound counts from the session's start, and on a busy machine the workers'
    start-up alone took more than a bound of 5 s: the run timed out before c5 started
    (the run was right, the test failed). So a run that timed out before c5 started is
    checked all the same, then run again with a bound twice as long (15, 30, 60, 120 s):
    the timing of the machine decides how long the test takes, never whether it passes.
    The run ignoring its bound fails it (c5 would hang for 600 s: pytest_run's limit)."""
    started = tmp_path / "c5-started"
    root = make_tree(tmp_path / "t", f'''
        import time, pytest
        @pytest.mark.parametrize("case", [f"c{{i}}" for i in range(20)])
        def test_case(case):
            if case == "c5":
                open({str(started)!r}, "w").close()
                time.sleep(600)
    ''')
    for bound in (15, 30, 60, 120):
        out = tmp_path / f"out-{bound}"
        cp = pytest_run(root, "-n", "2", f"--run-timeout={bound}", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", timeout=bound + 120)
        assert cp.returncode == 2, cp.stdout[-3000:] + cp.stderr[-2000:]
        meta = results(out)
        end = {k: v for k, v in meta["end"].items() if k not in ("running", "gpus")}
        assert end == {"kind": "timed-out", "why": f"the run did not end within --run-timeout={bound} s"}
        assert isinstance(meta["end"]["running"], list) and meta["end"]["gpus"] == []    # no GPU here
        assert meta["verdict"].startswith("TIMED OUT") and meta["exitstatus"] == 2, meta["verdict"]
        assert "test_tiny.py::test_case[c5]" not in states(out)    # never reported: never "passed"
        assert "TIMED OUT" in (out / "matrix.md").read_text() and (out / "junit.xml").is_file()
        assert "verdict: TIMED OUT" in cp.stdout
        if started.exists():
            break
    assert started.exists(), "c5 never started within --run-timeout=120 s"
    assert "test_tiny.py::test_case[c5]" in meta["not_reported_ids"], meta["not_reported_ids"]
    # the verdict names the case that was running when the bound passed
    assert "test_tiny.py::test_case[c5]" in meta["end"]["running"], meta["end"]
    assert f"within --run-timeout={bound} s; running: " in meta["verdict"] and \
        "test_tiny.py::test_case[c5]" in meta["verdict"], meta["verdict"]


def test_an_interrupted_run_says_interrupted(tmp_path):
    root = started_tree(tmp_path / "t", tmp_path / "started", cases=10, sleep_s=600)
    out = tmp_path / "out"
    proc = pytest_start(root, "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")
    wait_for(tmp_path / "started", 60)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, text[-3000:]
    meta = results(out)
    assert meta["end"]["kind"] == "interrupted" and meta["verdict"].startswith("INTERRUPTED"), meta["verdict"]
    assert "NOTHING PASSED" not in (out / "matrix.md").read_text()
    assert "test_tiny.py::test_case[c3]" in meta["end"]["running"], meta["end"]     # c3 sleeps
    assert "; running: " in meta["verdict"] and "test_tiny.py::test_case[c3]" in meta["verdict"], meta["verdict"]


GPU_TREE = '''
    def test_on_the_gpu(gpu):
        pass

    def test_host_side():
        pass
'''


@pytest.mark.skipif(USABLE > 0, reason="this machine has a GPU: the run measures it")
def test_no_gpu_is_not_measured_never_pass(tmp_path):
    """Without a usable GPU the GPU cases skip and the run exits 0 (CI on a CPU machine
    keeps working), but its verdict says the conformance was not measured."""
    out = tmp_path / "out"
    cp = pytest_run(make_tree(tmp_path / "t", GPU_TREE), "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    meta = results(out)
    assert meta["verdict"].startswith("NOT MEASURED: no usable GPU"), meta["verdict"]
    assert "): 1 GPU case(s) did not run; 1 host-side cases passed" in meta["verdict"], meta["verdict"]
    assert states(out)[NODE] == "skipped"
    # host-side cases alone (the self-tests): no GPU case was skipped, and the verdict says so
    cp = pytest_run(make_tree(tmp_path / "h", GPU_TREE), "-k", "host_side", f"--report-dir={tmp_path / 'h-out'}")
    assert "): the run selected no GPU case; 1 host-side cases passed" in results(tmp_path / "h-out")["verdict"]
    md = (out / "matrix.md").read_text()
    assert "NOT MEASURED" in md and "PASS" not in md.split("## Summary")[0]
    assert "verdict: NOT MEASURED" in cp.stdout


@pytest.mark.parametrize("how", ["option", "environment"])
def test_fewer_gpus_than_required_fail_the_run(tmp_path, how):
    need = USABLE + 1
    out = tmp_path / "out"
    args = ["-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}"]
    env = {}
    if how == "option":
        args.append(f"--require-gpus={need}")
    else:
        env["TMA_REQUIRE_GPUS"] = str(need)
    # -k selects nothing of the node: its case is reported whatever the selection
    cp = pytest_run(make_tree(tmp_path / "t", GPU_TREE), *args, "-k", "host_side", env=env)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    node = {c["id"]: c for c in results(out)["cases"]}[NODE]
    assert node["state"] == "failed" and node["rule"] == "run.usable-gpus", node
    assert f"--require-gpus={need}: {USABLE} usable GPU(s)" in node["message"]
    assert results(out)["verdict"].startswith("FAIL")
    assert f"--require-gpus={need}" in cp.stdout


class _Config:
    def __init__(self, require=None):
        self.require = require

    def getoption(self, name):
        return {"require_gpus": self.require}[name]


@pytest.mark.parametrize("require,traces,state,want", [
    (None, ["/dev/nvidiactl"], cuda_env.DriverState(False, "no usable CUDA driver: cuInit returned "
                                                           "CUDA_ERROR_NO_DEVICE"), "failed"),
    ("0", ["/dev/nvidiactl"], cuda_env.DriverState(False, "cuInit returned CUDA_ERROR_NO_DEVICE"), "skipped"),
    (None, [], cuda_env.DriverState(False, "no CUDA driver: libcuda.so.1 missing"), "skipped"),
    (None, ["/proc/driver/nvidia/version"], cuda_env.DriverState(
        False, "no GPU with tensor maps", 13000, (cuda_env.DeviceInfo(0, "A100", (8, 0)),)), "skipped"),
    ("1", [], cuda_env.DriverState(True, "", 13000, (cuda_env.DeviceInfo(0, "H100", (9, 0)),)), "passed"),
    ("2", [], cuda_env.DriverState(True, "", 13000, (cuda_env.DeviceInfo(0, "H100", (9, 0)),)), "failed"),
])
def test_node_check(monkeypatch, require, traces, state, want):
    """Where the NVIDIA device nodes or proc entry exist but CUDA cannot initialize, the
    node fails by default (--require-gpus=0 accepts it); GPUs without tensor maps are
    not a broken node (NOT MEASURED); --require-gpus=N counts GPUs with tensor maps."""
    from fixtures.plugins.run_control import harness as plugin
    monkeypatch.delenv("TMA_REQUIRE_GPUS", raising=False)
    monkeypatch.setattr(cuda_env, "probe", lambda: state)
    monkeypatch.setattr(cuda_env, "driver_traces", lambda: traces)
    outcome, message = plugin.node_check(_Config(require))
    assert outcome == want, message
    if outcome == "failed" and require is None:
        assert "/dev/nvidiactl" in message and "cuInit" in message


def test_a_reused_report_folder_shows_only_this_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("results.json", "map_layout.json", "matrix.md", "environment.json", "junit.xml"):
        (out / name).write_text('{"stale": true}')
    tree = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    cp = pytest_run(tree, f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert not (out / "map_layout.json").exists()
    env = (out / "environment.json").read_text()
    assert "stale" not in env and "no map_layout.json" in env
    assert "test_tiny.py::test_ok" in states(out) and "stale" not in (out / "junit.xml").read_text()
    # a run that writes no JUnit leaves none of an earlier run's beside its results.json
    cp = pytest_run(tree, f"--report-dir={out}")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert not (out / "junit.xml").exists() and "test_tiny.py::test_ok" in states(out)


def test_a_case_result_as_json_is_its_fields():
    """results.json's case rows: every field that is set, and the suite; a copy (the
    known issue's dict too), as dataclasses.asdict gave."""
    from dataclasses import asdict
    from reports.model import CaseResult
    full = CaseResult("suites/test_x.py::test_a[c1]", "failed", "[rule r] [case c1] no", "r",
                      None, {"id": "KI-1", "reason": "why", "mode": "xfail"}, 0.25, "call", "gw3")
    bare = CaseResult(NODE_CASE, "passed")
    for c in (full, bare):
        want = {k: v for k, v in dict(asdict(c), suite=c.suite).items() if v not in (None, "")}
        assert c.to_json() == want
    js = full.to_json()
    assert js["known_issue"] is not full.known_issue and js["suite"] == "x"
    assert set(bare.to_json()) == {"id", "state", "duration", "suite"}


def _run_of(cases, **meta):
    from reports.model import CaseResult, Run
    run = Run(source="x", cases={c.id: c for c in cases})
    run.meta = dict({"exitstatus": 1, "not_reported": 0, "gpu": {"usable": 1}}, **meta)
    return run


LOST = {"at": "2026-11-25T03:15:00+00:00", "case": "suites/test_a.py::test_b[c2]", "worker": "gw3",
        "why": "a fresh process sees no GPU 0: CUDA driver 13000 sees no GPU"}


def test_gpu_lost_is_worse_than_fail_and_below_interrupted():
    """GPU LOST: worse than FAIL (a failure before the loss does not hide it), below an
    interrupted or timed-out run; read back from a JUnit file alone (no results.json
    meta), the skip kind gpu-lost says it; NOT MEASURED (no GPU from the start) stays."""
    from reports.model import CaseResult, classify_skip, run_verdict
    reason = f"not run: GPU lost at {LOST['at']} during {LOST['case']}"
    assert classify_skip(reason) == "gpu-lost"
    assert classify_skip("GPU lost during this case at x: a fresh process sees no GPU 0: y") == "gpu-lost"
    cases = [CaseResult("suites/test_a.py::test_b[c1]", "passed"),
             CaseResult("suites/test_a.py::test_b[c0]", "failed", "[rule r] [case c0] no"),
             CaseResult(LOST["case"], "skipped", "GPU lost during this case", skip_kind="gpu-lost"),
             CaseResult("suites/test_a.py::test_b[c3]", "skipped", reason, skip_kind="gpu-lost"),
             CaseResult("suites/test_a.py::test_b[c4]", "skipped", reason, skip_kind="gpu-lost")]
    v = run_verdict(_run_of(cases, gpu_lost=LOST))
    assert v.status == "GPU LOST" and not v.passed and v.css == "bad"
    assert v.text.startswith(f"GPU LOST: the GPU stopped answering at {LOST['at']} during {LOST['case']} "
                             f"({LOST['why']}); 2 GPU case(s) not run ("), v.text
    assert run_verdict(_run_of(cases)).text.startswith(f"GPU LOST: the GPU stopped answering during {LOST['case']}; 2 ")
    interrupted = run_verdict(_run_of(cases, gpu_lost=LOST, exitstatus=2,
                                      end={"kind": "interrupted", "why": "received SIGTERM"}))
    assert interrupted.status == "INTERRUPTED" and "received SIGTERM" in interrupted.text
    timed = run_verdict(_run_of(cases, gpu_lost=LOST, exitstatus=2, end={"kind": "timed-out", "why": "t"}))
    assert timed.status == "TIMED OUT"
    assert run_verdict(_run_of(cases[:2])).status == "FAIL"
    no_gpu = [CaseResult("suites/test_a.py::test_b[c1]", "skipped", "no GPU: no driver", skip_kind="no-gpu")]
    assert run_verdict(_run_of(no_gpu, exitstatus=0, gpu={"usable": 0})).status == "NOT MEASURED"


def test_the_verdict_is_the_terminals_last_line(tmp_path):
    """The verdict is printed again below pytest's own summary line ("4 passed, 7 skipped"
    reads like a pass on a node without a GPU), as the terminal's last line."""
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    run = pytest_run(root, f"--report-dir={tmp_path / 'out'}", "-n", "0", "--require-gpus=0")
    lines = [ln for ln in run.stdout.splitlines() if ln.strip()]
    assert lines[-1].startswith("verdict: "), lines[-3:]
    assert lines[-1] == f"verdict: {results(tmp_path / 'out')['verdict']}"


def test_a_stopped_runs_verdict_names_what_was_running():
    from reports.model import running_text
    assert running_text({"kind": "completed"}) == ""
    assert running_text({"kind": "interrupted", "running": []}) == "; no case was running"
    assert running_text({"kind": "timed-out", "running": ["a", "b"], "gpus": [0, 2]}) == \
        "; running: a, b (each on GPUs 0, 2)"
    assert running_text({"kind": "timed-out", "running": list("abcde"), "gpus": [1]}) == \
        "; running: a, b, c and 2 more (each on GPU 1)"


def test_cases_judged_on_their_batchs_second_run_are_counted_and_recorded(tmp_path):
    """Cases that read a result of a second run (isolation.AGAIN grew during the case: a
    batch run whole again, read through Batches.outcome, or a call the GPU service made
    again): they pass, the summary says how many were judged on a second run and why,
    and results.json keeps each one's note; the others have none."""
    root = make_tree(tmp_path / "t", '''
        import pytest
        from fixtures.cuda_layer import isolation

        @pytest.mark.parametrize("case", [f"k{i}" for i in range(4)])
        def test_batch(case):
            if case in ("k1", "k2"):   # as Batches.outcome does for a result of a second run
                isolation.AGAIN.append("its batch of 2 cases faulted (it trapped) ... judged on that run")

        @pytest.mark.parametrize("n", range(3))
        def test_call(n):
            if n == 1:       # one of its own calls the GPU service made again
                isolation.AGAIN.append("its first call faulted (...): made again, this is the second's outcome")
    ''')
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "2", f"--report-dir={out}")
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert "3 case(s) judged on a second run: their batch or call faulted first" in cp.stdout, cp.stdout[-3000:]
    data = {c["id"]: c for c in results(out)["cases"]}
    again = {cid for cid, c in data.items() if c.get("ran_again")}
    assert again == {"test_tiny.py::test_batch[k1]", "test_tiny.py::test_batch[k2]",
                     "test_tiny.py::test_call[1]"}, again
    assert data["test_tiny.py::test_batch[k1]"]["ran_again"].endswith("judged on that run")
    assert data["test_tiny.py::test_call[1]"]["ran_again"].endswith("this is the second's outcome")
