"""prefetch.tensormap on a map in each state space (fixtures/tma_load/prefetch_map.py)
without a GPU: the cases, and the judgement of what the kernel read. The kernel runs on a
GPU node (suites/test_tma_prefetch.py test_prefetch_tensormap)."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer import status
from fixtures.rules.registry import get
from fixtures.tma_load import prefetch_map as pm

OK = np.full(len(pm.COORDS), status.OK, dtype=np.uint32)


@pytest.mark.parametrize("case", list(tl.PREFETCH_MAP_CASES))
def test_the_boxes_the_model_gives_pass_and_each_case_quotes_its_rule(case):
    assert get(tl.PREFETCH_MAP_CASES[case][2]).quote
    assert tl.judge_prefetch_map(case, pm.expected(), OK) == []


def test_a_wrong_element_or_a_block_that_did_not_load_fails_the_cases_rule():
    tiles = pm.expected().copy()
    tiles[1, 7, 31] += 1
    (err,) = tl.judge_prefetch_map("global-generic", tiles, OK)
    assert err[0] == "prefetch-map.global-load" and "1 of" in err[1] and err[2] == {"outcome": "bytes"}
    words = OK.copy()
    words[0] = status.TIMEOUT
    (err,) = tl.judge_prefetch_map("shared-generic", pm.expected(), words)
    assert err[0] == "prefetch-map.shared-no-op" and "status words" in err[1]


def test_every_map_has_a_baseline_and_the_boxes_lie_inside_the_tensor():
    loads = {through for _, through, _ in tl.PREFETCH_MAP_CASES.values()}
    baselines = {through for where, through, _ in tl.PREFETCH_MAP_CASES.values() if where == 6}
    assert loads == baselines == {0, 1, 2}
    bx, by = pm.BOX
    assert all(x + bx <= pm.SHAPE[1] and y + by <= pm.SHAPE[0] for x, y in pm.COORDS)
    assert tl.prefetch_map_cases("smoke") == ["param"]
    assert tl.prefetch_map_cases("full") == list(tl.PREFETCH_MAP_CASES)


def test_the_global_maps_prefetch_is_an_observation_unless_its_load_is_wrong():
    errors, seen = tl.observe_global("cuda_error", "cudaErrorIllegalAddress", None)
    assert errors == [] and "trapped: cudaErrorIllegalAddress" in seen
    errors, seen = tl.observe_global("returned", "", (pm.expected(), OK))
    assert errors == [] and "completed" in seen
    wrong = pm.expected() + 1
    errors, seen = tl.observe_global("returned", "", (wrong, OK))
    assert [e[0] for e in errors] == ["prefetch-map.global-load"] and not seen
    assert pm.GLOBAL not in tl.PREFETCH_MAP_CASES
