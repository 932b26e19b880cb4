"""CPU self-tests of the rules model (fixtures/host_encode/rules.py): every rule's boundary, both sides."""
from __future__ import annotations

import re

import pytest

from fixtures.host_encode import rule_model, rules as R, rules_im2col
from fixtures.tensormap import params as P
from fixtures.tensormap.enums import DataType, Interleave, Swizzle
from seeds import seed



def _tiled(**kw):
    base = dict(dtype=int(DataType.FLOAT16), rank=3, global_dim=(128, 16, 4),
                global_strides=(256, 4096), box_dim=(64, 8, 2), element_strides=(1, 1, 1))
    base.update(kw)
    return P.TiledParams(**base)


def _im2col(**kw):
    base = dict(dtype=int(DataType.FLOAT16), rank=4, global_dim=(64, 8, 8, 2),
                global_strides=(128, 1024, 8192), element_strides=(1, 1, 1, 1),
                lower_corner=(0, 0), upper_corner=(0, 0), channels_per_pixel=32,
                pixels_per_column=64)
    base.update(kw)
    return P.Im2colParams(**base)


def _wide(**kw):
    base = dict(dtype=int(DataType.FLOAT16), rank=3, global_dim=(64, 8, 2),
                global_strides=(128, 1024), element_strides=(1, 1, 1), lower_corner_w=0,
                upper_corner_w=0, channels_per_pixel=32, pixels_per_column=64, swizzle=2)
    base.update(kw)
    return P.Im2colWideParams(**base)


def _seed_text() -> str:
    """Seed 004 as one line: link targets, list bullets and mojibake normalized."""
    t = seed("004")
    t = re.sub(r"\[([^\]]*)\]\(<[^>]*>\)", r"\1", t)      # [text](<target>) -> text
    t = re.sub(r"\[(CU\w+)\]", r"\1", t)                    # [CUtensorMapSwizzle]
    t = re.sub(r"(?m)^\s*\*\s", " ", t)                       # list bullets
    t = t.replace("\\-", "-").replace("\u00c2\u00a0", " ").replace("\xa0", " ")
    t = re.sub(r"(?<=\w )\u00e2(?= \w)", "-", t)              # "i \u00e2 1": a mojibake minus
    t = t.replace("\u00e2", " ")
    return " ".join(t.split())


def _pieces(sentence: str) -> list[str]:
    return [s for s in re.split(r"(?<=[:.;]) | / ", sentence) if s.strip()]


def test_bases_are_valid():
    for p in (_tiled(), _im2col()):
        assert rule_model.evaluate(p, (9, 0)).accept, rule_model.evaluate(p, (9, 0)).explain()
    assert rule_model.evaluate(_wide(), (10, 0)).accept, rule_model.evaluate(_wide(), (10, 0)).explain()
    assert rule_model.evaluate(_wide(), (9, 0)).ids == ["im2col_wide.arch_cc100"]


@pytest.mark.parametrize("rule", [r for r in rule_model.RULES if r.source == "004"], ids=lambda r: r.id)
def test_sentence_is_quoted_from_seed_004(rule):
    text = _seed_text()
    # Sentences may be joined across list items; each piece must be in the seed.
    for piece in _pieces(rule.sentence):
        assert piece.strip() in text, f"{rule.id}: not in seed 004: {piece!r}"


def test_rule_ids_unique_and_dotted():
    ids = [r.id for r in rule_model.RULES]
    assert len(ids) == len(set(ids))
    for i in ids:
        assert re.fullmatch(r"[a-z0-9_]+(\.[a-z0-9_]+)+", i), i


