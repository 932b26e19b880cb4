"""Batch buckets and the xdist scheduler that keeps a bucket on one worker."""
from collections import defaultdict

import pytest

from fixtures.engine.units import bucket, BUCKETS, scope_of

from nested_run import REPO, make_tree, pytest_run


def test_bucket_is_stable_and_in_range():
    assert bucket("f16-r3-box64x8-swz128-nanfill") == bucket("f16-r3-box64x8-swz128-nanfill")
    assert all(0 <= bucket(f"case{i}") < BUCKETS for i in range(500))
    assert len({bucket(f"case{i}") for i in range(500)}) == BUCKETS


def test_scope_of():
    assert scope_of("suites/t.py::test_a") == "suites/t.py::test_a"
    nid = "suites/t.py::test_a[f16-r3]"
    assert scope_of(nid) == f"suites/t.py::test_a#{bucket('f16-r3')}"
    # the cases that pay a setup once per process share their file's one unit
    assert scope_of("suites/t.py::test_a[f16-r3-view]") == scope_of(
        "suites/t.py::test_b[u8-r1-view]") == "suites/t.py::*-view"
    assert scope_of("suites/t.py::test_a[u8-r1-view-dlpack]") != scope_of(
        "suites/t.py::test_a[f16-r3-view]")
    # the Triton tests of one kernel (data type, rank, box) share one unit, whatever the test
    assert scope_of("suites/t.py::test_triton_host_map[u8-r1-box32-swz32-il0-zerofill-es1-interior]") == \
        scope_of("suites/t.py::test_triton_device_store[u8-r1-box32-swz0-il0-nanfill-es1-outside-d0]") == \
        "suites/t.py::test_triton_*[u8-r1-box32]"


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
    from fixtures.plugins.run_control.scheduling import make_scheduler

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


def _batches(cases, key, run, size=0, before=None):
    """engine.Batches over ``cases`` whose batch runs are ``run(ids)`` (no GPU, no child)."""
    from types import SimpleNamespace
    from fixtures.engine.batches import Batches

    class Fake(Batches):
        def _build(self):
            if before is not None:
                before()

        def _run(self, ids):
            return run(ids)

    return Fake(None, None, cases, SimpleNamespace(key=key, batch=size))


def test_lazy_batches_run_each_batch_once_when_first_asked():
    from types import SimpleNamespace
    from fixtures.engine.suite import selected_ids
    cases = [SimpleNamespace(id=f"c{i}", group=i % 2) for i in range(7)]
    calls, built = [], []

    def run(ids):
        calls.append(list(ids))
        return {i: f"r-{i}" for i in ids if i != "c3"}, {"c3": "it trapped"}

    lb = _batches(cases, lambda c: c.group, run, size=2, before=lambda: built.append(1))
    assert calls == [] and sorted(len(m) for m in lb.members.values()) == [1, 2, 2, 2]
    assert lb.outcome("c0") == ("r-c0", "") and lb.outcome("c2") == ("r-c2", "")
    assert calls == [["c0", "c2"]] and built == [1]
    assert lb.outcome("c3") == (None, "it trapped") and lb.outcome("c1") == ("r-c1", "")
    assert calls == [["c0", "c2"], ["c1", "c3"]] and built == [1]
    assert lb.outcome("nope") == (None, "no batch planned for this case")
    from pathlib import Path
    items = [SimpleNamespace(callspec=SimpleNamespace(params={"case": cases[0]}), path=Path("/s/m.py")),
             SimpleNamespace(callspec=SimpleNamespace(params={"other": cases[1]}), path=Path("/s/n.py")),
             SimpleNamespace(name="no-callspec")]
    assert selected_ids(items, ("case",)) == {"c0"}
    assert selected_ids(items, ("case", "other"), "/s/x.py") == set()
    assert selected_ids(items, ("case", "other"), "/s/n.py") == {"c1"}


