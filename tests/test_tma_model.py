"""CPU self-tests of the tiled TMA load model (fixtures/tma_box/tiled.py) and of the case
generator (fixtures/tma_box/tiled_cases.py), against hand-worked examples from seed 004
(Driver API 6.30), the model's measured evidence and the CUTLASS/CuTe swizzle definition."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fixtures.tensormap import geometry as geo
from fixtures.tensormap.enums import DataType, dtypes_for, Interleave, OobFill, short, Swizzle
from fixtures.tensormap.params import TiledBox
from fixtures.tma_box import (element_values, smem_image, tiled as tma_model,
                              tiled_cases as tma_cases)
from fixtures.tma_box.smem_image import cute_swizzle, POISON, swizzle_offset
from fixtures.tma_box.tiled import box_counts, load, smem_bytes
from fixtures.tma_box.tiled_validity import rule_violations, trap_reason

F32, U8, F16 = DataType.FLOAT32, DataType.UINT8, DataType.FLOAT16
NONE_IL, ZERO, NAN = Interleave.NONE, OobFill.NONE, OobFill.NAN_REQUEST_ZERO_FMA


def f32_2d(dims, box, coords, *, es=(1, 1), swz=Swizzle.NONE, fill=ZERO, stride=None,
           smem_offset=0):
    stride = stride or geo.dense_strides(F32, dims)[0]
    return TiledBox(F32, 2, tuple(dims), (stride,), tuple(box), tuple(es), NONE_IL, swz,
                     fill, tuple(coords), smem_offset)


def tensor_bytes(host: np.ndarray) -> np.ndarray:
    return np.frombuffer(host.tobytes(), dtype=np.uint8)


def box_of(p, host, n_rows, n_cols, dtype=np.float32):
    r = load(p, tensor_bytes(host))
    assert r.kind == "data"
    n = smem_bytes(p)
    return np.frombuffer(r.data[:n], dtype=dtype).reshape(n_rows, n_cols), r


# ------------------------------------------------------------------ swizzle (CuTe)

@pytest.mark.parametrize("swz,b", [(Swizzle.B32, 1), (Swizzle.B64, 2), (Swizzle.B128, 3)],
                         ids=["swz32", "swz64", "swz128"])
def test_swizzle_is_cute_swizzle_b_4_3(swz, b):
    """CuTe copy_traits_sm90_tma_swizzle.hpp: SWIZZLE_32B/64B/128B == Swizzle<1|2|3,4,3>;
    Swizzle<B,M,S>(o) = o ^ ((o & (((1<<B)-1) << (M+S))) >> S)."""
    o = np.arange(4096)
    want = o ^ ((o & (((1 << b) - 1) << 7)) >> 3)
    assert np.array_equal(swizzle_offset(swz, o), want)
    assert np.array_equal(cute_swizzle(o, b, 4, 3), want)


def test_swizzle_128b_table():
    """The 128B pattern: 16-byte chunk c of 128-byte row r (r < 8) lands at chunk
    c ^ r; the pattern repeats every 1024 bytes."""
    for r in range(16):
        for c in range(8):
            for byte in (0, 7, 15):
                logical = r * 128 + c * 16 + byte
                assert swizzle_offset(Swizzle.B128, logical) == r * 128 + ((c ^ (r % 8)) * 16) + byte


def test_swizzle_32b_table():
    """32B swizzle with 32-byte rows: rows 0-3 keep their two chunks, rows 4-7 swap
    them (bit 4 ^= bit 7); repeats every 256 bytes."""
    got = [[swizzle_offset(Swizzle.B32, row * 32 + c * 16) // 16 - row * 2 for c in (0, 1)]
           for row in range(16)]
    assert got == [[0, 1]] * 4 + [[1, 0]] * 4 + [[0, 1]] * 4 + [[1, 0]] * 4


def test_swizzle_64b_table():
    """64B swizzle with 64-byte rows: chunk c of row k lands at c ^ ((k >> 1) & 3);
    repeats every 512 bytes (8 rows)."""
    for k in range(16):
        for c in range(4):
            assert swizzle_offset(Swizzle.B64, k * 64 + c * 16) == k * 64 + (c ^ ((k >> 1) & 3)) * 16


@pytest.mark.parametrize("swz", [Swizzle.B32, Swizzle.B64, Swizzle.B128],
                         ids=["swz32", "swz64", "swz128"])
def test_swizzle_permutes_each_128_byte_line(swz):
    """A bijection that keeps every byte inside its 128-byte line and its 16-byte
    chunk contents together; an involution."""
    o = np.arange(8192)
    s = swizzle_offset(swz, o)
    assert sorted(s.tolist()) == o.tolist()
    assert np.array_equal(s // 128, o // 128)
    assert np.array_equal(s % 16, o % 16)
    assert np.array_equal(swizzle_offset(swz, s), o)
    repeat = smem_image.SWIZZLE_REPEAT[swz]
    assert np.array_equal(s[repeat:2 * repeat] - repeat, s[:repeat])
    assert not np.array_equal(s[:repeat], o[:repeat])


def test_swizzled_load_places_rows():
    """f32 box 32x8 (128-byte rows) with 128B swizzle: row r's chunk c at chunk c ^ r."""
    host = np.arange(32 * 8, dtype=np.float32).reshape(8, 32)
    p = f32_2d((32, 8), (32, 8), (0, 0), swz=Swizzle.B128)
    r = load(p, tensor_bytes(host))
    got = np.frombuffer(r.data[:1024], dtype=np.float32).reshape(8, 8, 4)   # row, chunk, elem
    for row in range(8):
        for c in range(8):
            assert list(got[row, c ^ row]) == list(host[row, 4 * c:4 * c + 4])


