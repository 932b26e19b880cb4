"""CPU self-tests of the TMA write suites' cases and checks (fixtures/tma_store: reductions,
the span arithmetic, the write checks against an engine Run; fixtures/tma_load/prefetch.py
and its kernel row)."""
from __future__ import annotations

import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fixtures.tma_load as tl
import fixtures.tma_store as ts
from fixtures.cuda_layer import build, status as st
from fixtures.engine import Run
from fixtures.engine.pool import GLOBAL_GUARD
from fixtures.plugins.known_issues.entries import load
from fixtures.rules.registry import RuleFailure
from fixtures.tensormap.enums import DTYPES
from fixtures.tma_box import element_values, im2col as im
from fixtures.tma_store import reduce_cases as rc, reduce_model as rm
from fixtures.tma_store.checks import expected_load

ROOT = Path(__file__).resolve().parent.parent


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
    return Run(case.id, "CUDA_SUCCESS", status, changed_at=diff.astype(np.int64),
               changed_to=after_span[diff].tobytes())


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
    assert e.value.errors[0].facts == {"outcome": "bytes", "equals": "model-with-dim0-chunk"}
    entry = next(k for k in load(ROOT / "known_issues.toml") if k.id == "STORE-DIM0-CHUNK")
    assert entry.explains(e.value.errors)[0]                      # its known issue absorbs it
    worse = hw.copy()
    worse[GLOBAL_GUARD] ^= 0xFF                                  # and one more byte wrong
    with pytest.raises(RuleFailure) as e:
        ts.check_write(c, _run_of(c, worse, before), "store")
    assert "up to the next 16-byte boundary" not in str(e.value)
    assert "differ from the model" in str(e.value)
    assert e.value.errors[0].facts == {"outcome": "bytes"}
    assert not entry.explains(e.value.errors)[0]                  # ...and not this one
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
        assert pickle.loads(pickle.dumps(c)) == c          # cases cross as themselves
        # kernels/tma_prefetch.cu's row: mode (0 tile, 1 im2col), rank, coords[5], offsets[3]
        p = c.source.load
        row = tl.PREFETCH.row(c, 0, 0, 0)
        assert len(row) == PREFETCH_NPARAM and row[:2] == [MODE[c.mode], c.rank], c.id
        assert row[2:2 + c.rank] == list(p.coords) and not any(row[2 + c.rank:7]), c.id
        offsets = list(p.offsets) if c.mode == "im2col" else []
        assert row[7:] == offsets + [0] * (3 - len(offsets)), c.id


MODE = {"tile": 0, "im2col": 1}       # kernels/tma_prefetch.cu: mode 0 .tile, mode 1 .im2col
PREFETCH_NPARAM = int(re.search(r"#define TMA_PREFETCH_NPARAM (\d+)",
                                (build.KERNEL_DIR / "tma_prefetch.cu").read_text()).group(1))


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
        assert pickle.loads(pickle.dumps(c)) == c          # cases cross as themselves
    ops = {c.op for c in reds}
    assert ops == ({"add"} if level == "smoke" else set(rm.OPS))
    assert len({c.id for c in stores + reds}) == len(stores) + len(reds)
    assert all(ts.written_offsets(c.store).size for c in stores + reds if c.order)


def test_a_load_back_that_misses_the_write_fails():
    """A load-back variant passes on the model's image and fails, naming the load, when the
    image is the load of the tensor before the write."""
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
    with pytest.raises(RuleFailure) as e:                      # no build status: not built
        ts.check_write(c, run, "store")
    assert str(e.value).endswith("from 128 zero bytes) was not built: it was not built")
    run.build_status = st.OK
    ts.check_write(c, run, "store")
    run.build_status = st.TIMEOUT
    with pytest.raises(RuleFailure) as e:
        ts.check_write(c, run, "store")
    assert str(e.value).startswith(f"[rule tma-write.device-built-map] [case {c.id}] ")
    assert str(e.value).endswith(
        "was not built: the building warp reported timeout: the mbarrier wait passed its "
        "bound (TMA never completed)")
    # a "template" build whose template (a host map of another tensor) did not encode
    t = next(c for c in ts.variant_cases("standard") if c.built == "template")
    tensor, smem = ts.write_data(t)
    run = _run_of(t, np.frombuffer(ts.expected_span(t, tensor, smem), dtype=np.uint8),
                  ts.span_before(t, tensor))
    run.build_status, run.template_status = st.OK, "CUDA_SUCCESS"
    ts.check_write(t, run, "store")
    run.template_status = "CUDA_ERROR_INVALID_VALUE"
    with pytest.raises(RuleFailure) as e:
        ts.check_write(t, run, "store")
    assert str(e.value).endswith("(tensormap.replace of every field, from a host map of another "
                                 "tensor) was not built: its template did not encode: "
                                 "CUDA_ERROR_INVALID_VALUE")


