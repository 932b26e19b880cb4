"""A GPU that stops answering mid-run (CPU only, simulated): a real pytest run on a small
generated tree, with a tiny plugin (``-p fakegpu``) that makes this CPU machine look like
one with a usable H100 to the pytest processes. The isolated child, a fresh process,
sees no GPU here: exactly what a GPU that fell over looks like (the outcome no_gpu).

The run stops sending GPU work, the GPU cases after the loss skip (skip kind gpu-lost),
the case during which it went is no conformance failure either, and the run ends with the
verdict GPU LOST and exit status 6, its time, case and worker in results.json."""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from fixtures.cuda_layer import cuda_env
from reports import model
from reports.model import NODE_CASE

from nested_run import FAKE_PROBE, REPO, make_tree, pytest_run, results

CPU_ONLY = pytest.mark.skipif(cuda_env.probe().available,
                                reason="this machine has a GPU: a fresh process would see it")

# Loaded in the controller and every worker (xdist passes -p on), never in the isolated
# child: the pytest processes see one H100 whose context opens; the child sees none.
FAKE_GPU = '''
import os
from fixtures.cuda_layer import cuda_env, placement
import fixtures.plugins.run_control.session_start as session_start

STATE = cuda_env.DriverState(True, "", 13000, (cuda_env.DeviceInfo(0, "NVIDIA H100", (9, 0)),))
GONE = cuda_env.DriverState(False, "CUDA driver 13000 sees no GPU", 13000)


def probe():
    """A worker started after the loss sees no GPU at all (FAKE_GPU_GONE_AFTER: the report
    folder whose gpu_lost.json says so)."""
    folder = os.environ.get("FAKE_GPU_GONE_AFTER")
    if folder and os.environ.get("PYTEST_XDIST_WORKER") and os.path.exists(os.path.join(folder, "gpu_lost.json")):
        return GONE
    return STATE


cuda_env.probe = probe
session_start.PRECOMPILE = ()               # no kernel builds on this CPU machine


def fake_open(cls, info, arch=None):
    return cls(info.ordinal, info.name, info.cc, arch or "sm_90a")


placement.Gpu.open = classmethod(fake_open)
''' + FAKE_PROBE

TREE = '''
    import pytest
    from fixtures.cuda_layer.isolation import run_isolated

    @pytest.mark.parametrize("i", range(5))
    def test_gpu_before(gpu, i):
        pass

    def test_gpu_falls_over(gpu):
        out = run_isolated("fixtures.cuda_layer.isolation:nothing", device=gpu.ordinal)
        assert out.kind == "returned", out

    @pytest.mark.parametrize("i", range(10))
    def test_gpu_after(gpu, i):
        pass
'''

# With --dist=loadfile each file is one unit, run in order on one worker: the other
# worker waits for the loss, then sees it through the report folder.
OTHER = '''
import time, pytest

def test_wait_for_the_loss(report_dir):
    deadline = time.monotonic() + 60
    while not (report_dir / "gpu_lost.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)

@pytest.mark.parametrize("i", range(10))
def test_gpu_elsewhere(gpu, i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_host_side(i):
    pass
'''


