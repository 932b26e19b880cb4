"""The run order by recorded unit cost (fixtures/plugins/run_control/unit_costs.py and
scheduling.py ``run_order``): the weights, the record's reading, merging and pruning, and
two real runs, the first writing the record, the second (two workers) sending the costly
unit first in both workers' collections. CPU only."""
from __future__ import annotations

import json

from fixtures.engine.units import scope_of
from fixtures.plugins.run_control import unit_costs as uc
from fixtures.plugins.run_control.scheduling import run_order, unit_weights

import nested_run
from nested_run import pytest_run


def _units(order, ids):
    seen = []
    for i in order:
        u = ids[i].split("[")[0]
        if u not in seen:
            seen.append(u)
    return seen


def test_without_a_record_the_weight_is_the_cases():
    units = {"a": [0, 1, 2], "b": [3]}
    assert unit_weights(units, None) == {"a": 3.0, "b": 1.0}
    assert unit_weights(units, {}) == {"a": 3.0, "b": 1.0}


def test_a_recorded_unit_weighs_its_seconds_scaled_to_its_cases_here():
    units = {"a": [0, 1, 2, 3], "b": [4], "c": [5, 6]}
    w = unit_weights(units, {"a": [2.0, 2], "b": [3.0, 1]})
    assert w["a"] == 4.0                     # 2 s for 2 cases, 4 cases here
    assert w["b"] == 3.0
    assert abs(w["c"] - 2 * 5.0 / 3) < 1e-9  # unknown: its cases at the record's mean (5 s / 3)


def test_the_costliest_unit_goes_first_and_without_costs_the_largest():
    ids = [f"t.py::test_big[{i}]" for i in range(5)] + ["t.py::test_slow", "t.py::test_mid"]
    never = lambda i: False                  # noqa: E731
    assert _units(run_order(ids, never), ids)[:1] == ["t.py::test_big"]
    costs = {"t.py::test_slow": [2.0, 1], "t.py::test_mid": [0.5, 1]}
    costs.update({scope_of(n): [0.001, 1] for n in ids if "test_big" in n})
    assert _units(run_order(ids, never, costs=costs), ids)[:2] == ["t.py::test_slow", "t.py::test_mid"]
    assert sorted(run_order(ids, never, costs=costs)) == list(range(len(ids)))


def test_heavy_units_spread_over_the_cost_not_the_count():
    # one cheap unit of many cases, one costly unit of one case: a heavy unit goes after
    # 60% of the cost, that is after the costly unit, though it holds few cases
    ids = ["t.py::test_costly"] + [f"t.py::test_cheap_{i}" for i in range(9)] + ["t.py::test_trap"]
    heavy = lambda i: ids[i] == "t.py::test_trap"      # noqa: E731
    costs = {"t.py::test_costly": [9.0, 1], **{f"t.py::test_cheap_{i}": [0.1, 1] for i in range(9)}}
    order = [ids[i] for i in run_order(ids, heavy, costs=costs)]
    assert order[0] == "t.py::test_trap"          # the first heavy unit goes first, as by count
    ids2 = ids + ["t.py::test_trap2"]
    heavy2 = lambda i: ids2[i].startswith("t.py::test_trap")    # noqa: E731
    order2 = [ids2[i] for i in run_order(ids2, heavy2, costs=costs)]
    assert order2.index("t.py::test_trap2") == order2.index("t.py::test_costly") + 1
    by_count = [ids2[i] for i in run_order(ids2, heavy2)]
    assert by_count.index("t.py::test_trap2") > by_count.index("t.py::test_costly") + 1


def test_the_record_reads_merges_and_prunes(tmp_path):
    path = tmp_path / uc.FILE
    assert uc.read(path) == {}                            # missing
    path.write_text("{not json")
    assert uc.read(path) == {}                            # unreadable
    path.write_text(json.dumps({"schema": 99, "nodes": {}}))
    assert uc.read(path) == {}                            # another schema
    nodes = {"gpu x1": {"old": [1.0, 1, 100], "kept": [2.0, 2, 190], "bad": "x"}, "other": {"u": [1.0, 1, 10]}}
    merged = uc.merge(nodes, "gpu x1", {"new": [0.5, 3]}, today=200)
    assert merged == {"gpu x1": {"kept": [2.0, 2, 190], "new": [0.5, 3, 200]}}
    assert uc.costs_for({"n": {"a": [1.0, 2, 5], "b": [-1, 1, 5], "c": [1.0, 0, 5], "d": "x"}}, "n") == \
        {"a": [1.0, 2]}
    uc.write(path, "gpu x1", {"u": [1.25, 2]})
    assert uc.costs_for(uc.read(path), "gpu x1") == {"u": [1.25, 2]}


def test_unit_times_sum_each_units_cases():
    t = uc.unit_times([("t.py::a", 0.5), ("t.py::a", -1.0), ("t.py::b", 2.0)])
    assert t == {"t.py::a": [0.5, 2], "t.py::b": [2.0, 1]}


TREE = '''
import time, pytest

@pytest.mark.parametrize("i", range(40))
def test_many(i):
    pass

def test_slow():
    time.sleep(0.5)
'''

ORDER_PLUGIN = '''
import json, os

def pytest_collection_finish(session):
    wid = getattr(session.config, "workerinput", {}).get("workerid")
    if wid:
        with open(os.path.join(os.environ["ORDER_OUT"], wid + ".json"), "w") as f:
            json.dump([item.nodeid for item in session.items], f)
'''


def test_a_run_records_its_units_and_the_next_sends_the_costliest_first(tmp_path):
    root = nested_run.make_tree(tmp_path / "tree", TREE)
    (root / "orderlog.py").write_text(ORDER_PLUGIN)
    orders = tmp_path / "orders"
    orders.mkdir()
    env = nested_run.plugin_env(root, XDG_CACHE_HOME=str(tmp_path / "xdg"), ORDER_OUT=str(orders))
    cp = pytest_run(root, "-n", "1", "-p", "orderlog", f"--report-dir={tmp_path / 'out1'}", env=env)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    first = json.loads((orders / "gw0.json").read_text())
    assert first[0] != "test_tiny.py::test_slow"          # by count: many-case units first
    record = json.loads((tmp_path / "xdg" / "tma-conformance" / uc.FILE).read_text())
    (node, units), = record["nodes"].items()
    assert units["test_tiny.py::test_slow"][1] == 1 and units["test_tiny.py::test_slow"][0] >= 0.5
    assert sum(e[1] for e in units.values()) == 41

    cp = pytest_run(root, "-n", "2", "-p", "orderlog", f"--report-dir={tmp_path / 'out2'}", env=env)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert "41 passed" in cp.stdout
    a, b = (json.loads((orders / f"gw{k}.json").read_text()) for k in (0, 1))
    assert a == b                                         # xdist requires it
    assert a[0] == "test_tiny.py::test_slow"
    assert sorted(a) == sorted(first)
