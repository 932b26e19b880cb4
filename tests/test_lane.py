"""The run's trap lane (fixtures/cuda_layer/trap_lane.py): the jobs run ahead in a process of
their own, each case takes its call's outcome, and a lane that does not run a job --
not its call, not its GPU, dead, stuck -- leaves the case to make its own call."""
from __future__ import annotations

import ast
import os
import pickle
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.cuda_layer import trap_lane
from fixtures.cuda_layer.isolation import target_name
from fixtures.cuda_layer.placement import Gpu
from fixtures.plugins.run_control.scheduling import run_order

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def joined(tmp_path):
    yield tmp_path / "lane"
    trap_lane.leave()
    trap_lane.stop(tmp_path / "lane")


def begin(path: Path, jobs: list, device=None, watch: int | None = None) -> trap_lane.Joined:
    """The lane started (as the controller does) and joined with ``jobs`` (as the first
    worker to collect does)."""
    proc = trap_lane.start(path, device, os.getpid() if watch is None else watch)
    joined = trap_lane.join(path, jobs, device)
    joined.proc = proc
    return joined


def job(name: str, *args, timeout: float = 60.0) -> trap_lane.Job:
    return trap_lane.Job(key=trap_lane.key_of(name, args), target=f"isolation_targets:{name}", args=args,
                    timeout=timeout)


