"""CPU self-tests of the im2col load model (fixtures/tma_box/im2col.py) and its case
generator (fixtures/tma_box/im2col_cases.py): hand-worked examples from the documents'
sentences, the trap rule, the encoder's rules, ids unique, stable and parseable, and the
counts per sweep."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fixtures.tensormap import geometry as geo
from fixtures.tensormap.enums import DataType as DT, Interleave, OobFill, short, Swizzle
from fixtures.tensormap.params import Im2colBox
from fixtures.tma_box import im2col as im, im2col_cases as ic
from fixtures.tma_box.element_values import NAN_FILL
from fixtures.tma_box.smem_image import POISON
from reports import axes


def mk(dt, dims, lower, upper, cpp, ppc, coords, offsets, *, estr=None, swz=Swizzle.NONE,
       fill=OobFill.NONE, smem_offset=0):
    strides, _ = geo.dense_layout(dt, dims, 16)
    rank = len(dims)
    return Im2colBox(dt, rank, tuple(dims), tuple(int(s) for s in strides), tuple(lower),
                      tuple(upper), cpp, ppc, tuple(estr or (1,) * rank), Interleave.NONE, swz,
                      fill, tuple(coords), tuple(offsets), smem_offset)


def tensor(p):
    """Global bytes where each element's bytes spell its own index (distinct values)."""
    n = p.global_strides[-1] * p.global_dim[-1]
    return np.arange(n, dtype=np.uint64).astype(np.uint8)


# ----------------------------------------------------------------------------- the walk
def test_ptx_example_1_pixels():
    """PTX ISA 5.5.4, example 1: sizes C 64, W 9, H 14, N 64; Pixels-per-Column 64;
    lower corners W = H = -1, upper corners W = H = -1; tensor coordinates (7, 7, 4, 0)
    (C, W, H, N); offsets (0, 0). The filter base runs over W in [-1, 9 - 1 - 1] and H in
    [-1, 14 - 1 - 1]: from (W 7, H 4), the next pixel wraps to (W -1, H 5)."""
    p = mk(DT.FLOAT16, (64, 9, 14, 64), (-1, -1), (-1, -1), 8, 64, (8, 7, 4, 0), (0, 0))
    assert im.bounds(p) == [(-1, 7), (-1, 12)]
    pos = im.pixel_positions(p)
    assert pos.shape == (64, 3)
    assert pos[0].tolist() == [7, 4, 0]
    assert pos[1].tolist() == [-1, 5, 0]
    assert pos[9].tolist() == [7, 5, 0]
    assert pos[10].tolist() == [-1, 6, 0]
    assert pos[63].tolist() == [7, 11, 0]


def test_offsets_are_added_to_the_filter_base():
    """PTX ISA 5.5.4: "The im2col offsets ... are added to the filter base coordinates"."""
    a = mk(DT.FLOAT32, (8, 6, 5, 2), (0, 0), (-2, -1), 4, 20, (0, 1, 0, 0), (0, 0))
    b = a.with_(offsets=(2, 1))
    assert (im.pixel_positions(b) - im.pixel_positions(a)).tolist() == [[2, 1, 0]] * 20


def test_upper_corner_is_inclusive_and_entry_0_is_w():
    """UPPER_INCLUSIVE_EVIDENCE, CORNER_ORDER_EVIDENCE: W bounded by entry 0, [lower,
    globalDim - 1 + upper]."""
    p = mk(DT.UINT32, (4, 6, 3), (0,), (0,), 4, 14, (0, 0, 0), (0,))
    assert im.bounds(p) == [(0, 5)]
    assert [tuple(x) for x in im.pixel_positions(p)[:8].tolist()] == \
        [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (0, 1), (1, 1)]
    q = mk(DT.UINT32, (4, 7, 5, 2), (-1, 0), (0, -2), 4, 4, (0, -1, 0, 0), (0, 0))
    assert im.bounds(q) == [(-1, 6), (0, 2)]


def test_walk_w_then_h_then_d_then_n_with_strides():
    """WALK_EVIDENCE: W fastest by its element stride, wrap to the lower corner, the next
    dimension by its stride; past D, N by elementStrides[rank-1]."""
    p = mk(DT.UINT8, (16, 3, 2, 2, 5), (0, 0, 0), (0, 0, 0), 16, 12, (0, 0, 0, 0, 1), (0, 0, 0),
           estr=(1, 2, 1, 1, 2))
    pos = im.pixel_positions(p).tolist()
    assert pos[:6] == [[0, 0, 0, 1], [2, 0, 0, 1], [0, 1, 0, 1], [2, 1, 0, 1], [0, 0, 1, 1],
                       [2, 0, 1, 1]]
    assert pos[8] == [0, 0, 0, 3]
    assert pos[11] == [2, 1, 0, 3]


