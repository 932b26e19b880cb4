"""The run's GPU service (fixtures/cuda_layer/gpu_service.py): every process's isolated
calls on a GPU run in the children of one process, no more than its pool's whatever the
number of callers; a trap in one child costs the others nothing; the outcome is the one
the caller's own child would have given; a service that is not there, dies or refuses
leaves the call to the caller's own children.

On this CPU machine the calls name no GPU (device None): the service's children are
real processes, its socket, protocol and pool are the run's."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from fixtures.cuda_layer import cuda_env, gpu_service, isolation, trap_lane
from fixtures.cuda_layer.isolation import IsolatedRunner
from lane_helpers import call, in_a_real_child, running_lane

FORK_WARNING = "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"


@pytest.fixture
def service(tmp_path):
    """A lane with no jobs, started as the controller starts it: its service serves on."""
    with running_lane(tmp_path, lambda path, name="batches": gpu_service.ServiceRunner(
            path, name, None, IsolatedRunner()), unregister=gpu_service.leave,
            children=gpu_service.GENERAL, service=True) as make:
        yield make


def test_the_calls_of_many_callers_share_at_most_contexts_children(service):
    """Sixteen callers at once (two processes' eight workers' worth): every call is
    answered by a child of the service, never the caller's own, and the service opened
    at most GENERAL children for them (one more with the streams child)."""
    runners = [service() for _ in range(16)]
    pids: list = [None] * len(runners)

    def one(i):
        pids[i] = [call(runners[i], "nap", 0.2).value for _ in range(3)]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(runners))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    seen = {p for ps in pids for p in ps}
    assert None not in seen and os.getpid() not in seen
    assert 1 <= len(seen) <= gpu_service.GENERAL, seen
    assert all(r.local.started == 0 and not r.down for r in runners)
    served = trap_lane.stop(service.path)["service"]
    assert served["calls"] == {"batches": 48} and served["children"] <= gpu_service.GENERAL, served
    assert served["connections"] == 16 and served["peak_busy"] <= gpu_service.GENERAL


def test_the_lanes_part_ends_and_the_service_serves_on(service):
    """The first process to collect has no trap case: the lane's part ends at once (its
    summary written), the service serves on with its children open until the controller
    stops it, which then says what it served."""
    r = service()
    deadline = time.monotonic() + 30
    while not (service.path / trap_lane.SUMMARY).exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert service.proc.poll() is None and call(r, "add", 1, 2).value == 3
    summary = trap_lane.stop(service.path)
    assert service.proc.wait(30) == 0
    assert summary["jobs"] == summary["ran"] == 0 and "stopped" not in summary
    assert summary["service"]["calls"] == {"batches": 1} and summary["service"]["children"] == gpu_service.GENERAL


def test_a_callers_calls_stay_in_its_child_while_it_is_idle(service):
    """Each caller's calls go to the child its last call took when that one is idle (its
    compiled kernels are there), not round the pool; a caller whose child is busy takes
    another."""
    a, b = service(), service()
    first = call(a, "pid").value
    assert [call(a, "pid").value for _ in range(5)] == [first] * 5
    other = call(b, "pid").value
    assert [call(b, "pid").value for _ in range(3)] == [other] * 3
    busy: dict = {}
    t = threading.Thread(target=lambda: busy.update(out=call(a, "nap", 1.0)))
    t.start()
    time.sleep(0.3)
    c = service()
    assert call(c, "pid").value not in (first,)     # a's child is busy: c takes another
    t.join(60)
    assert busy["out"].value == first


def test_a_trap_costs_the_other_callers_nothing(service):
    """A call that traps poisons its child alone: its outcome says so, as the caller's
    own child's would; calls beside it return; the next call gets a fresh child."""
    a, b = service(), service("alone")
    a_pid, b_pid = call(a, "pid").value, call(b, "pid").value
    assert a_pid != b_pid
    slow: dict = {}
    t = threading.Thread(target=lambda: slow.update(out=call(a, "nap", 1.0)))
    t.start()
    time.sleep(0.2)
    trapped = call(b, "poison_with_error")
    t.join(60)
    assert trapped.kind == "cuda_error" and trapped.poisoned, trapped
    assert slow["out"].kind == "returned" and slow["out"].value == a_pid, slow
    assert call(a, "pid").value == a_pid                # a's child lived through b's trap
    assert call(b, "pid").value not in (a_pid, b_pid)   # b's was replaced by a fresh one
    assert b.local.started == 0