def test_swizzle_follows_the_address_off_the_repeat():
    """tile-ai/tilelang#2379: a 128B-swizzled destination only 128-byte aligned
    gets the pattern of its address bits: at offset 128 the first row is XORed by 1."""
    host = np.arange(32 * 2, dtype=np.float32).reshape(2, 32)
    p = f32_2d((32, 2), (32, 2), (0, 0), swz=Swizzle.B128, smem_offset=128)
    r = load(p, tensor_bytes(host))
    got = np.frombuffer(r.data[:256], dtype=np.float32).reshape(2, 8, 4)
    assert list(got[0, 1]) == list(host[0, 0:4])      # chunk 0 -> 1
    assert list(got[1, 2]) == list(host[1, 0:4])      # row at 256: chunk 0 -> 2


# ------------------------------------------------------------------ element strides

def test_element_strides_traverse_and_dim0_stride_is_ignored():
    """Seed 004: "TMA loads ceil(boxDim[i] / elementStrides[i]) elements along
    i-th dimension"; "when interleave is NONE, the first element of this array is
    ignored"."""
    host = np.arange(16 * 10, dtype=np.float32).reshape(10, 16)
    p = f32_2d((16, 10), (8, 5), (4, 1), es=(4, 2))
    assert box_counts(p) == (8, 3)
    got, _ = box_of(p, host, 3, 8)
    assert np.array_equal(got, host[[1, 3, 5], 4:12])


def test_interleave_reads_chunks_and_one_element_of_dim_rank_minus_2():
    """INTERLEAVE_EVIDENCE (H200 probe ilprobe15): u8, 16B interleave, box
    16x3x2, element strides (2, 1, 1) at (0, 1, 1): dimension 0 steps over
    16-byte chunks (8 chunks 32 bytes apart), dimension 1 (rank - 2) loads one
    element although its box is 3, dimension 2 loads 2."""
    strides = (2048, 2048 * 5)
    p = TiledBox(U8, 3, (32, 5, 4), strides, (16, 3, 2), (2, 1, 1), Interleave.B16,
                  Swizzle.NONE, ZERO, (0, 1, 1))
    assert box_counts(p) == (8, 1, 2)
    assert tma_model.unit_bytes(p) == 16 and tma_model.row_bytes(p) == 128
    assert smem_bytes(p) == 256
    g = np.random.default_rng(1).integers(0, 256, 2048 * 5 * 4, dtype=np.uint8)
    img = np.frombuffer(load(p, g).data, dtype=np.uint8)
    for row, c2 in enumerate((1, 2)):
        for k in range(8):
            src = 2048 * 1 + 2048 * 5 * c2 + 32 * k
            assert list(img[row * 128 + 16 * k: row * 128 + 16 * k + 16]) == list(g[src:src + 16])


