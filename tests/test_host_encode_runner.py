"""fixtures/host_encode/runner.py: the host-encoding suite's driver calls made in an
isolated child (the worker opens no context for them). The steps in order, the rule cases
one call per batch with a crash naming its own case, the outcomes read as the suite
reads them, and the real targets through a real child (no GPU needed for no steps)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import fixtures.host_encode as he
from fixtures import engine
from fixtures.cuda_layer.faults import HarnessError
from fixtures.cuda_layer.isolation import Outcome
from fixtures.host_encode import probes, runner
from fixtures.rules.registry import RuleFailure
from fixtures.tensormap import encode as enc
from fixtures.tensormap.params import TiledParams

from lane_helpers import in_a_real_child

BASE = 0x7000_0000
GPU = SimpleNamespace(ordinal=0, arch="sm_90a", sm=90, cc=(9, 0))
P = TiledParams(dtype=7, rank=2, global_dim=(64, 64), global_strides=(256,), box_dim=(32, 8),
                element_strides=(1, 1))


def _ok(address: int, tag: int = 0) -> enc.EncodeResult:
    return enc.EncodeResult(0, "CUDA_SUCCESS", address.to_bytes(8, "little") + bytes([tag]) * 120)


@pytest.fixture
def fake_driver(monkeypatch):
    """The child's allocation at BASE and encoders that answer with the address they got
    (a rank-5 map is rejected); every encode is logged."""
    log = []

    def encode_params(p, base, *, map_offset=None):
        log.append(("encode", base + (p.address_offset or 0), map_offset))
        if p.rank == 5:
            return enc.EncodeResult(1, "CUDA_ERROR_INVALID_VALUE", None)
        return _ok(base + (p.address_offset or 0), map_offset or 0)

    def replace_address(map_bytes, address):
        log.append(("replace", address))
        return _ok(address, map_bytes[8])

    monkeypatch.setattr(runner, "child_base", lambda: BASE)
    monkeypatch.setattr(runner, "encode_params", encode_params)
    monkeypatch.setattr(probes, "encode_params", encode_params)
    monkeypatch.setattr(enc, "replace_address", replace_address)
    return log


def test_steps_run_in_order_in_the_child(fake_driver):
    """Each step's answer in order: an encode at the base plus its offset, one written
    past a 128-byte boundary, a replace of a map made before (None where that step made
    none), cuTensorMapReplaceAddress to the base plus an offset."""
    bad = P.with_(rank=5)
    out = runner.run_steps([he.Step("encode", P), he.Step("encode", P.with_(address_offset=64), 64),
                            he.Step("replace", of=0, offset=4096), he.Step("encode", bad),
                            he.Step("replace", of=3, offset=16)])
    assert out[0] == _ok(BASE) and out[1] == _ok(BASE + 64, 64)
    assert out[2] == _ok(BASE + 4096) and not out[3].ok and out[4] is None
    assert fake_driver == [("encode", BASE, None), ("encode", BASE + 64, 64), ("replace", BASE + 4096),
                           ("encode", BASE, None)]
    with pytest.raises(ValueError, match="unknown step"):
        runner.run_steps([he.Step("launch")])


def test_a_replace_case_is_answered_as_the_suite_reads_it(fake_driver):
    """A rule case of cuTensorMapReplaceAddress: the base map and the replaced one."""
    case = next(c for c in he.rule_cases("smoke") if c.kind == "replace")
    got = runner.encode_cases([case])[case.id]
    assert isinstance(got, he.ReplaceOutcome) and got.base.ok
    assert got.replaced == _ok(BASE + case.params.new_address_offset, got.base.map_bytes[8])


def test_value_of_reads_an_outcome_as_the_suites_do():
    """Returned: its value. The harness's exception in the child: a HarnessError. Any
    other outcome (a crash, a hang): the test's rule fails for its case, saying why."""
    assert engine.value_of(Outcome("returned", [1]), "accepts-valid", "c1") == [1]
    with pytest.raises(HarnessError, match="harness: the encode in the isolated child raised"):
        engine.value_of(Outcome("exception", error="KeyError: 'x'"), "accepts-valid", "c1", "the encode")
    with pytest.raises(RuleFailure) as exc:
        engine.value_of(Outcome("crashed", error="signal 11"), "accepts-valid", "c1", "the encode")
    assert str(exc.value).startswith("[rule accepts-valid] [case c1] the encode did not complete: "
                                     "the isolated child died: signal 11")
    with pytest.raises(RuleFailure, match=r"\[case c1\] the scenario did not complete: it hung"):
        engine.value_of(Outcome("timeout", error="no answer in 240 s"), "fence.release-acquire", "c1",
                        "the scenario")


def test_rule_cases_one_call_per_batch_and_a_crash_names_its_case(fake_driver, monkeypatch):
    """The first case of a bucket asks for every case of it (one call); a batch whose
    child crashes is run again one case at a time, and only the case that crashes alone
    fails its rule, naming the crash."""
    cases = list(he.rule_cases("smoke"))[:400]
    b = he.RuleEncodes(GPU, cases)
    ids = max(b.members.values(), key=len)
    assert len(ids) >= 3
    bad = ids[len(ids) // 2]
    calls = []

    def fake_run_isolated(target, cs, *, device, timeout):
        assert target is runner.encode_cases and device == 0 and timeout == runner.CALL_TIMEOUT_S
        calls.append([c.id for c in cs])
        if bad in calls[-1]:
            return Outcome("crashed", error="signal 11")
        return Outcome("returned", target(cs))

    monkeypatch.setattr(runner, "run_isolated", fake_run_isolated)
    first = b.by_id[ids[0]]
    assert b.result(first) == runner.encode_one(first.params, BASE)
    assert calls[0] == ids and [bad] in calls
    made = len(calls)
    for cid in ids:
        if cid != bad:
            assert b.result(b.by_id[cid]) is not None
    with pytest.raises(RuleFailure, match=rf"\[case {bad}\] the encode did not complete: the isolated "
                                          rf"child died: signal 11"):
        b.result(b.by_id[bad])
    assert len(calls) == made and calls[-1] == ids[ids.index(bad) + 1:]   # the batch ran once


def test_the_targets_through_a_real_child(monkeypatch):
    """The real isolation targets, pickled into a real isolated child and back (no step:
    no GPU needed)."""
    for target, empty in ((runner.run_steps, []), (runner.encode_cases, {})):
        out = in_a_real_child(monkeypatch, target, [])
        assert (out.kind, out.value) == ("returned", empty), out
