"""Every GPU of a node runs every case (fixtures/plugins/run_control/every_gpu.py), shown on this CPU
machine with fake GPUs: a real pytest run on a small generated tree, with a tiny plugin
(``-p fakegpus``) that makes the pytest processes see N H100s whose contexts open (and
whose isolated children are never started). Each case runs on every GPU, in that GPU's
own thread, with its fixtures built there; a fault on one GPU fails that GPU alone and the
run's verdict, messages, results.json, JUnit, matrix and Prometheus file name it. The
two-GPU cases of the fence suite cover every GPU of a 4- and an 8-GPU node. A worker
opens no context and imports no CuPy: every driver call of its cases runs in an isolated
child."""
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
                              reason="this machine has a GPU: the fake GPUs would stand beside it")

# Loaded in the controller and every worker (xdist passes -p on): N H100s (FAKE_GPUS) with
# UUIDs and PCI bus ids; opening one costs nothing, its isolated child never starts.
FAKE_GPUS = '''
import os
from fixtures.cuda_layer import cuda_env, isolation, placement
import fixtures.plugins.run_control.session_start as session_start

N = int(os.environ.get("FAKE_GPUS", "4"))
STATE = cuda_env.DriverState(True, "", 13000, tuple(
    cuda_env.DeviceInfo(i, "NVIDIA H100", (9, 0), f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}",
                        f"0000:{0x18 + i:02X}:00.0") for i in range(N)))
cuda_env.probe = lambda: STATE
session_start.PRECOMPILE = ()                # no kernel builds on this CPU machine


def fake_open(cls, info, arch=None):
    return cls(info.ordinal, info.name, info.cc, arch or "sm_90a", uuid=info.uuid,
               pci_bus_id=info.pci_bus_id)


# a fresh process sees the GPU that would not open: not lost, the harness could not use it
isolation.check_gpu = lambda device, timeout=60.0: isolation.Outcome("returned")

if os.environ.get("FAKE_GPU_OPEN_FAILS"):
    # the isolated children of that GPU cannot open it (the harness's step, in the child)
    _FAILS = int(os.environ["FAKE_GPU_OPEN_FAILS"])

    def _run_isolated(target, *args, device=0, **kwargs):
        if device == _FAILS:
            return isolation.Outcome("exception", error=(
                f"HarnessError: harness: open {STATE.devices[device].label} failed: RuntimeError: "
                f"cuDevicePrimaryCtxRetain({device}): CUDA_ERROR_OUT_OF_MEMORY"))
        return isolation.Outcome("returned", 0)
    isolation.run_isolated = _run_isolated


placement.Gpu.open = classmethod(fake_open)
placement.Gpu.activate = lambda self: self
isolation.IsolatedRunner.prestart = lambda self, device=None: None
''' + FAKE_PROBE

# BROKEN: the GPU whose loads of cases 0 and 1 differ from the model. Each GPU's session
# fixture records the thread that built it and how often.
TREE = '''
    import os, threading, pytest
    from fixtures import engine
    from fixtures.cuda_layer import isolation, placement
    from fixtures.cuda_layer.faults import harness_step
    import fixtures.tma_load   # registers the rule tma-load.model
    from fixtures.rules.registry import fail

    BROKEN = int(os.environ.get("FAKE_BROKEN_GPU", "-1"))
    HARNESS = int(os.environ.get("FAKE_HARNESS_GPU", "-1"))
    BUILT = []

    @pytest.fixture(scope="session")
    def on_this_gpu(gpu):
        BUILT.append(gpu.ordinal)
        return {"ordinal": gpu.ordinal, "thread": threading.current_thread().name}

    @pytest.mark.rule("tma-load.model")
    @pytest.mark.parametrize("i", range(6))
    def test_load(gpu, on_this_gpu, i, request):
        assert on_this_gpu["ordinal"] == gpu.ordinal and placement.bound_gpu() is gpu
        assert on_this_gpu["thread"] == threading.current_thread().name
        assert BUILT.count(gpu.ordinal) == 1          # once per GPU, in its thread
        request.node.user_properties.append(("ran", gpu.ordinal))
        if os.environ.get("FAKE_GPU_OPEN_FAILS"):       # the case's driver calls, in a child
            engine.value_of(isolation.run_isolated("os:getpid", device=gpu.ordinal), "tma-load.model", f"case{i}")
        if gpu.ordinal == BROKEN and i < 2:
            fail("tma-load.model", f"case{i}", "3 byte(s) of shared memory differ from the model")
        if gpu.ordinal == HARNESS and i == 5:
            with harness_step(f"fill the status words on GPU {gpu.ordinal}"):
                raise RuntimeError("cudaErrorInvalidValue: invalid argument")

    @pytest.mark.rule("tma-load.model")
    @pytest.mark.parametrize("i", range(2))
    def test_skips_on_one_gpu(gpu, i):
        if gpu.ordinal == 1:
            pytest.skip("needs sm_100: GPU 1 is sm_90")

    @pytest.mark.rule("tma-load.model")
    def test_host_side():
        pass
'''