def test_box_counts_seed_example():
    """"To load N elements along i-th dimension, boxDim[i] must be set to N *
    elementStrides[i]"; and a box not a multiple loads ceil()."""
    p = f32_2d((64, 64), (16, 12), (0, 0), es=(1, 3))
    assert box_counts(p) == (16, 4)
    p = f32_2d((64, 64), (16, 13), (0, 0), es=(1, 3))
    assert box_counts(p) == (16, 5)


# ------------------------------------------------------------------ out of bounds

def test_straddling_box_zero_fill():
    host = (np.arange(20 * 6, dtype=np.float32) + 1).reshape(6, 20)
    p = f32_2d((20, 6), (8, 4), (16, 4))
    got, r = box_of(p, host, 4, 8)
    want = np.zeros((4, 8), dtype=np.float32)
    want[:2, :4] = host[4:6, 16:20]
    assert np.array_equal(got, want)
    assert r.oob_elements == 32 - 8


def test_negative_coordinates_zero_fill():
    host = (np.arange(16 * 4, dtype=np.float32) + 1).reshape(4, 16)
    p = f32_2d((16, 4), (8, 4), (-4, -2))
    got, _ = box_of(p, host, 4, 8)
    want = np.zeros((4, 8), dtype=np.float32)
    want[2:, 4:] = host[:2, :4]
    assert np.array_equal(got, want)


def test_fully_outside_nan_fill():
    host = np.ones((4, 16), dtype=np.float32)
    p = f32_2d((16, 4), (8, 4), (64, 0), fill=NAN)
    got, r = box_of(p, host, 4, 8, dtype=np.uint32)
    assert (got == element_values.NAN_FILL[F32]).all()
    assert np.isnan(got.view(np.float32)).all()
    assert r.oob_elements == 32


def test_row_padding_is_not_read():
    """Elements past globalDim[0] inside the stride padding are out of bounds."""
    host = np.full((4, 8), 7.0, dtype=np.float32)    # 32-byte stride, dim0 = 5
    p = f32_2d((5, 4), (8, 4), (0, 0), stride=32)
    got, _ = box_of(p, host, 4, 8)
    assert (got[:, :5] == 7).all() and (got[:, 5:] == 0).all()


def test_unwritten_bytes_keep_the_poison():
    host = np.ones((4, 8), dtype=np.float32)
    p = f32_2d((8, 4), (8, 4), (0, 0))
    r = load(p, tensor_bytes(host))
    assert len(r.data) == smem_bytes(p) + smem_image.SMEM_GUARD
    assert set(r.data[smem_bytes(p):]) == {POISON}


def test_nan_fill_patterns_are_nans():
    for dt, pat in element_values.NAN_FILL.items():
        size = tma_model.elem_size(dt)
        v = np.array([pat], dtype={2: np.uint16, 4: np.uint32, 8: np.uint64}[size])
        if dt == DataType.BFLOAT16:
            v = (v.astype(np.uint32) << 16)
            assert np.isnan(v.view(np.float32)).all()
        else:
            assert np.isnan(v.view({2: np.float16, 4: np.float32, 8: np.float64}[size])).all()


# ------------------------------------------------------------------ traps and rules

@pytest.mark.parametrize("dt,c0,traps", [
    (F32, 1, True), (F32, 2, True), (F32, 3, True), (F32, -1, True), (F32, 0, False),
    (F32, 4, False), (F32, 12, False), (F32, -4, False), (U8, 1, True), (U8, 15, True),
    (U8, 17, True), (U8, 61, True), (U8, 100, True), (U8, 16, False)],
    ids=lambda v: str(v) if not isinstance(v, DataType) else short(v))