def test_outcomes_are_the_callers_own_childs(service):
    """Values, exceptions, CUDA errors, hangs and crashes come back as the same Outcome a
    process's own child gives."""
    r, own = service(), IsolatedRunner()
    try:
        for name, args, kw in [("add", (2, 3), {"scale": 4}), ("boom", (), {}), ("cuda_fault", (), {}),
                               ("crash", (), {}), ("hang", (), {"timeout": 1.0})]:
            got, want = call(r, name, *args, **kw), call(own, name, *args, **kw)
            assert (got.kind, got.error.split(" with status")[0], got.poisoned, got.value) == \
                   (want.kind, want.error.split(" with status")[0], want.poisoned, want.value), name
        assert r.local.started == 0 and not r.down       # every one of them the service's
    finally:
        own.stop()


@pytest.mark.filterwarnings(FORK_WARNING)
def test_the_children_start_with_the_services_imports(service):
    """The service imports the library runtimes once (here tests/preloaded_marker.py
    stands for them) and forks its later children after: they have them before their
    first call (the first child is forked before, to open the GPU at once)."""
    runners = [service() for _ in range(gpu_service.GENERAL)]
    deadline = time.monotonic() + 30                     # the lane's part done: its children open
    while not (service.path / trap_lane.SUMMARY).exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    seen = [call(r, "imported", "preloaded_marker").value for r in runners]
    assert seen.count(True) >= gpu_service.GENERAL - 1, seen


@pytest.mark.parametrize("user", [None, "4"], ids=["unset", "user-4"])
def test_the_streams_child_has_the_users_queues(tmp_path, monkeypatch, user):
    """The service's children have one hardware queue, but the one of ``streams`` calls,
    which has the user's setting (the run passes it to the service)."""
    monkeypatch.setattr(cuda_env, "_user_connections", user)
    monkeypatch.setenv(cuda_env.CONNECTIONS, "1")
    path = tmp_path / "gpu"
    trap_lane.start(path, None, os.getpid(), service=True)
    trap_lane.join(path, [], None)
    gpu_service.use({None: path})
    monkeypatch.setattr(isolation, "_runners", {})
    try:
        seen = {kw: isolation.run_isolated("isolation_targets:environ", cuda_env.CONNECTIONS, device=None,
                                           **{kw: True}).value for kw in ("alone", "streams")}
        assert seen == {"alone": "1", "streams": user}
        assert all(isinstance(r, gpu_service.ServiceRunner) and r.local.started == 0
                   for r in isolation._runners.values())
        assert trap_lane.stop(path)["service"]["calls"] == {"alone": 1, "streams": 1}
    finally:
        for r in isolation._runners.values():
            r.stop()
        gpu_service.leave()
        trap_lane.leave()
        trap_lane.stop(path)


def test_a_dead_service_leaves_the_calls_to_the_callers_children(service):
    """The service dies: the call that found it gone runs in the caller's own child, and
    so does every later one; the caller says why it gave the service up."""
    r = service()
    assert call(r, "pid").value != os.getpid()
    os.kill(int((service.path / trap_lane.PID).read_text()), signal.SIGKILL)
    service.proc.wait(10)
    out = call(r, "add", 1, 2)
    assert out.kind == "returned" and out.value == 3 and r.local.started == 1
    assert r.down and gpu_service.GIVEN_UP[-1][0] == "batches"
    assert call(r, "add", 2, 2).value == 4 and r.local.started == 1


def test_a_service_that_never_started_is_given_up(tmp_path, monkeypatch):
    """No socket within CONNECT_S: the caller's own child makes the call."""
    monkeypatch.setattr(gpu_service, "CONNECT_S", 0.3)
    (tmp_path / "gpu").mkdir()
    r = gpu_service.ServiceRunner(tmp_path / "gpu", "batches", None, IsolatedRunner())
    try:
        assert call(r, "add", 1, 1).value == 2 and "no GPU service" in r.down
    finally:
        r.stop()
        gpu_service.leave()


