"""CPU self-tests pinning the one answer per tensor-map quantity (fixtures/tensormap/
geometry.py, ids.py, params.py): element sizes, swizzle spans, dense strides, the
rank-1 stride list, zero strides, stable hashes and number spellings."""
from __future__ import annotations

import dataclasses
import re

import pytest

from fixtures.host_encode import rule_model
from fixtures.tensormap import enums, geometry as geo, map_layout as ml
from fixtures.tensormap.enums import DataType, DTYPES, Interleave, OobFill, Swizzle
from fixtures.tensormap.ids import num, stable_hash
from fixtures.tensormap.params import encode_params, TiledBox, TiledMap, TiledParams
from fixtures.tma_box import tiled as tma_model, tiled_cases as tma_cases, tiled_validity
from seeds import seed

D = DataType
ELEM_BYTES = {D.UINT8: 1, D.UINT16: 2, D.UINT32: 4, D.INT32: 4, D.UINT64: 8, D.INT64: 8,
              D.FLOAT16: 2, D.FLOAT32: 4, D.FLOAT64: 8, D.BFLOAT16: 2, D.FLOAT32_FTZ: 4,
              D.TFLOAT32: 4, D.TFLOAT32_FTZ: 4,
              D.U4X16_ALIGN8B: 0.5, D.U4X16_ALIGN16B: 1, D.U6X16_ALIGN16B: 1}


def test_element_size_one_answer_per_type():
    assert set(ELEM_BYTES) == set(DataType)
    for d, want in ELEM_BYTES.items():
        assert enums.elem_bytes(d) == want, d.name
        assert enums.ELEM_BYTES[d] == want
        assert DTYPES[d].size == want, d.name          # enums' size is geometry's
        assert rule_model.elem_bytes(d) == want                  # so is the rules model's
        if DTYPES[d].is_packed:
            with pytest.raises(ValueError, match="packed types are not modelled"):
                tma_model.elem_size(d)
        else:
            assert tma_model.elem_size(d) == want


def test_packed_sizes_follow_the_seed_004_sentence():
    """The sentence geometry.py quotes to decide the packed sizes is seed 004's."""
    text = " ".join(seed("004").split())
    for sentence in (
            "CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B copies '16 x U4' packed values to memory "
            "aligned as 8 bytes. There are no gaps between packed values.",
            "CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B copies '16 x U4' packed values to memory "
            "aligned as 16 bytes. There are 8 byte gaps between every 8 byte chunk of packed "
            "values.",
            "CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B copies '16 x U6' packed values to memory "
            "aligned as 16 bytes. There are 4 byte gaps between every 12 byte chunk of packed "
            "values."):
        assert sentence in text
    # 16 values: 8 bytes without gaps; 8 + 8 gap bytes; 12 + 4 gap bytes
    assert 16 * enums.elem_bytes(D.U4X16_ALIGN8B) == 8
    assert 16 * enums.elem_bytes(D.U4X16_ALIGN16B) == 8 + 8
    assert 16 * enums.elem_bytes(D.U6X16_ALIGN16B) == 12 + 4


def test_swizzle_span_one_table():
    assert geo.SWIZZLE_SPAN == {Swizzle.NONE: None, Swizzle.B32: 32, Swizzle.B64: 64,
                                Swizzle.B128: 128, Swizzle.B128_ATOM_32B: 128,
                                Swizzle.B128_ATOM_32B_FLIP_8B: 128, Swizzle.B128_ATOM_64B: 128}
    assert rule_model.span is geo.span
    assert [geo.span(s) for s in range(8)] == [None, 32, 64, 128, 128, 128, 128, None]
    text = " ".join(seed("004").split())
    for n in (32, 64):
        assert f"CU_TENSOR_MAP_SWIZZLE_{n}B requires the bounding box inner dimension to be <= {n}." in text
    assert "CU_TENSOR_MAP_SWIZZLE_128B* require the bounding box inner dimension to be <= 128." in text


