"""Shared-memory placement cases (CPU only): a destination (a store: its source) at
16-byte steps past a 1024-byte boundary, one geometry per swizzle mode; off 128 bytes the
model calls the copy a trap with CUDA_ERROR_MISALIGNED_ADDRESS (the Programming Guide's
bound, the outcome measured), at a multiple of 128 the box swizzled by address; the
cases stand apart from the sweep's, whose ids they leave as they were."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.tma_load as tl
import fixtures.tma_store as ts
from fixtures.rules.registry import get, measured
from fixtures.tensormap.enums import Swizzle
from fixtures.tma_box import im2col, im2col_cases, smem_image, tiled, tiled_cases, tiled_validity
from fixtures.tma_store import reduce_cases


@pytest.mark.parametrize("level", ["standard", "full"])
def test_every_swizzle_mode_at_its_offsets(level):
    cases = tiled_cases.placement_cases(level)
    sweep = {c.id for c in tiled_cases.generate(level)}
    assert not sweep & {c.id for c in cases} and len({c.id for c in cases}) == len(cases)
    by_mode: dict = {}
    for c in cases:
        off = c.load.smem_offset
        assert c.id.endswith(f"-dst+{off}") and 16 <= off < 1024 and off % 16 == 0
        assert c.expect == ("data" if off % 128 == 0 else "trap"), c.id
        by_mode.setdefault(c.load.swizzle, set()).add(off)
    assert set(by_mode) == {Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128}
    for swz, offs in by_mode.items():
        if level == "full":      # every step, but one the sweep's own -dst+N case has
            missing = set(range(16, 1024, 16)) - offs
            assert all(f"{c.id.rsplit('-dst+', 1)[0]}-dst+{o}" in sweep
                       for o in missing for c in cases if c.load.swizzle == swz), (swz, missing)
        else:       # standard: a multiple of 128 each, a trap for two modes (im2col: the others)
            want = 2 if swz in (Swizzle.NONE, Swizzle.B64) else 1
            assert len(offs) == want and sum(o % 128 == 0 for o in offs) == 1, (swz, offs)
    smoke = tiled_cases.placement_cases("smoke")       # one trap: every run's lane has work
    assert len(smoke) == 1 and smoke[0].expect == "trap" and smoke[0].load.swizzle == Swizzle.B128


def test_off_128_bytes_is_a_measured_trap_and_a_multiple_a_box_swizzled_by_address():
    cases = tiled_cases.placement_cases("full")
    trap = next(c for c in cases if c.expect == "trap" and c.load.swizzle == Swizzle.B128)
    want = tiled.load(trap.load, tiled_cases.global_bytes(trap), 0)
    assert (want.kind, want.error) == ("trap", tiled_validity.MISALIGNED_ERROR)
    assert tiled_validity.SMEM_ALIGN_QUOTE in want.reason
    for rule in ("tma-load.smem-misaligned", "tma-store.smem-misaligned"):
        r = get(rule)
        assert measured(rule) and r.evidence and tiled_validity.SMEM_ALIGN_QUOTE in r.reading
    ok = next(c for c in cases if c.expect == "data" and c.load.swizzle == Swizzle.B128
              and c.load.smem_offset == 384)
    got = tiled.load(ok.load, tiled_cases.global_bytes(ok), 0)
    flat, _ = tiled.logical_box(ok.load, tiled_cases.global_bytes(ok), 0)
    # PTX ISA 5.5.7: the pattern follows the address: chunk bits [4,7) ^ row bits [7,10)
    idx = np.arange(flat.size) + 384
    phys = (idx ^ (((idx >> 7) & 7) << 4)) - 384
    image = np.full(tiled.copy_bytes(ok.load), smem_image.POISON, dtype=np.uint8)
    image[phys] = flat.reshape(-1)
    assert got.kind == "data" and got.data == image.tobytes()


def test_an_empty_parameter_set_gives_the_lane_no_job():
    """pytest parametrizes a test with no case as one skipped item whose parameter is
    NOTSET: the trap lane takes no job of it (it used to end the run in INTERNALERROR)."""
    from fixtures.engine.suite import RunsAlone
    from fixtures.tma_load.operations import TILED
    assert RunsAlone(TILED, "misplaced_case").job({"misplaced_case": object()}, None, "/x") is None
    assert RunsAlone(TILED, "misplaced_case").job({}, None, "/x") is None


def test_the_stores_take_the_same_placements():
    loads = [c for c in tiled_cases.placement_cases("standard")
             if tiled_cases.derived_placement(c, "standard")]
    stores = ts.placement_cases("standard")
    assert [s.id for s in stores] == [ts.store_id(c.id) for c in loads]
    for s in stores:
        assert s.rule == (ts.MISALIGNED_RULE if s.expect == "trap" else s.rule)
        assert (s.expect == "trap") == bool(s.store.smem_offset % 128), s.id


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_every_operation_has_its_placements(level):
    """Stores, reductions and multicast take the loads' placement cases (at full every
    multiple of 128 and each residue mod 128 once per swizzle mode, at standard the
    multiples of 128 and one mode's trap: traps cost the trap lane ~0.2 s each); im2col has its own
    geometry per mode at the same offsets; each trap's rule is the measured one."""
    loads = tiled_cases.placement_cases(level)
    derived = [c for c in loads if tiled_cases.derived_placement(c, level)]
    ops = {"store": (ts.placement_cases(level), ts.MISALIGNED_RULE),
           "reduce": (ts.reduce_placement_cases(level), ts.REDUCE_MISALIGNED_RULE),
           "multicast": (tl.multicast.placement_cases(level), tl.multicast.MISALIGNED_RULE),
           "im2col": (im2col_cases.placement_cases(level), "tma-load.smem-misaligned")}
    assert len(ops["store"][0]) == len(ops["multicast"][0]) == len(derived)
    for name, (cases, rule) in ops.items():
        traps = [c for c in cases if c.rule == rule]
        assert traps, name
        for c in cases:
            off = (c.store if hasattr(c, "store") else c.load).smem_offset
            assert (c.rule == rule) == bool(off % 128), (name, c.id)
    if level == "full":
        by_key: dict = {}
        for c in derived:
            key, off = tiled_cases.placement_of(c)
            by_key.setdefault(key, set()).add(off)
        for key, offs in by_key.items():
            assert {o % 128 for o in offs} == set(range(0, 128, 16)), key
            sweep = {c.id for c in tiled_cases.generate(level)}
            missing = set(range(128, 1024, 128)) - offs
            assert all(f"{key}-dst+{o}" in sweep for o in missing), (key, missing)