def _run(tmp_path, *args, env=None):
    root = make_tree(tmp_path / "t", TREE)
    (root / "fakegpu.py").write_text(FAKE_GPU)
    (root / "test_other.py").write_text(OTHER)
    out = tmp_path / "out"
    e = {"PYTHONPATH": os.pathsep.join([str(REPO), str(root)])}
    e.update(env or {})
    cp = pytest_run(root, "-p", "fakegpu", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", *args, env=e, timeout=180)
    return cp, out


@CPU_ONLY
def test_a_gpu_lost_mid_run_stops_the_gpu_work_and_says_so(tmp_path):
    cp, out = _run(tmp_path, "-n", "2", "--dist=loadfile")
    text = cp.stdout + cp.stderr
    assert cp.returncode == model.EXIT_GPU_LOST, text[-4000:]
    meta = results(out)
    cases = {c["id"]: c for c in meta["cases"]}
    lost = meta["gpu_lost"]
    falls = "test_tiny.py::test_gpu_falls_over"
    assert lost["case"] == falls and lost["worker"].startswith("gw"), lost
    assert lost["why"].startswith("a fresh process sees no GPU 0: "), lost
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", lost["at"]), lost
    assert meta["exitstatus"] == model.EXIT_GPU_LOST
    assert not [c for c in cases.values() if c["state"] == "failed"], text[-4000:]
    # the case during which it went: no conformance failure, named as such
    assert cases[falls]["state"] == "skipped" and cases[falls]["skip_kind"] == "gpu-lost", cases[falls]
    assert cases[falls]["message"].startswith(f"GPU lost during this case at {lost['at']}: "), cases[falls]
    # every GPU case after it, on this worker and on the other, was not run
    after = [i for i in cases if "test_gpu_after" in i or "test_gpu_elsewhere" in i]
    assert len(after) == 20
    for i in after:
        c = cases[i]
        assert c["state"] == "skipped" and c["skip_kind"] == "gpu-lost", c
        assert c["message"] == f"not run: GPU lost at {lost['at']} during {falls}", c
    assert {cases[i]["worker"] for i in after} - {lost["worker"]}, "the other worker never saw the loss"
    for i in cases:
        if "test_gpu_before" in i or "test_host_side" in i or i == NODE_CASE:
            assert cases[i]["state"] == "passed", cases[i]
    want = f"GPU LOST: GPU 0 stopped answering at {lost['at']} during {falls} ({lost['why']}); 20 GPU case(s) not run"
    assert meta["verdict"].startswith(want), meta["verdict"]
    assert f"verdict: {want}" in cp.stdout
    assert "20 gpu-lost" in cp.stdout or "21 gpu-lost" in cp.stdout
    junit = ET.parse(out / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["tmac.verdict"] == meta["verdict"]
    # read back from the files alone, the verdict is the same
    assert model.run_verdict(model.load_run(out)).text == meta["verdict"]
    from_junit = model.run_verdict(model.read_junit(out / "junit.xml"))
    assert from_junit.text.startswith(f"GPU LOST: the GPU stopped answering during {falls}; 20 GPU"), from_junit




def test_a_batch_whose_gpu_is_gone_is_not_bisected():
    """run_contained: a batch whose GPU a fresh child cannot see (no_gpu) is not run again
    case by case (each try a fresh child, up to 8 of them): no case of it is at fault."""
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine.batches import run_contained
    calls = []

    def call(ids):
        calls.append(list(ids))
        return Outcome("no_gpu", error="a fresh process sees no GPU 0: gone", poisoned=True)
    results, why = run_contained(["a", "b", "c"], call)
    assert calls == [["a", "b", "c"]] and results == {}
    assert why == {k: "the GPU was not usable: a fresh process sees no GPU 0: gone" for k in "abc"}


@CPU_ONLY
def test_no_gpu_from_the_start_is_never_a_lost_gpu(tmp_path):
    """Without a usable GPU from the start (no fake), an isolated call's no_gpu is no loss:
    the run stays NOT MEASURED, exit status 0 (the harness's own self-tests do this)."""
    root = make_tree(tmp_path / "t", '''
        from fixtures.cuda_layer.isolation import run_isolated

        def test_child_sees_no_gpu():
            assert run_isolated("fixtures.cuda_layer.isolation:nothing", device=0).kind == "no_gpu"
    ''')
    out = tmp_path / "out"
    cp = pytest_run(root, f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}")
    assert cp.returncode == 0, cp.stdout[-3000:]
    meta = results(out)
    assert meta["gpu_lost"] is None and meta["verdict"].startswith("NOT MEASURED"), meta["verdict"]
    assert not (out / "gpu_lost.json").exists()


@CPU_ONLY
def test_a_worker_started_after_the_loss_skips_its_gpu_cases_as_lost(tmp_path):
    """A replacement worker (its predecessor died after the loss) sees no GPU at all from
    its start: its GPU cases are "not run: GPU lost", not "no GPU"."""
    root = make_tree(tmp_path / "t", '''
        import os, pytest
        from fixtures.cuda_layer.isolation import run_isolated

        def test_a_gpu_falls_over(gpu):
            assert run_isolated("fixtures.cuda_layer.isolation:nothing", device=gpu.ordinal).kind == "returned"

        def test_b_worker_dies():
            os._exit(3)

        @pytest.mark.parametrize("i", range(5))
        def test_c_gpu_after(gpu, i):
            pass
    ''')
    (root / "fakegpu.py").write_text(FAKE_GPU)
    out = tmp_path / "out"
    cp = pytest_run(root, "-p", "fakegpu", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", "-n", "1",
                    env={"PYTHONPATH": os.pathsep.join([str(REPO), str(root)]), "FAKE_GPU_GONE_AFTER": str(out)})
    assert cp.returncode == model.EXIT_GPU_LOST, (cp.stdout + cp.stderr)[-4000:]
    meta = results(out)
    cases = {c["id"]: c for c in meta["cases"]}
    assert meta["gpu_lost"]["case"] == "test_tiny.py::test_a_gpu_falls_over"
    after = [c for i, c in cases.items() if "test_c_gpu_after" in i]
    assert len(after) == 5 and {c["skip_kind"] for c in after} == {"gpu-lost"}, after
    assert {c["worker"] for c in after} != {meta["gpu_lost"]["worker"]}, "not a replacement worker"
    assert meta["verdict"].startswith("GPU LOST: ") and "; 5 GPU case(s) not run" in meta["verdict"]
