"""Faults on a GPU node: the verdict when a GPU test goes wrong (these self-tests need a
GPU with tensor maps; without one they skip with the reason).

A worker killed inside a GPU test, an unexpected trap in a TMA-load batch, a load
that hangs: each fails its own case only, names what happened, and the run's
reports are complete."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.engine import Batches
from fixtures.engine.units import bucket
from fixtures.tensormap.enums import Interleave
from fixtures.tma_box import tiled as tma_model, tiled_cases as tma_cases, tiled_validity

from reports.model import NODE_CASE

from isolation_targets import TxOverride
from nested_run import make_tree, pytest_run, results, states


def one_batch(n: int) -> list:
    """``n`` data cases of the standard sweep that share a batch (one rank, one bucket,
    no interleave)."""
    cases = [c for c in tma_cases.generate("standard")
             if c.expect == "data" and c.rank == 2 and c.load.interleave == Interleave.NONE]
    b = bucket(cases[0].id)
    mine = [c for c in cases if bucket(c.id) == b][:n]
    assert len(mine) == n, f"only {len(mine)} cases in bucket {b}"
    return mine


def in_bucket(case, load, tag: str):
    """A case of ``load`` (over ``case``'s tensor) whose id shares ``case``'s bucket (so
    its batch); the model says whether it is data or a trap."""
    for k in range(10_000):
        cid = f"{case.id}-{tag}{k}"
        if bucket(cid) == bucket(case.id):
            return replace(case, id=cid, load=load,
                           expect="trap" if tiled_validity.trap_reason(load) else "data")
    raise AssertionError("no id in the bucket")


def assert_matches_model(batches, case):
    run = batches.result(case)
    assert run.status == 0 and run.encode_status == "CUDA_SUCCESS", run
    want = tma_model.load(case.load, tma_cases.global_bytes(case), 0)
    assert run.image == want.data, f"{case.id}: {np.count_nonzero(np.frombuffer(run.image, np.uint8) != np.frombuffer(want.data, np.uint8))} bytes differ"


def test_an_unexpected_trap_in_a_load_batch_fails_its_own_case_only(gpu, kernels):
    """A case the model calls data, made to trap (its inner coordinate one element off the
    16-byte alignment), in the middle of a batch: it fails naming the trap; every other
    case of the batch still loads the model's tile; the worker's own context is intact."""
    cases = one_batch(12)
    load = cases[5].load
    trap = in_bucket(cases[5], replace(load, coords=(load.coords[0] + 1,) + load.coords[1:]),
                     "unaligned")
    assert trap.expect == "trap", "the made case must be a trap by the model's rule"
    batch = cases[:6] + [trap] + cases[6:]
    b = Batches(gpu, kernels, batch, tl.TILED)
    assert len(b.members) == 1, "all in one batch"
    with pytest.raises(AssertionError, match="it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION") as info:
        b.result(trap)
    assert trap.id in str(info.value) and "run alone in the isolated child" in str(info.value)
    for c in cases:
        assert_matches_model(b, c)
    gpu.synchronize()       # the trap stayed in the child


def test_a_hanging_load_fails_its_own_case_naming_the_timeout(gpu, kernels):
    """A load whose mbarrier waits for bytes that never come, with no bound on the wait
    (so the kernel really hangs): the isolated call times out, the hanging case fails
    naming the timeout, and the others of its batch load the model's tile."""
    cases = one_batch(3)
    hang = cases[1]
    # (1 << 20) - 1: the largest count an mbarrier takes (one more traps); no load of
    # these cases delivers that many bytes, and the wait's bound is ~146 years
    op = replace(tl.TILED, call_timeout=15.0, tx_override=TxOverride({hang.id: (1 << 20) - 1}),
                 timeout_ns=1 << 62)
    b = Batches(gpu, kernels, cases, op)
    with pytest.raises(AssertionError, match="it hung: no answer from fixtures.engine.batches:run_cases "
                                             "within 15 s"):
        b.result(hang)
    for c in (cases[0], cases[2]):
        assert_matches_model(b, c)


KILLED = '''
    import os, pytest

    @pytest.mark.parametrize("case", [f"c{i}" for i in range(40)])
    def test_on_the_gpu(case, gpu):
        import cupy
        gpu.activate()
        assert int(cupy.arange(100).sum()) == 4950
        if case == "c17":
            os._exit(9)
'''


def test_a_worker_killed_in_a_gpu_test(gpu, tmp_path):
    """A worker that dies inside a GPU test (its CUDA context live): the run ends with
    complete reports and exit status 1; the case names the worker and its exit status."""
    out = tmp_path / "out"
    cp = pytest_run(make_tree(tmp_path / "t", KILLED), "-n", "2", f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}",
                    timeout=240)
    assert cp.returncode == 1, cp.stdout[-3000:] + cp.stderr[-2000:]
    got = states(out)
    assert got.pop(NODE_CASE) == "passed"
    crashed = "test_tiny.py::test_on_the_gpu[c17]"
    assert got.pop(crashed) == "failed" and len(got) == 39 and set(got.values()) == {"passed"}, got
    c = {c["id"]: c for c in results(out)["cases"]}[crashed]
    assert "worker gw" in c["message"] and "exit status 9" in c["message"], c
    assert results(out)["verdict"].startswith("FAIL")
    for name in ("junit.xml", "matrix.md", "matrix.html", "environment.json"):
        assert (out / name).is_file(), name
