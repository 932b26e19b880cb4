"""CPU self-tests of the TMA write suites' cases and checks (fixtures/tma_store: reductions,
the runner's span arithmetic, the write checks; fixtures/tma_load/prefetch.py)."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.tma_load as tl
import fixtures.tma_store as ts
from fixtures.cuda_layer import status as st
from fixtures.tensormap.enums import DTYPES
from fixtures.tensormap.registry import RuleFailure
from fixtures.tma_store import reduce_cases as rc
from fixtures.tma_store import reduce_model as rm


@pytest.mark.parametrize("level,per", [("smoke", 1), ("standard", 34), ("full", 100)])
def test_reduce_cases_cover_every_allowed_pair(level, per):
    cases = ts.generate_reduce(level)
    s = ts.reduce_summary(cases)
    pairs = {(c.op, c.store.dtype) for c in cases}
    assert pairs == set(rm.ALLOWED)
    assert all(n == per for n in s["pair"].values()), s["pair"]
    if level == "standard":
        assert s["total"] >= 1000
    assert len({c.id for c in cases}) == len(cases)
    assert all(c.id == f"{c.op}-" + c.id.split("-", 1)[1] for c in cases)
    assert all(min(c.store.coords) >= 0 for c in cases)


def test_reduce_data_lays_the_operand_pairs_on_the_written_elements():
    c = next(c for c in ts.generate_reduce("standard") if c.op == "add" and c.store.esize == 4
             and not c.id.endswith("-tail16"))
    tensor, smem = ts.write_data(c)
    goff, sbyte = ts.element_pairs(c.store)
    old, val = rc._pairs(c.op, c.store.dtype)
    e = c.store.esize
    got_old = np.stack([tensor[o:o + e] for o in goff]).view(old.dtype).ravel()
    got_val = np.stack([smem[o:o + e] for o in sbyte]).view(val.dtype).ravel()
    pairs = set(zip(old.tolist(), val.tolist()))
    assert all((a, b) in pairs for a, b in zip(got_old.tolist(), got_val.tolist()))
    t2, s2 = ts.write_data(c)
    assert np.array_equal(t2, tensor) and np.array_equal(s2, smem)


def test_a_tail_reduction_always_shows_the_chunk_write():
    """Each -tail16 reduction's operands make the chunk the H100 also writes visible: the
    documented and the hardware's spans differ, so the known issue can match it."""
    tails = [c for c in ts.generate_reduce("standard") if c.id.endswith("-tail16")]
    assert len(tails) > 50
    for c in tails:
        tensor, smem = ts.write_data(c)
        assert ts.expected_span(c, tensor, smem) != ts.expected_span(c, tensor, smem,
                                                                     partial_chunk=True), c.id


def test_tail_suffix_marks_exactly_the_boxes_over_a_partial_chunk():
    for c in ts.generate("standard"):
        if c.expect != "data":
            continue
        p = c.store
        differs = not np.array_equal(ts.written_offsets(p), ts.written_offsets(p, partial_chunk=True))
        assert c.id.endswith("-tail16") == differs, c.id
        if differs:
            assert p.global_dim[0] * p.esize % 16 and "-d0" in c.id


def _run_of(case, after_span, before_span, status=st.OK):
    diff = np.flatnonzero(after_span != before_span)
    return ts.WriteRun(case.id, "CUDA_SUCCESS", status, diff.astype(np.int64),
                       after_span[diff].tobytes())


def test_check_write_passes_the_model_and_names_a_partial_chunk_write():
    c = next(c for c in ts.generate("standard") if c.id.endswith("-tail16"))
    tensor, smem = ts.write_data(c)
    before = ts.span_before(c, tensor)
    want = np.frombuffer(ts.expected_span(c, tensor, smem), dtype=np.uint8)
    ts.check_write(c, _run_of(c, want, before), "store")          # the model: passes
    hw = np.frombuffer(ts.expected_span(c, tensor, smem, partial_chunk=True), dtype=np.uint8)
    with pytest.raises(RuleFailure) as e:
        ts.check_write(c, _run_of(c, hw, before), "store")
    assert "up to the next 16-byte boundary" in str(e.value)
    assert str(e.value).startswith(f"[rule {c.rule}] [case {c.id}]")
    worse = hw.copy()
    worse[ts.GLOBAL_GUARD] ^= 0xFF                                  # and one more byte wrong
    with pytest.raises(RuleFailure) as e:
        ts.check_write(c, _run_of(c, worse, before), "store")
    assert "up to the next 16-byte boundary" not in str(e.value)
    assert "differ from the model" in str(e.value)
    with pytest.raises(RuleFailure, match="kernel status"):
        ts.check_write(c, _run_of(c, want, before, st.UNWRITTEN), "store")