def test_a_request_the_service_cannot_read_is_made_by_the_caller(service):
    """The service refuses a request it cannot unpickle: that call, and only it, runs in
    the caller's own child."""
    from isolation_targets import Unreadable
    r = service()
    out = call(r, "read", Unreadable())
    assert (out.kind, out.value) == ("returned", "read") and r.local.started == 1 and not r.down
    assert call(r, "pid").value != r.local.proc.pid
    assert trap_lane.stop(service.path)["service"]["refused"] == 1


def test_the_pool_never_opens_more_than_its_children(monkeypatch):
    """However many threads ask at once, the pool hands out at most GENERAL general
    runners and one streams runner, each to one caller at a time."""
    pool = gpu_service.Pool(None, None, general=3)
    busy, most, lock = set(), [0], threading.Lock()

    def one(name):
        r = pool.acquire(name)
        with lock:
            assert id(r) not in busy
            busy.add(id(r))
            most[0] = max(most[0], len(busy))
        time.sleep(0.01)
        with lock:
            busy.discard(id(r))
        pool.release(r)

    threads = [threading.Thread(target=one, args=("streams" if i % 5 == 0 else "batches",)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pool.general) == 3 and pool.streams is not None and most[0] <= 4
    assert sum(pool.calls.values()) == 40 and pool.summary()["children"] == 4


class _Child:
    """A runner as the pool sees it, without a process: started and still owing its
    warm-up replies (as a child prestarted on a GPU is until its first call)."""

    def __init__(self):
        self.proc, self._warming, self.started, self.warm_call = object(), 1, 1, None

    def call(self, target, *args, device=None, timeout=60.0, **kwargs):
        self._warming = 0              # its first call reads the warm-up replies
        return isolation.Outcome("returned", value=id(self))

    def prestart(self, device=None):
        pass

    def stop(self):
        pass


def test_each_connection_gets_a_child_of_its_own_while_the_pool_has_them(monkeypatch):
    """Four connections' first calls, one after another, each take a child no other
    connection holds (not the one the last call used, however its warm-up stands); their
    later calls stay there; a fifth connection shares, the least recently used."""
    pool = gpu_service.Pool(None, None, general=4)
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": _Child())
    pool.open(4)
    last: dict = {}
    for rounds in range(3):
        for conn in "abcd":
            out, took = pool.call("batches", "t:f", prefer=last.get(conn))
            if took is not last.get(conn):
                pool.hold(last.get(conn), took)
                last[conn] = took
    assert len({id(r) for r in last.values()}) == 4 and len(pool.general) == 4
    out, took = pool.call("batches", "t:f")
    assert took is last["a"]            # all held: the least recently used
    for conn in "abcd":                 # connections closed: their children are free again
        pool.hold(last[conn], None)
    assert not +pool._held


def test_the_calls_that_may_trap_never_take_a_workers_child(monkeypatch):
    """The calls that run alone (the lane's jobs, the workers' cases that may trap) take
    the pool's "alone" children, the least recently used first and never more than its
    ALONE, never a general child however idle those are; the lane's end keeps one."""
    pool = gpu_service.Pool(None, None, general=2, alone=3)
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": _Child())
    pool.open(2)
    pool.open(5, "alone")
    assert len(pool.general) == 2 and len(pool.alone) == 3
    took = [pool.call("alone", "t:f", prefer=pool.general[0])[1] for _ in range(6)]
    assert not {id(r) for r in took} & {id(r) for r in pool.general}
    assert [id(r) for r in took] == [id(r) for r in took[:3]] * 2 and len(set(map(id, took))) == 3
    held = [pool.acquire("alone") for _ in range(3)]         # all busy: the next one waits
    waiting: dict = {}
    t = threading.Thread(target=lambda: waiting.update(r=pool.acquire("alone")))
    t.start()
    t.join(0.2)
    assert t.is_alive() and len(pool.alone) == 3
    pool.release(held[1])
    t.join(10)
    assert waiting["r"] is held[1]
    for r in (held[0], held[2], waiting["r"]):
        pool.release(r)
    pool.keep_alone(1)
    assert len(pool.alone) == 1 and len(pool.general) == 2
    assert pool.summary()["calls"] == {"alone": 10}


def test_one_call_that_may_trap_at_a_time_when_asked(monkeypatch):
    """``one_alone`` (``--traps-one-at-a-time``): an "alone" call waits while another is in
    flight, however many "alone" children are idle; the batches are not held up."""
    pool = gpu_service.Pool(None, None, general=2, alone=3, one_alone=True)
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": _Child())
    pool.open(2)
    pool.open(3, "alone")
    first = pool.acquire("alone")
    waiting: dict = {}
    t = threading.Thread(target=lambda: waiting.update(r=pool.acquire("alone")))
    t.start()
    t.join(0.2)
    assert t.is_alive(), "a second call that may trap went beside the first"
    batches = pool.acquire("batches")          # the batches go on
    pool.release(batches)
    pool.release(first)
    t.join(10)
    assert waiting["r"] is not None and waiting["r"] in pool.alone
    # a child a trap poisoned is still being reaped: its slot is held until it is gone
    reaper = threading.Thread(target=time.sleep, args=(0.5,))
    reaper.start()
    waiting["r"].reaping = reaper
    t0 = time.monotonic()
    pool.release(waiting["r"])
    assert time.monotonic() - t0 >= 0.4 and not reaper.is_alive()
    assert pool.summary()["one_trap_at_a_time"] is True
    assert "one_trap_at_a_time" not in gpu_service.Pool(None, None).summary()
    other = gpu_service.Pool(None, None, alone=2)            # without: released at once
    monkeypatch.setattr(other, "_new", lambda streams=False, role="batches": _Child())
    r = other.acquire("alone")
    r.reaping = threading.Thread(target=time.sleep, args=(0.5,))
    r.reaping.start()
    t0 = time.monotonic()
    other.release(r)
    assert time.monotonic() - t0 < 0.3


@pytest.mark.parametrize("one", [True, False])
def test_the_lane_serves_one_call_that_may_trap_at_a_time_when_asked(tmp_path, one):
    """A lane started with ``one_trap`` runs two workers' "alone" calls one after the
    other, and says so in what it served; without, side by side."""
    with running_lane(tmp_path, lambda path, name="alone": gpu_service.ServiceRunner(
            path, name, None, IsolatedRunner()), unregister=gpu_service.leave,
            children=gpu_service.GENERAL, service=True, one_trap=one) as make:
        a, b = make(), make()
        call(a, "pid"), call(b, "pid")            # an "alone" child started (a second starts below)
        spans: dict = {}
        threads = [threading.Thread(target=lambda r=r, k=k: spans.update({k: call(r, "nap_span", 1.5)}))
                   for k, r in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        (s1, e1), (s2, e2) = sorted(o.value for o in spans.values())
        assert (s2 >= e1) == one, (one, spans)
        served = trap_lane.stop(make.path)["service"]
    assert served.get("one_trap_at_a_time", False) == one and served["calls"]["alone"] == 4


def test_the_lanes_traps_leave_the_workers_children_alone(tmp_path):
    """A lane whose jobs all trap, beside a worker's batches: every job's outcome is the
    trap's, the worker's child (the pool's one general child) is the same process before
    and after them (its loaded kernels kept), and the service keeps one "alone" child once
    the jobs are done."""
    path = tmp_path / "gpu"
    proc = trap_lane.start(path, None, os.getpid(), children=1, service=True)
    r = gpu_service.ServiceRunner(path, "batches", None, IsolatedRunner())
    try:
        before = call(r, "pid").value
        jobs = [trap_lane.Job(key=trap_lane.key_of("poison", i), target="isolation_targets:poison_with_error",
                              args=()) for i in range(6)]
        trap_lane.join(path, jobs, None)
        outs = [trap_lane.take(j.key, None) for j in jobs]
        assert all(o is not None and o.kind == "cuda_error" and o.poisoned for o in outs), outs
        assert call(r, "pid").value == before and r.local.started == 0
        summary = trap_lane.stop(path)
        assert proc.wait(30) == 0
        assert summary["ran"] == 6 and summary["outcomes"] == {"cuda_error": 6}
        assert summary["service"]["children"] == 1 + 1, summary      # the general one, one alone kept
    finally:
        r.stop()
        gpu_service.leave()
        trap_lane.leave()
        trap_lane.stop(path)


def test_a_socket_that_cannot_be_made_sends_the_calls_home_at_once(tmp_path):
    """The service cannot make its socket (here: a path longer than a Unix socket's): the
    lane says why in its folder, runs its jobs with its own four children, and a worker's
    runners make their calls themselves at once, not after CONNECT_S each."""
    path = tmp_path / ("x" * 120) / "gpu"
    proc = trap_lane.start(path, None, os.getpid(), children=6, service=True)
    jobs = [trap_lane.Job(key=trap_lane.key_of("nap", i), target="isolation_targets:nap", args=(i / 1e6,))
            for i in range(6)]
    trap_lane.join(path, jobs, None)
    runners: list = []
    try:
        runners += [gpu_service.ServiceRunner(path, name, None, IsolatedRunner()) for name in ("batches", "alone")]
        t0 = time.monotonic()
        assert [call(r, "add", 1, 1).value for r in runners] == [2, 2]
        assert time.monotonic() - t0 < gpu_service.CONNECT_S / 3
        assert "no GPU service" in runners[0].down and runners[1].down == runners[0].down
        assert "AF_UNIX path too long" in runners[0].down or "too long" in runners[0].down
        assert all(trap_lane.take(j.key, None).kind == "returned" for j in jobs)
        assert proc.wait(30) == 0
        assert trap_lane.stop(path)["children"] == trap_lane.CHILDREN    # not the 6 asked of a service
    finally:
        for r in runners:
            r.stop()
        gpu_service.leave()
        trap_lane.leave()
        trap_lane.stop(path)


def test_one_call_that_may_trap_at_a_time_stays_apart_from_the_long_kernels(monkeypatch):
    """``one_alone``: a call of ``LONG_KERNELS`` (the fence scenarios' spinning kernels)
    waits for the call that may trap in flight, and holds the next one back until it
    ends; other calls are not held up, and without ``one_alone`` nothing waits."""
    pool = gpu_service.Pool(None, None, general=2, alone=2, one_alone=True)
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": _Child())
    (long_target,) = gpu_service.LONG_KERNELS
    trap = pool.acquire("alone")
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(long=pool.call("batches", long_target)))
    t.start()
    t.join(0.2)
    assert t.is_alive() and pool.long_waiting == 1, "the long kernels went beside a trap"
    pool.release(pool.acquire("batches"))               # the batches go on
    pool.release(trap)
    t.join(10)
    assert "long" in done and pool.long_busy == 0 and pool.long_waiting == 0
    # a long call in flight holds the calls that may trap back
    release = threading.Event()
    monkeypatch.setattr(_Child, "call", lambda self, target, *a, **k: release.wait(10)
                        and isolation.Outcome("returned", value="done"))
    t = threading.Thread(target=lambda: pool.call("batches", long_target))
    t.start()
    deadline = time.monotonic() + 10
    while pool.long_busy == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    got: dict = {}
    w = threading.Thread(target=lambda: got.update(r=pool.acquire("alone")))
    w.start()
    w.join(0.2)
    assert w.is_alive(), "a call that may trap went beside the long kernels"
    release.set()
    t.join(10)
    w.join(10)
    assert got["r"] in pool.alone
    pool.release(got["r"])
    t = threading.Thread(target=lambda: done.update(alone=pool.call("alone", long_target)))
    t.start()                                            # a long call that itself runs alone:
    t.join(10)                                           # not held back by itself
    assert not t.is_alive() and "alone" in done
    free = gpu_service.Pool(None, None, general=2, alone=2)        # without one_alone
    monkeypatch.setattr(free, "_new", lambda streams=False, role="batches": _Child())
    held = free.acquire("alone")
    free.call("batches", long_target)                    # not held up
    free.release(held)


class _Killed(_Child):
    """A child whose first ``fail`` calls fault as a context killed from outside would."""

    def __init__(self, fail: int = 1):
        super().__init__()
        self.fail, self.calls, self.at = fail, 0, []

    def call(self, target, *args, device=None, timeout=60.0, **kwargs):
        self.calls += 1
        self.at.append(time.monotonic())
        if self.calls <= self.fail:
            return isolation.Outcome("cuda_error", error="CUDA_ERROR_LAUNCH_FAILED", poisoned=True)
        return isolation.Outcome("returned", value="ran")


@pytest.mark.parametrize("beside", ["in flight", "begun and ended", "none", "starting"])
def test_a_call_that_faulted_beside_a_trap_is_made_again(monkeypatch, beside):
    """A batches call whose child faulted as a context killed from outside does
    (CUDA_ERROR_LAUNCH_FAILED, no answer) while an "alone" call was in flight, or began
    and ended during it, is made once more once that call is over: the second outcome
    is the answer, saying why (Outcome.again), and the service counts it. With no call
    that may trap beside it (an "alone" child merely starting up is none), the fault is
    the answer."""
    pool = gpu_service.Pool(None, None, general=1, alone=1)
    child = _Killed()
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": child)
    trap_over: list = []
    if beside == "in flight":
        trap = pool.acquire("alone")

        def end_trap():
            time.sleep(0.3)
            trap_over.append(time.monotonic())
            pool.release(trap)
        threading.Thread(target=end_trap).start()
    elif beside == "begun and ended":
        def call(target, *args, device=None, timeout=60.0, **kwargs):   # a trap came and went meanwhile
            pool.release(pool.acquire("alone"))
            return _Killed.call(child, target)
        monkeypatch.setattr(child, "call", call)
    elif beside == "starting":
        pool.alone.append(_Child())
        pool._busy.add(id(pool.alone[-1]))           # as open() holds a child while it starts
    out, _ = pool.call("batches", "m:f")
    if beside in ("none", "starting"):
        assert out.kind == "cuda_error" and not out.again and "made_again" not in pool.summary()
        return
    assert out.kind == "returned" and out.value == "ran" and child.calls == 2
    assert out.again.startswith("its first call faulted (cuda_error: CUDA_ERROR_LAUNCH_FAILED (context "
                                "poisoned)) while a call that may trap ran on the same GPU"), out.again
    assert pool.summary()["made_again"] == 1
    if beside == "in flight":          # made again once the trap's call ended, not 30 s later
        assert trap_over and trap_over[0] <= child.at[1] < trap_over[0] + 5, (trap_over, child.at)


@pytest.mark.parametrize("fault", ["illegal instruction", "named its case", "alone"])
def test_a_fault_of_the_call_s_own_is_not_made_again(monkeypatch, fault):
    """Beside an "alone" call in flight, these faults are their call's own and are the
    answer: a trap of the suite's kind (CUDA_ERROR_ILLEGAL_INSTRUCTION), a fault whose
    target answered naming the case at fault (a value: engine's Stopped), and any
    fault of an "alone" call."""
    pool = gpu_service.Pool(None, None, general=1, alone=2)
    child = _Killed()
    if fault == "illegal instruction":
        monkeypatch.setattr(child, "call", lambda target, *a, **k: isolation.Outcome(
            "cuda_error", error="CUDA_ERROR_ILLEGAL_INSTRUCTION", poisoned=True))
    elif fault == "named its case":
        monkeypatch.setattr(child, "call", lambda target, *a, **k: isolation.Outcome(
            "cuda_error", value="stopped at c3", error="CUDA_ERROR_LAUNCH_FAILED", poisoned=True))
    monkeypatch.setattr(pool, "_new", lambda streams=False, role="batches": child)
    trap = pool.acquire("alone")
    out, _ = pool.call("alone" if fault == "alone" else "batches", "m:f")
    assert out.kind == "cuda_error" and not out.again and child.calls <= 1
    pool.release(trap)


def test_a_worker_notes_each_call_made_again(monkeypatch, tmp_path):
    """ServiceRunner: an answer that is a call's second outcome is kept in isolation.AGAIN
    (the case's record reads it), the outcome returned as it came."""
    class _Conn:
        def fileno(self):
            return -1

    answer = isolation.Outcome("returned", value=1, again="its first call faulted (...): made again")
    r = gpu_service.ServiceRunner(tmp_path, "batches", 0, IsolatedRunner())
    monkeypatch.setattr(r, "_connect", lambda: setattr(r, "_conn", _Conn()))
    monkeypatch.setattr(gpu_service, "send", lambda out, msg: None)
    monkeypatch.setattr(gpu_service, "recv", lambda fd, deadline: answer)
    isolation.AGAIN.clear()
    try:
        assert r.call("m:f", device=0) is answer
        assert isolation.AGAIN == [answer.again]
    finally:
        isolation.AGAIN.clear()


def test_the_lane_makes_a_batch_again_that_faulted_beside_a_trap(tmp_path):
    """The real service (a lane with --gpu-service on, no GPU): a worker's batch whose
    child traps the first time, while another worker's "alone" call runs, comes back as
    the second call's outcome, saying so, and the service counts it."""
    with running_lane(tmp_path, lambda path, name: gpu_service.ServiceRunner(
            path, name, None, IsolatedRunner()), unregister=gpu_service.leave,
            children=gpu_service.GENERAL, service=True) as make:
        batches, alone = make("batches"), make("alone")
        call(batches, "pid"), call(alone, "pid")
        done: dict = {}
        t = threading.Thread(target=lambda: done.update(span=call(alone, "nap_span", 2.0)))
        t.start()
        time.sleep(0.5)                                   # the "alone" call is in flight
        try:
            out = call(batches, "batch", ["a", "b"], once=str(tmp_path / "faulted"), killed=True)
            answered = time.time()
            t.join(60)
            assert out.kind == "returned" and out.value == {"a": "ran a", "b": "ran b"}, out
            assert out.again.startswith("its first call faulted (cuda_error: CUDA_ERROR_LAUNCH_FAILED"), out.again
            assert isolation.AGAIN == [out.again]         # this process's note of it
            assert answered >= done["span"].value[1]      # made again once the "alone" call ended
        finally:
            isolation.AGAIN.clear()
        served = trap_lane.stop(make.path)["service"]
    assert served["made_again"] == 1, served


def test_the_service_names_each_childs_pid_by_role(tmp_path):
    """What the service served says each child's pid by role (a kernel log's Xid line
    names a pid: which process the GPU held up, a trapping one or a bystander), the
    children a trap replaced included."""
    with running_lane(tmp_path, lambda path, name: gpu_service.ServiceRunner(
            path, name, None, IsolatedRunner()), unregister=gpu_service.leave,
            children=gpu_service.GENERAL, service=True) as make:
        batches, alone = make("batches"), make("alone")
        first = call(batches, "pid").value
        poisoned = call(alone, "poison").value
        again = call(alone, "pid").value                       # a fresh child after the trap's
        served = trap_lane.stop(make.path)["service"]
    assert first in served["pids"]["batches"], served
    assert {poisoned, again} <= set(served["pids"]["alone"]) and poisoned != again, served


def test_a_call_asked_once_is_made_once_for_every_caller(service):
    """Eight callers ask at once for the same ``once`` call (a session's measure, the same
    for every worker): the service makes it once and answers all eight with its outcome;
    a call that raised is not shared (each caller makes it); the service says what its
    children's time went to."""
    runners = [service() for _ in range(8)]
    got: list = [None] * len(runners)

    def one(i):
        got[i] = runners[i].call_once("isolation_targets:nap", 0.5, device=None)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(runners))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {o.kind for o in got} == {"returned"} and len({o.value for o in got}) == 1, got
    other = runners[0].call_once("isolation_targets:nap", 0.0, device=None)    # other arguments:
    assert other.kind == "returned"                                           # another call
    failed = [r.call_once("isolation_targets:boom", device=None) for r in runners[:3]]
    assert [o.kind for o in failed] == ["exception"] * 3
    assert all(r.local.started == 0 and not r.down for r in runners)
    served = trap_lane.stop(service.path)["service"]
    assert served["calls"] == {"batches": 1 + 1 + 3} and served["answered_once"] == 7, served
    assert served["targets"]["isolation_targets:nap"][0] == 2, served["targets"]
    assert served["targets"]["isolation_targets:boom"][0] == 3
    assert served["busy_s"]["batches"] >= 0.5


def test_a_call_asked_once_without_a_service_is_the_processs_own(monkeypatch):
    """With no service (``--gpu-service off``) a ``once`` call is an ordinary call of this
    process's own child."""
    out = in_a_real_child(monkeypatch, "isolation_targets:pid", once=True)
    assert out.kind == "returned" and out.value != os.getpid()
