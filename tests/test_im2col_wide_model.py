"""CPU self-tests of the im2col-wide load model and its cases (fixtures/tma_load/im2col_wide_*.py):
hand-worked examples from the sentences of seed 004 (cuTensorMapEncodeIm2colWide) and the
PTX ISA (Tensors, im2col::w and im2col::w::128 modes; cp.async.bulk.tensor), and the
shape of the sweep (ids unique, stable, well formed; counts; every map valid by the
host-encoding rules at compute capability 10.0)."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.host_encode as he
from fixtures.tensormap import geometry as geo
from fixtures.tensormap.enums import DataType, Im2colWideMode, OobFill, short, Swizzle
from fixtures.tma_box.element_values import NAN_FILL
from fixtures.tma_box.smem_image import POISON
from fixtures.tma_load import im2col_wide_cases as wc, im2col_wide_model as wm

W, W128 = Im2colWideMode.W, Im2colWideMode.W128


def _load(mode=W, *, dtype=DataType.UINT8, c_dim=16, w_dim=40, rest=(2,), channels=16,
          pixels=8, lower=0, upper=0, estr_w=1, swz=Swizzle.B64, fill=OobFill.NONE,
          coords=None, halo=0, off=0):
    dims = (c_dim, w_dim) + tuple(rest)
    strides, run = geo.dense_layout(dtype, dims, 16)
    rank = len(dims)
    coords = coords if coords is not None else (0, 0) + (0,) * (rank - 2)
    p = wm.WideLoad(dtype, rank, dims, strides, lower, upper, channels, pixels,
                    (1, estr_w) + (1,) * (rank - 2), mode, swz, fill, coords, halo, off)
    return p, run


def _rows(p, image: bytes) -> np.ndarray:
    """Undo the swizzle: the (rows, pitch) logical rows of an image."""
    img = np.frombuffer(image, dtype=np.uint8)
    n = wm.n_rows(p) * wm.row_pitch(p)
    logical = np.arange(n, dtype=np.int64)
    return img[wm.swizzle_offset(p.swizzle, logical)].reshape(wm.n_rows(p), wm.row_pitch(p))


# ------------------------------------------------------------------ the documents' sentences
def test_w_mode_loads_pixels_per_column_then_the_halo_next_to_them():
    """PTX ISA: "Number of pixels loaded in im2col::w mode is as specified by
    Pixels-per-Column in the TensorMap."; with wHalo = 2 "A tensor copy operation with the
    above parameters loads 128 pixels and the two halo pixels"; "The halo pixels are always
    loaded in the shared memory next to the main row pixels"."""
    p, _ = _load(W, w_dim=200, pixels=128, coords=(0, 7, 0), halo=2)
    assert wm.n_rows(p) == 130
    assert list(wm.pixel_w(p)[126:]) == [133, 134, 135, 136]        # main rows 126, 127, halo 128, 129
    assert wm.smem_bytes(p) == 130 * 16


def test_w128_mode_loads_128_pixels_with_the_halo_after_every_32():
    """PTX ISA: "The number of elements accessed in the im2col::w::128 mode is fixed and is
    equal to 128." / "Pixels-per-Column is ignored in im2col::w::128 mode." / "the halo
    elements are loaded after every 32 elements in the bounding box along the W dimension"."""
    for pixels in (1, 64, 1000):
        p, _ = _load(W128, w_dim=200, pixels=pixels, halo=2)
        assert wm.n_pixels(p) == 128 and wm.n_rows(p) == 128 + 4 * 2
    idx = wm.pixel_index(p)
    assert idx[:34] == list(range(34))              # pixels 0..31, then the halo 32, 33
    assert idx[34:36] == [32, 33]                   # the next group starts at pixel 32
    assert idx[-2:] == [128, 129]


def test_woffset_shifts_the_box_and_the_first_element():
    """PTX ISA, wOffset: "Bounding Box Lower Corner W += wOffset / Bounding Box Upper Corner
    W += wOffset / W += wOffset"."""
    p0, _ = _load(W, lower=-1, upper=0, coords=(0, 3, 0))
    p5, _ = _load(W, lower=-1, upper=0, coords=(0, 3, 0), off=5)
    assert wm.box_w(p0) == (-1, 39) and wm.box_w(p5) == (4, 44)
    assert wm.pixel_w(p5)[0] == wm.pixel_w(p0)[0] + 5 == 8


