"""The child-process isolation: results, errors, crashes, time-outs, reuse, recycling."""
import os

import pytest

from fixtures.cuda_layer.isolation import IsolatedRunner, hang_site, run_isolated


# Forking from a pytest process (threads of its own) is what Python 3.12 warns of; the
# child touches none of their locks (the lane forks from its main thread likewise).
@pytest.fixture(params=[False, pytest.param(True, marks=pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"))],
    ids=["spawned", "forked"])
def runner(request):
    """A runner whose children are new interpreters, or forked from this process (the
    trap lane's: fixtures/cuda_layer/trap_lane.py); each behaves the same."""
    r = IsolatedRunner(fork=request.param)
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
    # the bound applied: the call did not last the hang's 60 s (half of it, so that a
    # loaded machine's seconds never decide; the outcome's kind says the rest)
    assert out.kind == "timeout" and out.seconds < 30, out
    assert call(runner, "add", 1, 2).value == 3


def test_a_timeout_says_where_the_child_hung(runner):
    """Before it is killed, a child whose call did not answer writes every thread's Python
    stack (isolated_child.STACKS_SIGNAL): the timeout's detail names the frame it hung in."""
    out = call(runner, "hang", timeout=1.0)
    assert out.kind == "timeout", out
    assert "most recent call first" in out.detail and 'isolation_targets.py", line' in out.detail, out.detail
    assert " in hang" in out.detail, out.detail
    site = hang_site(out.detail)
    assert site.startswith("isolation_targets.py:") and site.endswith(" in hang"), site
    assert hang_site("") == "" and hang_site("no stacks here") == ""


def test_the_hang_site_is_the_calls_thread():
    """Of a child's threads, the one that runs its calls (in child_main) names the site,
    wherever its block stands in the dump and whichever thread took the signal."""
    dump = ('Current thread 0x00007f01 (most recent call first):\n'
            '  File "/x/jax/pool.py", line 9 in _worker\n'
            '  File "/usr/lib/threading.py", line 1 in run\n\n'
            'Thread 0x00007f02 (most recent call first):\n'
            '  File "/x/fixtures/engine/batches.py", line 42 in run_batch\n'
            '  File "/x/fixtures/cuda_layer/isolated_child.py", line 221 in child_main\n')
    assert hang_site(dump) == "batches.py:42 in run_batch"
    assert hang_site(dump.split("\n\n")[0]) == "pool.py:9 in _worker"     # no call thread


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
    from fixtures.engine.batches import run_contained
    return run_contained(keys, lambda ids: call(runner, "batch", ids, timeout=3.0, **faults))


KEYS = [f"c{i}" for i in range(8)]


@pytest.mark.parametrize("kind,words", [("trap", "it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION"),
                                        ("hang", "(it was in isolation_targets.py:"),
                                        ("crash", "the isolated child died")])
def test_a_fault_in_a_batch_fails_its_own_case_only(runner, kind, words):
    results, why = contained(runner, KEYS, **{kind: ["c3"]})
    assert list(why) == ["c3"] and words in why["c3"], why
    assert results == {k: f"ran {k}" for k in KEYS if k != "c3"}


def test_two_faults_in_a_batch(runner):
    results, why = contained(runner, KEYS, trap=["c1", "c6"])
    assert sorted(why) == ["c1", "c6"] and set(results) == set(KEYS) - {"c1", "c6"}


def test_a_fault_of_the_batch_alone_fails_all_of_it_and_says_so(runner):
    """No case faults alone and the batch faults again when run whole: every case fails,
    saying so; none is noted as judged on a second run."""
    from fixtures.engine import batches
    batches.RAN_AGAIN.clear()
    results, why = contained(runner, KEYS, together=["c2", "c5"], killed=True)
    assert not results and set(why) == set(KEYS)
    assert "no case faults alone" in why["c0"], why["c0"]
    assert "and again when run whole (it trapped: CUDA_ERROR_LAUNCH_FAILED" in why["c0"], why["c0"]
    assert not batches.RAN_AGAIN


def test_a_batch_that_faults_once_from_outside_is_judged_on_its_second_run(runner, tmp_path):
    """The batch traps the first time it runs whole (as a context killed by another
    process's trap recovery), no case faults alone, and it runs whole again: its cases
    take that run's results, each noted in RAN_AGAIN with the first fault."""
    from fixtures.engine import batches
    batches.RAN_AGAIN.clear()
    try:
        results, why = contained(runner, KEYS, once=str(tmp_path / "faulted"), killed=True)
        assert not why and results == {k: f"ran {k}" for k in KEYS}
        assert set(batches.RAN_AGAIN) == set(KEYS)
        assert batches.RAN_AGAIN["c0"].startswith("its batch of 8 cases faulted (it trapped: "
                                                  "CUDA_ERROR_LAUNCH_FAILED")
        assert batches.RAN_AGAIN["c0"].endswith("with no case at fault alone, then ran whole again: "
                                                "judged on that run")
    finally:
        batches.RAN_AGAIN.clear()


def test_faults_are_bounded(runner):
    from fixtures.engine.batches import run_contained
    results, why = run_contained(KEYS, lambda ids: call(runner, "batch", ids, trap=KEYS[:4]),
                                 max_faults=2)
    assert set(why) == set(KEYS) and not results
    assert "not run: 2 cases of its batch faulted already (last: c1)" in why["c2"]


# run_contained with a target that knows which case faulted (isolation.Stopped)
def stopped_calls(runner, keys, max_faults=8, **options):
    from fixtures.engine.batches import run_contained
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


# the next child: started, and warmed, as soon as a reply says the context is poisoned
def test_the_next_child_starts_warm_right_after_a_poisoned_reply(runner):
    """After a poisoned reply the next child is started at once and asked to open the
    GPU and to run ``warm_call``; the next call reads those replies first, then runs in
    it (no second start)."""
    runner.warm_call = ("isolation_targets:add", (1, 2), {})
    assert runner.reaping is None
    assert call(runner, "poison").poisoned
    assert runner.started == 2 and runner._warming == 2 and runner.proc is not None
    # the poisoned child is reaped aside, by a thread the caller can wait for
    # (the GPU service's --traps-one-at-a-time does)
    runner.reaping.join(30)
    assert not runner.reaping.is_alive()
    pid = runner.proc.pid
    out = call(runner, "pid")
    assert out.value == pid and runner.started == 2 and runner._warming == 0


def test_a_child_that_cannot_warm_up_is_replaced_before_the_call(runner):
    """A child whose warm-up fails (here: ``warm_call`` raises) is dropped for a fresh
    one before the call, which runs there."""
    runner.warm_call = ("isolation_targets:boom", (), {})
    call(runner, "poison")
    assert call(runner, "add", 1, 2).value == 3 and runner.started == 3


def test_a_child_that_cannot_open_its_gpu_is_replaced_before_the_call(runner):
    """A child started ahead opens the GPU it is given; one that cannot (here: no
    driver) is dropped before the call, which runs in a fresh child and names the fault
    itself when the call needs that GPU."""
    from fixtures.cuda_layer import cuda_env
    if cuda_env.probe().available:
        pytest.skip("this machine has a GPU: the child would open it")
    runner.prestart(device=0)               # warms with GPU 0, which is not there
    assert call(runner, "add", 1, 2).value == 3


def test_the_runners_are_three_per_gpu():
    from fixtures.cuda_layer.isolation import runner as named
    assert named("batches") is named() and named("alone") is not named()
    assert named("streams") not in (named(), named("alone"))
    assert named("batches", 1) is named(device=1) and named("batches", 1) is not named("batches", 0)
    assert named("alone", 2) not in (named("alone", 1), named("batches", 2))
    with pytest.raises(ValueError, match="one of"):
        named("spare")


@pytest.mark.parametrize("user", [None, "4"], ids=["unset", "user-4"])
def test_children_have_one_hardware_queue_but_the_streams_one(monkeypatch, user):
    """The worker (cuda_env.one_queue_here), its batches' and its traps' children run
    with CUDA_DEVICE_MAX_CONNECTIONS=1 (one kernel on one stream at a time: they open
    faster and trap cheaper); the child of the targets that run kernels on several
    streams at once has the user's setting, whatever the worker's."""
    from fixtures.cuda_layer import cuda_env, isolation
    monkeypatch.setattr(cuda_env, "_user_connections", user)       # what one_queue_here kept
    monkeypatch.setenv(cuda_env.CONNECTIONS, "1")                    # and set
    monkeypatch.setattr(isolation, "_runners", {})
    try:
        def seen(**kw):
            out = run_isolated("isolation_targets:environ", cuda_env.CONNECTIONS, device=None, **kw)
            assert out.kind == "returned", out
            return out.value
        assert seen() == "1" and seen(alone=True) == "1"
        assert seen(streams=True) == user
        assert os.environ.get(cuda_env.CONNECTIONS) == "1"      # the worker's own: untouched
    finally:
        for r in isolation._runners.values():
            r.stop()


@pytest.mark.parametrize("user", [None, "4"], ids=["unset", "user-4"])
def test_one_queue_here_keeps_the_users_value(monkeypatch, user):
    """A process that runs cases sets one queue for itself before CUDA initializes in it,
    keeping the user's value for the streams child and environment.json; where CUDA is
    initialized already it changes nothing (the contexts would not have that setting)."""
    from fixtures.cuda_layer import cuda_env
    monkeypatch.setattr(cuda_env, "_user_connections", cuda_env._UNSET)
    monkeypatch.setenv(cuda_env.CONNECTIONS, "?")     # monkeypatch restores what was there
    if user is None:
        monkeypatch.delenv(cuda_env.CONNECTIONS, raising=False)
    else:
        monkeypatch.setenv(cuda_env.CONNECTIONS, user)
    assert cuda_env.has_user_queues() and cuda_env.user_connections() == user
    monkeypatch.setattr(cuda_env, "_cuda_initialized", False)
    assert cuda_env.one_queue_here()
    assert os.environ[cuda_env.CONNECTIONS] == "1" and cuda_env.user_connections() == user
    assert cuda_env.has_user_queues() == (user == "1")
    assert cuda_env.user_environment({"A": "b", cuda_env.CONNECTIONS: "1"}) == (
        {"A": "b"} if user is None else {"A": "b", cuda_env.CONNECTIONS: user})
    assert cuda_env.one_queue_here() and cuda_env.user_connections() == user    # twice: still the user's
    assert cuda_env.connections_record() == {"user": user, "workers": "1", "isolated_children": "1",
                                             "streams_child": user}
    monkeypatch.setattr(cuda_env, "_user_connections", cuda_env._UNSET)
    monkeypatch.setenv(cuda_env.CONNECTIONS, "8")
    monkeypatch.setattr(cuda_env, "_cuda_initialized", True)
    assert not cuda_env.one_queue_here() and os.environ[cuda_env.CONNECTIONS] == "8"


def test_one_queue_leaves_the_environment_it_is_given_alone(monkeypatch):
    from fixtures.cuda_layer import cuda_env
    monkeypatch.setenv(cuda_env.CONNECTIONS, "8")
    given = {"A": "b"}
    assert cuda_env.one_queue(given) == {"A": "b", cuda_env.CONNECTIONS: "1"} and given == {"A": "b"}
    assert cuda_env.one_queue()[cuda_env.CONNECTIONS] == "1" and os.environ[cuda_env.CONNECTIONS] == "8"


def test_a_context_check_that_raises_is_unknown_not_healthy(monkeypatch):
    """The child's check of its context after a call: no driver is nothing to poison; a
    check that raises anything else leaves the context's state unknown, so the child is
    replaced and the reply kept as it is (it read as a healthy context before, and the
    child was kept)."""
    import fixtures.cuda_layer.isolated_child as iso
    from cuda.bindings import driver

    class DynamicLibNotFoundError(RuntimeError):     # cuda.pathfinder's, on a machine without libcuda
        pass

    def raising(exc):
        def f():
            raise exc
        return f

    monkeypatch.setattr(driver, "cuCtxGetCurrent", raising(DynamicLibNotFoundError("no libcuda")))
    assert iso._context_healthy()[0] is True
    monkeypatch.setattr(driver, "cuCtxGetCurrent", raising(RuntimeError("bindings broke")))
    assert iso._context_healthy() == (None, "RuntimeError: bindings broke")
    reply = iso._handle("isolation_targets:add", (2, 3), {}, None, {})
    assert reply["kind"] == "returned" and reply["value"] == 5 and reply["poisoned"] is True
    assert "could not be checked after the call (RuntimeError: bindings broke): the child was replaced" \
        in reply["detail"]


def test_a_case_judged_on_a_second_run_keeps_the_note_in_results_json():
    """CaseResult.ran_again goes into results.json (an index into 'messages') and comes
    back; a bad index is the file's fault, named."""
    from reports import model
    cases = {"a": model.CaseResult("a", model.PASSED, ran_again="its batch ... judged on that run"),
             "b": model.CaseResult("b", model.PASSED)}
    data = model.results_data({"schema": model.RESULTS_SCHEMA}, cases.values())
    assert {c.id: c for c in model.cases_of(data)} == cases
    bad = dict(data, cases=[dict(data["cases"][0], ran_again=-1)])
    with pytest.raises(model.ReportInputError, match="ran_again -1"):
        model.cases_of(bad)


def test_a_batch_run_whole_again_that_comes_back_short_fails_every_case():
    """The batch faulted, each case passed alone, and the whole batch's second run returned
    without one of them: no case is judged on it; each fails naming the fault of the
    batch and the short second run."""
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine import batches
    calls = []

    def call(ids):
        calls.append(list(ids))
        if len(calls) == 1:
            return Outcome("cuda_error", error="CUDA_ERROR_LAUNCH_FAILED", poisoned=True)
        if len(ids) == 1:
            return Outcome("returned", value={ids[0]: "ok"})
        return Outcome("returned", value={k: "ok" for k in ids[1:]})
    batches.RAN_AGAIN.clear()
    try:
        results, why = batches.run_contained(["a", "b"], call)
        assert calls == [["a", "b"], ["a"], ["b"], ["a", "b"]]
        assert not results and set(why) == {"a", "b"} and not batches.RAN_AGAIN
        assert ("faulted (it trapped: CUDA_ERROR_LAUNCH_FAILED (the context was poisoned)), and when run "
                "whole again it returned without some of them, but no case faults alone") in why["a"], why["a"]
    finally:
        batches.RAN_AGAIN.clear()


@pytest.mark.parametrize("first,again,words,harness", [
    # a trap of the suite's own kind, not a context killed from outside: not run again
    (("cuda_error", "CUDA_ERROR_ILLEGAL_INSTRUCTION"), None, "(it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION "
     "(the context was poisoned)), but no case", False),
    # the service made the first call again already: not run a third time
    (("cuda_error", "CUDA_ERROR_LAUNCH_FAILED", "made again"), None, "poisoned)), but no case", False),
    (("cuda_error", "CUDA_ERROR_LAUNCH_FAILED"), ("exception", "MemoryError: no memory"),
     "and again when run whole (the harness raised MemoryError: no memory)", True),
    (("cuda_error", "CUDA_ERROR_LAUNCH_FAILED"), ("returned-again",),
     "it completed only when the GPU service made it a third time", False),
    (("crashed", "child exited with status -11"), ("stopped",), "and when run whole again case b stopped it "
     "(b trapped)", False),
])
def test_a_batch_that_faulted_is_run_whole_again_only_once_and_only_for_a_kill(first, again, words, harness):
    """run_contained runs a batch whole again only after a fault a context killed from
    outside shows (CUDA_ERROR_LAUNCH_FAILED, a crash) on the batch's first run, and judges
    its cases on it only when it completed on its own first try; otherwise each case fails
    naming both runs (a harness error where the second raised in the harness)."""
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine import batches
    calls = []

    def call(ids):
        calls.append(list(ids))
        if len(ids) == 1:
            return Outcome("returned", value={ids[0]: "ok"})
        if len(calls) == 1:
            return Outcome(first[0], error=first[1], poisoned=True, again=first[2] if len(first) > 2 else "")
        if again[0] == "returned-again":
            return Outcome("returned", value={k: "ok" for k in ids}, again="its first call faulted (...)")
        if again[0] == "stopped":
            return Outcome("cuda_error", value=batches.Stopped({"a": "ok"}, "b", "b trapped"), poisoned=True)
        return Outcome(again[0], error=again[1])
    batches.RAN_AGAIN.clear()
    try:
        results, why = batches.run_contained(["a", "b"], call)
        assert len(calls) == (3 if again is None else 4), calls
        assert not results and set(why) == {"a", "b"} and not batches.RAN_AGAIN
        assert words in why["a"] and "a fault of the batch, not of one case" in why["a"], why["a"]
        assert getattr(why["a"], "harness", False) == harness
    finally:
        batches.RAN_AGAIN.clear()
