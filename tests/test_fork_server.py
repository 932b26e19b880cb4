"""The lane's fork server (fixtures/cuda_layer/fork_server.py, isolation's ``LaneForked``):
a worker's isolated children forked by the run's trap lane, with its imports, talking to
the worker over the worker's own pipes; a lane that is not there, dies or refuses leaves
the child to a new interpreter on the same pipes, and the calls' outcomes are the same.

On this CPU machine the calls name no GPU (device None): the lane, its socket and the
children are the run's own, started as the controller starts them."""
from __future__ import annotations

import os
import signal
import time

import pytest

from fixtures.cuda_layer import isolation, trap_lane
from fixtures.cuda_layer.isolation import FORK_SERVERS, IsolatedRunner, LaneForked
from lane_helpers import call, running_lane

FORK_WARNING = "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"


@pytest.fixture
def lane(tmp_path):
    """A lane with no jobs that forks the workers' children, started as the controller
    starts it with ``--child-start fork`` (its preload module here tests/lane_helpers.py);
    ``make(environment)``: a runner, with an
    environment of its own where given."""
    with running_lane(tmp_path, lambda path, environment=None: IsolatedRunner(environment=environment),
                      register=lambda path: FORK_SERVERS.update({None: path}),
                      unregister=FORK_SERVERS.clear, forks=True, preload_modules=("lane_helpers",)) as make:
        yield make


def lane_pid(path) -> int:
    deadline = time.monotonic() + 30
    while not (path / trap_lane.PID).exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return int((path / trap_lane.PID).read_text())


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_workers_children_are_the_lanes_and_answer_it_directly(lane):
    """Each runner's child is forked by the lane (its parent is the lane's process, not
    this one) and answers this process's calls; two runners, two children."""
    a, b = lane(), lane()
    pa, pb = call(a, "pid").value, call(b, "pid").value
    assert pa != pb and os.getpid() not in (pa, pb)
    assert isinstance(a.proc, LaneForked) and a.proc.how == "forked" and b.proc.how == "forked"
    assert parent_of(pa) == parent_of(pb) == lane_pid(lane.path)
    assert call(a, "add", 2, 3, scale=10).value == 50
    assert trap_lane.stop(lane.path)["forks"] == {"forked": 2, "refused": 0}


@pytest.mark.filterwarnings(FORK_WARNING)
def test_the_outcomes_are_a_new_interpreters(lane, tmp_path):
    """Returned values, exceptions, a poisoned context, a crash and a timeout come back as
    they do from a child started as a new interpreter; after a crash or a poisoned reply
    the next child is forked again and answers."""
    r, own = lane(), IsolatedRunner()
    FORK_SERVERS.clear()                       # ``own``: a new interpreter's children
    try:
        for name, args, kw in [("add", (1, 2), {}), ("boom", (), {}), ("poison", (), {}),
                               ("crash", (), {}), ("hang", (), {"timeout": 1.0})]:
            FORK_SERVERS[None] = lane.path
            got = call(r, name, *args, **kw)
            FORK_SERVERS.clear()
            want = call(own, name, *args, **kw)
            same = (lambda o: (o.kind, o.error, o.poisoned)) if name == "poison" else \
                (lambda o: (o.kind, o.value, o.error, o.poisoned))      # poison returns its pid
            assert same(got) == same(want), name
        FORK_SERVERS[None] = lane.path
        assert call(r, "add", 3, 4).value == 7 and r.proc.how == "forked"
        assert r.started == 4                  # the first, and one after poison, crash, hang
    finally:
        own.stop()


def test_no_lane_means_a_new_interpreter_on_the_same_pipes(tmp_path, monkeypatch):
    """No fork server within FORK_CONNECT_S: the child is a new interpreter, which gets
    the requests written before it started."""
    monkeypatch.setattr(isolation, "FORK_CONNECT_S", 0.2)
    (tmp_path / "gpu").mkdir()
    FORK_SERVERS[None] = tmp_path / "gpu"
    r = IsolatedRunner()
    try:
        r.prestart(None)
        assert call(r, "add", 1, 1).value == 2 and r.proc.how == "spawned"
        assert parent_of(call(r, "pid").value) == os.getpid()
    finally:
        r.stop()
        FORK_SERVERS.clear()


def test_a_dead_lane_leaves_later_children_to_new_interpreters(lane):
    """The lane dies (its children with it): the call that finds its child gone says so
    (a crash, as a child's death is), and the next child is a new interpreter."""
    r = lane()
    assert call(r, "pid").value
    pid = lane_pid(lane.path)
    os.kill(pid, signal.SIGKILL)
    lane.proc.wait(10)
    (lane.path / isolation.FORK_SOCKET).unlink()
    out = call(r, "add", 1, 2)
    if out.kind == "crashed":                  # the child died with the lane
        out = call(r, "add", 1, 2)
    assert (out.kind, out.value) == ("returned", 3) and r.proc.how == "spawned"


def test_a_request_the_lane_cannot_read_gets_a_new_interpreter(lane):
    """A request the server cannot read (here: no descriptors) is refused with a reason;
    the worker's child is then a new interpreter, and the server goes on forking."""
    import socket as socket_mod
    from fixtures.cuda_layer.isolated_child import recv
    lane_pid(lane.path)
    deadline = time.monotonic() + 30
    while not (lane.path / isolation.FORK_SOCKET).exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with socket_mod.socket(socket_mod.AF_UNIX, socket_mod.SOCK_STREAM) as s:
        s.connect(str(lane.path / isolation.FORK_SOCKET))
        s.sendall(b"F")
        got = recv(s.fileno(), time.monotonic() + 10)
    assert "refused" in got and "descriptors" in got["refused"]
    for r in (lane(), lane()):              # the lane's first two: then it ends its jobs' part
        assert call(r, "add", 2, 2).value == 4 and r.proc.how == "forked"
    assert trap_lane.stop(lane.path)["forks"] == {"forked": 2, "refused": 1}


def test_killing_before_the_pid_came_kills_the_child(lane):
    """A child killed before the lane said its pid (a timeout at once, a stop) is killed
    as soon as the pid comes, and its status is SIGKILL's."""
    r = lane()
    r.prestart(None)
    proc = r.proc
    proc.kill()
    assert proc.wait() == -signal.SIGKILL


def test_the_lane_forks_no_library_runtime_in(lane):
    """The lane's later modules (the library runtimes; here tests/preloaded_marker.py) are
    never imported where it forks: a forked child imports them itself, as a new
    interpreter does (JAX's compiler does not survive a fork)."""
    first = [lane(), lane()]                  # the workers' first children, then one after
    assert [call(r, "imported", "preloaded_marker").value for r in first] == [False, False]
    r = lane()
    assert call(r, "imported", "preloaded_marker").value is False and r.proc.how == "forked"
    assert call(r, "imported", "lane_helpers").value is True       # its preload modules, forked in


def test_a_child_with_an_environment_of_its_own_is_a_new_interpreter(lane):
    """The streams child (an environment of its own: the user's hardware work queues) is
    never forked from the lane, whose environment has one queue: a new interpreter, its
    environment the one asked for."""
    r = lane(lambda: dict(os.environ, TMAC_TEST_OWN_ENV="yes"))
    assert call(r, "environ", "TMAC_TEST_OWN_ENV").value == "yes"
    assert not isinstance(r.proc, LaneForked) and parent_of(r.proc.pid) == os.getpid()
    lane_pid(lane.path)                      # the lane's fork server listens: it forked none
    assert trap_lane.stop(lane.path)["forks"] == {"forked": 0, "refused": 0}