def test_traversal_stride_steps_the_w_walk_only():
    """PTX ISA: "the number of elements traversed along only the W dimension is strided by
    the traversal stride as specified in the TensorMap"; seed 004: the first element of
    elementStrides "is ignored" (C)."""
    p, run = _load(W, estr_w=3, pixels=4, coords=(0, 2, 1))
    assert list(wm.pixel_w(p)) == [2, 5, 8, 11]
    q = wm.WideLoad(p.dtype, p.rank, p.global_dim, p.global_strides, p.lower_w, p.upper_w,
                    p.channels, p.pixels, (7, 3, 1), p.mode, p.swizzle, p.oob_fill, p.coords)
    g = np.random.default_rng(1).integers(0, 256, run, dtype=np.uint8)
    assert wm.load(p, g).data == wm.load(q, g).data


def test_rows_hold_the_channels_of_each_pixel_and_the_fill_outside():
    """Seed 004: NWC layout, channelsPerPixel elements "accessed along C dimension"; a pixel
    left of the box (PTX ISA: "The first element can lie outside of the Bounding Box in the
    W-dimension only and only on the left side") or past the tensor holds the fill."""
    p, run = _load(W, dtype=DataType.FLOAT16, c_dim=8, channels=8, w_dim=6, rest=(2,),
                   pixels=8, lower=0, coords=(0, -2, 1), fill=OobFill.NAN_REQUEST_ZERO_FMA)
    g = np.arange(run, dtype=np.uint8)
    rows = _rows(p, wm.load(p, g).data)
    nan = NAN_FILL[DataType.FLOAT16].to_bytes(2, "little") * 8
    assert rows[0, :16].tobytes() == nan and rows[1, :16].tobytes() == nan      # W -2, -1
    for k, w in enumerate(range(0, 6), start=2):                                 # W 0..5
        start = p.global_strides[1] + w * p.global_strides[0]                    # n = 1
        assert rows[k, :16].tobytes() == g[start:start + 16].tobytes()
    assert (rows[:, 16:] == POISON).all()                                        # pitch: the 64-byte span


def test_channels_past_c_are_filled():
    p, run = _load(W, c_dim=24, channels=16, coords=(16, 0, 0), pixels=2)
    rows = _rows(p, wm.load(p, np.full(run, 7, dtype=np.uint8)).data)
    assert (rows[:, :8] == 7).all() and (rows[:, 8:16] == 0).all()


def test_first_element_right_of_the_box_and_operand_ranges_are_refused():
    """PTX ISA: "Im2col::w mode : valid range is [0, 512). Im2col::w::128 mode : valid range
    is [0, 32)." / "wOffset ... valid range of values is [0, 32)."; the first element only
    left of the box."""
    ok, _ = _load(W, halo=511)
    assert not wm.rule_violations(ok)
    assert wm.rule_violations(_load(W, halo=512)[0])
    assert wm.rule_violations(_load(W128, halo=32)[0]) and not wm.rule_violations(_load(W128, halo=31)[0])
    assert wm.rule_violations(_load(W, off=32)[0])
    assert wm.rule_violations(_load(W, upper=-1, coords=(0, 39, 0))[0])      # box ends at 38
    assert not wm.rule_violations(_load(W, lower=2, coords=(0, 0, 0))[0])    # left of the box: allowed
    assert wm.rule_violations(_load(W, swz=Swizzle.B32)[0])                  # not in seed 004's list
    assert wm.rule_violations(_load(W, channels=128, c_dim=128)[0])          # 128 B > the 64B swizzle