def test_the_im2col_write_model_is_the_load_run_backwards():
    """fixtures/tma_store/im2col_writes.py write(): a store writes each element an im2col load
    (offsets 0) reads from where the load puts it: loading the tensor after the store gives
    back the source at every in-bounds position (TF32 aside: the load rounds, the store
    keeps the bits as a tiled store does), and nothing else of the tensor changes."""
    from fixtures.tma_store import im2col_writes as iw
    stores = [c for c in iw.generate("standard") if c.op == "store"]
    assert {c.load.rank for c in stores} == {3, 4, 5}
    for c in stores[::7]:
        p = c.load
        tensor, smem = iw.data(c)
        after = np.frombuffer(iw.write(p, "store", tensor, smem, 0), dtype=np.uint8)
        goff, sbyte = iw.element_pairs(p)
        k = np.arange(p.esize)
        written = (goff[:, None] + k).reshape(-1)
        untouched = np.ones(after.size, dtype=bool)
        untouched[written] = False
        assert np.array_equal(after[untouched], tensor[untouched]), c.id
        assert np.array_equal(after[written], smem[(sbyte[:, None] + k).reshape(-1)]), c.id
        if p.dtype in element_values.BIT_ALTERING:
            continue
        image = np.frombuffer(im.load(p, after, 0).data, dtype=np.uint8)
        idx = (sbyte[:, None] + k).reshape(-1)
        assert np.array_equal(image[idx], smem[idx]), c.id


def test_an_im2col_reduction_reduces_exactly_what_the_store_writes():
    """A reduction through an im2col map changes the elements the store through it would
    write, each to reduce_model.reduce(op, type, old, source element), and nothing else;
    its operands change most elements (the edge lists), so a missed element shows."""
    from fixtures.tma_store import im2col_writes as iw, reduce_model as rm
    reds = [c for c in iw.generate("standard") if c.op != "store"]
    assert {c.op for c in reds} == set(rm.OPS)
    for c in reds[::5]:
        p = c.load
        tensor, smem = iw.data(c)
        assert rm.is_allowed(c.op, p.dtype), c.id
        goff, sbyte = iw.element_pairs(p)
        u = np.dtype(f"u{p.esize}")
        k = np.arange(p.esize)
        old = np.ascontiguousarray(tensor[(goff[:, None] + k).reshape(-1)]).view(u)
        val = np.ascontiguousarray(smem[(sbyte[:, None] + k).reshape(-1)]).view(u)
        after = np.frombuffer(iw.write(p, c.op, tensor, smem, 0), dtype=np.uint8)
        got = np.ascontiguousarray(after[(goff[:, None] + k).reshape(-1)]).view(u)
        assert np.array_equal(got, rm.reduce(c.op, p.dtype, old, val)), c.id
        rest = np.ones(after.size, dtype=bool)
        rest[(goff[:, None] + k).reshape(-1)] = False
        assert np.array_equal(after[rest], tensor[rest]), c.id


