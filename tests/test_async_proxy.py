"""Generic-proxy data handed to TMA and the byte accounting of its mbarrier
(fixtures/fences/async_proxy.py, tx_count.py) without a GPU: the cases, the model, the
judgement of what the kernels saw, and each launch recorded over the reproducers'
stand-ins against the kernel's declared parameters. The kernels run on a GPU node
(suites/test_fence_scopes.py test_proxy_fence, test_transaction_count)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from fixtures import fences
from fixtures.cuda_layer import status
from fixtures.fences import async_proxy as ap, tx_count as tx
from fixtures.repro import record
from fixtures.rules.registry import get
from fixtures.tma_box import tiled
from kernel_params import declared


def _answer(case, seen=None, words=None):
    n = ap.handoffs(case)
    blocks = 2 * ap.BLOCKS if ap.PROXY_CASES[case].scenario == "flag" else ap.BLOCKS
    return {"seen": ap.value(np.arange(n)) if seen is None else seen,
            "status": np.full(blocks, status.OK, dtype=np.uint32) if words is None else words}


def test_the_value_of_a_hand_off_is_the_kernels_and_no_two_tiles_share_one():
    assert ap.value(0, 0) == 1 and ap.value(3, 255) == 3 * 1024 + 256
    tiles = ap.value(np.arange(ap.handoffs("smem-store-fenced")))
    assert tiles.shape == (ap.BLOCKS * ap.TRIALS, ap.TILE_ELEMS)
    assert np.unique(tiles).size == tiles.size and (tiles != ap.SMEM_POISON).all()
    assert ap.handoffs("init-no-fence") == ap.BLOCKS * ap.INIT_TRIALS


@pytest.mark.parametrize("case", list(fences.PROXY_CASES))
def test_the_models_tiles_pass_and_each_case_quotes_its_rule(case):
    assert get(fences.PROXY_CASES[case].rule).quote
    errors, obs = fences.judge_proxy(case, _answer(case))
    assert errors == [] and (obs == "" if fences.PROXY_CASES[case].documented
                             else obs.startswith(f"0 of {ap.handoffs(case)} hand-offs"))


def test_a_tally_tells_stale_tiles_from_the_next_ones_and_from_garbage():
    case = "flag-load-unfenced"
    seen = ap.value(np.arange(ap.handoffs(case)))
    seen[5] = ap.value(4)                  # hand-off 5 saw hand-off 4's tile (same block)
    seen[ap.TRIALS, :3] = 0                # a block's first hand-off saw the zeros it started with
    seen[7, 10] = ap.value(8, 10)          # one element of the next hand-off
    seen[9, 0] = 12345                     # neither
    t = fences.tally(case, seen)
    assert (t.wrong, t.earlier, t.later) == (4, 2, 1)
    assert t.first.startswith("hand-off 5 (block 0, hand-off 5), 256 of 256 elements differ")
    assert "4 of 4096 hand-offs saw a tile unlike the model" in str(t)
    # the loads' stage starts poisoned, not zero
    seen = ap.value(np.arange(ap.handoffs("read-then-load-unfenced")))
    seen[0] = ap.SMEM_POISON
    assert fences.tally("read-then-load-unfenced", seen).earlier == 1


def test_a_documented_hand_off_fails_on_one_element_an_undocumented_one_is_an_observation():
    seen = ap.value(np.arange(ap.handoffs("smem-store-fenced")))
    seen[17, 200] += 1
    (err,), obs = fences.judge_proxy("smem-store-fenced", _answer("smem-store-fenced", seen))
    assert err[0] == "async-proxy.shared-then-tma-write" and err[2] == {"outcome": "bytes"} and not obs
    assert "1 of 4096 hand-offs" in err[1]
    errors, obs = fences.judge_proxy("smem-store-unfenced", _answer("smem-store-unfenced", seen))
    assert errors == [] and obs.startswith("1 of 4096 hand-offs saw a tile unlike the model")


def test_a_block_that_did_not_end_ok_fails_except_an_unfenced_barriers_timeout():
    words = np.full(2 * ap.BLOCKS, status.OK, dtype=np.uint32)
    words[3] = status.TIMEOUT
    (err,), _ = fences.judge_proxy("flag-load-unfenced", _answer("flag-load-unfenced", words=words))
    assert err[0] == "async-proxy.global-then-tma-load" and "1 of 32 blocks did not end OK" in err[1]
    words = np.full(ap.BLOCKS, status.OK, dtype=np.uint32)
    words[0] = status.TIMEOUT
    errors, obs = fences.judge_proxy("init-no-fence", _answer("init-no-fence", words=words))
    assert errors == [] and obs.startswith("1 of 16 blocks timed out")
    (err,), _ = fences.judge_proxy("init-proxy-fence", _answer("init-proxy-fence", words=words))
    assert err[0] == "async-proxy.mbarrier-init"


def test_levels():
    assert fences.proxy_cases("smoke") == list(ap.SMOKE)
    assert fences.proxy_cases("standard") == fences.proxy_cases("full") == list(fences.PROXY_CASES)
    assert fences.tx_cases("smoke") == list(tx.SMOKE)
    assert fences.tx_cases("full") == list(fences.TX_CASES)


# ------------------------------------------------------------------ byte accounting
def _tx_answer(case, words=(status.OK,), after=status.OK):
    c = fences.TX_CASES[case]
    n = 2 if c.multicast else 1
    ans = {"seen": np.stack([tx.expected(case)] * n), "status": np.array(words * n if len(words) == 1
                                                                         else words, dtype=np.uint32)}
    if not c.multicast:
        ans["after"] = np.array([after], dtype=np.uint32)
        ans["again"] = tiled.plane_box(tx.tensor(), 0, 0, *tx.BOX)[None]
    return ans


def test_the_boxes_bytes_and_the_bytes_inside_the_tensor():
    assert tx.BOX_BYTES == 1024
    assert tx.inbounds_bytes(0, 8) == 1024 and tx.inbounds_bytes(0, 100) == 0
    assert tx.inbounds_bytes(48, 60) == 16 * 4 * 4 and tx.inbounds_bytes(-16, -4) == 16 * 4 * 4
    assert fences.TX_CASES["partial-inbounds"].expect_bytes() == 256
    assert (tx.expected("outside-box") == 0).all() and (tx.expected("inside-box") != 0).all()
    assert (tx.expected("negative-box")[4:, 16:] == tx.tensor()[:4, :16]).all()


@pytest.mark.parametrize("case", list(fences.TX_CASES))
def test_what_the_documents_decide_passes_and_each_case_quotes_its_rule(case):
    c = fences.TX_CASES[case]
    assert get(c.rule).quote
    words = (status.TIMEOUT,) if c.outcome == "timeout" else (status.OK,)
    errors, obs = fences.judge_tx(case, _tx_answer(case, words))
    assert errors == [] and bool(obs) == (c.outcome == "observe")


def test_a_long_count_that_completes_a_box_that_does_not_or_a_hurt_block_fails():
    (err,), _ = fences.judge_tx("inside-long", _tx_answer("inside-long"))
    assert err[0] == "tx.phase-completion" and "ended ok, not a timeout" in err[1]
    (err,), _ = fences.judge_tx("partial-box", _tx_answer("partial-box", (status.TIMEOUT,)))
    assert err[0] == "tx.box-bytes" and "did not complete its phase" in err[1]
    errs, obs = fences.judge_tx("inside-short", _tx_answer("inside-short", after=status.TIMEOUT))
    assert [e[0] for e in errs] == ["tx.phase-completion"] and "hurt the block" in errs[0][1]
    ans = _tx_answer("multicast-box")
    ans["seen"][1, 0, 0] += 1
    (err,), _ = fences.judge_tx("multicast-box", ans)
    assert err[0] == "tx.multicast" and err[1].startswith("CTA 1: the tile")


# ------------------------------------------------------------------ the launches
@pytest.mark.parametrize("case", list(fences.PROXY_CASES) + list(fences.TX_CASES))
def test_each_launch_passes_the_kernels_declared_parameters(case, monkeypatch):
    mod, run = (ap, fences.run_proxy) if case in fences.PROXY_CASES else (tx, fences.run_tx)
    monkeypatch.setattr(mod, "load_kernel", lambda source, **kw: record.FakeModule(source))
    with record.recording() as prog:
        run(case, "sm_90a")
    launches = [s for s in prog.steps if s["op"] == "launch"]
    assert launches
    for step in launches:
        assert [a[0] for a in step["args"]] == declared(ap.SOURCE, step["kernel"]), step["kernel"]
        assert step["block"] == 128 and step["cluster"] == (2 if step["kernel"] == "tx_multicast" else 1)


# ------------------------------------------------------------------ across two GPUs
class _Stream:
    def __init__(self, **kw):
        pass

    def synchronize(self):
        pass


def test_the_two_gpu_hand_offs_launch_as_declared(monkeypatch):
    monkeypatch.setattr(ap, "load_kernel", lambda source, **kw: record.FakeModule(source))
    monkeypatch.setattr(ap, "current_device", lambda: 0)
    monkeypatch.setattr(ap, "use_device", lambda d: None)
    monkeypatch.setattr(ap, "on_device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(record.FakeCupy.cuda, "Stream", _Stream, raising=False)
    with record.recording() as prog:
        answer = fences.run_proxy_two_gpu("flag-load-fenced", "sm_90a", producer=1, consumer=0)
    launches = [s for s in prog.steps if s["op"] == "launch"]
    assert [s["kernel"] for s in launches] == ["flag_consume_sys", "flag_produce_sys"]
    for step in launches:
        assert [a[0] for a in step["args"]] == declared(ap.SOURCE, step["kernel"]), step["kernel"]
        assert (step["grid"], step["block"]) == (ap.BLOCKS, 128)
    # both kernels share the flags, and the consumer's map is over the tensor the producer writes
    consume, produce = (s["args"] for s in launches)
    assert consume[4] == produce[3] == ["buf", consume[4][1], 0]
    (enc,) = [s for s in prog.steps if s["op"] == "encode"]
    assert enc["address"] == [produce[0][1], 0]
    assert answer["seen"].shape == (ap.BLOCKS * ap.TRIALS, ap.TILE_ELEMS) and answer["status"].size == 2 * ap.BLOCKS


def test_two_gpu_judgement():
    n = ap.BLOCKS * ap.TRIALS
    ok = {"seen": ap.value(np.arange(n)), "status": np.full(2 * ap.BLOCKS, status.OK, dtype=np.uint32)}
    assert fences.judge_two_gpu("flag-load-fenced", ok) == ([], "")
    errors, obs = fences.judge_two_gpu("flag-load-unfenced", ok)
    assert errors == [] and obs.startswith("0 of 4096 hand-offs")
    stale = dict(ok, seen=ok["seen"].copy())
    stale["seen"][3] = ap.value(2)
    (err,), _ = fences.judge_two_gpu("flag-load-fenced", stale)
    assert err[0] == fences.TWO_GPU_RULE and "1 of 4096" in err[1] and "(1 an earlier" in err[1]
    late = dict(ok, status=ok["status"].copy())
    late["status"][0] = status.TIMEOUT
    (err,), _ = fences.judge_two_gpu("flag-load-unfenced", late)
    assert "1 of 32 blocks (producer GPU's, then the consumer's) did not end OK" in err[1]
    assert get(fences.TWO_GPU_RULE).quote
