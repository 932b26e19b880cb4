"""Batch buckets and the xdist scheduler that keeps a bucket on one worker."""
from collections import defaultdict

from fixtures.cuda_layer.batching import BUCKETS, bucket, scope_of

from nested_run import make_tree, pytest_run


def test_bucket_is_stable_and_in_range():
    assert bucket("f16-r3-box64x8-swz128-nanfill") == bucket("f16-r3-box64x8-swz128-nanfill")
    assert all(0 <= bucket(f"case{i}") < BUCKETS for i in range(500))
    assert len({bucket(f"case{i}") for i in range(500)}) == BUCKETS


def test_scope_of():
    assert scope_of("suites/t.py::test_a") == "suites/t.py::test_a"
    nid = "suites/t.py::test_a[f16-r3]"
    assert scope_of(nid) == f"suites/t.py::test_a#{bucket('f16-r3')}"


def test_each_bucket_runs_on_one_worker_and_ids_stay_clean(tmp_path):
    log = tmp_path / "log"
    log.mkdir()
    root = make_tree(tmp_path / "t", f'''
        import os, pytest
        @pytest.mark.parametrize("case", [f"c{{i}}" for i in range(200)])
        def test_case(case):
            open(os.path.join({str(log)!r}, case), "w").write(os.environ["PYTEST_XDIST_WORKER"])
    ''')
    r = pytest_run(root, "-n", "3", "-q", f"--junitxml={tmp_path / 'j.xml'}",
                   f"--report-dir={tmp_path / 'rep'}", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    workers = defaultdict(set)
    for f in log.iterdir():
        workers[bucket(f.name)].add(f.read_text())
    assert len(workers) > 3 and all(len(w) == 1 for w in workers.values()), dict(workers)
    assert len({w for ws in workers.values() for w in ws}) > 1, "everything ran on one worker"
    assert "@" not in (tmp_path / "j.xml").read_text().split("<testcase", 1)[1]


def test_a_worker_dead_before_xdist_knows_is_not_sent_work():
    """Seen under load: a worker that died (os._exit) had its last completed case
    arrive before its death; rescheduling it sent work into a closed channel, and the
    run ended in INTERNALERROR (OSError "cannot send (already closed?)"). The unit
    given to it stays its unfinished work, which remove_node puts back in the queue."""
    from types import SimpleNamespace
    from fixtures.cuda_layer.batching import make_scheduler

    class DeadNode:
        shutting_down = False
        gateway = SimpleNamespace(id="gw0")

        def send_runtest_some(self, indices):
            raise OSError("cannot send (already closed?)")

        def shutdown(self):
            pass

    config = SimpleNamespace(getvalue=lambda name: ["1*popen"] if name == "tx" else None)
    sched = make_scheduler(config, None)
    node = DeadNode()
    ids = [f"t.py::test[c{i}]" for i in range(4)]
    sched.add_node(node)
    sched.add_node_collection(node, ids)
    sched.collection = ids
    for nid in ids:
        sched.workqueue.setdefault(f"t.py::test#{nid[-3:-1]}", {})[nid] = False
    sched._reschedule(node)                       # no OSError out of the scheduler
    assert sched.remove_node(node) is not None    # what it was given goes back
    assert sum(len(u) for u in sched.workqueue.values()) == len(ids) - 1


def test_lazy_batches_run_each_batch_once_when_first_asked():
    from types import SimpleNamespace
    from fixtures.cuda_layer.batching import LazyBatches, selected_ids
    cases = [SimpleNamespace(id=f"c{i}", group=i % 2) for i in range(7)]
    calls, built = [], []

    def run(ids):
        calls.append(list(ids))
        return {i: f"r-{i}" for i in ids if i != "c3"}, {"c3": "it trapped"}

    lb = LazyBatches(cases, lambda c: c.group, run, size=2, before=lambda: built.append(1))
    assert calls == [] and sorted(len(m) for m in lb.members.values()) == [1, 2, 2, 2]
    assert lb.result("c0") == ("r-c0", "") and lb.result("c2") == ("r-c2", "")
    assert calls == [["c0", "c2"]] and built == [1]
    assert lb.result("c3") == (None, "it trapped") and lb.result("c1") == ("r-c1", "")
    assert calls == [["c0", "c2"], ["c1", "c3"]] and built == [1]
    assert lb.result("nope") == (None, "no batch planned for this case")
    items = [SimpleNamespace(callspec=SimpleNamespace(params={"case": cases[0]}), module="m"),
             SimpleNamespace(callspec=SimpleNamespace(params={"other": cases[1]}), module="m"),
             SimpleNamespace(name="no-callspec")]
    assert selected_ids(items, ("case",)) == {"c0"}
    assert selected_ids(items, ("case", "other"), module="x") == set()
