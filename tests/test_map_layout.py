"""Self-tests of fixtures/tensormap/map_layout.py with a fake encoder of known layout (CPU only)."""
from __future__ import annotations

import math

import pytest

from fixtures.tensormap import map_layout as ml
from fixtures.tensormap.encode import EncodeResult
from fixtures.tensormap.enums import DTYPES

M32 = (1 << 32) - 1


def fake_encode(dtype, rank, address, dims, strides, box, es, il, swz, l2, fill):
    """A made-up layout: w0 address, w1 small enums, w2..w6 dim-1, w7..w10 stride>>4,
    w11 box-1 | (es-1) << 40, w12 a derived quantity (box bytes), w13 a constant."""
    bad = EncodeResult(1, "CUDA_ERROR_INVALID_VALUE", None)
    if not 1 <= rank <= 5 or address % 16 or any(not 1 <= b <= 256 for b in box):
        return bad
    if any(not 1 <= d <= 1 << 32 for d in dims) or any(not 1 <= e <= 8 for e in es):
        return bad
    if rank > 1 and any(s % 16 or s >= 1 << 40 for s in strides[:rank - 1]):
        return bad
    if il and rank < 3:
        return bad
    if int(dtype) >= 13 or int(swz) >= 4:
        return bad               # like sm_90: the packed types and atomicity are rejected
    w = [0] * 16
    w[0] = address
    w[1] = int(dtype) | (rank - 1) << 4 | int(il) << 8 | int(swz) << 10 | int(l2) << 14 | int(fill) << 16
    for i in range(rank):
        w[2 + i] = (dims[i] - 1) & M32
        w[11] |= (box[i] - 1) << (8 * i) | (es[i] - 1) << (40 + 3 * i)
    for i in range(rank - 1):
        w[7 + i] = strides[i] >> 4
    w[12] = int(math.prod(box) * DTYPES[dtype].size)
    w[13] = 0xC0DE
    return EncodeResult(0, "CUDA_SUCCESS", b"".join(x.to_bytes(8, "little") for x in w))


@pytest.fixture(scope="module")
def layout():
    return ml.measure(fake_encode, ml.default_bases(0x7F00_0000_0000))


def _mask(word, lo, hi):
    return ((1 << hi) - 1 - ((1 << lo) - 1)) << (64 * word)


def test_direct_fields_found_exactly(layout):
    fp = layout.footprints
    assert fp["global_dim[0]"] == _mask(2, 0, 32)
    assert fp["global_dim[4]"] == _mask(6, 0, 32)
    assert fp["global_stride[0]"] == _mask(7, 0, 36)
    assert fp["global_stride[3]"] == _mask(10, 0, 36)
    assert fp["element_stride[1]"] == _mask(11, 43, 46)
    assert fp["fill"] == _mask(1, 16, 17)
    assert fp["l2_promotion"] == _mask(1, 14, 16)
    assert fp["interleave"] == _mask(1, 8, 10)
    assert fp["swizzle"] == _mask(1, 10, 12)


def test_address_bits_walked(layout):
    assert layout.footprints["global_address"] == _mask(0, 4, 57) | (0x7F00_0000_0000 & 0)


def test_derived_bits_are_shared(layout):
    """The derived word (box bytes) moves with box_dim and elemtype: it is reported as
    shared between several fields."""
    box0 = layout.footprints["box_dim[0]"]
    assert box0 & _mask(11, 0, 8) == _mask(11, 0, 8)
    assert box0 & _mask(12, 0, 64)
    assert layout.footprints["elemtype"] & _mask(12, 0, 64)
    assert layout.shared_bits() & _mask(12, 0, 64)
    assert "box_dim[0]" in layout.owners(64 * 12 + 4) or "box_dim[0]" in layout.owners(64 * 12 + 5)


def test_rank_footprint_excludes_dimensions(layout):
    assert layout.footprints["rank"] == _mask(1, 4, 7)


def test_constant_and_table(layout):
    assert layout.always_one & _mask(13, 0, 64) == 0xC0DE << (64 * 13)
    rows = {r["field"]: r for r in layout.table()}
    assert rows["global_dim[0]"]["ranges"] == ["w2[0:32]"]
    assert rows["l2_promotion"]["replaceable"] is False
    js = layout.to_json()
    assert js["schema"] == "tmac-map-layout/1" and len(js["fields"]) == len(ml.all_keys())


def test_ranges_and_words():
    m = _mask(8, 0, 21) | _mask(8, 30, 31) | _mask(9, 63, 64)
    assert ml.ranges(m) == ["w8[0:21]", "w8[30:31]", "w9[63:64]"]
    assert ml.words_of(m) == [8, 9]


def test_key_active():
    assert ml.key_active("box_dim[2]", 3) and not ml.key_active("box_dim[3]", 3)
    assert ml.key_active("global_stride[1]", 3) and not ml.key_active("global_stride[2]", 3)
    assert ml.key_active("rank", 1)


def test_rejected_base_is_an_error():
    b = ml.default_bases(0x1000)[0].with_(box_dim=(300,))
    with pytest.raises(ValueError, match="rejected"):
        ml.measure(fake_encode, [b])
