"""The multicast cases (fixtures/tma_load/multicast.py): ids, coverage, counts (no GPU)."""
import re

import pytest

import fixtures.tma_load as tl
from fixtures.engine.device_maps import template_for
from fixtures.tma_box import im2col, im2col_cases, smem_image, tiled, tiled_cases

mc = tl.multicast
LEVELS = ("smoke", "standard", "full")
ID = re.compile(r"^(tile|im2col)-cl(\d+)-mask0b([01]+)-src(\d+)-(.+?)(-dev-(template|zeros))?$")


@pytest.mark.parametrize("level", LEVELS)
def test_ids_unique_and_read_like_the_case(level):
    cases = mc.generate(level)
    assert len({c.id for c in cases}) == len(cases)
    for c in cases:
        m = ID.match(c.id)
        assert m, c.id
        mode, n, bits, src, load_id, _, built = m.groups()
        assert int(n) == c.cluster and len(bits) == c.cluster
        assert int(bits, 2) == c.mask and int(src) == c.src and built == c.built
        assert load_id == c.data_id and c.mode == mode
        assert mode == "tile" or (built is None and "-dev-copy" not in c.id)
        # bit i = CTA rank i, written most significant first
        assert all((bits[c.cluster - 1 - r] == "1") == c.receives(r) for r in range(c.cluster))
        assert c.rule == ("tma-load.device-built-map" if c.built else "tma-load.multicast")


@pytest.mark.parametrize("level", LEVELS)
def test_ids_are_stable_and_cached(level):
    a = [c.id for c in mc.generate(level)]
    mc.generate.cache_clear()
    b = [c.id for c in mc.generate(level)]
    assert a == b
    assert mc.generate(level) is mc.generate(level)


def test_known_ids():
    ids = {c.id for c in mc.generate("standard")}
    assert "tile-cl2-mask0b11-src0-u64-r1-box16-swz128-il0-zerofill-esN-interior" in ids


@pytest.mark.parametrize("level,low,high", [("smoke", 40, 80), ("standard", 280, 320),
                                            ("full", 1100, 1200)])
def test_counts(level, low, high):
    cases = mc.generate(level)
    s = mc.summary(cases)
    assert low <= s["total"] <= high, s
    specs = {(c.cluster, c.mask, c.src) for c in cases}      # each spec has its im2col loads
    assert s["mode"]["im2col"] == len(specs) * mc.IM2COL_PER_SPEC[level], s
    tile = s["mode"]["tile"]
    dev = s["map"].get("template", 0) + s["map"].get("zeros", 0)
    assert dev * 4 == tile or abs(dev / tile - 0.25) < 0.03, s
    assert s["map"]["template"] and s["map"]["zeros"]


@pytest.mark.parametrize("level", LEVELS)
def test_cluster_and_mask_coverage(level):
    cases = mc.generate(level)
    for n in mc.CLUSTERS:
        mine = [c for c in cases if c.cluster == n]
        assert mine, n
        masks = {c.mask for c in mine}
        full = (1 << n) - 1
        assert full in masks                                        # every CTA
        assert any(c.src not in c.destinations for c in mine)       # issuer outside the mask
        assert any(c.mask != full and c.receives(c.src) for c in mine)
        if level != "smoke":
            assert any(bin(m).count("1") == 1 for m in masks)      # one CTA
            assert {c.src for c in mine if c.mask == full} == {0, n - 1}
            if n > 2:
                assert any(1 < bin(m).count("1") < n for m in masks)   # sparse subsets


def test_mask_specs_valid():
    for n in mc.CLUSTERS:
        specs = mc.mask_specs(n)
        assert len({(m, s) for _, m, s in specs}) == len(specs)
        assert all(0 < m < (1 << n) and 0 <= s < n for _, m, s in specs)
        if n > 2:
            assert len(specs) == 8


def test_expected_images():
    c = next(c for c in mc.generate("standard") if c.src not in c.destinations)
    inside = mc.expected(c, c.destinations[0])
    assert inside == tiled.load(c.load, mc.global_bytes(c), 0).data
    assert mc.expected(c, c.src) == bytes([smem_image.POISON]) * tiled.copy_bytes(c.load)
    assert inside != mc.expected(c, c.src)       # the check tells a delivered box from poison
    # the data are the tiled case's own
    load = {t.id: t for t in tiled_cases.generate("standard")}[c.data_id]
    assert (mc.global_bytes(c) == tiled_cases.global_bytes(load)).all()
    assert load.load == c.load


def test_expected_im2col_images():
    """An im2col case: the destinations hold the im2col model's pixels of the im2col
    suite's own tensor bytes; a CTA outside the mask its poison."""
    c = next(c for c in mc.generate("standard") if c.mode == "im2col" and
             c.mask != (1 << c.cluster) - 1)
    i2c = {t.id: t for t in im2col_cases.generate("standard")}[c.data_id]
    assert (mc.global_bytes(c) == im2col_cases.global_bytes(i2c)).all()
    want = im2col.load(c.load, mc.global_bytes(c)).data
    assert mc.expected(c, c.destinations[0]) == want
    outside = next(r for r in range(c.cluster) if not c.receives(r))
    assert mc.expected(c, outside) == bytes([smem_image.POISON]) * im2col.copy_bytes(c.load)
    assert c.tx_bytes == im2col.tx_bytes(c.load)


def test_every_mode_and_interleave_in_the_sweep():
    cases = mc.generate("full")
    assert {c.mode for c in cases} == {"tile", "im2col"}
    assert any(c.mode == "im2col" and c.load.interleave for c in cases)


def test_templates_are_other_tensors():
    for c in mc.generate("standard"):
        if c.built == "template":
            t = template_for(c.id, c.load.dtype, c.rank)
            assert tl.MULTICAST.template(c) == t         # the one the launch starts from
            assert t.dtype != c.load.dtype and t.rank != c.rank
            assert t.dtype.name not in ("TFLOAT32", "TFLOAT32_FTZ")
