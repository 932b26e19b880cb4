"""CPU self-tests of the host-encoding case generator (fixtures/host_encode/cases.py)."""
from __future__ import annotations

import collections
import os
import re

import pytest

from fixtures.host_encode import bases as eb, cases as ec, rule_model, rules_im2col
from fixtures.tensormap import params as P
from fixtures.tensormap.enums import (DataType, Im2colWideMode, Interleave, L2Promotion, OobFill,
                                      Swizzle)

LEVELS = ("smoke", "standard", "full")


def _view(p):
    return p.base if isinstance(p, P.ReplaceParams) else p


@pytest.mark.parametrize("level", LEVELS)
def test_ids_unique_and_readable(level):
    cs = ec.cases(level)
    ids = [c.id for c in cs]
    dup = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not dup, dup[:5]
    for i in ids:
        assert re.fullmatch(r"[A-Za-z0-9_.^+\-]+", i), i
        assert "param" not in i and i.split("-")[-1] in eb.SIDES, i


def test_ids_are_stable():
    """Same list, same order, every time (no hash() or set order involved)."""
    a = [c.id for c in ec.cases("standard")]
    ec.cases.cache_clear()
    eb.base_pool.cache_clear()
    ec._split_pool.cache_clear()
    b = [c.id for c in ec.cases("standard")]
    assert a == b
    # a few ids pinned: a change to them breaks report diffs between runs
    assert any(i.startswith("tiled-") and "-box_dim.range-" in i and i.endswith("-eq257-out")
               for i in a)


@pytest.mark.parametrize("level", LEVELS)
def test_every_rule_has_inside_and_outside_cases(level):
    by_rule = collections.defaultdict(set)
    for c in ec.cases(level):
        by_rule[c.rule].add("in" if c.side == "in" else "out")
    missing = {r.id: {"in", "out"} - by_rule[r.id] for r in rule_model.RULES if by_rule[r.id] != {"in", "out"}}
    assert not missing, missing


@pytest.mark.parametrize("level", LEVELS)
def test_sides_agree_with_the_model(level):
    """An 'in' case satisfies its rule, an 'out'/'far' case breaks it (at its cc)."""
    bad = []
    for c in ec.cases(level):
        sat = rules_im2col.RULES_BY_ID[c.rule].satisfied(c.params, c.side_cc)
        if sat != (c.side == "in"):
            bad.append(c.id)
    assert not bad, bad[:10]


def test_inside_cases_are_valid_when_the_base_is():
    """'in' cases of non-architecture rules are accepted on sm_100 (they move one parameter
    inside its range on a valid base), so 'out' answers are about that rule."""
    bad = []
    for c in ec.cases("standard"):
        if c.side == "in" and not rules_im2col.RULES_BY_ID[c.rule].arch and c.rule not in (
                "dtype.enum", "swizzle.enum"):
            v = rule_model.evaluate(c.params, (10, 0))
            if not v.accept:
                bad.append((c.id, v.ids))
    assert not bad, bad[:10]


def test_outside_cases_mostly_break_only_their_rule():
    """Just-outside cases should isolate their rule: most break nothing else."""
    n = alone = 0
    for c in ec.cases("standard"):
        if c.side == "out" and not rules_im2col.RULES_BY_ID[c.rule].arch:
            n += 1
            ids = rule_model.evaluate(c.params, (10, 0)).ids
            assert c.rule in ids, c.id
            alone += ids == [c.rule]
    assert alone / n > 0.8, f"only {alone} of {n} just-outside cases break their rule alone"


def test_bases_are_valid():
    for kind in (P.TILED, P.IM2COL, P.WIDE):
        pool = eb.base_pool(kind)
        assert pool
        for p in pool:
            v = rule_model.evaluate(p, (10, 0))
            assert v.accept, (eb.base_id(p), v.ids)


@pytest.mark.parametrize("level", LEVELS)
def test_every_enum_value_appears(level):
    seen = collections.defaultdict(set)
    for c in ec.cases(level):
        p = _view(c.params)
        for f in ("dtype", "interleave", "swizzle", "l2_promotion", "oob_fill", "rank"):
            seen[f].add(getattr(p, f))
        if isinstance(p, P.Im2colWideParams):
            seen["mode"].add(p.mode)
    for f, enum_cls in (("dtype", DataType), ("interleave", Interleave), ("swizzle", Swizzle),
                        ("l2_promotion", L2Promotion), ("oob_fill", OobFill),
                        ("mode", Im2colWideMode)):
        missing = {int(m) for m in enum_cls} - seen[f]
        assert not missing, f"{level}: {f} values never used: {missing}"
    assert {1, 2, 3, 4, 5} <= seen["rank"]