def test_the_batches_selections_read_the_collected_items_once_per_gpu():
    """Each suite's batches ask which of their cases were collected (some 25 selections
    per worker): one pass over the items per GPU answers them all (before, each selection
    read all 26,000 items of a standard sweep again)."""
    from pathlib import Path
    from types import SimpleNamespace
    from fixtures.engine.suite import ONCE_ON, selected_ids

    class Items(list):
        passes = 0

        def __iter__(self):
            Items.passes += 1
            return super().__iter__()

    def item(param, case, path, once=None):
        return SimpleNamespace(callspec=SimpleNamespace(params={param: SimpleNamespace(id=case)}),
                               path=Path(path), stash={} if once is None else {ONCE_ON: once})
    items = Items([item("a", "a0", "/s/m.py"), item("a", "a1", "/s/m.py", once=1),
                   item("b", "b0", "/s/n.py"), item("b", "b1", "/s/n.py", once=0)])
    gpu0, gpu1 = SimpleNamespace(ordinal=0), SimpleNamespace(ordinal=1)
    assert selected_ids(items, ("a",), gpu=gpu0) == {"a0"}
    assert selected_ids(items, ("b",), gpu=gpu0) == {"b0", "b1"}
    assert selected_ids(items, ("a", "b"), "/s/n.py", gpu=gpu0) == {"b0", "b1"}
    assert Items.passes == 1
    assert selected_ids(items, ("a", "b"), gpu=gpu1) == {"a0", "a1", "b0"}
    assert selected_ids(items, ("a",)) == {"a0", "a1"} and Items.passes == 3


def test_a_batch_whose_run_raises_is_a_harness_error_of_each_of_its_cases():
    """Running a batch raised (the harness's own code: the cases' data, pickling them, the
    call into the child): each case of the batch raises a HarnessError naming the batch
    (before, the first case failed its rule with the exception and the others with "did
    not complete: " and no reason); a skip is each case's skip; other batches run on."""
    from types import SimpleNamespace
    from fixtures.cuda_layer.faults import HarnessError, is_harness_error
    cases = [SimpleNamespace(id=f"c{i}", group=i % 3) for i in range(6)]
    calls = []

    def run(ids):
        calls.append(list(ids))
        if "c0" in ids:
            raise RuntimeError("dictionary changed size during iteration")
        if "c1" in ids:
            pytest.skip("GPU lost")
        return {i: f"r-{i}" for i in ids}, {}

    lb = _batches(cases, lambda c: c.group, run)
    for cid in ("c0", "c3"):
        with pytest.raises(HarnessError) as info:
            lb.outcome(cid)
        assert is_harness_error(info.value)
        assert str(info.value) == ("harness: running this case's batch of 2 case(s) failed: "
                                   "RuntimeError: dictionary changed size during iteration")
        assert isinstance(info.value.__cause__, RuntimeError)
    for cid in ("c1", "c4"):
        with pytest.raises(pytest.skip.Exception, match="GPU lost"):
            lb.outcome(cid)
    assert lb.outcome("c2") == ("r-c2", "") and lb.outcome("c5") == ("r-c5", "")
    assert calls == [["c0", "c3"], ["c1", "c4"], ["c2", "c5"]]     # each batch run once


# ---------------------------------------------------------------- the scheduler's bookkeeping
def _reference_scheduler(config, log):
    """The scheduler before its bookkeeping was made linear: xdist's own (pending cases
    counted by walking the workload, indices by ``list.index``, xdist's ``_reschedule``
    with our AHEAD for its 2) with our scope and our dead-worker handling (``remove_node``
    itself, not a copy: what it promises is tested on its own, by
    ``test_a_dead_workers_crash_item_and_unfinished_cases``). The new one must decide
    exactly as this one does."""
    from xdist.scheduler import LoadScopeScheduling
    from fixtures.plugins.run_control.scheduling import make_scheduler
    ours = type(make_scheduler(config, log))
    ahead = ours.AHEAD

    class Reference(LoadScopeScheduling):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self._pending, self._index = {}, {}     # ours.remove_node forgets a node's

        def _split_scope(self, nodeid):
            return scope_of(nodeid)

        remove_node = ours.remove_node

        def _reschedule(self, node):
            if node not in self.registered_collections:
                return
            try:
                if node.shutting_down:          # xdist's _reschedule, with AHEAD for its 2
                    return
                if not self.workqueue:
                    node.shutdown()
                    return
                if self._pending_of(self.assigned_work[node]) <= ahead:
                    self._assign_work_unit(node)
                while (self.workqueue and not node.shutting_down
                       and self._pending_of(self.assigned_work[node]) < 2):
                    self._assign_work_unit(node)
            except OSError:
                return

    return Reference(config, log)


