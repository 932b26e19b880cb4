"""Maps over tensors in several kinds of memory (CPU only): the cases, the operation's
memory, and the kinds' names; the loads themselves need a GPU (suites/test_tma_load.py
``test_tma_load_memory_kind``)."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer import memory_kinds
from fixtures.rules.registry import get
from fixtures.tma_box import tiled_cases


@pytest.mark.parametrize("level, n", [("smoke", 1), ("standard", 5), ("full", 20)])
def test_every_kind_but_cudamalloc_over_the_interior_bases(level, n):
    cases = tiled_cases.memory_cases(level)
    assert len(cases) == n and len({c.id for c in cases}) == n
    sweep = {c.id for c in tiled_cases.generate(level)}
    for c in cases:
        base, _, kind = c.id.rpartition("-mem=")
        assert kind == c.memory and kind in memory_kinds.KINDS and kind != "device"
        assert base.endswith("-interior") and c.expect == "data" and c.id not in sweep
    if level != "smoke":
        assert {c.memory for c in cases} == set(memory_kinds.KINDS) - {"device"}


def test_the_operation_runs_in_device_memory_unless_told():
    from dataclasses import replace
    assert tl.TILED.memory == "device"
    assert replace(tl.TILED, memory="managed").memory == "managed"
    with pytest.raises(ValueError, match="memory kind 'bogus'"):
        memory_kinds.to_gpu(np.zeros(16, dtype=np.uint8), "bogus")


def test_the_rule_quotes_seed_004s_only_requirement_on_the_address():
    r = get("tma-load.memory-kind")
    assert r.document.startswith("seed 004") and "16 byte aligned" in r.quote
