"""The child-process isolation: results, errors, crashes, time-outs, reuse, recycling."""
import os

import pytest

from fixtures.cuda_layer.isolation import IsolatedRunner, run_isolated


@pytest.fixture
def runner():
    r = IsolatedRunner()
    yield r
    r.stop()


def call(r, name, *args, **kw):
    kw.setdefault("device", None)
    return r.call(f"isolation_targets:{name}", *args, **kw)


def test_returns_value_despite_stray_prints(runner):
    out = call(runner, "add", 2, 3, scale=4)
    assert (out.kind, out.value) == ("returned", 20), out


def test_exception_becomes_result(runner):
    out = call(runner, "boom")
    assert out.kind == "exception" and "planted failure" in out.error
    assert "ValueError" in out.detail


def test_cuda_error_becomes_result_with_its_name(runner):
    out = call(runner, "cuda_fault")
    assert (out.kind, out.error) == ("cuda_error", "CUDA_ERROR_ILLEGAL_INSTRUCTION"), out


def test_child_is_reused_while_healthy(runner):
    a, b = call(runner, "pid"), call(runner, "pid")
    assert a.value == b.value != os.getpid()
    assert runner.started == 1


def test_poisoned_child_is_replaced(runner):
    first = call(runner, "poison")
    assert first.kind == "cuda_error" and first.poisoned, first
    assert isinstance(first.value, int), "the returned value was lost"
    second = call(runner, "pid")
    assert second.kind == "returned" and runner.started == 2


def test_crash_becomes_result_and_next_call_works(runner):
    out = call(runner, "crash")
    assert out.kind == "crashed" and "status 3" in out.error, out
    assert call(runner, "add", 1, 1).value == 2


def test_timeout_kills_the_child(runner):
    out = call(runner, "hang", timeout=1.0)
    assert out.kind == "timeout" and out.seconds < 10, out
    assert call(runner, "add", 1, 2).value == 3


def test_a_gpu_the_child_cannot_see_is_named(runner):
    """A GPU gone for a fresh process (fallen off, or hung after a fault; here: no driver at
    all) is the outcome no_gpu, with the probe's reason, not an IndexError in the harness;
    the next call starts a fresh child."""
    from fixtures.cuda_layer import cuda_env
    state = cuda_env.probe()
    if state.available:
        pytest.skip("this machine has a GPU: the call would run")
    out = call(runner, "add", 1, 1, device=0)
    assert out.kind == "no_gpu" and out.poisoned, out
    assert out.error.startswith("a fresh process sees no GPU 0: ") and state.reason in out.error, out
    assert call(runner, "add", 1, 2).value == 3 and runner.started == 2


def test_target_must_name_a_function():
    with pytest.raises(ValueError, match="module:function"):
        run_isolated("isolation_targets.add")


# run_contained: a fault names its own case only
def contained(runner, keys, **faults):
    from fixtures.cuda_layer.isolation import run_contained
    return run_contained(keys, lambda ids: call(runner, "batch", ids, timeout=3.0, **faults))


KEYS = [f"c{i}" for i in range(8)]


@pytest.mark.parametrize("kind,words", [("trap", "it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION"),
                                        ("hang", "it hung"), ("crash", "the isolated child died")])
def test_a_fault_in_a_batch_fails_its_own_case_only(runner, kind, words):
    results, why = contained(runner, KEYS, **{kind: ["c3"]})
    assert list(why) == ["c3"] and words in why["c3"], why
    assert results == {k: f"ran {k}" for k in KEYS if k != "c3"}


def test_two_faults_in_a_batch(runner):
    results, why = contained(runner, KEYS, trap=["c1", "c6"])
    assert sorted(why) == ["c1", "c6"] and set(results) == set(KEYS) - {"c1", "c6"}


def test_a_fault_of_the_batch_alone_fails_all_of_it_and_says_so(runner):
    results, why = contained(runner, KEYS, together=["c2", "c5"])
    assert not results and set(why) == set(KEYS)
    assert "no case faults alone" in why["c0"]


def test_faults_are_bounded(runner):
    from fixtures.cuda_layer.isolation import run_contained
    results, why = run_contained(KEYS, lambda ids: call(runner, "batch", ids, trap=KEYS[:4]),
                                 max_faults=2)
    assert set(why) == set(KEYS) and not results
    assert "not run: 2 cases of its batch faulted already (last: c1)" in why["c2"]