# (rule id, params just inside, params just outside, cc)
BOUNDARIES = [
    ("map.align64", _tiled(map_offset=64), _tiled(map_offset=32), (9, 0)),
    ("dtype.enum", _tiled(dtype=15), _tiled(dtype=16), (10, 0)),
    ("dtype.packed_arch", _tiled(dtype=12), _tiled(dtype=13), (9, 0)),
    ("swizzle.atom_arch", _tiled(swizzle=3), _tiled(swizzle=4), (9, 0)),
    ("interleave.enum", _tiled(interleave=2), _tiled(interleave=3), (9, 0)),
    ("swizzle.enum", _tiled(swizzle=6), _tiled(swizzle=7), (10, 0)),
    ("l2.enum", _tiled(l2_promotion=3), _tiled(l2_promotion=4), (9, 0)),
    ("fill.enum", _tiled(oob_fill=1), _tiled(oob_fill=2), (9, 0)),
    ("tiled.rank.range", _tiled(rank=5, global_dim=(8,) * 5, global_strides=(16,) * 4,
                                box_dim=(8,) * 5, element_strides=(1,) * 5),
     _tiled(rank=6, global_dim=(8,) * 6, global_strides=(16,) * 5, box_dim=(8,) * 6,
            element_strides=(1,) * 6), (9, 0)),
    ("tiled.rank.range", _tiled(rank=1, global_dim=(8,), global_strides=(), box_dim=(8,),
                                element_strides=(1,)),
     _tiled(rank=0, global_dim=(), global_strides=(), box_dim=(), element_strides=()), (9, 0)),
    ("tiled.rank.interleave_min3", _tiled(interleave=1),
     _tiled(interleave=1, rank=2, global_dim=(128, 16), global_strides=(256,), box_dim=(64, 8),
            element_strides=(1, 1)), (9, 0)),
    ("im2col.rank.range", _im2col(rank=3), _im2col(rank=2), (9, 0)),
    ("im2col.rank.range", _im2col(rank=5), _im2col(rank=6), (9, 0)),
    ("address.align16", _tiled(address_offset=16), _tiled(address_offset=8), (9, 0)),
    ("address.align32_interleave32", _tiled(interleave=2, swizzle=1, address_offset=32),
     _tiled(interleave=2, swizzle=1, address_offset=16), (9, 0)),
    ("address.align32_packed16b", _tiled(dtype=14, address_offset=32),
     _tiled(dtype=14, address_offset=16), (10, 0)),
    ("global_dim.range", _tiled(global_dim=(128, 16, 1 << 32)),
     _tiled(global_dim=(128, 16, (1 << 32) + 1)), (9, 0)),
    ("global_dim.range", _tiled(global_dim=(128, 16, 1)), _tiled(global_dim=(128, 16, 0)), (9, 0)),
    ("global_dim.packed16b_mult128", _tiled(dtype=15, global_dim=(256, 16, 4)),
     _tiled(dtype=15, global_dim=(192, 16, 4)), (10, 0)),
    ("global_dim.packed8b_mult2", _tiled(dtype=13, global_dim=(130, 16, 4)),
     _tiled(dtype=13, global_dim=(129, 16, 4)), (10, 0)),
    ("global_strides.mult16", _tiled(global_strides=(256, 4096 + 16)),
     _tiled(global_strides=(256, 4096 + 8)), (9, 0)),
    ("global_strides.max", _tiled(global_strides=(256, (1 << 40) - 16)),
     _tiled(global_strides=(256, 1 << 40)), (9, 0)),
    ("global_strides.interleave32_mult32", _tiled(interleave=2, swizzle=1, global_strides=(256, 4096 + 32)),
     _tiled(interleave=2, swizzle=1, global_strides=(256, 4096 + 16)), (9, 0)),
    ("global_strides.packed16b_mult32", _tiled(dtype=14, global_strides=(256, 4096 + 32)),
     _tiled(dtype=14, global_strides=(256, 4096 + 16)), (10, 0)),
    ("global_strides.includes_previous", _tiled(global_dim=(128, 4096, 4)),
     _tiled(global_dim=(128, 4097, 4)), (9, 0)),
    ("box_dim.range", _tiled(box_dim=(64, 8, 256)), _tiled(box_dim=(64, 8, 257)), (9, 0)),
    ("box_dim.range", _tiled(box_dim=(64, 8, 1)), _tiled(box_dim=(64, 8, 0)), (9, 0)),
    ("box_dim.inner_mult16", _tiled(box_dim=(8, 8, 2)), _tiled(box_dim=(9, 8, 2)), (9, 0)),
    ("box_dim.packed16b_128", _tiled(dtype=14, box_dim=(128, 8, 2)),
     _tiled(dtype=14, box_dim=(144, 8, 2)), (10, 0)),
    ("element_strides.range", _tiled(element_strides=(1, 8, 1)), _tiled(element_strides=(1, 9, 1)), (9, 0)),
    ("element_strides.range", _tiled(element_strides=(1, 1, 1)), _tiled(element_strides=(0, 1, 1)), (9, 0)),
    ("swizzle.inner_span", _tiled(swizzle=2, box_dim=(32, 8, 2)),
     _tiled(swizzle=2, box_dim=(40, 8, 2)), (9, 0)),
    ("swizzle.inner_span", _im2col(swizzle=1, channels_per_pixel=16),
     _im2col(swizzle=1, channels_per_pixel=24), (9, 0)),
    ("swizzle.u6_needs_no_interleave", _tiled(dtype=15), _tiled(dtype=15, interleave=1), (10, 0)),
    ("swizzle.interleave32_needs_swz32", _tiled(interleave=2, swizzle=1),
     _tiled(interleave=2, swizzle=2), (9, 0)),
    ("swizzle.u6_modes", _tiled(dtype=15, swizzle=6), _tiled(dtype=15, swizzle=5), (10, 0)),
    ("swizzle.u4_16b_modes", _tiled(dtype=14, swizzle=4), _tiled(dtype=14, swizzle=6), (10, 0)),
    ("fill.nan_float_only", _tiled(dtype=9, oob_fill=1), _tiled(dtype=3, oob_fill=1), (9, 0)),
    ("fill.nan_float_only", _tiled(dtype=12, oob_fill=1), _tiled(dtype=13, oob_fill=1), (10, 0)),
    ("im2col.lower_corner.rank4", _im2col(lower_corner=(-128, 127), upper_corner=(0, 127)),
     _im2col(lower_corner=(-129, 0)), (9, 0)),
    ("im2col.upper_corner.rank4", _im2col(upper_corner=(127, 0)), _im2col(upper_corner=(128, 0)), (9, 0)),
    ("im2col.lower_corner.rank3", _im2col(rank=3, global_dim=(64, 8, 2), global_strides=(128, 1024),
                                          element_strides=(1, 1, 1), lower_corner=(-32768,),
                                          upper_corner=(0,)),
     _im2col(rank=3, global_dim=(64, 8, 2), global_strides=(128, 1024), element_strides=(1, 1, 1),
             lower_corner=(-32769,), upper_corner=(0,)), (9, 0)),
    ("im2col.upper_corner.rank5", _im2col(rank=5, global_dim=(64, 8, 8, 8, 2),
                                          global_strides=(128, 1024, 8192, 65536),
                                          element_strides=(1,) * 5, lower_corner=(0, 0, 0),
                                          upper_corner=(-16, 0, 0)),
     _im2col(rank=5, global_dim=(64, 8, 8, 8, 2), global_strides=(128, 1024, 8192, 65536),
             element_strides=(1,) * 5, lower_corner=(0, 0, 0), upper_corner=(-17, 0, 0)), (9, 0)),
    ("im2col.upper_corner.rank3", _im2col(rank=3, global_dim=(64, 8, 2), global_strides=(128, 1024),
                                          element_strides=(1, 1, 1), lower_corner=(32767,),
                                          upper_corner=(32767,)),
     _im2col(rank=3, global_dim=(64, 8, 2), global_strides=(128, 1024), element_strides=(1, 1, 1),
             lower_corner=(32767,), upper_corner=(32768,)), (9, 0)),
    ("im2col.lower_corner.rank5", _im2col(rank=5, global_dim=(64, 8, 8, 8, 2),
                                          global_strides=(128, 1024, 8192, 65536),
                                          element_strides=(1,) * 5, lower_corner=(0, 0, 15),
                                          upper_corner=(0, 0, 15)),
     _im2col(rank=5, global_dim=(64, 8, 8, 8, 2), global_strides=(128, 1024, 8192, 65536),
             element_strides=(1,) * 5, lower_corner=(0, 0, 16), upper_corner=(0, 0, 15)), (9, 0)),
    ("im2col.box_nonzero_area", _im2col(upper_corner=(-7, 0)), _im2col(upper_corner=(-8, 0)), (9, 0)),
    ("im2col.channels.max", _im2col(channels_per_pixel=256), _im2col(channels_per_pixel=264), (9, 0)),
    ("im2col.channels.packed16b_128", _im2col(dtype=14, channels_per_pixel=128),
     _im2col(dtype=14, channels_per_pixel=144), (10, 0)),
    ("im2col.pixels.max", _im2col(pixels_per_column=1024), _im2col(pixels_per_column=1025), (9, 0)),
    ("im2col_wide.arch_cc100", _wide(), _wide(), None),
    ("im2col_wide.pixels.max", _wide(pixels_per_column=1024), _wide(pixels_per_column=1025), (10, 0)),
    ("im2col_wide.pixels.max", _wide(mode=1, pixels_per_column=1025), _wide(pixels_per_column=1025), (10, 0)),
    ("im2col_wide.mode.enum", _wide(mode=1), _wide(mode=2), (10, 0)),
    ("im2col_wide.lower_corner.range", _wide(lower_corner_w=-32768), _wide(lower_corner_w=-32769), (10, 0)),
    ("im2col_wide.upper_corner.range", _wide(upper_corner_w=32767, lower_corner_w=32767),
     _wide(upper_corner_w=32768, lower_corner_w=32767), (10, 0)),
    ("im2col_wide.box_nonzero_area", _wide(upper_corner_w=-7), _wide(upper_corner_w=-8), (10, 0)),
    ("im2col_wide.swizzle.subset", _wide(swizzle=4, channels_per_pixel=64),
     _wide(swizzle=1, channels_per_pixel=16), (10, 0)),
    ("im2col_wide.swizzle.packed16b_modes", _wide(dtype=15, swizzle=3, channels_per_pixel=128),
     _wide(dtype=15, swizzle=2, channels_per_pixel=128), (10, 0)),
    ("im2col_wide.swizzle.inner_span", _wide(channels_per_pixel=32), _wide(channels_per_pixel=40), (10, 0)),
    ("arch.tensor_map_cc90", _tiled(), _tiled(), None),
    ("replace.address.align16", P.ReplaceParams(base=_tiled(), new_address_offset=16),
     P.ReplaceParams(base=_tiled(), new_address_offset=8), (9, 0)),
    ("replace.address.align32_interleave32",
     P.ReplaceParams(base=_tiled(interleave=2, swizzle=1), new_address_offset=32),
     P.ReplaceParams(base=_tiled(interleave=2, swizzle=1), new_address_offset=16), (9, 0)),
    ("replace.address.align32_packed16b",
     P.ReplaceParams(base=_tiled(dtype=15), new_address_offset=32),
     P.ReplaceParams(base=_tiled(dtype=15), new_address_offset=16), (10, 0)),
]


