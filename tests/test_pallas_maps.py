"""Self-tests of the Pallas copy cases (fixtures/library_maps/pallas.py), CPU only: the
cases of a level, the expectation (the tiled load and store models) against a slice copy
written here element by element, what a copy through Mosaic's tile indices gives, and the
verdicts: the models' bytes pass, a changed byte fails naming the element, a refusal
passes only where the rule allows it and with Mosaic's words, a wrong copy that equals
the tile-index copy says so and carries the fact a known issue would match."""
from __future__ import annotations

import numpy as np

from fixtures import library_maps as lm
from fixtures.engine.units import scope_of
from fixtures.library_maps import pallas
from fixtures.tensormap.enums import short


def _slice_copy(case) -> np.ndarray:
    """y after copying x[r0:r0+BM, c0:c0+BN] (zero outside x) to y[r1:, c1:] (nothing
    written outside y), element by element."""
    (m, n), (bm, bn), es = case.shape, case.box, case.load.esize
    x = pallas.x_bytes(case).reshape(m, n, es)
    y = pallas.y_bytes(case).reshape(m, n, es).copy()
    r0, c0, r1, c1 = case.offsets()
    box = np.zeros((bm, bn, es), dtype=np.uint8)
    for i in range(bm):
        for j in range(bn):
            if 0 <= r0 + i < m and 0 <= c0 + j < n:
                box[i, j] = x[r0 + i, c0 + j]
    for i in range(bm):
        for j in range(bn):
            if 0 <= r1 + i < m and 0 <= c1 + j < n:
                y[r1 + i, c1 + j] = box[i, j]
    return y.reshape(-1)


def _case(name, level="smoke"):
    return next(c for c in lm.pallas_cases(level) + lm.pallas_unaligned_cases(level)
                if c.id == name)


def test_the_cases_of_a_level():
    for level in ("smoke", "standard", "full"):
        cs = lm.pallas_cases(level) + lm.pallas_unaligned_cases(level)
        ids = [c.id for c in cs]
        assert len(ids) == len(set(ids))
        for c in cs:
            (m, n), (bm, bn) = c.shape, c.box
            assert c.id.split("-")[0] == short(c.dtype)
            assert m % pallas.TILE_ROWS == 0 and n % c.span == 0 and bn % c.span == 0
            assert bm <= 256 and bn <= 256
            if c.rule == "library.pallas.copy" and pallas.SMEM[c.smem] and not c.static:
                assert c.promise == (pallas.TILE_ROWS, c.span)      # what Pallas needs
                assert all(v % t == 0 for v, t in zip(c.offsets(), (8, c.span) * 2)), c.id
            if c.static:
                assert min(c.offsets()) >= 0          # Pallas refuses a constant slice outside
    std = lm.pallas_cases("standard")
    assert {c.dtype for c in std} == set(pallas.JAX_TYPES)
    assert {c.smem for c in std} == set(pallas.SMEM)
    assert len(std) + len(lm.pallas_unaligned_cases("standard")) == 468


def test_the_cases_of_an_element_width_are_one_scheduling_unit():
    """Every data type of a width shares its unit (one worker imports JAX for them), and no
    compiled kernel's batch spans two units; standard's nine data types make four units."""
    f = "suites/test_library_maps.py::test_pallas_{}[{}]"
    cases = lm.pallas_cases("standard") + lm.pallas_unaligned_cases("standard")
    unit = {c.id: scope_of(f.format("copy", c.id)) for c in cases}
    assert {scope_of(f.format(t, c.id)) for t in ("copy", "unaligned") for c in cases
            if c.id.split("-")[0] in ("f16", "bf16", "u16")} == {
        "suites/test_library_maps.py::test_pallas_*[w16]"}
    assert len(set(unit.values())) == 4
    by_kernel: dict = {}
    for c in cases:
        by_kernel.setdefault(c.compile_key(), set()).add(unit[c.id])
    assert all(len(units) == 1 for units in by_kernel.values())


def test_the_models_copy_the_slice():
    """The expectation (tiled.load, then the store model) is the slice copy, every case of
    the smoke level (both edges, negative and unaligned offsets)."""
    for c in lm.pallas_cases("smoke") + lm.pallas_unaligned_cases("smoke"):
        assert np.array_equal(pallas.expected(c), _slice_copy(c)), c.id