def test_an_im2col_load_off_128_bytes_is_a_trap():
    c = next(c for c in im2col_cases.placement_cases("standard") if c.expect == "trap")
    want = im2col.load(c.load, im2col_cases.global_bytes(c), 0)
    assert (want.kind, want.error) == ("trap", tiled_validity.MISALIGNED_ERROR)


def test_a_misplaced_source_lays_its_bytes_inside_the_source():
    """A store or reduction source off 128 bytes under a swizzle: its bytes are laid as at
    the 128-byte line below (the copy traps; the address's own pattern put some outside
    the source, and the harness raised IndexError laying a reduction's operands)."""
    from fixtures.tma_store import model
    for c in ts.placement_cases("full"):
        if c.expect == "trap" and c.store.swizzle != Swizzle.NONE:
            _, sbyte = tiled.byte_pairs(c.store)
            assert sbyte.min() >= 0 and sbyte.max() < model.source_bytes(c.store), c.id
    for c in ts.reduce_placement_cases("full"):
        reduce_cases.data(c)            # raised IndexError at 224, 432, ... under 128B swizzle


def test_a_harness_exception_in_the_trap_child_is_the_harness_s(monkeypatch):
    """A case that must trap whose child raised (the harness's own code, not a CUDA error)
    is a harness error, never the rule's failure."""
    from fixtures.cuda_layer.faults import HarnessError
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine import trap_check
    monkeypatch.setattr(trap_check, "run_alone", lambda *a, **k: Outcome("exception", error="IndexError: x"))
    c = next(c for c in tiled_cases.placement_cases("standard") if c.expect == "trap")
    with pytest.raises(HarnessError, match="IndexError"):
        trap_check.expect_trap(c, tl.TILED, None, None, rule="tma-load.smem-misaligned",
                          reason="r", error=tiled_validity.MISALIGNED_ERROR)


def test_a_misplaced_case_passes_only_on_the_misaligned_address_error(monkeypatch):
    """expect_misaligned_trap: the case passes on CUDA_ERROR_MISALIGNED_ADDRESS only; a
    completed copy or another error fails the case's measured rule."""
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine import trap_check
    from fixtures.rules.registry import RuleFailure
    c = next(c for c in tiled_cases.placement_cases("standard") if c.expect == "trap")
    for out, ok in ((Outcome("cuda_error", error=tiled_validity.MISALIGNED_ERROR), True),
                    (Outcome("cuda_error", error=tiled_validity.TRAP_ERROR), False),
                    (Outcome("returned", value={}), False)):
        monkeypatch.setattr(trap_check, "run_alone", lambda *a, _o=out, **k: _o)
        if ok:
            trap_check.expect_misaligned_trap(c, tl.TILED, None, None, rule="tma-load.smem-misaligned",
                                         smem_offset=c.load.smem_offset)
        else:
            with pytest.raises(RuleFailure, match=r"\[rule tma-load.smem-misaligned\]"):
                trap_check.expect_misaligned_trap(c, tl.TILED, None, None,
                                             rule="tma-load.smem-misaligned",
                                             smem_offset=c.load.smem_offset)