def test_unaligned_inner_coordinate_traps(dt, c0, traps):
    """Rule tma-load.trap's evidence: f32 inner coordinates 1, 2, 3, -1 trapped, 0, 4, 8, 12, 16, -4
    did not; u8 1, 15, 17, 61, 100 trapped, 16 did not."""
    es = tma_model.elem_size(dt)
    p = TiledBox(dt, 1, (256 // es,), (), (32 // es,), (1,), NONE_IL, Swizzle.NONE, ZERO, (c0,))
    assert bool(trap_reason(p)) == traps
    r = load(p, bytes(256))
    assert r.kind == ("trap" if traps else "data")
    if traps:
        assert r.error == "CUDA_ERROR_ILLEGAL_INSTRUCTION"


def test_rules_from_seed_004():
    ok = f32_2d((64, 8), (32, 8), (0, 0), swz=Swizzle.B128)
    assert rule_violations(ok) == []
    # tilelang#2578: fp16 box of 128 channels (256 B) under 128B swizzle
    bad = TiledBox(F16, 2, (256, 8), (512,), (128, 8), (1, 1), NONE_IL, Swizzle.B128, ZERO, (0, 0))
    assert any("swizzle span" in v for v in rule_violations(bad))
    assert rule_violations(f32_2d((64, 8), (3, 8), (0, 0)))          # 12 B inner box
    assert rule_violations(f32_2d((64, 8), (32, 8), (0, 0), es=(1, 9)))
    assert rule_violations(f32_2d((64, 8), (32, 8), (0, 0), stride=264))
    i32 = TiledBox(DataType.INT32, 2, (64, 8), (256,), (32, 8), (1, 1), NONE_IL,
                    Swizzle.NONE, NAN, (0, 0))
    assert any("NaN" in v for v in rule_violations(i32))
    il = TiledBox(F16, 2, (8, 8), (16,), (8, 8), (1, 1), Interleave.B16, Swizzle.NONE, ZERO, (0, 0))
    assert any("rank >= 3" in v for v in rule_violations(il))
    il32 = TiledBox(F16, 3, (16, 8, 2), (32, 256), (16, 8, 1), (1, 1, 1), Interleave.B32,
                     Swizzle.B64, ZERO, (0, 0, 0))
    assert any("32B swizzle" in v for v in rule_violations(il32))
    with pytest.raises(ValueError):
        load(bad, bytes(8192))


def test_describe_offset_names_the_element():
    p = f32_2d((20, 6), (8, 4), (16, 4))
    assert "box element (1, 0) byte 0" in tma_model.describe_offset(p, 4)
    assert "out of bounds" in tma_model.describe_offset(p, 4 * 4)
    assert "in bounds" in tma_model.describe_offset(p, 0)


# ------------------------------------------------------------------ the generator

def test_generator_levels_and_coverage():
    smoke = tma_cases.generate("smoke")
    std = tma_cases.generate("standard")
    assert 30 <= len(smoke) <= 200
    assert sum(c.expect == "data" for c in std) >= 5000
    want_dt = {short(d) for d in dtypes_for(90)} - {"b4x16", "b4x16p64", "b6x16p32"}
    assert len(want_dt) == 13
    s = tma_cases.summary(std)
    assert set(s["dtype"]) == want_dt
    assert set(s["swizzle"]) == {"swz0", "swz32", "swz64", "swz128"}
    for lvl in (smoke, std):
        seen = {(short(c.load.dtype), short(c.load.swizzle)) for c in lvl}
        assert len(seen) == 13 * 4, "every data type x swizzle at every level"
    ids = " ".join(c.id for c in std)
    for frag in ("il16", "il32", "nanfill", "straddle-lo-d0", "straddle-hi-d4", "negative",
                 "outside-d", "esN", "dst+", "r1-", "r5-"):
        assert frag in ids, frag
    assert any(c.expect == "trap" for c in smoke)


def test_generator_cases_are_valid_and_ids_readable():
    for c in tma_cases.generate("standard"):
        assert rule_violations(c.load) == [], c.id
        assert (c.expect == "trap") == bool(trap_reason(c.load)), c.id
        assert c.id.startswith(short(c.load.dtype) + "-r") or c.id.startswith("trap-")
        assert "param" not in c.id and " " not in c.id
        p = c.load
        ext = p.global_strides[-1] * p.global_dim[-1] if p.rank > 1 else p.global_dim[0] * p.esize
        assert ext <= c.tensor_bytes


def test_generator_is_stable():
    a = tma_cases.generate("standard")
    tma_cases.generate.cache_clear()
    b = tma_cases.generate("standard")
    assert [c.id for c in a] == [c.id for c in b]
    assert a[100] == b[100]
    assert np.array_equal(tma_cases.global_bytes(a[100]), tma_cases.global_bytes(b[100]))


def test_data_holds_special_values():
    c = next(c for c in tma_cases.generate("standard") if c.load.dtype == F32
             and c.tensor_bytes >= 4096)
    v = tma_cases.global_bytes(c).view(np.uint32)
    f = v.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any()
    assert ((v & 0x7F800000) == 0).sum() > 2                 # zeros and subnormals
    assert (v == 0x80000000).any() and (v == 0).any()          # signed zeros


# ------------------------------------------------------------------ measured behaviour

@pytest.mark.parametrize("src,want", [
    (0x6CAD834D, 0x6CAD8000), (0x10B09ED0, 0x10B0A000), (0x3F801FFF, 0x3F802000),
    (0xBF801000, 0xBF800000), (0x3F803000, 0x3F804000), (0xFF7FFFFF, 0xFF800000),
    (0x7FC00000, 0x7FFFE000), (0xFFAF5893, 0x7FFFE000), (0x7F800000, 0x7F800000),
    (0x007FFFFF, 0x00800000), (0x80000001, 0x80000000), (0x00001FFF, 0x00002000)],
    ids=lambda v: f"{v:08x}")
def test_tf32_load_rounding(src, want):
    """BIT_ALTERING_EVIDENCE (H200): TF32 loads round to nearest even on bit 13,
    NaN -> 0x7fffe000, subnormals rounded, for both TF32 types."""
    for dt in (DataType.TFLOAT32, DataType.TFLOAT32_FTZ):
        got = element_values.alter_element_bits(dt, np.array([src], dtype=np.uint32))
        assert int(got[0]) == want, f"{short(dt)}: 0x{src:08x} -> 0x{int(got[0]):08x}"
    for dt in (F32, DataType.FLOAT32_FTZ):
        assert int(element_values.alter_element_bits(dt, np.array([src], np.uint32))[0]) == src


def test_nan_fill_is_0x7ff7_repeated():
    """NAN_FILL_EVIDENCE (H200): 0x7ff7 repeated over the element."""
    for dt, pat in element_values.NAN_FILL.items():
        size = tma_model.elem_size(dt)
        assert element_values.fill_pattern(dt, NAN) == bytes.fromhex("f77f") * (size // 2)
    assert element_values.fill_pattern(DataType.INT32, ZERO) == bytes(4)


def test_swizzled_narrow_rows_start_on_span_boundaries():
    """ROW_PITCH_EVIDENCE (H200): u8 box 16x8 under 64B swizzle: row r's 16 bytes
    at r*64 swizzled: rows 0..3 at bytes 0, 64, 144, 208; gaps keep the poison."""
    host = np.arange(16 * 8, dtype=np.uint8).reshape(8, 16)
    p = TiledBox(U8, 2, (16, 8), (16,), (16, 8), (1, 1), NONE_IL, Swizzle.B64, ZERO, (0, 0))
    assert tma_model.row_pitch(p) == 64 and tma_model.footprint(p) == 512
    assert smem_bytes(p) == 128                       # the transaction count: data only
    r = load(p, tensor_bytes(host))
    img = np.frombuffer(r.data, dtype=np.uint8)
    for row, at in enumerate((0, 64, 144, 208, 256 + 32, 256 + 96, 384 + 48, 384 + 112)):
        assert list(img[at:at + 16]) == list(host[row]), row
    assert (img[16:64] == POISON).all()


def test_the_documented_reading_travels_with_the_load():
    """The letter of seed 004 is a property of the load (a DocumentedLoad), not of the
    model's state: a case runs on each GPU in a thread of its own, and one thread's
    documented reading (test_box_per_seed_004) must not change the box another thread's
    model computes at the same time (a switch in the model's globals did: interleaved
    stores and reductions failed on both GPUs of a two-GPU node)."""
    tiled = tma_model
    p = TiledBox(DataType.INT32, 4, (8, 5, 8, 2), (64, 320, 2560), (4, 3, 3, 1), (1, 1, 1, 1),
                  Interleave.B16, Swizzle.B32, OobFill.NONE, (0, 0, 0, 0))
    d = tiled.documented(p)
    assert tiled.box_counts(p) == (4, 3, 1, 1)                       # measured
    assert tiled.box_counts(d) == (4, 3, 3, 1)                       # seed 004's letter
    assert tiled.unit_bytes(p) == 16 and tiled.unit_bytes(d) == p.esize
    assert tiled.box_counts(p) == (4, 3, 1, 1) and d != p
    assert tiled.box_counts(dataclasses.replace(d, coords=(1, 0, 0, 0))) == (4, 3, 3, 1)
    plain = dataclasses.replace(p, interleave=Interleave.NONE, swizzle=Swizzle.NONE)
    assert tiled.box_counts(tiled.documented(plain)) == tiled.box_counts(plain)