def test_the_tile_index_copy():
    """Through Mosaic's tile indices an aligned copy is the copy itself; an offset 3 rows
    past a tile reads rows 3..7 of each tile and zeros, and writes the same way."""
    for c in lm.pallas_cases("smoke"):
        if pallas.SMEM[c.smem]:
            assert np.array_equal(pallas.tile_split(c), pallas.expected(c)), c.id
    c = _case("f16-r2-pallas-swz128-box128x64-dynamic-row3")
    got = pallas.tile_split(c)
    assert not np.array_equal(got, pallas.expected(c))
    (m, n), es = c.shape, c.load.esize
    x = pallas.x_bytes(c).reshape(m, n * es)
    y = got.reshape(m, n * es)
    bn = c.box[1] * es
    # box row i is x's row 67 + i while 3 + i % 8 < 8, else zero (past the tile's end);
    # the store's offset, 64, is a tile's start: box row i goes to y's row 64 + i
    assert np.array_equal(y[64:69, :bn], x[67:72, :bn])
    assert not y[69:72, :bn].any() and np.array_equal(y[72:77, :bn], x[75:80, :bn])
    assert pallas._split(-3, 8) == (-1, 5) and pallas._split(67, 8) == (8, 3)


def test_copy_verdict():
    c = _case("f16-r2-pallas-swz128-box64x64-inner")
    want = pallas.expected(c)
    assert lm.pallas_verdict(c, {"after": want.tobytes()}) == []
    bad = want.copy()
    bad[10] ^= 1
    [(rule, text, facts)] = lm.pallas_verdict(c, {"after": bad.tobytes()})
    assert rule == "library.pallas.copy" and "y[0, 5] byte 0" in text and facts == {"outcome": "bytes"}
    [(rule, text)] = lm.pallas_verdict(c, {"refused": "ValueError: no"})
    assert "refused to build" in text
    assert "no tensor came back" in lm.pallas_verdict(c, {})[0][1]


def test_unaligned_verdict():
    c = _case("f16-r2-pallas-swz128-box128x64-dynamic-row3")
    refusal = f"ValueError: Failed to infer a possible set of layouts. {pallas.REFUSAL} 0 using pl.multiple_of."
    assert lm.pallas_verdict(c, {"refused": refusal}) == []
    assert lm.pallas_verdict(c, {"after": pallas.expected(c).tobytes()}) == []
    [(rule, text)] = lm.pallas_verdict(c, {"refused": "ValueError: something else"})
    assert rule == "library.pallas.unaligned" and "not the refusal" in text
    # jax-ml/jax#34102's wrong copy: the copy through the tile indices
    [(rule, text, facts)] = lm.pallas_verdict(c, {"after": pallas.tile_split(c).tobytes()})
    assert facts == {"outcome": "bytes", "equals": pallas.TILE_SPLIT} and "34102" in text
    other = pallas.expected(c).copy()
    other[0] ^= 0xFF
    assert lm.pallas_verdict(c, {"after": other.tobytes()})[0][2] == {"outcome": "bytes"}


def test_missing_names_the_install():
    why = lm.pallas_missing()
    assert why == "" or "pip install" in why


def test_the_child_keeps_jax_compilations_in_the_harness_cache_unless_the_user_names_one(
        monkeypatch, tmp_path):
    """pallas_kernels (the isolated child's side, which imports JAX: here a stand-in for
    its config) turns JAX's persistent compilation cache on in the harness's cache home,
    every kernel kept; a user's JAX_COMPILATION_CACHE_DIR is left to JAX with the user's
    own thresholds."""
    from fixtures.library_maps import pallas_kernels

    class Config:
        def __init__(self):
            self.values = {}

        def update(self, name, value):
            self.values[name] = value

    class Jax:
        config = Config()

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pallas_kernels._persistent_cache(Jax)
    assert Jax.config.values == {
        "jax_compilation_cache_dir": str(tmp_path / "tma-conformance" / pallas_kernels.JAX_CACHE),
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": -1}
    Jax.config = Config()
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    pallas_kernels._persistent_cache(Jax)
    assert Jax.config.values == {}