def _run(tmp_path, *args, gpus: int = 4, env=None, tree: str = TREE, known: str | None = None):
    root = make_tree(tmp_path / "t", tree, known=known)
    (root / "fakegpus.py").write_text(FAKE_GPUS)
    out = tmp_path / "out"
    e = {"PYTHONPATH": os.pathsep.join([str(REPO), str(root)]), "FAKE_GPUS": str(gpus)}
    e.update(env or {})
    cp = pytest_run(root, "-p", "fakegpus", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", *args, env=e, timeout=180)
    return cp, out


def _uuid(k: int) -> str:
    return f"GPU-{k:08x}-aaaa-bbbb-cccc-{k:012x}"


def _label(k: int) -> str:
    return f"GPU {k} ({_uuid(k)}, 0000:{0x18 + k:02X}:00.0)"


@CPU_ONLY
def test_a_fault_on_one_gpu_fails_that_gpu_alone_and_names_it(tmp_path):
    cp, out = _run(tmp_path, "-n", "2", "--prom-file", str(tmp_path / "tmac.prom"),
                   env={"FAKE_BROKEN_GPU": "2"})
    text = cp.stdout + cp.stderr
    assert cp.returncode == 1, text[-4000:]
    meta = results(out)
    cases = {c["id"]: c for c in meta["cases"]}
    assert [g["uuid"] for g in meta["gpu"]["run"]] == [_uuid(k) for k in range(4)]
    # every GPU ran every single-GPU case; the host-side case ran on none
    per_gpu = model.gpu_counts(model.read_results_json(out / "results.json"))
    assert {k: sum(v.values()) for k, v in per_gpu.items()} == {0: 8, 1: 8, 2: 8, 3: 8}
    assert "gpus" not in cases["test_tiny.py::test_host_side"]
    for i in range(6):
        c = cases[f"test_tiny.py::test_load[{i}]"]
        broken = i < 2
        assert c["gpus"] == {"0": "passed", "1": "passed", "2": "failed" if broken else "passed",
                             "3": "passed"}, c
        assert c["state"] == ("failed" if broken else "passed"), c
        if broken:
            assert c["rule"] == "tma-load.model"
            assert c["message"].startswith(f"[rule tma-load.model] [case case{i}] [{_label(2)}] 3 byte(s)"), c
            assert "(GPUs 0, 1, 3: passed)" in c["message"] and "GPU 0 (" not in c["message"], c
    want = f"FAIL: {_label(2)} 2 failed; GPUs 0, 1, 3 passed (of 10)"
    assert meta["verdict"] == want and f"verdict: {want}" in cp.stdout
    assert f"{_label(2)}: 6 passed, 2 failed\n" in cp.stdout, cp.stdout[-2000:]       # per GPU
    assert f"{_label(1)}: 6 passed, 2 skipped\n" in cp.stdout, cp.stdout[-2000:]
    # JUnit: each GPU case names its GPUs; the failing ones each GPU in full
    junit = ET.parse(out / "junit.xml").getroot()
    tcs = {tc.get("name"): tc for tc in junit.iter("testcase")}
    assert tcs["test_load[3]"].findtext("system-out") == "GPUs 0, 1, 2, 3: passed"
    assert tcs["test_load[0]"].findtext("system-out").splitlines()[2] == f"{_label(2)}: failed"
    assert tcs["test_host_side"].find("system-out") is None
    assert model.read_junit(out / "junit.xml").cases["test_tiny.py::test_load[0]"].gpus == \
        cases["test_tiny.py::test_load[0]"]["gpus"]
    # each GPU's properties apart
    props = [(p.get("name"), p.get("value")) for p in tcs["test_load[4]"].iter("property")]
    assert props == [(f"gpu{k}.ran", str(k)) for k in range(4)], props
    # the matrix's per-GPU table, and the Prometheus file's per-GPU series
    md = (out / "matrix.md").read_text()
    assert f"| **{_label(2)}** | NVIDIA H100 | 6 | **2** | 0 | 0 | 0 | 0 | 8 |" in md, md[:3000]
    assert f"| {_label(1)} | NVIDIA H100 | 6 | 0 | 0 | 2 | 0 | 0 | 8 |" in md
    prom = (tmp_path / "tmac.prom").read_text()
    assert f'tmac_gpu_passed{{gpu="{_uuid(2)}",ordinal="2"}} 0' in prom
    assert f'tmac_gpu_passed{{gpu="{_uuid(0)}",ordinal="0"}} 1' in prom
    assert f'tmac_gpu_cases{{gpu="{_uuid(2)}",ordinal="2",state="failed"}} 2' in prom


@CPU_ONLY
def test_a_skip_on_one_gpu_says_where_and_a_healthy_node_passes(tmp_path):
    cp, out = _run(tmp_path, "-n", "2", "-k", "skips or host")
    meta = results(out)
    cases = {c["id"]: c for c in meta["cases"]}
    c = cases["test_tiny.py::test_skips_on_one_gpu[0]"]
    assert c["state"] == "skipped" and c["gpus"] == {"0": "passed", "1": "skipped", "2": "passed",
                                                      "3": "passed"}, c
    assert c["message"] == "needs sm_100: GPU 1 is sm_90 (GPU 1) (GPUs 0, 2, 3: passed)", c
    assert c["skip_kind"] == "arch-lacks-feature"
    assert results(out)["verdict"] == ("PASS: 2 passed (2 skipped) on each of 4 GPUs (0, 1, 2, 3); GPU 1 "
                                       "skipped 2 case(s) another GPU ran")
    cp, out = _run(tmp_path, "-n", "2", "-k", "load or host")
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    assert results(out)["verdict"] == "PASS: 8 passed on each of 4 GPUs (0, 1, 2, 3)"


@CPU_ONLY
def test_a_harness_fault_is_no_broken_rule(tmp_path):
    """A step of the harness that fails on one GPU (an array filled with another GPU
    current) ends the case as a harness error on that GPU: no rule is named, the verdict
    is HARNESS ERROR (exit status 3), not a conformance FAIL."""
    cp, out = _run(tmp_path, "-n", "0", "-k", "load", env={"FAKE_HARNESS_GPU": "3"})
    meta = results(out)
    assert cp.returncode == model.EXIT_HARNESS, (cp.stdout + cp.stderr)[-3000:]
    c = {x["id"]: x for x in meta["cases"]}["test_tiny.py::test_load[5]"]
    assert c["state"] == "harness-error" and "rule" not in c, c
    assert c["gpus"] == {"0": "passed", "1": "passed", "2": "passed", "3": "harness-error"}
    assert c["message"].startswith(f"harness-error: [case test_load[5]] [{_label(3)}] harness: fill the "
                                   f"status words on GPU 3 failed: RuntimeError: cudaErrorInvalidValue"), c
    assert meta["verdict"].startswith(f"HARNESS ERROR: {_label(3)} 1 harness error; GPUs 0, 1, 2 passed: "
                                      f"the harness itself failed, no documented rule was judged"), meta["verdict"]
    assert meta["status"] == "HARNESS ERROR"
    junit = ET.parse(out / "junit.xml").getroot()
    tc = next(t for t in junit.iter("testcase") if t.get("name") == "test_load[5]")
    assert tc.find("failure") is None                       # the harness failed: an <error>
    assert tc.find("error").get("message").startswith("harness-error: [case test_load[5]]")
    back = model.read_junit(out / "junit.xml").cases["test_tiny.py::test_load[5]"]
    assert (back.state, back.phase) == (model.HARNESS, "call")


@CPU_ONLY
def test_a_gpu_that_cannot_be_opened_is_a_harness_error_on_it_alone(tmp_path):
    """GPU 2's context cannot be created in its isolated children (the workers open none)
    while a fresh process still sees it: each case whose driver calls run there is a
    harness error on GPU 2 (the same one, said once per case), the other GPUs pass; a case
    that makes no driver call passes there too."""
    cp, out = _run(tmp_path, "-n", "2", "-k", "load or skips", env={"FAKE_GPU_OPEN_FAILS": "2"})
    meta = results(out)
    assert cp.returncode == model.EXIT_HARNESS, (cp.stdout + cp.stderr)[-3000:]
    cases = {c["id"]: c for c in meta["cases"] if c["id"].startswith("test_tiny")}
    assert len(cases) == 8
    for cid, c in cases.items():
        if "test_skips_on_one_gpu" in cid:
            assert c["gpus"] == {"0": "passed", "1": "skipped", "2": "passed", "3": "passed"}, c
            continue
        assert c["state"] == "harness-error" and c["gpus"] == {
            "0": "passed", "1": "passed", "2": "harness-error", "3": "passed"}, c
        assert c["message"].count("harness: open GPU 2 (") == 1, c
        assert "failed: RuntimeError: cuDevicePrimaryCtxRetain(2): CUDA_ERROR_OUT_OF_MEMORY" in c["message"], c
    assert meta["verdict"].startswith(f"HARNESS ERROR: {_label(2)} 6 harness error; GPUs 0, 1, 3 passed"), \
        meta["verdict"]


KNOWN = '''
schema = 1

[[issue]]
id = "FAKE-BYTES"
pattern = "test_tiny.py::test_load[0]"
reason = "the loads of case 0 differ"
evidence = "a fake GPU's measurement"
rule = "tma-load.model"
match = "byte\\\\(s\\\\) of shared memory differ"
'''


@CPU_ONLY
@pytest.mark.parametrize("broken,state", [("all", "known-issue"), ("2", "failed")])
def test_a_known_issue_holds_only_where_every_gpu_fails_as_described(tmp_path, broken, state):
    """A known issue that fails as described on every GPU is a known issue on each; one
    that passes on some GPUs fails there (strict xfail per GPU), naming them."""
    tree = TREE.replace("if gpu.ordinal == BROKEN and i < 2:",
                        "if (BROKEN == -2 or gpu.ordinal == BROKEN) and i < 2:")
    cp, out = _run(tmp_path, "-n", "0", "-k", "load", tree=tree, known=KNOWN,
                   env={"FAKE_BROKEN_GPU": "-2" if broken == "all" else broken})
    cases = {x["id"]: x for x in results(out)["cases"]}
    c = cases["test_tiny.py::test_load[0]"]
    assert c["state"] == state, c
    if broken == "all":
        assert c["gpus"] == {str(k): "known-issue" for k in range(4)}, c
        assert cases["test_tiny.py::test_load[1]"]["state"] == "failed"      # no entry of its own
    else:
        assert c["gpus"] == {"0": "failed", "1": "failed", "2": "known-issue", "3": "failed"}, c
        assert f"[rule known-issue-no-longer-reproduces] [case case0] [{_label(0)}] passed, although " \
               f"listed as known issue FAKE-BYTES, which fails as described on GPU 2" in c["message"], c
        assert "[not known issue FAKE-BYTES" in c["message"] and cp.returncode == 1


@CPU_ONLY
def test_one_gpu_runs_as_before_and_names_its_gpu(tmp_path):
    cp, out = _run(tmp_path, "-n", "2", "-k", "load", gpus=1, env={"FAKE_BROKEN_GPU": "0"})
    meta = results(out)
    c = {x["id"]: x for x in meta["cases"]}["test_tiny.py::test_load[0]"]
    assert c["gpus"] == {"0": "failed"} and c["message"].startswith(
        f"[rule tma-load.model] [case case0] [{_label(0)}] 3 byte(s)"), c
    assert meta["verdict"] == "FAIL: 2 failed, 0 could not build (of 7)"
    tc = next(t for t in ET.parse(out / "junit.xml").getroot().iter("testcase") if t.get("name") == "test_load[3]")
    assert tc.findtext("system-out") == f"{_label(0)}: passed"


@CPU_ONLY
@pytest.mark.parametrize("args,env,why", [
    (["--gpus=4"], {}, "--gpus=4: GPU 4: CUDA sees 4 GPU(s) here"),
    (["--gpus=1,1"], {}, "--gpus=1,1: GPU 1 is named twice"),
    ([], {"TMA_GPUS": "x"}, "TMA_GPUS=x: 'x' is not a GPU ordinal"),
])
def test_a_bad_choice_of_gpus_is_one_line_before_any_case(tmp_path, args, env, why):
    cp, out = _run(tmp_path, "-n", "2", *args, env=env)
    assert cp.returncode == 4, cp.stdout + cp.stderr
    assert f"ERROR: {why}" in cp.stderr and "Traceback" not in cp.stdout + cp.stderr, cp.stderr


@CPU_ONLY
def test_the_gpus_chosen_are_the_run_s(tmp_path):
    cp, out = _run(tmp_path, "-n", "2", "--gpus=1,3", "-k", "load")
    meta = results(out)
    assert [g["ordinal"] for g in meta["gpu"]["run"]] == [1, 3]
    assert {x["id"]: x for x in meta["cases"]}["test_tiny.py::test_load[0]"]["gpus"] == \
        {"1": "passed", "3": "passed"}


@CPU_ONLY
def test_require_gpus_fails_before_any_case_runs(tmp_path):
    """--require-gpus=8 on a node of 4: the run ends at once, FAIL, no case run, reports
    written."""
    cp, out = _run(tmp_path, "-n", "2", "--require-gpus=8")
    assert cp.returncode == 1, cp.stdout + cp.stderr
    meta = results(out)
    assert [c["id"] for c in meta["cases"]] == [NODE_CASE]
    assert meta["verdict"].startswith("FAIL: [rule run.usable-gpus] [case test_usable_gpus] --require-gpus=8: "
                                      "4 usable GPU(s)"), meta["verdict"]
    assert "bringing up nodes" not in cp.stdout        # no worker was started


@CPU_ONLY
@pytest.mark.parametrize("n_gpus", [4, 8])
@pytest.mark.parametrize("sweep", ["smoke", "standard", "full"])
def test_the_two_gpu_cases_cover_every_gpu(tmp_path, n_gpus, sweep):
    """The fence suite's two-GPU cases on a node of 4 and of 8 GPUs: every GPU is a producer
    and a consumer of a map across GPUs (a ring at smoke and standard, every ordered pair
    at full), and each id names its pair."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "fakegpus.py").write_text(FAKE_GPUS)
    cp = pytest_run(REPO, "-p", "fakegpus", "--collect-only", "-q", f"--sweep={sweep}",
                    "suites/test_fence_multi_gpu.py",
                    env={"PYTHONPATH": os.pathsep.join([str(REPO), str(root)]), "FAKE_GPUS": str(n_gpus)})
    ids = [line for line in cp.stdout.splitlines() if "::test_two_gpu[" in line]
    pairs = {tuple(map(int, m.groups())) for i in ids for m in [re.search(r"-gpu(\d+)-to-gpu(\d+)-", i)]}
    assert {p for p, _ in pairs} == set(range(n_gpus)) == {c for _, c in pairs}, pairs
    want = n_gpus * (n_gpus - 1) if sweep == "full" else n_gpus
    assert len(pairs) == want and len(ids) == 6 * want, (len(pairs), len(ids))
    assert len(set(ids)) == len(ids)


def test_cuda_core_is_loaded_once_whole_whatever_the_threads_asking(monkeypatch):
    """Each GPU's thread asks for cuda.core's API at once: it is loaded by one of them
    while the others wait, and kept (a thread that imported it during another's import
    could see it half made: an H100 node skipped a GPU's cuda.core cases)."""
    import threading
    import time
    from fixtures.cuda_layer import cuda_core
    inside, most, calls = [0], [0], []

    def slow_load():
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        calls.append(1)
        inside[0] -= 1
        return ("cuda.core", "StridedMemoryView")
    monkeypatch.setattr(cuda_core, "_api", None)
    monkeypatch.setattr(cuda_core, "_load_api", slow_load)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cuda_core.cuda_core_api())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == [("cuda.core", "StridedMemoryView")] * 4 and calls == [1] and most[0] == 1


@CPU_ONLY
def test_a_fingerprint_without_the_driver_fails_the_nodes_case(tmp_path):
    """The node's case judges the run's environment.json: a probe that could not start (the
    driver and GPUs "unavailable") fails it, naming the driver and each GPU CUDA sees; the
    fake node's whole fingerprint passes it."""
    cp, out = _run(tmp_path, "-n", "2", "-k", "host_side", gpus=2, env={"FAKE_PROBE_LOST": "1"})
    node = {c["id"]: c for c in results(out)["cases"]}[NODE_CASE]
    assert node["state"] == "failed", node
    assert "the environment fingerprint (environment.json) lacks the CUDA driver version" in node["message"]
    assert f"every GPU CUDA sees here: {_label(0)} (NVIDIA H100), {_label(1)} (NVIDIA H100)" \
        in node["message"], node["message"]
    assert cp.returncode == 1, (cp.stdout + cp.stderr)[-3000:]
    cp, out = _run(tmp_path / "whole", "-n", "2", "-k", "host_side", gpus=2)
    node = {c["id"]: c for c in results(out)["cases"]}[NODE_CASE]
    assert node["state"] == "passed", node
    env = json.loads((out / "environment.json").read_text())
    assert env["driver"]["cuda_driver_version"] == 13000
    assert [g["uuid"] for g in env["gpus"]] == [_uuid(0), _uuid(1)]


TRAP_TREE = '''
    import os
    from dataclasses import dataclass

    import pytest

    from fixtures import engine


    @dataclass(frozen=True)
    class Case:
        id: str


    @pytest.fixture(scope="session")
    def batch(request, gpu):
        # what a GPU's batch of these cases holds (engine.batch_fixture's selection)
        return engine.selected_ids(request.session.items, ("case",), gpu=gpu)

    @pytest.mark.trap
    @pytest.mark.parametrize("case", [Case(str(i)) for i in range(11)], ids=lambda c: c.id)
    def test_trap(gpu, case, batch, request):
        request.node.user_properties.append(("ran", gpu.ordinal))
        # each GPU's batch holds the trap cases dealt to it, none of another GPU's (with
        # --traps-on-every-gpu: all of them)
        share = 11 if os.environ.get("FAKE_TRAPS_EVERY") else -(-11 // int(os.environ["FAKE_GPUS"]))
        assert case.id in batch and len(batch) <= share, sorted(batch)

    @pytest.mark.parametrize("i", range(3))
    def test_load(gpu, i):
        pass
'''


@CPU_ONLY
@pytest.mark.parametrize("n_gpus,workers", [(4, "8"), (8, "32")])
def test_each_trap_case_runs_once_per_node_dealt_evenly_over_its_gpus(tmp_path, n_gpus, workers):
    """A trap case runs on one GPU of the node; the run's trap cases are dealt over its
    GPUs within one case of even, whatever the number of workers; every other case runs on
    every GPU; the node's verdict and a fleet merge take the dealt cases for what they are.
    ``--traps-on-every-gpu`` runs them on every GPU. (``--traps=all``: the tree's trap
    cases are one condition, which the budget would run once.)"""
    cp, out = _run(tmp_path, "-n", workers, "--traps=all", gpus=n_gpus, tree=TRAP_TREE)
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    cases = {c["id"]: c for c in results(out)["cases"]}
    where = [list(cases[f"test_tiny.py::test_trap[{i}]"]["gpus"]) for i in range(11)]
    assert all(len(w) == 1 for w in where), where
    per_gpu = [sum(w == [str(k)] for w in where) for k in range(n_gpus)]
    assert sum(per_gpu) == 11 and max(per_gpu) - min(per_gpu) <= 1, per_gpu
    for i in range(3):
        assert set(cases[f"test_tiny.py::test_load[{i}]"]["gpus"]) == {str(k) for k in range(n_gpus)}
    assert results(out)["verdict"] == (f"PASS: 15 passed on {n_gpus} GPUs (" + ", ".join(map(str, range(n_gpus)))
                                       + "): each ran every case but the 11 trap case(s), each run on one of them")
    from reports import merge
    gpus = merge.gpus_of(model.read_results_json(out / "results.json"))
    assert merge.uneven(gpus) == "" and sum(g["once"] for g in gpus) == 11, gpus
    if n_gpus == 4:
        cp, out = _run(tmp_path, "-n", "2", "--traps=all", "--traps-on-every-gpu", gpus=n_gpus,
                       tree=TRAP_TREE, env={"FAKE_TRAPS_EVERY": "1"})
        assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
        cases = {c["id"]: c for c in results(out)["cases"]}
        assert all(set(cases[f"test_tiny.py::test_trap[{i}]"]["gpus"]) == {"0", "1", "2", "3"}
                   for i in range(11))


SERVICE_TREE = '''
    import os, pytest
    from fixtures.cuda_layer import isolation

    @pytest.mark.parametrize("i", range(4))
    def test_runner(gpu, i):
        kinds = {name: type(isolation.runner(name, gpu.ordinal)).__name__
                 for name in isolation.RUNNERS}
        assert set(kinds.values()) == {os.environ["FAKE_RUNNER_KIND"]}, kinds
        if i == 0 and gpu.ordinal == 1:      # as a runner does that gives its service up
            from fixtures.cuda_layer import gpu_service
            gpu_service.GIVEN_UP.append(("batches", 1, "planted"))
'''


@CPU_ONLY
@pytest.mark.parametrize("option,kind", [("on", "ServiceRunner"), ("off", "IsolatedRunner")])
def test_the_gpu_service_serves_every_worker_on_every_gpu_when_asked(tmp_path, option, kind):
    """``--gpu-service on`` (the default): every worker's runners of every GPU send their
    calls to that GPU's service (the lane's process); ``off``: each worker's own.
    ``--traps-one-at-a-time`` reaches every GPU's service (without one it is a usage
    error: tests/test_plugin_options.py)."""
    one = ["--traps-one-at-a-time"] if option == "on" else []    # a usage error with off
    cp, out = _run(tmp_path, "-n", "4", f"--gpu-service={option}", *one, gpus=2,
                   tree=SERVICE_TREE, env={"FAKE_RUNNER_KIND": kind})
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    lanes = results(out)["timeline"]["lane"]["gpus"]
    assert sorted(lanes) == ["0", "1"] and all(
        (lane.get("service") or {}).get("one_trap_at_a_time", False) == (option == "on")
        for lane in lanes.values()), lanes
    cases = [c for c in results(out)["cases"] if "test_runner" in c["id"]]
    assert len(cases) == 4 and all(c["gpus"] == {"0": "passed", "1": "passed"} for c in cases), cases
    worker = next(c["worker"] for c in cases if c["id"].endswith("[0]"))
    # a worker's runners that gave the service up reach results.json, named by worker
    assert results(out)["timeline"]["gpu_service_given_up"] == {worker: [["batches", 1, "planted"]]}


@CPU_ONLY
@pytest.mark.parametrize("n_gpus,workers", [(4, "8"), (8, "32")])
def test_each_gpu_has_its_service_children_capped_whatever_the_workers(tmp_path, n_gpus, workers):
    """The processes that may hold a context on a GPU are its service's children: one per
    worker for the batches, at most ``GENERAL_MAX`` (8) whatever ``-n`` (before, ``-n 32``
    gave each GPU 32), up to ``ALONE`` for the calls that run alone and one for the
    streams; the workers hold none (test_a_worker_opens_no_context_and_imports_no_cupy).
    The issue's bound of 4 a GPU is not this: 4 children cost the sweeps time
    (docs/performance.md, 2026-12-07, eighth session)."""
    from fixtures.cuda_layer.gpu_service import ALONE, GENERAL_MAX
    cp, out = _run(tmp_path, "-n", workers, gpus=n_gpus, tree=SERVICE_TREE,
                   env={"FAKE_RUNNER_KIND": "ServiceRunner"})
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    lanes = results(out)["timeline"]["lane"]["gpus"]
    assert sorted(lanes, key=int) == [str(k) for k in range(n_gpus)], lanes
    for k, lane in lanes.items():
        pids = lane["service"]["pids"]
        assert len(pids["batches"]) == min(int(workers), GENERAL_MAX), (k, pids)
        assert sum(len(v) for v in pids.values()) <= GENERAL_MAX + ALONE + 1, (k, pids)


# A worker as it is on a node (the GPU neither opened nor activated by a stub): the
# driver's context calls and an import of CuPy, wherever they happen, write a line to
# FAKE_CTX_LOG saying which call, in which process and thread.
REAL_WORKER = FAKE_GPUS.replace("placement.Gpu.activate = lambda self: self\n", "") + '''
import importlib.abc, importlib.machinery, json, sys, threading, time
from cuda.bindings import driver as _driver


def _log(what):
    with open(os.path.join(os.environ["FAKE_CTX_LOG"], f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps({"what": what, "thread": threading.current_thread().name}) + "\\n")


_driver.cuDeviceGet = lambda ordinal: (0, ordinal)
_driver.cuDevicePrimaryCtxRetain = lambda dev: (_log("cuDevicePrimaryCtxRetain"), (0, f"ctx-{dev}"))[1]
_driver.cuCtxSetCurrent = lambda ctx: (_log("cuCtxSetCurrent"), (0,))[1]


class _FakeCupy(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self) if name == "cupy" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _log("import cupy")


sys.modules.pop("cupy", None)
sys.meta_path.insert(0, _FakeCupy())
'''

ON_THE_GPU = '''
    def test_on_the_gpu(gpu):
        assert gpu.context is None and gpu.arch == "sm_90a"
'''


@CPU_ONLY
def test_a_worker_opens_no_context_and_imports_no_cupy(tmp_path):
    """At most four contexts per GPU, whatever -n: a worker of a one-GPU run opens no
    context of its own and imports no CuPy, before, during or after its cases (its
    cases' driver calls run in isolated children); its GPU fixture describes the GPU."""
    root = make_tree(tmp_path / "t", ON_THE_GPU)
    (root / "realworker.py").write_text(REAL_WORKER)
    log, out = tmp_path / "ctx", tmp_path / "out"
    log.mkdir()
    cp = pytest_run(root, "-n", "2", "-p", "realworker", f"--report-dir={out}", timeout=180,
                    env={"PYTHONPATH": os.pathsep.join([str(REPO), str(root)]), "FAKE_GPUS": "1",
                         "FAKE_CTX_LOG": str(log)})
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert [c["state"] for c in results(out)["cases"] if "test_on_the_gpu" in c["id"]] == ["passed"]
    lines = [line for p in log.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert lines == [], lines