def test_start_in_the_middle_of_the_box():
    p = mk(DT.UINT8, (32, 5, 4, 3), (-1, -1), (0, 0), 16, 8, (16, 2, 1, 1), (0, 1))
    assert im.pixel_positions(p).tolist()[:4] == [[2, 2, 1], [3, 2, 1], [4, 2, 1], [-1, 3, 1]]


# ----------------------------------------------------------------------------- the bytes
def test_bytes_of_a_small_load():
    """Rows of channelsPerPixel elements from the channel coordinate, in walk order, dense
    without a swizzle; out-of-bounds pixels and channels filled."""
    p = mk(DT.UINT8, (20, 3, 2), (-1,), (0,), 16, 5, (16, -1, 0), (0,))
    g = tensor(p)
    r = im.load(p, g)
    assert r.kind == "data" and len(r.data) == 5 * 16 + 128
    img = np.frombuffer(r.data, dtype=np.uint8)
    s0, s1 = p.global_strides
    for j, (w, n) in enumerate([(-1, 0), (0, 0), (1, 0), (2, 0), (-1, 1)]):
        row = img[16 * j:16 * j + 16]
        for k in range(16):
            ch = 16 + k
            inb = 0 <= w < 3 and ch < 20
            assert row[k] == (g[n * s1 + w * s0 + ch] if inb else 0), (j, k)
    assert (img[80:] == POISON).all()
    assert r.oob_elements == 2 * 16 + 3 * 12


def test_pitch_under_swizzle_and_tx_bytes():
    """PITCH_EVIDENCE: a 16-byte pixel row starts on the span; the count is data bytes."""
    p = mk(DT.UINT8, (32, 9, 2), (0,), (0,), 16, 16, (0, 0, 0), (0,), swz=Swizzle.B128)
    assert im.row_pitch(p) == 128 and im.tx_bytes(p) == 256 and im.footprint(p) == 2048
    assert im.row_pitch(p.with_(swizzle=Swizzle.NONE)) == 16
    img = np.frombuffer(im.load(p, tensor(p)).data, dtype=np.uint8)
    # row 1 (pixel W=1) lands in line 1, its 16-byte chunk XORed with 1: bytes 144..159
    assert img[144:160].tolist() == tensor(p)[32:48].tolist()     # W=1: globalStrides[0] = 32
    assert (img[128:144] == POISON).all()


def test_nan_fill_and_tf32_rounding():
    p = mk(DT.TFLOAT32, (8, 2, 1), (0,), (0,), 8, 3, (0, 0, 0), (0,),
           fill=OobFill.NAN_REQUEST_ZERO_FMA)
    g = np.zeros(p.global_strides[-1] * 1, dtype=np.uint8)
    g[:4] = np.frombuffer(np.uint32(0x3F801FFF).tobytes(), np.uint8)
    img = np.frombuffer(im.load(p, g).data, dtype=np.uint32)
    assert img[0] == 0x3F802000                      # rounded to TF32 (TF32_EVIDENCE)
    assert (img[16:24] == NAN_FILL[DT.TFLOAT32]).all()   # pixel W=2: outside


def test_past_the_last_image_is_all_fill():
    p = mk(DT.FLOAT32, (8, 4, 2), (0,), (0,), 8, 6, (0, 0, 2), (0,))
    r = im.load(p, tensor(p))
    assert r.oob_elements == 48 and set(r.data[:192]) == {0}


def test_describe_offset_names_pixel_and_channel():
    p = mk(DT.FLOAT32, (8, 4, 2), (0,), (0,), 4, 6, (4, 1, 0), (0,))
    text = im.describe_offset(p, 16 + 8)
    assert "pixel 1 (W=2, N=0), channel 6" in text and "in bounds" in text


# ----------------------------------------------------------------------------- rules
def test_trap_reason_unaligned_channel():
    p = mk(DT.FLOAT32, (16, 4, 2), (0,), (0,), 8, 4, (1, 0, 0), (0,))
    assert im.trap_reason(p) and im.load(p, tensor(p)).kind == "trap"
    assert im.trap_reason(p.with_(coords=(-4, 0, 0))) is None
    assert im.trap_reason(p.with_(coords=(4, 0, 0))) is None
    assert im.trap_reason(mk(DT.FLOAT64, (16, 4, 2), (0,), (0,), 2, 4, (1, 0, 0), (0,)))