class _SimNode:
    """A worker as the scheduler sees it: it records what it is sent, and runs its cases
    in that order, each once it holds the next one too or is shutting down."""

    def __init__(self, name, events, dead_on_send=False):
        from types import SimpleNamespace
        self.name, self.events, self.dead_on_send = name, events, dead_on_send
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []

    def send_runtest_some(self, indices):
        self.events.append(("send", self.name, list(indices)))
        if self.dead_on_send:
            self.events.append(("send-closed", self.name))
            raise OSError("cannot send (already closed?)")
        self.queue.extend(indices)

    def shutdown(self):
        self.events.append(("shutdown", self.name))
        self.shutting_down = True

    def __repr__(self):
        return self.name


def _simulate(make, seed, n_workers, collection, deaths):
    """Drive a scheduler through a random run (the same for the same seed): workers finish
    cases in random order among themselves; ``deaths`` workers die at random moments and
    are replaced, one of them dead already when it is next sent work. Returns every
    decision the scheduler made and every answer it gave."""
    import random
    from types import SimpleNamespace
    rng = random.Random(seed)
    events: list = []
    config = SimpleNamespace(getvalue=lambda name: [f"{n_workers}*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False))
    from xdist.remote import Producer
    sched = make(config, Producer("sim", enabled=False))
    nodes = [_SimNode(f"gw{i}", events) for i in range(n_workers)]
    for n in nodes:
        sched.add_node(n)
    for n in nodes:
        sched.add_node_collection(n, collection)
    sched.schedule()
    spawned = n_workers
    for step in range(20 * len(collection)):
        events.append(("state", sched.tests_finished, sched.has_pending, len(sched.workqueue)))
        live = [n for n in nodes if n in sched.assigned_work]
        if deaths and live and rng.random() < 0.004:
            deaths -= 1
            victim = rng.choice(live)
            nodes.remove(victim)
            events.append(("died", victim.name, sched.remove_node(victim)))
            new = _SimNode(f"gw{spawned}", events, dead_on_send=deaths == 1 and rng.random() < 0.5)
            spawned += 1
            nodes.append(new)
            sched.add_node(new)
            sched._reschedule(new)              # still collecting: nothing yet
            sched.add_node_collection(new, collection)
            sched.schedule()
            continue
        ready = [n for n in live if not n.dead_on_send and
                 (len(n.queue) >= 2 or (n.shutting_down and n.queue))]
        if not ready:
            break
        n = rng.choice(ready)
        sched.mark_test_complete(n, n.queue.pop(0))
    for n in list(nodes):
        if n in sched.assigned_work:
            events.append(("finished", n.name, sched.remove_node(n)))
    events.append(("end", sched.tests_finished, sched.has_pending, dict(sched.workqueue)))
    return events


def test_a_dead_workers_crash_item_and_unfinished_cases():
    """A worker that dies: its crash item is the first case it was sent and did not
    finish (a worker runs its cases in the order sent); its other unfinished cases go back
    to the front of the queue, unit by unit in the order it was sent them, without the
    crash item and without the cases it finished, ahead of the units no worker was sent; a
    replacement worker is sent those first, in that order."""
    from types import SimpleNamespace
    from xdist.remote import Producer
    from fixtures.plugins.run_control.scheduling import make_scheduler
    events: list = []
    config = SimpleNamespace(getvalue=lambda name: ["1*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False))
    sched = make_scheduler(config, Producer("sim", enabled=False))
    ids = ([f"s/t.py::test_x[a{i}-view]" for i in range(3)]      # three units (-view:
           + [f"s/u.py::test_y[b{i}-view]" for i in range(2)]    # one unit per file)
           + [f"s/v.py::test_z[c{i}-view]" for i in range(2)])
    first = _SimNode("gw0", events)
    sched.add_node(first)
    sched.add_node_collection(first, ids)
    sched.schedule()
    assert first.queue == [0, 1, 2, 3, 4]          # two units sent, the third queued
    sched.mark_test_complete(first, first.queue.pop(0))            # a0 done, a1 running
    assert sched.remove_node(first) == ids[1]
    assert list(sched.workqueue) == [scope_of(ids[0]), scope_of(ids[3]), scope_of(ids[5])]
    assert dict(sched.workqueue[scope_of(ids[0])]) == {ids[2]: False}
    second = _SimNode("gw1", events)
    sched.add_node(second)
    sched._reschedule(second)
    sched.add_node_collection(second, ids)
    sched.schedule()
    assert second.queue[:3] == [2, 3, 4] and not {0, 1} & set(second.queue)


def test_the_scheduler_decides_as_xdist_bookkeeping_does():
    """The linear bookkeeping (a pending count per worker, an index of its collection)
    gives the same assignments, shutdowns, crash items and answers as xdist's own, on
    simulated runs: several functions of many cases and a few single cases, 1 to 8
    workers, with and without dead workers (replaced; one dead before xdist knows)."""
    from fixtures.plugins.run_control.scheduling import make_scheduler
    collection = ([f"s/t.py::test_one[c{i}]" for i in range(300)]
                  + [f"s/t.py::test_two[x{i}-y{i % 7}]" for i in range(150)]
                  + ["s/t.py::test_plain", "s/u.py::test_other"]
                  + [f"s/u.py::test_three[k{i}]" for i in range(40)])
    runs = died = closed = 0
    for seed in range(12):
        for workers in (1, 2, 3, 8):
            deaths = seed % 4
            new = _simulate(make_scheduler, seed, workers, collection, deaths)
            ref = _simulate(_reference_scheduler, seed, workers, collection, deaths)
            assert new == ref, (seed, workers, deaths)
            assert any(e[0] == "send" for e in new)
            runs += 1
            died += sum(1 for e in new if e[0] == "died" and e[2] is not None)
            closed += sum(1 for e in new if e[0] == "send-closed")
    assert runs == 48 and died > 30 and closed > 0, (runs, died, closed)


def test_the_scheduler_bookkeeping_is_linear():
    """40,000 cases over 8 workers: the controller's bookkeeping of a whole run takes
    well under the bound (0.4 s on a 2-core development VM, where the reference, xdist's
    own bookkeeping, takes 18 s)."""
    import time
    from fixtures.plugins.run_control.scheduling import make_scheduler
    collection = [f"s/t.py::test_{f}[c{i}]" for f in range(5) for i in range(8000)]
    t0 = time.perf_counter()
    events = _simulate(make_scheduler, 1, 8, collection, 0)
    assert time.perf_counter() - t0 < 20
    sent = sorted(i for e in events if e[0] == "send" for i in e[2])
    assert sent == list(range(len(collection)))


def test_run_order_spreads_heavy_units_over_the_others():
    """The units in the order the workers put their collection: the others largest first,
    the heavy ones (a case that runs alone) spread evenly over the first 60% of the other
    units' cases (not of the units: the units come largest first, and the heavy ones
    ended up just before the tail), the first heavy unit first; every case once."""
    from fixtures.plugins.run_control.scheduling import run_order
    ids = ([f"s/t.py::test_big[c{i}]" for i in range(2000)] + ["s/t.py::test_plain"]
           + [f"s/t.py::test_trap[t{i}]" for i in range(6)] + [f"s/u.py::test_small[k{i}]" for i in range(3)]
           + [f"s/v.py::test_one_{i}" for i in range(300)])
    heavy = {i for i, nid in enumerate(ids) if "test_trap" in nid}
    order = run_order(ids, heavy.__contains__)
    assert sorted(order) == list(range(len(ids)))
    units = []
    for i in order:
        scope = scope_of(ids[i])
        if not units or units[-1] != scope:
            units.append(scope)
    at = [k for k, u in enumerate(units) if "test_trap" in u]
    assert len(at) == 6 and at[0] == 0
    others = len(ids) - 6
    before = [sum(1 for i in order[:order.index(ids.index(f"s/t.py::test_trap[t{j}]"))]
                  if i not in heavy) for j in range(6)]
    before.sort()
    assert before[0] == 0 and before[-1] <= 0.6 * others + 40        # 40: the largest unit's size
    gaps = [b - a for a, b in zip(before, before[1:])]
    assert all(0.6 * others / 6 - 40 <= g <= 0.6 * others / 6 + 40 for g in gaps), gaps
    rest = [u for u in units if "test_trap" not in u]
    sizes = [sum(1 for nid in ids if scope_of(nid) == u) for u in rest]
    assert sizes == sorted(sizes, reverse=True)


def test_run_order_spreads_a_unit_that_pays_a_setup_like_a_heavy_one():
    """The units of cases that pay a setup of seconds (ids ending ``-view``: one unit per
    file, a few cases) would come last by size and make the tail: they are spread like a
    heavy unit, before the other heavy units (the longest first); without any, the order
    is by size alone."""
    from fixtures.plugins.run_control.scheduling import run_order
    ids = ([f"s/t.py::test_big[c{i}]" for i in range(2000)] + [f"s/v.py::test_one_{i}" for i in range(300)]
           + ["s/l.py::test_view_host[u8-a-view]", "s/l.py::test_view_store[u8-b-view]"]
           + [f"s/t.py::test_trap[t{i}]" for i in range(3)])
    traps = {i for i, nid in enumerate(ids) if "test_trap" in nid}
    order = run_order(ids, traps.__contains__)
    assert sorted(order) == list(range(len(ids)))
    views = [k for k, i in enumerate(order) if ids[i].endswith("-view]")]
    assert len(views) == 2 and views[1] == views[0] + 1          # one unit, together
    assert views[0] == 0, [ids[i] for i in order[:3]]             # before the traps, at the start
    traps_at = [k for k, i in enumerate(order) if i in traps]
    assert len(traps_at) == 3 and traps_at[0] > views[1]
    # by size it would have come after every unit of 300 single cases
    plain = run_order(ids[:2300] + ids[2300:2302], lambda i: False)
    assert [ids[i] for i in plain[:2]] == ids[2300:2302]          # spread: the first heavy unit is first


TRITON_TESTS = {"triton_cases": ("test_triton_host_map", "test_triton_host_load", "test_triton_device_map",
                                 "test_triton_device_load"),
                "triton_store_cases": ("test_triton_host_store", "test_triton_device_store"),
                "triton_view_cases": ("test_triton_view_host", "test_triton_view_device")}


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_a_triton_batch_is_one_unit_with_all_its_tests(level):
    """A Triton batch (one compiled kernel's cases) is called once per run: every test of
    every case of the batch is in one scheduling unit, so one worker runs them all and the
    first asks for the batch (fixtures/engine/units.py ``SHARED_BY_TOKENS``)."""
    import fixtures.library_maps as lm
    from fixtures.library_maps.cases import batch_key
    suite = (REPO / "suites" / "test_library_maps.py").read_text()
    for cases_of, tests in TRITON_TESTS.items():
        batches = defaultdict(set)
        for c in getattr(lm, cases_of)(level):
            for t in tests:
                assert f"def {t}(" in suite, t
                batches[batch_key(c)].add(scope_of(f"suites/test_library_maps.py::{t}[{c.id}]"))
        assert batches and all(len(u) == 1 for u in batches.values()), {
            k: u for k, u in batches.items() if len(u) > 1}
    units = {scope_of(f"suites/test_library_maps.py::test_triton_host_map[{c.id}]") for c in lm.triton_cases(level)}
    assert len(units) > 1 or level == "smoke"       # not one unit for the whole suite


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_device_encodes_read_by_other_tests_are_in_the_field_cases_unit(level):
    """The device-encoding suite's address and stride checks read the encodes of the field
    cases' batches (fixtures/device_encode/runner.py ``batch_key``): each of their cases is
    in the unit of its field case, so the worker that encodes the batch runs them too; its
    spaces check shares each group's unit with the styles check (fixtures/engine/units.py
    ``SAME_UNIT_AS``)."""
    import fixtures.device_encode as de
    from fixtures.device_encode.runner import batch_key
    path = "suites/test_device_encode.py"
    suite = (REPO / path).read_text()
    fields = list(de.field_cases(level, 90))
    readers = {"test_replace_address_matches_driver": [c for c in fields if c.key == "global_address"],
               "test_global_stride_operand_is_bytes": [c for c in fields if c.key.startswith("global_stride")]}
    units = defaultdict(set)
    for c in fields:
        units[batch_key(c)].add(scope_of(f"{path}::test_replace_field[{c.id}]"))
    for test, cases in readers.items():
        assert f"def {test}(" in suite and cases, test
        for c in cases:
            units[batch_key(c)].add(scope_of(f"{path}::{test}[{c.id}]"))
    assert all(len(u) == 1 for u in units.values()), {k: u for k, u in units.items() if len(u) > 1}
    assert len(units) > 1
    # the spaces check reads the styles check's groups' encodes (``_by_variant``)
    groups = sorted({c.key.split("[")[0] for c in fields})
    assert "def test_spaces_agree(" in suite and len(groups) > 1
    for g in groups:
        assert scope_of(f"{path}::test_spaces_agree[{g}]") == scope_of(f"{path}::test_styles_agree[{g}]"), g