def _bid(b):
    return f"{b[0]}-{BOUNDARIES.index(b)}"


@pytest.mark.parametrize("b", BOUNDARIES, ids=_bid)
def test_boundary_both_sides(b):
    rid, inside, outside, cc = b
    rule = rules_im2col.RULES_BY_ID[rid]
    if cc is None:   # architecture rules: the same map on both sides of the cc boundary
        lo = (8, 0) if rid == "arch.tensor_map_cc90" else (9, 0)
        hi = (9, 0) if rid == "arch.tensor_map_cc90" else (10, 0)
        assert rule.satisfied(inside, hi) and not rule.satisfied(outside, lo)
        return
    assert rule.satisfied(inside, cc), f"{rid}: inside case reported as violated"
    assert not rule.satisfied(outside, cc), f"{rid}: outside case reported as satisfied"
    assert rid not in rule_model.evaluate(inside, cc).ids
    v = rule_model.evaluate(outside, cc)
    assert not v.accept and rid in v.ids, v.explain()


def test_every_rule_has_a_boundary_test():
    assert {b[0] for b in BOUNDARIES} == set(rules_im2col.RULES_BY_ID)


def test_verdict_lists_every_broken_rule():
    p = _tiled(map_offset=1, address_offset=8, box_dim=(300, 8, 2), oob_fill=1, dtype=0)
    ids = set(rule_model.evaluate(p, (9, 0)).ids)
    assert {"map.align64", "address.align16", "box_dim.range", "fill.nan_float_only"} <= ids


