"""Graphs that hold a map (fixtures/fences/graph_maps.py) without a GPU: what each case's
launches must read, and the judgement of an answer. The graphs run on a GPU node
(suites/test_fence_scopes.py test_graph_holds_map)."""
from __future__ import annotations

import numpy as np
import pytest

from fixtures import fences
from fixtures.cuda_layer import status
from fixtures.fences import graph_maps as gm
from fixtures.rules.registry import get


def _answer(case, reads, calls=None, st=None):
    a, b = gm.tensors()
    boxes = {"a": gm.expected(a), "b": gm.expected(b)}
    ok = np.full(len(gm.COORDS), status.OK, dtype=np.uint32)
    return {"phases": [(boxes[r].copy(), ok if st is None else st) for r in reads],
            "calls": calls if calls is not None else {}}


@pytest.mark.parametrize("case", list(fences.GRAPH_CASES))
def test_the_launches_that_read_what_the_documents_give_pass(case):
    rule, want = fences.GRAPH_CASES[case]
    assert get(rule).quote
    calls = {"cuGraphExecUpdate": "CUDA_SUCCESS", "resultInfo.result": "CU_GRAPH_EXEC_UPDATE_SUCCESS"} \
        if case == "exec-update" else {}
    assert fences.judge_graph(case, _answer(case, want, calls)) == []


def test_a_replay_that_reads_the_moved_tensor_fails_naming_what_it_read():
    (err,) = fences.judge_graph("capture-copies-map", _answer("capture-copies-map", ("a", "b")))
    assert err[0] == "graph.launch-copies-params" and "launch 2 read tensor B" in err[1]
    assert err[2] == {"outcome": "bytes", "equals": "tensor-b"}
    (err,) = fences.judge_graph("exec-set-params", _answer("exec-set-params", ("a", "a")))
    assert err[0] == "graph.exec-set-params" and err[2]["equals"] == "tensor-a"


def test_bytes_of_neither_tensor_a_failed_load_or_call_and_a_missing_launch_fail():
    ans = _answer("node-copies-map", ("a",))
    ans["phases"][0][0][0, 0, 0] = 7.5
    (err,) = fences.judge_graph("node-copies-map", ans)
    assert "neither tensor" in err[1] and err[2] == {"outcome": "bytes"}
    bad = np.array([status.OK, status.TIMEOUT], dtype=np.uint32)
    (err,) = fences.judge_graph("node-copies-map", _answer("node-copies-map", ("a",), st=bad))
    assert "status words" in err[1]
    errs = fences.judge_graph("exec-update", _answer("exec-update", ("a", "b"), {
        "cuGraphExecUpdate": "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "resultInfo.result": "CU_GRAPH_EXEC_UPDATE_SUCCESS"}))
    assert [e[2]["status"] for e in errs] == ["CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"]
    errs = fences.judge_graph("exec-update", _answer("exec-update", ("a",), {}))
    assert any("1 launches ran, the case has 2" in e[1] for e in errs)


def test_the_boxes_are_inside_the_tensors_and_the_two_tensors_differ_everywhere():
    a, b = gm.tensors()
    bx, by = gm.BOX
    for x, y in gm.COORDS:
        assert 0 <= x and x + bx <= a.shape[1] and 0 <= y and y + by <= a.shape[0]
    assert (gm.expected(a) != gm.expected(b)).all() and (b - a == gm.B_OFFSET).all()
    assert gm.graph_cases("smoke") == ["capture-copies-map"]
    assert gm.graph_cases("standard") == list(fences.GRAPH_CASES) == gm.graph_cases("full")