def test_im2col_write_cases_keep_to_what_was_measured():
    """The sweep's maps have non-negative corners and coordinates, no interleave and no
    element read twice; ids are unique and name op, type, rank, swizzle and position;
    the corner cases have a negative lower corner and every element inside the tensor,
    or a positive upper corner and a pixel past the spatial edge; the standard sweep covers every non-packed type, every swizzle, ranks 3-5
    and the three positions."""
    from fixtures.tensormap.enums import Interleave
    from fixtures.tma_store import im2col_writes as iw
    for level, lo, hi in (("smoke", 6, 20), ("standard", 1000, 3000)):
        cs = iw.generate(level)
        assert lo <= len(cs) <= hi and len({c.id for c in cs}) == len(cs)
        for c in cs:
            p = c.load
            assert min(p.lower_corner) >= 0 and max(p.upper_corner) <= 0, c.id
            assert min(p.coords) >= 0 and not iw._past_spatial_edge(p), c.id
            assert im.base_in_box(p), c.id
            assert p.interleave == Interleave.NONE and set(p.offsets) == {0}, c.id
            off, inb = im.element_offsets(p)
            assert np.unique(off[inb]).size == off[inb].size, c.id
            assert c.id.startswith("im2col-" if c.op == "store" else f"{c.op}-im2col-"), c.id
    s = iw.summary(iw.generate("standard"))
    assert len(s["dtype"]) == 13 and len(s["swizzle"]) == 4 and set(s["rank"]) == {"r3", "r4", "r5"}
    assert {"inside", "crossing", "outside", "tail16"} <= set(s["position"])
    for c in iw.corner_cases("full"):
        p = c.load
        assert (min(p.lower_corner) < 0 and im.element_offsets(p)[1].all()) or \
            (min(p.lower_corner) == 0 and max(p.upper_corner) > 0 and iw._past_spatial_edge(p)), c.id
        assert c.rule == "tma-write.im2col-corner-outside"


def test_an_im2col_write_that_misses_fails_its_rule_and_names_the_byte():
    """check_write on an im2col store whose GPU bytes differ from the model in one element:
    [rule tma-store.im2col] [case id], the map's corners, and which pixel and channel the
    byte belongs to."""
    from fixtures.rules.registry import RuleFailure
    from fixtures.tma_store import im2col_writes as iw
    c = next(c for c in iw.generate("standard") if c.op == "store" and c.id.endswith("-inside"))
    tensor, smem = ts.write_data(c)
    before = ts.span_before(c, tensor)
    want = np.frombuffer(ts.expected_span(c, tensor, smem), dtype=np.uint8).copy()
    goff, _ = iw.element_pairs(c.load)
    want[GLOBAL_GUARD + int(goff[0])] ^= 0x40
    run = _run_of(c, want, before)
    with pytest.raises(RuleFailure) as info:
        ts.check_write(c, run, "im2col store")
    msg = str(info.value)
    assert msg.startswith(f"[rule tma-store.im2col] [case {c.id}] 1 byte(s)"), msg
    assert "corners" in msg and "written by pixel row 0 channel" in msg, msg


def test_the_im2col_probe_bookkeeping_on_a_fake_child(monkeypatch):
    """capture.im2col_probe on CPU, its isolated child replaced: in-bounds writes return
    the model's bytes (one of them altered), the others trap. The report counts each
    part, names the one that differs and every trap by its position."""
    from fixtures import engine
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.tma_store import capture as cp
    cases = {c.id: c for c in cp.im2col_probe_cases("standard")}
    inside = {i for i, c in cases.items() if cp.im2col_in_bounds(c.load)}
    spoiled = sorted(inside)[0]

    def fake(target, op, cs, *a, **k):      # the engine's target: the cases themselves
        assert target is engine.run_cases and op == ts.WRITES
        if any(c.id not in inside for c in cs):
            return Outcome("cuda_error", error="CUDA_ERROR_ILLEGAL_INSTRUCTION", poisoned=True)
        out = {}
        for c in cs:
            tensor, smem = ts.write_data(c)
            after = np.frombuffer(ts.expected_span(c, tensor, smem), dtype=np.uint8).copy()
            if c.id == spoiled:
                after[GLOBAL_GUARD] ^= 1
            out[c.id] = _run_of(c, after, ts.span_before(c, tensor))
        return Outcome("returned", value=out)

    monkeypatch.setattr(cp, "run_isolated", fake)
    gpu = SimpleNamespace(arch="sm_90a", sm=90, ordinal=0)
    res = cp.im2col_probe("standard", gpu, None)
    lines = cp.im2col_report(res)
    n_in, n_out = len(inside), len(cases) - len(inside)
    assert lines[0].endswith(f"{n_in - 1} of {n_in} equal the im2col load run backwards; "
                             "1 differ, 0 faulted"), lines[0]
    assert lines[1].endswith(f"0 of {n_out} equal the im2col load run backwards; 0 differ, "
                             f"{n_out} faulted"), lines[1]
    assert lines[2].startswith(f"  differs: {spoiled} CUDA_SUCCESS 0 1")
    assert sum(x.startswith("  fault: ") for x in lines) == n_out