def wait_for(cond, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_the_lane_runs_the_jobs_and_each_case_takes_its_outcome(joined):
    """Values, a trap (a poisoned child: the next job gets a fresh one) and an exception
    come back as the worker's own calls would; each taken outcome's window is kept."""
    jobs = [job("add", 1, 2), job("poison_with_error"), job("boom"), job("add", 5, 5), job("pid"),
            job("pid")]
    begin(joined, jobs)
    outs = [trap_lane.take(j.key, None) for j in jobs]
    assert [o.kind for o in outs] == ["returned", "cuda_error", "exception", "returned", "returned", "returned"]
    assert outs[0].value == 3 and outs[3].value == 10
    assert outs[1].error == "CUDA_ERROR_ILLEGAL_INSTRUCTION" and outs[1].poisoned
    assert "planted failure" in outs[2].error
    assert outs[4].value != os.getpid()             # it ran in a child of the lane
    assert len(trap_lane.TAKEN) == len(jobs) and all(a <= b for a, b in trap_lane.TAKEN)
    wait_for(lambda: (joined / trap_lane.SUMMARY).exists())
    summary = trap_lane.stop(joined)
    assert summary["jobs"] == summary["ran"] == len(jobs)
    assert summary["outcomes"] == {"returned": 4, "cuda_error": 1, "exception": 1}
    assert summary["child_starts"] >= min(trap_lane.CHILDREN, len(jobs)) + 1    # a fresh one after the trap
    assert not joined.exists()


def test_a_hang_and_a_crash_in_the_lane_are_their_cases_outcomes(joined):
    """A job that hangs past its timeout (its child killed) and one whose child dies are
    their cases' outcomes, as in the worker's own call; the jobs after them run."""
    jobs = [job("hang", timeout=1.0), job("crash"), job("add", 3, 4)]
    begin(joined, jobs)
    outs = [trap_lane.take(j.key, None) for j in jobs]
    assert [o.kind for o in outs] == ["timeout", "crashed", "returned"], outs
    assert "no answer from isolation_targets:hang within 1 s" in outs[0].error
    assert outs[1].error == "child exited with status 3" and outs[2].value == 7


def test_a_call_the_lane_does_not_run_is_the_callers(joined, monkeypatch):
    """Not one of the lane's jobs, or on another GPU: None at once, without looking for
    an outcome (the case makes its own call); and without a lane at all. "At once" is
    what take does, not seconds: a take that waits looks for its outcome (_load) until
    the lane ends or stalls."""
    assert trap_lane.take("nothing", None) is None
    j = job("add", 1, 1)
    begin(joined, [j])
    looked = []
    load = trap_lane._load
    monkeypatch.setattr(trap_lane, "_load", lambda path: looked.append(path) or load(path))
    assert trap_lane.take(trap_lane.key_of("other"), None) is None
    assert trap_lane.take(j.key, 3) is None
    assert looked == []
    assert trap_lane.take(j.key, None).value == 2
    assert looked, "take looked for no outcome: this test no longer sees a wait"


def test_the_second_process_reads_the_jobs_of_the_first(joined):
    """Every process joins with the same jobs; the lane runs the first one's."""
    jobs = [job("add", 2, 2)]
    begin(joined, jobs)
    second = trap_lane.join(joined, [job("add", 9, 9)], None)
    assert second.keys == {jobs[0].key}
    assert trap_lane.take(jobs[0].key, None).value == 4


def test_a_run_without_jobs_ends_the_lane(joined):
    """The lane started with the run; the first process to collect has none of its
    cases: the lane ends at once (its children's contexts closed), opening no socket
    (it serves the workers only with ``--gpu-service on``: tests/test_gpu_service.py)."""
    j = begin(joined, [])
    assert j.proc.wait(30) == 0
    assert not (joined / "sock").exists()
    summary = trap_lane.stop(joined)
    assert summary["jobs"] == summary["ran"] == 0 and "stopped" not in summary
    assert summary["jobs_at"] >= summary["start"] and "service" not in summary


def test_the_lanes_own_children_are_taken_in_turn(joined):
    """Without a service the lane takes its CHILDREN children in turn, job after job, so
    that a child poisoned by a trap has the others' jobs' time to start again."""
    jobs = [job("nap", i / 1e6) for i in range(trap_lane.CHILDREN + 2)]
    begin(joined, jobs)
    pids = [trap_lane.take(j.key, None).value for j in jobs]
    n = trap_lane.CHILDREN
    assert len(set(pids[:n])) == n and pids[n:] == pids[:2], pids


def test_a_gpu_the_lane_lost_is_lost_for_the_case(joined):
    """The lane's child cannot see its GPU (here: no driver at all): the case takes the
    outcome no_gpu, and this process records the loss as for its own call (isolation's
    LOST, which the harness turns into the run's GPU LOST); the lane stops there."""
    from fixtures.cuda_layer import cuda_env, isolation
    if cuda_env.probe().available:
        pytest.skip("this machine has a GPU: the call would run")
    jobs = [job("add", 1, 1), job("add", 2, 2)]
    before = len(isolation.LOST)
    begin(joined, jobs, device=0)
    assert trap_lane.take(jobs[0].key, 0).kind == "no_gpu"
    assert len(isolation.LOST) == before + 1 and isolation.LOST[-1][1] == 0
    assert trap_lane.take(jobs[1].key, 0) is None           # the lane stopped: the case calls itself
    del isolation.LOST[before:]


def test_a_dead_lane_leaves_its_cases_to_their_workers(joined):
    """The lane dies in a hanging job: a case waiting for a later job stops waiting and
    makes its own call; the controller's stop says the lane did not finish."""
    jobs = [job("hang"), job("add", 1, 1)]
    j = begin(joined, jobs)
    wait_for(lambda: (joined / trap_lane.PID).exists())
    os.kill(int((joined / trap_lane.PID).read_text()), signal.SIGKILL)
    t = time.monotonic()
    assert trap_lane.take(jobs[1].key, None) is None
    # it stops at the lane's death, not at the stall bound (300 s): a tenth of that, so
    # that a loaded machine's seconds never decide
    assert time.monotonic() - t < trap_lane.STALL_S / 10
    assert j.proc.wait(5) == -signal.SIGKILL
    assert "did not finish" in trap_lane.stop(joined)["stopped"]


def test_a_lane_that_never_started_is_given_up(joined, monkeypatch):
    """No pid after the start grace: the case makes its own call."""
    monkeypatch.setattr(trap_lane, "START_GRACE_S", 0.2)
    joined.mkdir()
    (joined / trap_lane.OUT).mkdir()
    (joined / trap_lane.JOBS).write_bytes(pickle.dumps([job("add", 1, 1)]))
    trap_lane.join(joined, [], None)          # the jobs written, the lane never started
    assert trap_lane.take(job("add", 1, 1).key, None) is None


def test_the_lane_stops_when_the_run_is_gone(joined):
    """Tied to the run's process (here: one that has exited), the lane stops before its
    jobs and says why."""
    import subprocess
    import sys
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    j = begin(joined, [job("add", 1, 1)], watch=gone.pid)
    wait_for(lambda: (joined / trap_lane.SUMMARY).exists() or j.proc.poll() is not None)
    assert trap_lane.take(job("add", 1, 1).key, None) is None


def test_a_run_that_ends_before_its_jobs_come_ends_the_lane(joined):
    """Started with a run that ends before any process collected: the lane stops and
    says why."""
    import subprocess
    import sys
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    proc = trap_lane.start(joined, None, run.pid)
    run.wait()
    assert proc.wait(30) == 0
    assert "ended before its jobs came" in trap_lane.stop(joined)["stopped"]


def test_the_lane_units_come_last_in_collection_order():
    """run_order: the lane's cases after every other unit (heavy ones spread as before),
    in their collection order, which is the lane's."""
    ids = [f"t.py::test_a[{i}]" for i in range(40)] + ["t.py::test_trap[x]", "t.py::test_trap[y]",
                                                       "t.py::test_iso"]
    laned = lambda i: ids[i].startswith("t.py::test_trap")            # noqa: E731
    heavy = lambda i: ids[i] == "t.py::test_iso"                       # noqa: E731
    order = run_order(ids, heavy, last=laned)
    assert sorted(order) == list(range(len(ids)))
    assert [ids[i] for i in order[-2:]] == ["t.py::test_trap[x]", "t.py::test_trap[y]"]
    assert order.index(ids.index("t.py::test_iso")) < len(ids) - 2
    assert run_order(ids, heavy) == run_order(ids, heavy, last=None)


def test_the_marker_names_the_call_the_case_makes():
    """The key a ``runs_alone`` marker gives a case at collection (the plugin's view of
    the GPU and the kernel cache) is the key ``run_alone`` computes in the case (the
    ``gpu`` fixture's Gpu, the ``kernels`` fixture's cache folder)."""
    import fixtures.tma_load as tl
    from fixtures import engine
    from fixtures.engine.batches import alone_key
    from fixtures.tma_box import tiled_cases
    case = next(c for c in tiled_cases.generate("smoke") if c.expect == "trap")
    plugin_gpu = SimpleNamespace(ordinal=0, sm=90, arch="sm_90a")
    fixture_gpu = Gpu(0, "NVIDIA H100", (9, 0), "sm_90a")
    cache = Path("/tmp/kernels")
    j = engine.RunsAlone(tl.TILED, "trap_case").job({"trap_case": case}, plugin_gpu, cache)
    assert j.key == alone_key(tl.TILED, case, fixture_gpu, str(cache))
    assert j.key != alone_key(tl.PREFETCH, case, fixture_gpu, cache)
    assert j.target == target_name(engine.run_cases) and j.args[1] == [case]


def _calls(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call)]