def test_dense_strides():
    assert geo.dense_strides(D.FLOAT16, (100, 3, 4)) == (208, 624)
    assert geo.dense_strides(D.FLOAT16, (100, 3, 4), 32) == (224, 672)
    assert geo.dense_strides(D.UINT8, (64,)) == ()
    assert geo.dense_strides(D.UINT8, ()) == ()
    assert geo.dense_strides(D.U4X16_ALIGN8B, (66, 2)) == (48,)      # 33 bytes -> 48
    assert geo.dense_strides(D.U6X16_ALIGN16B, (128, 2, 2), 32) == (128, 256)
    assert geo.dense_layout(D.FLOAT32, (5, 2, 3)) == ((32, 64), 192)
    assert geo.dense_layout(D.UINT8, (16, 2, 3), unit=16, pads=(16, 32)) == ((272, 576), 1728)
    assert geo.dense_layout(D.FLOAT64, (3,)) == ((), 32)
    assert geo.extend_strides(D.UINT8, (64, 4, 4), (), 32) == (64, 256)
    assert geo.extend_strides(D.UINT8, (64, 4, 4), (2048,)) == (2048, 8192)
    assert geo.extend_strides(D.UINT8, (64, 4), (96, 384)) == (96,)
    # the names device_encode and the rules model use are geometry's
    assert rule_model.dense_strides is geo.dense_strides
    for v in geo.dense_strides(D.FLOAT16, (100, 3, 4)):
        assert isinstance(v, int)


def test_rank1_gets_a_one_element_stride_list():
    """Measured on the H200 (known_issues.toml ENC-RANK1-*): rank 1 with an EMPTY globalStrides list is rejected, a one-element list
    accepted. Every valid-map encode path passes one element; host_encode's raw params
    pass exactly what the case says."""
    assert geo.strides_for_encode(D.FLOAT16, 1, (100,), ()) == [208]
    assert geo.strides_for_encode(D.UINT8, 1, (1,), ()) == [16]
    assert geo.strides_for_encode(D.UINT8, 2, (64, 2), (64,)) == [64]
    calls = []

    def fake(*args, **kw):
        calls.append((args, kw))

    TiledMap(D.FLOAT16, 1, 0x1000, (100,), (), (8,), (1,)).encode(fake)
    TiledBox(D.FLOAT16, 1, (100,), (), (8,), (1,), Interleave.NONE, Swizzle.NONE,
              OobFill.NONE, (0,)).map(0x1000).encode(fake)
    encode_params(TiledParams(dtype=6, rank=1, global_dim=(100,), global_strides=(),
                              box_dim=(8,), element_strides=(1,)), 0x1000, encoder=fake)
    assert [c[0][4] for c in calls] == [[208], [208], []]
    assert calls[0] == calls[1]
    assert calls[0][0] == (D.FLOAT16, 1, 0x1000, [100], [208], [8], [1], 0, 0, 0, 0)


def test_zero_stride_is_one_answer():
    """Seed 004: strides "must be a multiple of 16 and less than 2^40": zero is both."""
    assert geo.stride_in_range(0) and geo.stride_ok(0) and geo.stride_ok(0, 32)
    assert not geo.stride_ok(8) and not geo.stride_ok(1 << 40) and not geo.stride_ok(-16)
    p = TiledParams(dtype=7, rank=2, global_dim=(64, 4), global_strides=(0,), box_dim=(32, 4),
                    element_strides=(1, 1))
    assert rule_model.evaluate(p).accept
    load = TiledBox(D.FLOAT32, 2, (64, 4), (0,), (32, 4), (1, 1), Interleave.NONE,
                     Swizzle.NONE, OobFill.NONE, (0, 0))
    assert tiled_validity.rule_violations(load) == []
    assert tiled_validity.rule_violations(dataclasses.replace(load, global_strides=(8,)))