def test_a_write_that_changes_nothing_fails():
    c = next(c for c in ts.generate("standard") if c.expect == "data" and c.rule == "tma-store.model")
    tensor, _ = ts.write_data(c)
    before = ts.span_before(c, tensor)
    with pytest.raises(RuleFailure, match="differ from the model"):
        ts.check_write(c, _run_of(c, before, before), "store")


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_prefetch_cases(level):
    cases = tl.prefetch.generate(level)
    s = tl.prefetch.summary(cases)
    assert set(s["mode"]) == {"tile", "im2col"}
    assert len(s["dtype"]) == 13
    assert s["expect"]["trap"] >= 2
    if level == "standard":
        assert s["expect"]["done"] >= 50
    for c in cases:
        assert c.id == f"{c.mode}-{c.source.id}"
        assert (c.expect == "trap") == (c.source.expect == "trap")
        assert tl.prefetch.case_from_params(c.params()) == c
        row = tl.prefetch._row(c)
        assert len(row) == tl.prefetch.NPARAM and row[0] == tl.prefetch.MODE_CODE[c.mode]


def test_disallowed_pairs_are_left_out_of_the_sweep():
    from fixtures.tma_store.capture import disallowed_cases
    for c in disallowed_cases("standard"):
        assert not rm.is_allowed(c.op, c.store.dtype), (c.op, DTYPES[c.store.dtype].ptx_name)


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_variant_cases(level):
    from fixtures.tma_store import cases as sc
    stores, reds = ts.variant_cases(level), ts.reduce_variant_cases(level)
    assert {n for c in stores for n in sc.VARIANTS if c.id.endswith("-" + n)} == set(sc.VARIANTS)
    for c in stores + reds:
        name = next(n for n in sc.VARIANTS if c.id.endswith("-" + n))
        field_, value = sc.VARIANTS[name]
        assert getattr(c, field_) == value and c.rule == sc.VARIANT_RULES[field_]
        assert "-tail16" not in c.id and min(c.store.coords) >= 0
        assert not (c.built == "template" and c.store.dtype in sc.TF32_TYPES)
        from fixtures.tma_store.runner import case_from_params
        assert case_from_params(c.params()) == c
    ops = {c.op for c in reds}
    assert ops == ({"add"} if level == "smoke" else set(rm.OPS))
    assert len({c.id for c in stores + reds}) == len(stores) + len(reds)
    assert all(ts.written_offsets(c.store).size for c in stores + reds if c.order)


def test_a_load_back_that_misses_the_write_fails():
    """A load-back variant passes on the model's image and fails, naming the load, when the
    image is the load of the tensor before the write."""
    from fixtures.tma_store.runner import expected_load
    c = next(c for c in ts.variant_cases("standard") if c.order == "after-wait")
    tensor, smem = ts.write_data(c)
    before = ts.span_before(c, tensor)
    want = ts.expected_span(c, tensor, smem)
    run = _run_of(c, np.frombuffer(want, dtype=np.uint8), before)
    run.load_status, run.image = st.OK, expected_load(c, want)
    ts.check_write(c, run, "store")
    run.image = expected_load(c, before.tobytes())
    assert run.image != expected_load(c, want)
    with pytest.raises(RuleFailure, match="does not see the written bytes"):
        ts.check_write(c, run, "store")
    run.load_status = st.TIMEOUT
    with pytest.raises(RuleFailure, match="status timeout"):
        ts.check_write(c, run, "store")


def test_a_map_the_device_did_not_build_fails():
    c = next(c for c in ts.variant_cases("standard") if c.built == "zeros")
    tensor, smem = ts.write_data(c)
    before = ts.span_before(c, tensor)
    run = _run_of(c, np.frombuffer(ts.expected_span(c, tensor, smem), dtype=np.uint8), before)
    run.build_status = "ok"
    ts.check_write(c, run, "store")
    run.build_status = "timeout: the mbarrier wait passed its bound (TMA never completed)"
    with pytest.raises(RuleFailure, match="was not built"):
        ts.check_write(c, run, "store")


def test_the_im2col_store_probe_candidate_is_the_load_run_backwards():
    """The probe's candidate (fixtures/tma_store/capture.py) writes each element an im2col
    load reads from where the load puts it: loading the candidate's tensor gives back the
    source at every in-bounds position, and nothing else of the tensor changes."""
    from fixtures.tma_load.through_map import im2col_model as im, tiled_model as tm
    from fixtures.tma_store import capture as cp
    cases = cp.im2col_probe_cases("standard")
    assert len(cases) >= 20 and {c.load.rank for c in cases} == {3, 4, 5}
    for c in cases:
        p = c.load
        assert set(p.offsets) == {0} and c.id.startswith("im2col-store-")
        tensor, smem = cp._probe_data(c)
        after = cp.im2col_candidate(p, tensor, smem)
        off, inb = im.element_offsets(p)
        es = p.esize
        k = np.arange(es)
        written = (off[inb][:, None] + k).reshape(-1)
        untouched = np.ones(after.size, dtype=bool)
        untouched[written] = False
        assert np.array_equal(after[untouched], tensor[untouched]), c.id
        image = np.frombuffer(im.load(p, after, 0).data, dtype=np.uint8)
        P, per = off.shape
        logical = np.arange(P)[:, None] * im.row_pitch(p) + np.arange(per)[None, :] * es
        phys = (tm.swizzle_offset(p.swizzle, logical + p.smem_offset) - p.smem_offset
                if p.swizzle != tm.Swizzle.NONE else logical)
        idx = (phys[inb][:, None] + k).reshape(-1)
        assert np.array_equal(image[idx], smem[idx]), c.id