@pytest.mark.parametrize("change,needle", [
    (dict(channels_per_pixel=260), "channelsPerPixel"),
    (dict(pixels_per_column=1025), "pixelsPerColumn"),
    (dict(channels_per_pixel=2), "multiple of 16"),
    (dict(lower_corner=(-129, 0)), "corner offsets"),
    (dict(offsets=(256, 0)), "im2col offsets"),
    (dict(upper_corner=(-7, 0)), "non-zero area"),
    (dict(swizzle=Swizzle.B32, channels_per_pixel=16), "swizzle span"),
    (dict(oob_fill=OobFill.NAN_REQUEST_ZERO_FMA, dtype=DT.UINT32), "NaN fill"),
])
def test_rule_violations(change, needle):
    p = mk(DT.FLOAT32, (16, 6, 4, 2), (0, 0), (0, 0), 4, 4, (0, 0, 0, 0), (0, 0))
    assert im.rule_violations(p) == []
    bad = im.rule_violations(p.with_(**change))
    assert any(needle in b for b in bad), bad


def test_rank_5_corner_range():
    p = mk(DT.UINT8, (16, 4, 4, 4, 2), (0, 0, -16), (0, 0, 15), 16, 4, (0, 0, 0, 0, 0), (0, 0, 31))
    assert im.rule_violations(p) == []
    assert im.rule_violations(p.with_(lower_corner=(0, 0, -17)))
    assert im.rule_violations(p.with_(offsets=(0, 0, 32)))


def mk_il(dt, il, dims, lower, upper, cpp, ppc, coords, offsets, *, estr=None, swz=Swizzle.NONE,
          fill=OobFill.NONE):
    """An interleaved map: dimension 0 in chunks (W), then H/D, channel group, N."""
    ck = geo.interleave_bytes(il)
    strides, _ = geo.dense_layout(dt, dims, ck, unit=ck)
    rank = len(dims)
    return Im2colBox(dt, rank, tuple(dims), tuple(int(s) for s in strides), tuple(lower),
                      tuple(upper), cpp, ppc, tuple(estr or (1,) * rank), il, swz, fill,
                      tuple(coords), tuple(offsets))


def test_interleaved_pixels_are_chunks_along_w():
    """INTERLEAVE_EVIDENCE: rank 3 is (W in 16-byte chunks, channel group, N). W = 4,
    groups 2, images 2; base W 1, group 1, image 0; 5 pixels: W 1, 2, 3, then the wrap
    to image 1, W 0, 1. Each pixel is the 16 bytes of its chunk."""
    p = mk_il(DT.UINT8, Interleave.B16, (4, 2, 2), (0,), (0,), 16, 5, (1, 1, 0), (0,))
    assert im.spatial_dims(p) == (0,) and im.channel_dim(p) == 1
    assert p.global_strides == (64, 128)
    t = tensor(p)
    r = im.load(p, t)
    got = np.frombuffer(r.data, np.uint8)[:5 * 16].reshape(5, 16)
    for row, (w, n) in zip(got, ((1, 0), (2, 0), (3, 0), (0, 1), (1, 1))):
        start = n * 128 + 1 * 64 + w * 16
        assert row.tolist() == t[start:start + 16].tolist(), (w, n)
    assert im.tx_bytes(p) == 5 * 16 and r.oob_elements == 0


def test_interleaved_pixel_is_one_chunk_whatever_channels_per_pixel():
    """INTERLEAVE_EVIDENCE: channelsPerPixel x element size of 2 and 4 chunks still
    moves one chunk per pixel; below a chunk the encoder refuses the map."""
    p = mk_il(DT.UINT8, Interleave.B16, (4, 2, 2), (0,), (0,), 64, 3, (0, 0, 0), (0,))
    assert im.row_bytes(p) == 16 and im.tx_bytes(p) == 48
    q = mk_il(DT.UINT32, Interleave.B16, (4, 2, 2), (0,), (0,), 2, 3, (0, 0, 0), (0,))
    assert any("not a multiple of 16" in v for v in im.rule_violations(q))
    r = mk_il(DT.FLOAT64, Interleave.B32, (4, 2, 2), (0,), (0,), 4, 3, (0, 0, 0), (0,),
              swz=Swizzle.B32)
    assert im.rule_violations(r) == [] and im.row_bytes(r) == 32


def test_interleaved_group_and_spatial_bounds():
    """Rank 4 (W, H, group, N): corners, offsets and element strides of entries 0 and 1
    apply to W and H; a group coordinate outside its dimension fills every pixel; the
    group's own element stride is ignored."""
    p = mk_il(DT.FLOAT16, Interleave.B16, (3, 5, 4, 3), (-1, 0), (0, -1), 8, 6, (1, 0, 1, 1),
              (1, 0), estr=(1, 1, 2, 1))
    assert im.bounds(p) == [(-1, 2), (0, 3)]
    pos = im.pixel_positions(p)
    assert pos[:, 0].tolist() == [2, 3, 0, 1, 2, 3] and pos[:, 1].tolist() == [0, 0, 1, 1, 1, 1]
    t = tensor(p)
    r = im.load(p, t)
    rows = np.frombuffer(r.data, np.uint8)[:6 * 16].reshape(6, 16)
    start = 1 * p.global_strides[2] + 1 * p.global_strides[1] + 2 * 16
    assert rows[0].tolist() == t[start:start + 16].tolist()
    assert rows[1].tolist() == [0] * 16                      # W 3 is past the 3 chunks
    out = im.load(p.with_(coords=(1, 0, 4, 1)), t)           # group 4 of 4: all filled
    assert out.oob_elements == 6 * 8
    nan = im.load(p.with_(coords=(1, 0, -1, 1), oob_fill=OobFill.NAN_REQUEST_ZERO_FMA), t)
    assert (np.frombuffer(nan.data, np.uint8)[:16].view(np.uint16) == NAN_FILL[DT.FLOAT16]).all()