def test_every_case_run_alone_through_the_engine_is_declared_to_the_lane():
    """A suite test that runs its case alone through an operation (``engine.expect_trap``,
    ``check_write_alone``) carries ``engine.runs_alone`` with that operation and that
    parameter: otherwise the lane never runs it and its worker traps during the run."""
    seen = 0
    for path in sorted((ROOT / "suites").glob("test_*.py")):
        for fn in ast.parse(path.read_text()).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            for call in _calls(fn):
                name = ast.unparse(call.func)
                if name.endswith("expect_trap"):
                    param, op = ast.unparse(call.args[0]), ast.unparse(call.args[1])
                elif name.endswith("check_write_alone"):
                    param, op = ast.unparse(call.args[0]), "ts.WRITES"
                else:
                    continue
                seen += 1
                marks = [ast.unparse(d) for d in fn.decorator_list]
                assert f"engine.runs_alone({op}, {param!r})" in marks, (
                    f"{path.name}::{fn.name} runs {param} alone through {op} without "
                    f"@engine.runs_alone({op}, \"{param}\"): {marks}")
    assert seen >= 7


def test_a_call_of_its_own_is_keyed_as_the_case_makes_it(joined):
    """An ``AloneCall`` marker's job (test_large_global_dim's) has the key of the case's
    own ``call_alone``: the case takes the lane's outcome of it."""
    import fixtures.tma_load as tl
    from fixtures.tensormap.enums import DataType
    params = {"case_id": "x", "dtype": DataType.UINT8, "dims": (1 << 31,), "strides": (), "box": (32,)}
    gpu = SimpleNamespace(ordinal=None, sm=90, arch="sm_90a")
    j = trap_lane.AloneCall(tl.LARGE_DIM_TARGET, tl.large_dim_args, builds=("x.cu",)).job(params, gpu, Path("/c"))
    assert j.args == (int(DataType.UINT8), (1 << 31,), (), (32,), "sm_90a", "/c")
    assert j.builds == (("x.cu", "sm_90a", "/c"),)
    mine = trap_lane.Job(key=j.key, target="isolation_targets:add", args=(1, 2))   # what the lane answers
    begin(joined, [mine])
    out = trap_lane.call_alone(tl.LARGE_DIM_TARGET, *tl.large_dim_args(params, gpu, "/c"), device=None)
    assert out.value == 3                   # the lane's outcome, not a call of the target here


def test_each_gpu_has_its_lane_and_a_case_takes_its_gpus_outcome(tmp_path):
    """A run on several GPUs has a lane per GPU, each running every job on its GPU: the
    call of a case on GPU 1 takes GPU 1's lane's outcome, on GPU 0 GPU 0's, on a GPU
    without a lane none (its own call)."""
    from fixtures.cuda_layer.isolation import Outcome
    j = job("add", 1, 1)
    try:
        for k in (0, 1):
            path = tmp_path / f"gpu{k}"
            trap_lane.join(path, [j], k)
            (path / trap_lane.OUT).mkdir(parents=True, exist_ok=True)
            (path / trap_lane.OUT / f"{j.key}.pkl").write_bytes(pickle.dumps(
                {"outcome": Outcome("returned", value=f"on GPU {k}"), "start": 1.0 + k, "stop": 2.0 + k}))
        assert trap_lane.take(j.key, 1).value == "on GPU 1" and trap_lane.take(j.key, 0).value == "on GPU 0"
        assert trap_lane.take(j.key, 2) is None
        assert trap_lane.TAKEN == [(2.0, 3.0), (1.0, 2.0)]
    finally:
        trap_lane.leave()
