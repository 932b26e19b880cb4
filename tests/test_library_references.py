"""fixtures/library_maps/checks.py ``References``: the driver's maps the Triton checks
compare with, made in an isolated child (the worker opens no context): both L2
promotions in one call, kept; the check's verdict the same as with an encode made in
process; a call that does not return is the harness's."""
from __future__ import annotations

import dataclasses
import hashlib
from types import SimpleNamespace

import pytest

from fixtures import library_maps as lm
from fixtures.cuda_layer.faults import HarnessError
from fixtures.cuda_layer.isolation import Outcome
from fixtures.library_maps import checks
from fixtures.tensormap import encode as enc
from fixtures.tensormap.enums import L2Promotion, Swizzle

GPU = SimpleNamespace(ordinal=0, arch="sm_90a")


def _result(p, address, l2) -> enc.EncodeResult:
    """A stand-in driver: the map names its parameters, address and L2 promotion."""
    return enc.EncodeResult(0, "CUDA_SUCCESS", hashlib.sha256(repr((p, address, int(l2))).encode()).digest() * 4)


@pytest.fixture
def calls(monkeypatch):
    made = []

    def fake_run_isolated(target, jobs, *, device, timeout):
        assert target is checks.driver_maps and device == 0
        made.append(jobs)
        return Outcome("returned", [_result(*j) for j in jobs])
    monkeypatch.setattr(checks, "run_isolated", fake_run_isolated)
    return made


def test_both_promotions_in_one_call_and_kept(calls):
    refs = lm.References(GPU)
    p = lm.triton_cases("smoke")[0].load
    assert refs(p, 4096) == _result(p, 4096, L2Promotion.NONE)
    assert refs(p, 4096, L2Promotion.L2_128B) == _result(p, 4096, L2Promotion.L2_128B)
    assert len(calls) == 1 and [j[2] for j in calls[0]] == [L2Promotion.NONE, L2Promotion.L2_128B]
    refs(p, 8192)
    assert len(calls) == 2 and refs.calls == 2


def test_the_verdict_is_the_one_made_in_process(calls, monkeypatch):
    c = lm.triton_cases("smoke")[0]
    swz = Swizzle(c.load.swizzle)
    monkeypatch.setattr(type(c.load), "encode", lambda self, address=0, l2=L2Promotion.NONE:
                        _result(self, address, l2))
    p = dataclasses.replace(c.load, swizzle=swz, box_dim=tuple(c.load.box_dim))
    lib = _result(p, 4096, L2Promotion.L2_128B).map_bytes       # Triton's 128B promotion
    here = lm.triton_host(c, lib, 4096, swz, c.load.box_dim, "who")
    there = lm.triton_host(c, lib, 4096, swz, c.load.box_dim, "who", driver=lm.References(GPU))
    assert here == there and not there.errors and there.explained[0][0] == "library.triton.l2-128b"


def test_a_call_that_does_not_return_is_the_harness(monkeypatch):
    monkeypatch.setattr(checks, "run_isolated", lambda *a, **k: Outcome("crashed", error="signal 11"))
    p = lm.triton_cases("smoke")[0].load
    with pytest.raises(HarnessError, match="the reference encodes did not complete: crashed: signal 11"):
        lm.References(GPU)(p, 4096)
