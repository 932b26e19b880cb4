"""A CUDA error of the harness's own calls is the harness's, without a marker to forget
(fixtures/cuda_layer/faults.py): only the operation under test (its launch and its wait,
``under_test``) or a sticky error (a kernel's fault, wherever it surfaced) is the case's.

Each batch path a reproducer records (fixtures/repro: the engine's loads, stores,
reductions, prefetches and multicasts, device encoding, a fence scenario) runs here over
the recording stand-ins of CuPy; every CuPy call it makes
(allocation, pool copy, fill, row copy, readback) is made to fail in turn with CuPy's
``cudaErrorMemoryAllocation``, and what the isolated child answers for it must be the
harness's exception naming that very call, never a CUDA error of the case (which
``fixtures.engine.batches.run_contained`` reads as a trap and the case's rule). The same
failure inside the launch must stay the operation's. A nested run shows the verdict."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import repro
from fixtures.cuda_layer import faults
from fixtures.cuda_layer.faults import HarnessError, under_test
from fixtures.cuda_layer.isolated_child import _reply_of
from fixtures.repro import record

from nested_run import first_case_ids, make_tree, pytest_run, results

ROOT = Path(__file__).resolve().parents[1]
ALLOCATION = 2          # cudaErrorMemoryAllocation: what a full GPU answers an allocation
ILLEGAL_ADDRESS = 700   # cudaErrorIllegalAddress: sticky, only a faulting kernel raises it

# One smoke case of each batch path a reproducer records (its test's first case): every
# harness CuPy call of the path's code is injected into (host encoding makes none; the
# library paths need their libraries: the child and the verdict they share are tested
# below, whatever the path).
PATHS = (
    "suites/test_tma_load.py::test_tma_load", "suites/test_tma_load.py::test_tma_load_trap",
    "suites/test_im2col_load.py::test_im2col_load", "suites/test_multicast.py::test_multicast",
    "suites/test_tma_prefetch.py::test_tma_prefetch", "suites/test_tma_store.py::test_tma_store",
    "suites/test_tma_store.py::test_tma_store_im2col", "suites/test_tma_reduce.py::test_tma_reduce",
    "suites/test_device_encode.py::test_replace_address_matches_driver",
    "suites/test_fence_scopes.py::test_same_block",
)

# The stand-ins' CuPy calls, each replaced by one that counts it and can fail: defined
# in code of a file outside the checkout (as CuPy's own calls are), so that the step the
# harness names is the harness's line that made the call, not this test's.
_INJECTOR = '''
import sys
def wrap(real, name, plan):
    def call(*args, **kwargs):
        caller = sys._getframe(1)
        plan.calls.append((name, caller.f_code.co_filename, caller.f_lineno))
        if len(plan.calls) - 1 == plan.fail_at:
            raise plan.error()
        return real(*args, **kwargs)
    return call
'''
_ns: dict = {}
exec(compile(_INJECTOR, "/site-packages/cupy/_stand_in.py", "exec"), _ns)   # noqa: S102


class Plan:
    def __init__(self, fail_at: int | None = None, code: int = ALLOCATION):
        from cupy_backends.cuda.api.runtime import CUDARuntimeError
        self.calls: list[tuple[str, str, int]] = []
        self.fail_at = fail_at
        self.error = lambda: CUDARuntimeError(code)


def _injected(monkeypatch, plan: Plan) -> None:
    for name in ("asarray", "ascontiguousarray", "full", "zeros"):
        monkeypatch.setattr(record.FakeCupy, name,
                            staticmethod(_ns["wrap"](getattr(record.FakeCupy, name), f"cupy.{name}", plan)))
    for name in ("get", "__getitem__", "__setitem__"):
        monkeypatch.setattr(record.FakeArray, name,
                            _ns["wrap"](getattr(record.FakeArray, name), f"array.{name}", plan))
    launch = record.FakeFunction.launch

    def marked_launch(self, *args, **kwargs):     # what kernel_launch.Kernel.launch marks
        with under_test(f"launch {self.name}"):
            if plan.fail_at == "launch":
                raise plan.error()
            return launch(self, *args, **kwargs)
    monkeypatch.setattr(record.FakeFunction, "launch", marked_launch)


@pytest.fixture(scope="module")
def found() -> dict:
    """{path: the suite's case} (the first smoke case of each test, collected in this process)."""
    return {k: repro.find_case(cid, "smoke") for k, cid in first_case_ids(PATHS, "smoke").items()}


def _fail(found_case, monkeypatch, plan: Plan) -> dict:
    """The isolated child's reply for the path's recording under ``plan`` (what
    ``_handle`` answers for the exception the target raised), or None if it returned."""
    _injected(monkeypatch, plan)
    try:
        repro.program(found_case, sm=90)
    except Exception as exc:  # the path's fault, as the child meets it
        return {"reply": _reply_of(exc), "exc": exc}
    finally:
        monkeypatch.undo()
    return None


@pytest.mark.parametrize("path", PATHS)
def test_every_cuda_call_of_the_harness_fails_as_the_harness(path, found, monkeypatch):
    plan = Plan()
    _injected(monkeypatch, plan)
    repro.program(found[path], sm=90)
    monkeypatch.undo()
    steps = list(plan.calls)
    assert steps, f"{path}: the recording made no CuPy call: nothing was injected"
    for k, (name, file, line) in enumerate(steps):
        got = _fail(found[path], monkeypatch, Plan(fail_at=k))
        assert got is not None, f"{path}: call {k} ({name} at {file}:{line}) failed, the path returned"
        reply, exc = got["reply"], got["exc"]
        where = f"{Path(file).resolve().relative_to(ROOT).as_posix()}:{line}"
        assert reply["kind"] == "exception", (
            f"{path}: {name} at {where} failed with cudaErrorMemoryAllocation and the child "
            f"answered {reply['kind']} {reply['error']!r}: a harness call read as the case's")
        assert reply["error"].startswith("HarnessError: harness: "), reply["error"]
        assert "cudaErrorMemoryAllocation" in reply["error"], reply["error"]
        if not isinstance(exc, HarnessError):        # a step that names itself says its words
            assert where in reply["error"], f"{path}: the step named is not {where}: {reply['error']}"
        assert faults.is_harness_error(exc), exc


@pytest.mark.parametrize("path", ["suites/test_tma_load.py::test_tma_load",
                                  "suites/test_tma_store.py::test_tma_store",
                                  "suites/test_fence_scopes.py::test_same_block"])
def test_the_operation_keeps_its_own_errors(path, found, monkeypatch):
    """The same error raised by the launch is the case's (a refused launch); a sticky
    error is the case's wherever it surfaced (a trap met at the readback): the check can
    tell both ways."""
    got = _fail(found[path], monkeypatch, Plan(fail_at="launch"))
    assert got["reply"]["kind"] == "cuda_error" and got["reply"]["error"] == "cudaErrorMemoryAllocation"
    assert not faults.is_harness_error(got["exc"])
    plan = Plan()
    _injected(monkeypatch, plan)
    repro.program(found[path], sm=90)
    monkeypatch.undo()
    last = len(plan.calls) - 1             # the last call: a readback after the launch
    got = _fail(found[path], monkeypatch, Plan(fail_at=last, code=ILLEGAL_ADDRESS))
    assert got["reply"]["kind"] == "cuda_error" and got["reply"]["error"] == "cudaErrorIllegalAddress"
    assert not faults.is_harness_error(got["exc"])


@pytest.mark.parametrize("fork", [False, pytest.param(True, marks=pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"))],
    ids=["spawned", "forked"])
def test_a_real_child_answers_a_harness_cuda_error_as_the_harness(fork):
    """No stand-in for the child: a real isolated child, a new interpreter (every batch's)
    or forked (the trap lane's jobs'), whose target fails a CuPy call outside the
    operation answers ``exception`` naming the step; the same error under test,
    ``cuda_error``."""
    from fixtures.cuda_layer.isolation import IsolatedRunner
    r = IsolatedRunner(fork=fork)
    try:
        out = r.call("isolation_targets:cupy_error", False, device=None, timeout=60)
        assert out.kind == "exception", out
        assert out.error.startswith("HarnessError: harness: tests/isolation_targets.py:"), out.error
        assert "cudaErrorMemoryAllocation" in out.error
        with pytest.raises(HarnessError, match="the isolated call raised HarnessError: harness: "):
            out.raise_if_harness()
        out = r.call("isolation_targets:cupy_error", True, device=None, timeout=60)
        assert out.kind == "cuda_error" and out.error == "cudaErrorMemoryAllocation", out
        out.raise_if_harness()         # the operation's: nothing raised
    finally:
        r.stop()


def test_a_case_whose_harness_call_fails_is_a_harness_error_in_the_verdict(tmp_path):
    """End to end: a case whose engine path meets cudaErrorMemoryAllocation at the pool's
    copy is ``harness-error`` naming the step, the verdict HARNESS ERROR (exit 3), and no
    rule is named; the same error at the launch fails the case's rule."""
    tree = make_tree(tmp_path / "t", f'''
        import sys
        import pytest
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from fixtures.engine.operation import run_batch
        from fixtures.repro import record
        from fixtures.tma_box import tiled_cases
        from fixtures.tma_load.operations import TILED
        import test_harness_by_default as t

        CASE = next(c for c in tiled_cases.generate("smoke") if c.expect == "data")

        @pytest.mark.rule("tma-load.model")
        @pytest.mark.parametrize("where", ["pool", "launch"])
        def test_case(where, monkeypatch):
            t._injected(monkeypatch, t.Plan(fail_at=0 if where == "pool" else "launch"))
            with record.recording():
                run_batch(record.FakeModule(TILED.source), TILED, [CASE])
    ''')
    p = pytest_run(tree, "-q", "-p", "no:randomly", f"--report-dir={tmp_path / 'r'}")
    data = results(tmp_path / "r")
    by = {c["id"].rsplit("[", 1)[1].rstrip("]"): c for c in data["cases"] if "test_case" in c["id"]}
    assert by["pool"]["state"] == "harness-error", by["pool"]
    assert "harness: fixtures/engine/operation.py:" in by["pool"]["message"], by["pool"]["message"]
    assert "[rule" not in by["pool"]["message"]
    assert by["launch"]["state"] == "failed" and "[rule tma-load.model]" in by["launch"]["message"]
    assert "verdict: FAIL" in p.stdout, p.stdout[-2000:]
    # the harness's fault alone: HARNESS ERROR
    p = pytest_run(tree, "-q", "-p", "no:randomly", "-k", "pool", f"--report-dir={tmp_path / 'r2'}")
    assert p.returncode == 3 and "verdict: HARNESS ERROR" in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("name,sticky", [
    ("CUDA_ERROR_ILLEGAL_INSTRUCTION", True), ("cudaErrorIllegalAddress", True),
    ("CUDA_ERROR_MISALIGNED_ADDRESS", True), ("cudaErrorLaunchFailure", True),
    ("CUDA_ERROR_LAUNCH_FAILED", True), ("cudaErrorAssert", True),
    ("cudaErrorMemoryAllocation", False), ("CUDA_ERROR_OUT_OF_MEMORY", False),
    ("CUDA_ERROR_INVALID_VALUE", False), ("cudaErrorInvalidDevice", False)])
def test_sticky_errors_by_either_api_s_name(name, sticky):
    """The driver's and the runtime's names of one error are told alike."""
    assert faults.is_sticky(name) is sticky