def test_32_byte_atomicity_follows_the_ptx_table():
    """PTX ISA, 128-byte swizzle, 32-byte atomicity: lines "0 1 | 2 3 | 4 5 | 6 7",
    "2 3 | 0 1 | 6 7 | 4 5", "4 5 | 6 7 | 0 1 | 2 3", "6 7 | 4 5 | 2 3 | 0 1" (16-byte cells)."""
    table = [[0, 1, 2, 3, 4, 5, 6, 7], [2, 3, 0, 1, 6, 7, 4, 5], [4, 5, 6, 7, 0, 1, 2, 3],
             [6, 7, 4, 5, 2, 3, 0, 1]]
    for line, cells in enumerate(table * 2):
        for pos, cell in enumerate(cells):
            phys = wm.swizzle_offset(Swizzle.B128_ATOM_32B, (line * 8 + cell) * 16)
            assert phys == (line * 8 + pos) * 16, (line, cell)


def test_every_reading_is_marked_unverified():
    text = open(wm.__file__).read()
    assert len(wm.UNVERIFIED_READINGS) >= 8
    for key, question in wm.UNVERIFIED_READINGS.items():
        assert "?" in question and "Reading:" in question, key
    assert text.count("UNVERIFIED (") >= 6


# ------------------------------------------------------------------ the sweep
COUNTS = {"smoke": 52, "standard": 198, "full": 600}


@pytest.mark.parametrize("level", list(COUNTS))
def test_counts_and_ids(level):
    cases = wc.wide_cases(level)
    assert len(cases) == COUNTS[level]
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)
    for c in cases:
        parts = c.id.split("-")
        p = c.load
        assert parts[0] == short(p.dtype) and parts[1] == f"r{p.rank}"
        assert parts[2] == ("im2colw128" if p.mode == W128 else "im2colw")
        assert parts[3] == short(p.swizzle) and parts[4] in ("zerofill", "nanfill")
        assert parts[4] == short(p.oob_fill)
        assert "--" not in c.id and all(x for x in parts)
        assert not any(ch.isspace() for ch in c.id)


def test_ids_are_stable_and_data_seeded_by_id():
    first = wc.wide_cases("standard")[0]
    again = wc.wide_cases.__wrapped__("standard")[0]      # generated again, not cached
    assert again == first and again is not first
    assert np.array_equal(wc.wide_global_bytes(first), wc.wide_global_bytes(again))
    assert "u8-r3-im2colw-swz128-zerofill-c128-p8-lo0-him1-s1-inside-h1-o0" in {
        c.id for c in wc.wide_cases("full")}


def test_smoke_is_in_standard_is_in_full_by_combination():
    def combos(level):
        return {"-".join(c.id.split("-")[:5]) for c in wc.wide_cases(level)}
    assert combos("smoke") <= combos("standard") == combos("full")


@pytest.mark.parametrize("level", list(COUNTS))
def test_every_case_is_a_valid_map_and_load(level):
    """Seed 004's rules (the host-encoding catalogue, compute capability 10.0) accept every
    map; the model answers every load; the shared memory fits one block."""
    for c in wc.wide_cases(level):
        assert not wm.rule_violations(c.load), c.id
        assert he.violated_ids(c.load.params(0), cc=(10, 0)) == [], c.id
        assert wm.copy_bytes(c.load) + 1024 <= 227 * 1024, c.id
        assert c.tensor_bytes <= wc.MAX_TENSOR_BYTES, c.id


def test_variants_do_what_their_names_say():
    for c in wc.wide_cases("full"):
        p, name = c.load, c.id.split("-")[-3]
        lo, hi = wm.box_w(p)
        ws = wm.pixel_w(p)
        if name == "left":
            assert ws[0] < lo
        elif name == "past":
            assert ws.max() > hi and ws[0] >= lo
        elif name == "cedge":
            assert p.coords[0] + p.channels > p.global_dim[0]
        elif name == "halo":
            assert p.w_halo >= 3 and p.w_offset >= 1
        else:
            assert lo <= ws[0] and ws.max() <= hi, c.id
        assert (p.coords[0] * p.esize) % 16 == 0, c.id      # UNVERIFIED (channels): C on 16 bytes


def test_model_answers_every_full_case():
    for c in wc.wide_cases("full")[::7]:
        r = wm.load(c.load, wc.wide_global_bytes(c))
        assert len(r.data) == wm.copy_bytes(c.load)
        img = np.frombuffer(r.data, dtype=np.uint8)
        assert (img[wm.footprint(c.load):] == POISON).all(), c.id    # the guard stays poisoned