def test_alignment_helpers():
    assert geo.address_align(D.FLOAT16) == 16 and geo.stride_align(D.FLOAT16) == 16
    assert geo.address_align(D.FLOAT16, Interleave.B32) == 32
    assert geo.stride_align(D.U6X16_ALIGN16B) == 32 == geo.stride_align(D.U4X16_ALIGN16B)
    assert geo.stride_align(D.U4X16_ALIGN8B) == 16
    assert geo.round_up(33, 16) == 48 and geo.round_up(16.5, 16) == 32 and geo.round_up(0, 16) == 0


def test_load_is_a_map_plus_coordinates():
    m = TiledMap(D.FLOAT32, 2, 0x4000, (64, 8), (256,), (32, 8), (1, 1), swizzle=Swizzle.B128,
                 fill=OobFill.NAN_REQUEST_ZERO_FMA)
    load = TiledBox.of(m, (4, 1), 128)
    assert load.coords == (4, 1) and load.smem_offset == 128 and load.oob_fill == m.fill
    assert load.map(0x4000) == m
    assert TiledParams(dtype=7, rank=2, global_dim=(64, 8), global_strides=(256,), box_dim=(32, 8),
                       element_strides=(1, 1), swizzle=3, oob_fill=1,
                       address_offset=0x400).to_map(0x3C00) == m


def test_stable_hash_is_the_existing_one():
    assert tma_cases.stable_seed is stable_hash
    assert stable_hash("data", "f16-r1-box64") == stable_hash("data|f16-r1-box64")
    # pinned: every generated tensor and some case choices depend on these values
    assert stable_hash("geom", "f16", 1, "il0", "swz0", "zerofill", "es1") == \
        int.from_bytes(__import__("hashlib").blake2b(b"geom|f16|1|il0|swz0|zerofill|es1",
                                                     digest_size=8).digest(), "little")
    from fixtures.device_encode import cases as de_cases
    assert de_cases._stable is stable_hash         # device encoding uses the same one


NUM_VALUES = sorted({0, 1, 3, 15, 16, 17, 100, 255, 256, 257, 1000, 4096, 65535, 65536,
                     65520, -1, -16, -32768, -32769}
                    | {v for k in range(0, 66) for v in ((1 << k) - 64, (1 << k) - 16, (1 << k) - 1,
                                                          1 << k, (1 << k) + 1, (1 << k) + 16,
                                                          (1 << k) + 64, (1 << k) + 65)})


def test_number_spellings_keep_both_callers_outputs():
    from fixtures.host_encode import bases
    from fixtures.device_encode import field_sweep

    def pow2_before(v: int) -> str:                # device encoding's spelling, pinned
        for k in range(4, 41):
            if v == 1 << k:
                return f"2^{k}"
            if v == (1 << k) - 1 and k >= 16:
                return f"2^{k}-1"
            if v == (1 << k) - 16 and k >= 16:
                return f"2^{k}-16"
        return str(v)
    assert bases._num is num
    assert [num(v) for v in (16, 256, 1 << 32, (1 << 40) - 16, (1 << 31) + 16, 65536, -32768,
                             1000, 100)] == \
        ["16", "2^8", "2^32", "2^40-16", "2^31+16", "2^16", "m2^15", "2^10-24", "100"]
    for v in NUM_VALUES:
        if v >= 0:
            assert num(v, style="pow2") == pow2_before(v) == field_sweep._num(v), v
    # the two spellings differ, e.g.:
    assert (num(16), num(16, style="pow2")) == ("16", "2^4")
    assert (num(65535), num(65535, style="pow2")) == ("2^16-1", "2^16-1")
    assert (num(65537), num(65537, style="pow2")) == ("2^16+1", "65537")
    with pytest.raises(ValueError):
        num(1, style="words")


def test_no_module_copies_the_span_or_size_tables():
    """The copies the geometry module replaced stay gone."""
    import inspect
    import fixtures.host_encode.rules as rules_mod
    import fixtures.tma_box.tiled_cases as cases_mod
    for mod in (rules_mod, tma_model, cases_mod, ml):
        src = inspect.getsource(mod)
        assert not re.search(r"Swizzle\.B32: 32, Swizzle\.B64: 64", src), mod.__name__
        assert "bits // 8" not in src and "bits / 8" not in src, mod.__name__
