"""One run per report folder (fixtures/plugins/run_control/run_lock.py): a run that finds a live
run's folder stops at start-up with one line naming that run (exit 4); a dead run's
lock does not block; workers and --collect-only take no lock."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nested_run import REPO, make_tree, pytest_run, results

WAITS = '''
import os
import time
from pathlib import Path


def test_waits_for_the_flag():
    flag = Path(os.environ["TMAC_TEST_FLAG"])
    t0 = time.time()
    while not flag.exists() and time.time() - t0 < 120:
        time.sleep(0.05)
    assert flag.exists()


def test_other():
    pass
'''


def _start(root: Path, *args: str, env: dict) -> subprocess.Popen:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for k in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", "TMA_REQUIRE_GPUS"):
        e.pop(k, None)
    e.update(env)
    return subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=root, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the first run ended (exit {proc.returncode}) before {path.name}:\n"
                                 f"{out[-3000:]}\n{err[-2000:]}")
        assert time.time() - t0 < timeout, f"no {path} after {timeout} s"
        time.sleep(0.05)


def test_second_run_on_a_live_runs_folder_is_refused(tmp_path):
    """The second run exits 4 with one line naming the first (run id, host, pid, start
    time) before any case runs; the first's files are intact and it ends as it would;
    then the folder takes a new run."""
    root = make_tree(tmp_path / "t", WAITS)
    out = tmp_path / "out"
    flag = tmp_path / "flag"
    env = {"TMAC_TEST_FLAG": str(flag)}
    first = _start(root, f"--report-dir={out}", "-n", "2", "--require-gpus=0", env=env)
    try:
        _wait_for(out / ".tmac-run.json", first)
        _wait_for(out / "environment.json", first)
        owner = json.loads((out / ".tmac-run.json").read_text())
        env_before = (out / "environment.json").read_bytes()

        second = pytest_run(root, f"--report-dir={out}", "-n", "2", "--require-gpus=0", env=env)
        assert second.returncode == 4, second.stdout[-2000:] + second.stderr[-2000:]
        errors = [ln for ln in second.stderr.splitlines() if ln.startswith("ERROR:")]
        assert len(errors) == 1, second.stderr
        line = errors[0]
        assert line.startswith(f"ERROR: --report-dir: {out} is in use by run {owner['run_id']} "), line
        for part in (f"host {owner['host']}", f"pid {first.pid}", f"started {owner['started']}"):
            assert part in line, line
        assert "Traceback" not in second.stdout + second.stderr and "passed" not in second.stdout
        assert (out / "environment.json").read_bytes() == env_before     # not removed, not rewritten

        # --collect-only takes no lock
        listing = pytest_run(root, f"--report-dir={out}", "--collect-only", "-q", env=env)
        assert listing.returncode == 0, listing.stdout + listing.stderr
    finally:
        flag.write_text("")
        o, e = first.communicate(timeout=180)
    assert first.returncode == 0, o[-3000:] + e[-2000:]
    res = results(out)
    assert res["run_id"] == owner["run_id"] and res["verdict"].startswith("NOT MEASURED"), res["verdict"]
    assert {c["id"]: c["state"] for c in res["cases"]}["test_tiny.py::test_waits_for_the_flag"] == "passed"
    assert not (out / ".tmac-run.json").exists()

    third = pytest_run(root, f"--report-dir={out}", "-n", "0", "--require-gpus=0", env=env)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-2000:]
    assert results(out)["run_id"] != owner["run_id"]


KILLED = '''
import os, signal, sys
from fixtures.plugins.run_control.run_lock import RunLock
lock = RunLock(sys.argv[1])
lock.acquire({"run_id": "dead-run", "host": os.uname().nodename, "pid": os.getpid(), "started": "then"})
os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_dead_runs_lock_does_not_block(tmp_path):
    """A run killed while it held the folder (its owner file left behind) does not block
    the next run, which takes the folder and clears the earlier files."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("{}")
    cp = subprocess.run([sys.executable, "-c", KILLED, str(out)], cwd=REPO, capture_output=True, text=True,
                        env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert cp.returncode == -signal.SIGKILL, cp.stderr
    assert json.loads((out / ".tmac-run.json").read_text())["run_id"] == "dead-run"
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    run = pytest_run(root, f"--report-dir={out}", "-n", "0", "--require-gpus=0")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert results(out)["run_id"] != "dead-run" and not (out / ".tmac-run.json").exists()


def test_lock_refusal_names_the_holder(tmp_path):
    """In one process: a second RunLock on a held folder raises FolderInUse with the
    holder's owner file; after release it can be taken."""
    from fixtures.plugins.run_control.run_lock import FolderInUse, RunLock
    owner = {"run_id": "r1", "host": "h", "pid": 1, "started": "2026-11-25T12:00:00+00:00"}
    a = RunLock(tmp_path)
    a.acquire(owner)
    try:
        RunLock(tmp_path).acquire(dict(owner, run_id="r2"))
        raise AssertionError("a held folder was taken")
    except FolderInUse as e:
        assert e.owner == owner
        assert e.line("--report-dir") == (
            f"--report-dir: {tmp_path} is in use by run r1 (host h, pid 1, started "
            f"2026-11-25T12:00:00+00:00), still running; give this run another --report-dir, "
            f"or wait for that one to end")
    a.release()
    b = RunLock(tmp_path)
    b.acquire(owner)
    b.release()


def test_a_setup_error_leaves_no_half_folder(tmp_path):
    """A run stopped at start-up by a setup error (exit 4: a bad --run-timeout, an --arch
    the node cannot run) leaves no report folder it made behind: before, the folder held
    its lock file alone, which a fleet merge met as a node. A folder that was there
    before is kept."""
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    made = tmp_path / "qual" / "node7"
    run = pytest_run(root, f"--report-dir={made}", "-n", "0", "--require-gpus=0", "--run-timeout=soon")
    assert run.returncode == 4 and "--run-timeout" in run.stdout + run.stderr
    assert not made.exists() and (tmp_path / "qual").is_dir()
    kept = tmp_path / "kept"
    kept.mkdir()
    run = pytest_run(root, f"--report-dir={kept}", "-n", "0", "--require-gpus=0", "--run-timeout=soon")
    assert run.returncode == 4 and kept.is_dir() and not (kept / ".tmac-run.json").exists()
    # a run that wrote its reports keeps its folder, lock file and all
    run = pytest_run(root, f"--report-dir={made}", "-n", "0", "--require-gpus=0")
    assert run.returncode == 0 and (made / "results.json").is_file()