def test_every_kind_is_covered():
    kinds = collections.Counter(c.kind for c in ec.cases("standard"))
    assert set(kinds) == {P.TILED, P.IM2COL, P.WIDE, P.REPLACE}, kinds


def test_hopper_tiled_bases_span_everything():
    """On sm_90 (no packed, no 128B_ATOM) the tiled cases still span every value."""
    seen = collections.defaultdict(set)
    for c in ec.cases("standard"):
        p = c.params
        if isinstance(p, P.TiledParams) and rule_model.evaluate(p, (9, 0)).accept:
            for f in ("dtype", "rank", "interleave", "swizzle", "l2_promotion", "oob_fill"):
                seen[f].add(getattr(p, f))
    assert len(seen["dtype"]) == 13 and len(seen["swizzle"]) == 4
    assert len(seen["interleave"]) == 3 and len(seen["l2_promotion"]) == 4
    assert len(seen["oob_fill"]) == 2 and seen["rank"] == {1, 2, 3, 4, 5}


def test_sweep_sizes():
    s, m, f = (len(ec.cases(level)) for level in LEVELS)
    assert s < m < f
    assert m >= 2000, f"standard has only {m} cases"


def test_valid_combinations_on_hopper():
    combos = eb.valid_tiled_combinations(90)
    assert {p.dtype for p in combos} == set(range(13))
    for p in combos:
        assert rule_model.evaluate(p, (9, 0)).accept, eb.base_id(p)
    ids = [eb.base_id(p) for p in combos]
    assert len(ids) == len(set(ids))
    # 13 dtypes x 5 ranks; rank >= 3 adds 16B (4 swizzles) and 32B (swizzle 32B) interleave
    per = 4 * 2 + (4 + 4 + 1) * 3
    floats = 7
    assert len(combos) == per * 4 * (floats * 2 + (13 - floats))


def test_case_addresses_are_offsets():
    for c in ec.cases("smoke"):
        p = _view(c.params)
        assert p.address_offset is None or 0 <= p.address_offset < 4096


def test_the_case_cache_gives_the_generated_cases(tmp_path, monkeypatch):
    """A case list read back from the case cache is the generated one (same cases, same
    order); a cache written by other code (another digest) or spoiled is not read, the
    lists of the two checkouts written last before are kept beside this one's, and an
    unwritable cache only costs the generation."""
    import pickle
    from fixtures.cuda_layer import paths
    monkeypatch.setenv(paths.CASE_CACHE_ENV, str(tmp_path / "cc"))
    fresh = ec._generate("smoke")
    calls = []

    def produce():
        calls.append(1)
        return ec._generate("smoke")
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 1
    (path,) = (tmp_path / "cc").glob("he-smoke-*.pickle")
    assert path.name == f"he-smoke-{paths._fixtures_digest()}.pickle"
    again = paths.cached_on_disk("he-smoke", produce)
    assert again == fresh and [c.id for c in again] == [c.id for c in fresh] and len(calls) == 1
    path.write_bytes(path.read_bytes()[:1000])                  # spoiled: generated again
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 2
    stale = tmp_path / "cc" / "he-smoke-0000.pickle"             # other code's list
    stale.write_bytes(pickle.dumps(("not", "these")))
    os.utime(stale, (1, 1))                                     # the oldest
    monkeypatch.setattr(paths, "_DIGEST", "1111")
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 3
    other = tmp_path / "cc" / "he-smoke-and-more-2222.pickle"   # another name's list
    other.write_bytes(b"")
    monkeypatch.setattr(paths, "_DIGEST", "3333")               # a third checkout
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 4
    assert {p.name for p in (tmp_path / "cc").glob("he-smoke-*.pickle")} == {
        "he-smoke-1111.pickle", "he-smoke-3333.pickle", path.name, other.name}
    assert not stale.exists()        # two other checkouts' lists kept, the oldest removed
    monkeypatch.setattr(paths, "_DIGEST", path.name[len("he-smoke-"):-len(".pickle")])
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 4   # kept: read
    monkeypatch.setenv(paths.CASE_CACHE_ENV, str(tmp_path / "file"))
    (tmp_path / "file").write_text("")                          # not a folder
    assert paths.cached_on_disk("he-smoke", produce) == fresh and len(calls) == 5