def test_invalid_enum_does_not_crash_size_rules():
    v = rule_model.evaluate(_tiled(dtype=1000, swizzle=1000), (9, 0))
    assert set(v.ids) == {"dtype.enum", "swizzle.enum"}


def test_replace_rejects_when_base_invalid():
    v = rule_model.evaluate(P.ReplaceParams(base=_tiled(box_dim=(64, 8, 0)), new_address_offset=16))
    assert not v.accept and not v.violated and v.base_violated


def test_null_address_reading():
    assert rule_model.evaluate(_tiled(address_offset=None)).accept


def test_element_size_of_packed_types():
    assert rule_model.elem_bytes(DataType.U4X16_ALIGN8B) == 0.5
    assert rule_model.elem_bytes(DataType.U4X16_ALIGN16B) == 1.0
    assert rule_model.elem_bytes(DataType.U6X16_ALIGN16B) == 1.0
    assert rule_model.elem_bytes(DataType.FLOAT64) == 8


def test_dense_strides():
    assert rule_model.dense_strides(DataType.FLOAT16, (100, 3, 5)) == (208, 624)
    assert rule_model.dense_strides(DataType.UINT8, (8, 4), align=32) == (32,)
    assert rule_model.dense_strides(DataType.UINT8, (8,)) == ()


def test_ambiguous_rules_say_so():
    for rid in ("global_strides.includes_previous", "element_strides.range",
                "im2col.box_nonzero_area", "dtype.packed_arch", "swizzle.atom_arch"):
        assert rules_im2col.RULES_BY_ID[rid].reading, rid