def test_interleaved_base_outside_box_traps():
    """INTERLEAVE_EVIDENCE: H at -1 with the box from 0 ended the launch."""
    p = mk_il(DT.UINT8, Interleave.B16, (3, 6, 5, 2), (-1, 0), (0, -1), 16, 40, (0, -1, 0, 0),
              (0, 1))
    assert not im.base_in_box(p) and im.load(p, tensor(p)).kind == "trap"
    assert im.load(p.with_(coords=(0, 0, 0, 0)), tensor(p)).kind == "data"


def test_interleaved_32b_swizzle_by_address():
    """32B interleave, 32B swizzle: 32-byte pixels dense; the second 128-byte line's
    16-byte halves swap (the tiled model's swizzle by address)."""
    p = mk_il(DT.UINT32, Interleave.B32, (4, 5, 3, 2), (0, 0), (0, 0), 8, 10, (0, 0, 0, 0), (0, 0),
              swz=Swizzle.B32)
    t = tensor(p)
    img = np.frombuffer(im.load(p, t).data, np.uint8)
    assert img[0:16].tolist() == t[0:16].tolist()
    assert img[128:144].tolist() == t[144:160].tolist() and img[144:160].tolist() == t[128:144].tolist()


# ----------------------------------------------------------------------------- cases
def test_counts_per_sweep():
    s = {lv: ic.summary(ic.generate(lv)) for lv in ("smoke", "standard", "full")}
    n_il = len(ic.il_combos())
    assert n_il == 300
    assert s["smoke"]["total"] == 128 + ic.LIMIT_COUNT + 2
    assert s["standard"]["total"] == ic.STANDARD_TOTAL + n_il + ic.LIMIT_COUNT + 4 + 2
    assert s["full"]["total"] == 240 * 30 + n_il * 4 + ic.LIMIT_COUNT + 14 + 4
    for lv, n in (("smoke", 2), ("standard", 6), ("full", 18)):
        assert s[lv]["expect"]["trap"] == n
        assert s[lv]["limit"] == ic.LIMIT_COUNT
    assert len(s["full"]["dtype"]) == 13 and set(s["full"]["rank"]) == {3, 4, 5}
    assert abs(s["full"]["device_copy"] / s["full"]["total"] - 1 / 16) < 0.02


def test_ids_unique_stable_and_parseable():
    cases = ic.generate("full")
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))
    ic.generate.cache_clear()
    assert [c.id for c in ic.generate("full")] == ids
    std = {c.id for c in ic.generate("standard") if c.expect == "data"}
    assert {c.id for c in ic.generate("smoke") if c.expect == "data"} <= set(ids)
    assert std <= set(ids)                       # a level is a prefix of the same lists
    for c in cases:
        ax = axes.parse(c.id)
        assert ax["dtype"] and ax["rank"] == str(c.rank), c.id
        assert ax["swizzle"] and ax["interleave"] == short(c.load.interleave) and ax["fill"], c.id
        assert "-im2col-" in c.id
        assert c.id.endswith("-dev-copy") == c.device_copy


def test_smoke_ids_pinned():
    """The smoke ids are part of reports and known issues: a change must be deliberate."""
    digest = hashlib.sha256("\n".join(c.id for c in ic.generate("smoke")).encode()).hexdigest()
    assert digest[:16] == SMOKE_DIGEST


def test_cases_are_valid_and_modelled():
    for c in ic.generate("standard"):
        p = c.load
        assert im.rule_violations(p) == [], c.id
        # PTX ISA 5.5.4: "must be within" (the interleaved traps break it on purpose)
        assert im.base_in_box(p) or "-base-" in c.id, c.id
        if c.expect == "trap":
            assert im.trap_reason(p)
        else:
            assert im.copy_bytes(p) <= ic.LIMIT_SMEM
    lim = ic.limit_cases()
    assert any(c.load.channels_per_pixel == 256 for c in lim)
    assert any(c.load.pixels_per_column == 1024 for c in lim)


SMOKE_DIGEST = "f75fc88ab0e9f843"
