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


# run_contained with a target that knows which case faulted (isolation.Stopped)
def stopped_calls(runner, keys, max_faults=8, **options):
    from fixtures.cuda_layer.isolation import run_contained
    calls = []

    def one(ids):
        calls.append(list(ids))
        return call(runner, "stopping", ids, timeout=10.0, **options)
    return run_contained(keys, one, max_faults=max_faults), calls


@pytest.mark.parametrize("poisoned", [True, False])
def test_a_stopped_case_gets_its_why_and_the_rest_runs_on(runner, poisoned):
    """c2 and c5 stop their calls: the results before each stop are kept, the stopped
    case gets the target's why, and the rest runs on in the next call (a fresh child
    after a poisoned context), with no bisection: three calls in all."""
    (results, why), calls = stopped_calls(runner, KEYS, stop=["c2", "c5"], poisoned=poisoned)
    assert calls == [KEYS, KEYS[3:], KEYS[6:]]
    assert results == {k: f"ran {k}" for k in KEYS if k not in ("c2", "c5")}
    assert sorted(why) == ["c2", "c5"]
    assert why["c2"].startswith("c2 trapped in pid ") and why["c5"].startswith("c5 trapped in pid ")
    pid = {k: why[k].rsplit(" ", 1)[1] for k in why}
    if poisoned:        # each stop poisoned its child: c5 stopped in the second one
        assert pid["c2"] != pid["c5"] and runner.started == 3
    else:
        assert pid["c2"] == pid["c5"] and runner.started == 1


def test_stopped_faults_are_bounded(runner):
    """max_faults=2: after the second stop (c3) the rest of the batch is not run, each
    case naming the last one that faulted."""
    (results, why), calls = stopped_calls(runner, KEYS, max_faults=2, stop=["c1", "c3", "c5"])
    assert calls == [KEYS, KEYS[2:]]
    assert results == {"c0": "ran c0", "c2": "ran c2"}
    assert sorted(why) == ["c1", "c3", "c4", "c5", "c6", "c7"]
    assert why["c3"].startswith("c3 trapped in pid ")
    for k in ("c4", "c5", "c6", "c7"):
        assert why[k] == "not run: 2 cases of its batch faulted already (last: c3)"


def test_a_stop_at_the_last_case_ends_the_batch(runner):
    (results, why), calls = stopped_calls(runner, KEYS, stop=["c7"], poisoned=False)
    assert calls == [KEYS] and list(why) == ["c7"]
    assert results == {k: f"ran {k}" for k in KEYS[:7]}


# the spare child: ready when a trap poisons the child
def test_a_spare_takes_over_after_a_poisoned_context():
    """spare="eager": a second child starts beside the first; after a poisoned reply the
    next call runs in it (no process start on the caller's path), and a new spare
    starts beside it."""
    r = IsolatedRunner(spare="eager")
    try:
        assert call(r, "pid").kind == "returned" and r.started == 2
        spare = r._spare[0].pid
        assert call(r, "poison").poisoned
        after = call(r, "pid")
        assert after.value == spare and r.started == 3 and r._spare[0].pid not in (spare, after.value)
    finally:
        r.stop()
    assert r._spare is None and r.proc is None


def test_a_spare_after_the_first_fault():
    """spare="after-fault": no spare until the first poisoned reply; from then on one."""
    r = IsolatedRunner(spare="after-fault")
    try:
        call(r, "pid")
        assert r.started == 1 and r._spare is None
        call(r, "poison")
        assert r.started == 3 and r._spare is not None      # a fresh child, and a spare
        spare = r._spare[0].pid
        call(r, "poison")
        assert call(r, "pid").value == spare and r.started == 4
    finally:
        r.stop()


def test_a_dead_spare_is_not_used():
    r = IsolatedRunner(spare="eager")
    try:
        call(r, "pid")
        r._spare[0].kill()
        r._spare[0].wait()
        assert call(r, "poison").poisoned
        out = call(r, "pid")
        assert out.kind == "returned" and r.started == 4    # child, dead spare, fresh, new spare
    finally:
        r.stop()


def test_a_timeout_keeps_the_spare():
    r = IsolatedRunner(spare="eager")
    try:
        call(r, "pid")
        spare = r._spare[0].pid
        assert call(r, "hang", timeout=1.0).kind == "timeout"
        assert call(r, "pid").value == spare
    finally:
        r.stop()


def test_a_child_that_cannot_open_its_gpu_is_replaced_before_the_call():
    """A spare opens the GPU of the last call; one that cannot (here: no driver) is
    dropped at promotion and the call runs in a fresh child, which names the fault
    itself when the call needs that GPU."""
    from fixtures.cuda_layer import cuda_env
    if cuda_env.probe().available:
        pytest.skip("this machine has a GPU: the spare would open it")
    r = IsolatedRunner(spare="eager")
    try:
        r.prestart(device=0)                 # warms with GPU 0, which is not there
        assert call(r, "add", 1, 2).value == 3
    finally:
        r.stop()
