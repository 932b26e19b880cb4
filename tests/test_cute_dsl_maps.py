"""CUTLASS's CuTe DSL maps (fixtures/library_maps/cute_dsl.py) on a CPU: the cases of a
level (one per distinct tiled map for create_tensor_map_tiled, the DSL-shaped boxes for
make_tiled_tma_atom on both sides of a 128 KiB span), the tensor and box an atom's type
declares, and the verdicts: equal maps pass, and every bit the DSL's rules do not
explain fails, naming the rule and the bits (maps made by hand, as 16 words); the load and
store checks against the tiled models; and, where the DSL is installed (no GPU needed),
every function the smoke cases need compiles for sm_90a."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fixtures import library_maps as lm
from fixtures.engine.units import scope_of
from fixtures.library_maps import cute_dsl
from fixtures.plugins.reporting.case_rules import measured_of_item
from fixtures.tensormap import map_layout as ml
from fixtures.tensormap.enums import DataType, L2Promotion, short, Swizzle
from fixtures.tma_box import tiled, tiled_validity

ATOM_TYPE = ('!cute_nvgpu.atom.non_exec_tiled_tma_load<sm_90, f16, copy_bits = 8192, '
             'tma_gbasis = <"(64,8):(1@0,1@1)">, tma_format = F16_RN>')


def _words(*pairs) -> bytes:
    w = [0] * 16
    for i, v in pairs:
        w[i] = v
    return b"".join(x.to_bytes(8, "little") for x in w)


def _atom(name="under128k"):
    return next(c for c in lm.cute_cases("smoke") if c.path == "atom"
                and c.id == f"f16-r2-box64x8-swz128-{name}-atom")


def test_the_cases_of_a_level():
    for level in ("smoke", "standard"):
        cs = lm.cute_cases(level)
        ids = [c.id for c in cs]
        assert len(ids) == len(set(ids))
        tm = [c for c in cs if c.path == "tensormap"]
        assert len({c.load.map() for c in tm}) == len(tm)    # one per distinct map
        assert {c.l2 for c in tm} == set(cute_dsl.L2_CYCLE)
        atoms = [c for c in cs if c.path == "atom"]
        assert {c.load.dtype for c in atoms} == set(cute_dsl.ATOM_DTYPES)
        for c in atoms:    # the swizzle's span innermost (16 bytes without one)
            assert c.load.box_dim[0] * c.load.esize == cute_dsl.SPAN[c.load.swizzle]
            assert tiled_validity.rule_violations(c.load) == [], c.id
    # with Mosaic's, over 1,000 standard test cases (an atom case is a map and a load)
    cs = lm.cute_cases("standard")
    assert len(cs) + sum(c.path == "atom" for c in cs) + len(lm.mosaic_cases("standard")) >= 1000
    # standard keeps the compiles few: every feature of the full sweep's maps, not every map
    full = [c for c in lm.cute_cases("full") if c.path == "tensormap"]
    shown = set().union(*(cute_dsl._features(c.load) for c in full))
    assert shown == set().union(*(cute_dsl._features(c.load) for c in lm.cute_cases("standard")
                                  if c.path == "tensormap"))


def test_the_cases_of_a_data_type_are_one_scheduling_unit():
    f = "suites/test_library_maps.py::test_cute_{}[{}]"
    units = {scope_of(f.format(t, c.id)) for c in lm.cute_cases("smoke")
             for t in (("atom_map", "atom_load") if c.path == "atom" else ("tensormap_map",))
             if c.load.dtype == DataType.FLOAT16}
    assert units == {"suites/test_library_maps.py::test_cute_*[f16]"}
    assert all(c.id.split("-")[0] == short(c.load.dtype) for c in lm.cute_cases("standard"))


def test_bit85_cases_sit_on_both_sides_of_128_kib():
    spans = {n: cute_dsl.span_of(_atom(n).load) for n in ("under128k", "at128k", "over128k")}
    assert spans == {"under128k": 130816, "at128k": 131072, "over128k": 131328}


def test_the_tensor_and_box_an_atom_declares():
    c = _atom()
    d, why = cute_dsl.declared_load(c, ATOM_TYPE)
    assert why == "" and d.box_dim == (64, 8) and d.dtype == DataType.FLOAT16
    assert (d.global_dim, d.global_strides) == (c.load.global_dim, c.load.global_strides)
    # an Int32 tensor's atom declares U32; a permuted basis walks the tensor's modes so
    d, _ = cute_dsl.declared_load(c, ATOM_TYPE.replace("F16_RN", "U32"))
    assert d.dtype == DataType.UINT32
    assert cute_dsl.declared_load(c, ATOM_TYPE.replace("(1@0,1@1)", "(1@1,1@0)"))[0] is None
    assert "does not declare" in cute_dsl.declared_load(c, "!cute.atom<>")[1]


def test_tensormap_verdict():
    c = next(x for x in lm.cute_cases("smoke") if x.path == "tensormap")
    m = _words((0, 0x7F0000001000), (1, 0x1000006310), (6, 0x3F00000000000000), (7, 7))
    r = {"address": 1 << 20, "driver": m, "driver_status": "CUDA_SUCCESS", "dsl": m}
    assert lm.cute_verdict(c, r).errors == []
    bad = dict(r, dsl=_words((0, 0x7F0000001000), (1, 0x1000006310 | 1 << 18),
                             (6, 0x3F00000000000000), (7, 7)))
    (rule, msg), = lm.cute_verdict(c, bad).errors
    assert rule == "library.cute.tensormap" and "w1[18:19]" in msg
    refused = dict(r, driver_status="CUDA_ERROR_INVALID_VALUE")
    assert "refused" in lm.cute_verdict(c, refused).errors[0][1]


def _atom_result(case, dsl_word1):
    plain = _words((0, 0x7F0000001000), (1, 0x1000006310), (6, 0x3F00000000000000), (7, 7),
                   (8, 0x400), (9, 0x400))
    l2 = _words((0, 0x7F0000001000), (1, 0x1000006310 | 2 << 17), (6, 0x3F00000000000000),
                (7, 7), (8, 0x400), (9, 0x400))
    dsl = _words((0, 0x7F0000001000), (1, dsl_word1), (6, 0x3F00000000000000), (7, 7))[:64] \
        + bytes([cute_dsl.SENTINEL]) * 64                  # copy_tensormap copies bytes 0-63
    d, _ = cute_dsl.declared_load(case, ATOM_TYPE)
    return {"address": 1 << 20, "driver": plain, "driver_status": "CUDA_SUCCESS",
            "dsl": dsl, "atom_type": ATOM_TYPE, "declared": d,
            "declared_why": "", "declared_plain": plain, "declared_plain_status": "CUDA_SUCCESS",
            "declared_l2": l2, "declared_l2_status": "CUDA_SUCCESS"}


@pytest.mark.parametrize("name,bit85", [("under128k", False), ("at128k", True), ("over128k", True)])
def test_atom_verdict_explains_l2_bit65_and_bit85_by_span(name, bit85):
    c = _atom(name)
    w1 = 0x1000006310 | 2 << 17 | 1 << 1 | (1 << 21 if bit85 else 0)
    v = lm.cute_verdict(c, _atom_result(c, w1))
    assert v.errors == []
    assert [e[0] for e in v.explained] == ["library.cute.atom-l2", "library.cute.atom-bit65"] + (
        ["library.cute.atom-bit85"] if bit85 else [])
    # bit 85 on the wrong side of 128 KiB, bit 65 missing, a bit no rule explains: each fails
    for word1, bits in ((w1 ^ 1 << 21, "w1[21:22]"), (w1 & ~(1 << 1), "w1[1:2]"), (w1 | 1 << 19, "w1[19:20]")):
        (rule, msg), = lm.cute_verdict(c, _atom_result(c, word1)).errors
        assert rule == "library.cute.atom-map" and bits in msg, msg


def test_atom_verdict_reads_what_copy_tensormap_copied():
    c = _atom()
    r = _atom_result(c, 0x1000006310 | 2 << 17 | 1 << 1)
    r["dsl"] = r["dsl"][:64] + bytes([cute_dsl.SENTINEL]) * 64     # bytes 64-127 not copied
    assert lm.cute_verdict(c, r).errors == []
    # a DSL that copies all 128 bytes is held to all 128: its zero words 8-9 then differ
    r["dsl"] = r["dsl"][:64] + bytes(64)
    (rule, msg), = lm.cute_verdict(c, r).errors
    assert rule == "library.cute.atom-map" and "w8" in msg and "bytes 0-127" in msg


def test_load_verdict_against_the_tiled_model():
    for c in (_atom("at128k"), next(x for x in lm.cute_cases("smoke") if x.id.endswith("ragged-atom"))):
        want = tiled.load(c.load, cute_dsl.pool_bytes(), 0).data[:tiled.smem_bytes(c.load)]
        r = {"address": 1 << 20, "load": want}
        assert cute_dsl.load_verdict(c, r) == []
        bad = bytearray(want)
        bad[5] ^= 1
        (rule, msg), = cute_dsl.load_verdict(c, dict(r, load=bytes(bad)))
        assert rule == "library.cute.atom-load" and "1 of" in msg and "byte 5" in msg
        assert "no shared memory" in cute_dsl.load_verdict(c, dict(r, load=None))[0][1]
        assert "left" in cute_dsl.load_verdict(c, dict(r, load=want[:-16]))[0][1]
    # the near-edge case reads zero fill, not the tensor
    c = _atom("at128k")
    assert c.load.coords[0] < 0 and 0 in tiled.load(c.load, cute_dsl.pool_bytes(), 0).data


def test_a_tf32_load_rests_on_the_measured_rounding_and_its_map_on_nothing_measured():
    loads = {c.id: c for c in lm.cute_atom_load_cases("smoke")}
    maps = {c.id: c for c in lm.cute_cases("smoke") if c.path == "atom"}
    assert loads.keys() == maps.keys()
    tid = next(i for i in loads if i.startswith("tf32-"))
    item = lambda c: SimpleNamespace(callspec=SimpleNamespace(params={"c": c}), user_properties=[],
                                     get_closest_marker=lambda name: None)
    assert "BIT_ALTERING_EVIDENCE" in measured_of_item(item(loads[tid]))
    assert measured_of_item(item(maps[tid])) == ()
    fid = next(i for i in loads if i.startswith("f16-"))
    assert measured_of_item(item(loads[fid])) == ()


def test_store_expected_is_the_store_models_and_the_verdict_can_fail():
    from fixtures.tma_store import model
    cs = lm.cute_atom_store_cases("smoke")
    assert cs and all(min(c.load.coords) >= 0 for c in cs)
    for c in cs:
        n = cute_dsl.store_extent(c)
        src = cute_dsl.store_source(tiled.smem_bytes(c.load))
        assert cute_dsl.store_expected(c).tobytes() == model.store(
            c.load, cute_dsl.pool_bytes()[:n], src, 0), c.id
    c = next(x for x in cs if x.id.endswith("ragged-atom"))
    want = cute_dsl.store_expected(c).tobytes()
    r = {"address": 1 << 20, "store": want}
    assert lm.cute_store_verdict(c, r) == []
    bad = bytearray(want)
    bad[-1] ^= 0xFF                        # a byte past the tensor written
    (rule, msg), = lm.cute_store_verdict(c, dict(r, store=bytes(bad)))
    assert rule == "library.cute.atom-store" and "1 of" in msg
    assert "no tensor" in lm.cute_store_verdict(c, dict(r, store=None))[0][1]


def test_without_the_dsl_the_cases_skip_naming_the_install(monkeypatch):
    monkeypatch.setattr(cute_dsl.importlib.util, "find_spec", lambda name: None)
    assert "pip install 'nvidia-cutlass-dsl[cu13]" in cute_dsl.missing()
    assert ml.MAP_BITS == 1024 and L2Promotion.L2_128B == 2 and Swizzle.B128 == 3


class _FakeArray:
    """A device array's stand-in for compiling without a GPU (fill, slicing, ``get``)."""
    def __init__(self, n=128):
        self.data, self.n = SimpleNamespace(ptr=0x7F0010000000), n

    def fill(self, v):
        pass

    def __getitem__(self, i):
        return self

    def __setitem__(self, i, v):
        pass

    def get(self):
        return SimpleNamespace(tobytes=lambda: bytes(self.n))


@pytest.mark.skipif(cute_dsl.missing() != "", reason="the CuTe DSL is not installed here "
                    "(pip install -e '.[cutedsl]'): its functions cannot be compiled")
def test_every_dsl_function_compiles_for_sm90(monkeypatch):
    """With the DSL installed (no GPU needed), each function the smoke cases need compiles
    for sm_90a through the child's own code path (its launches replaced): a new DSL
    release that changes an API the cases use fails here, on a CPU."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    k = pytest.importorskip("fixtures.library_maps.cute_dsl_kernels")
    fake = SimpleNamespace(full=lambda *a, **kw: _FakeArray(), zeros=lambda *a, **kw: _FakeArray(),
                           uint8="uint8", cuda=SimpleNamespace(
                               get_current_stream=lambda: SimpleNamespace(ptr=0, synchronize=lambda: None)))
    compiled = []

    def compile_only(*args, **kwargs):
        k.cute.__dict__["_tmac_real_compile"](*args, **kwargs)
        compiled.append(args[0].__name__)
        return lambda *a: None

    monkeypatch.setattr(k, "cupy", fake)
    monkeypatch.setitem(k.cute.__dict__, "_tmac_real_compile", k.cute.compile)
    monkeypatch.setattr(k.cute, "compile", compile_only)
    monkeypatch.setattr(k, "_compiled", {})
    monkeypatch.setattr(k, "_out", None)
    monkeypatch.setattr(k, "_load_out", None)
    keys = {}
    for c in lm.cute_cases("smoke"):
        keys.setdefault(c.compile_key(), c)
    for c in keys.values():
        if c.path == "tensormap":
            k.tensormap_bytes(c, 0x7F0000000000)
        else:
            k.atom_run(c, 0x7F0000000000, 0x7F0020000000)
            assert "tma_format" in k._declared[c.compile_key()], c.id
    assert len(compiled) == len(keys)


class _HostArray:
    """A device array's stand-in that holds its host bytes (``get``)."""
    def __init__(self, a):
        self.a, self.data = np.asarray(a), SimpleNamespace(ptr=0x7F0020000000)

    def get(self):
        return self.a


@pytest.mark.skipif(cute_dsl.missing() != "", reason="the CuTe DSL is not installed here "
                    "(pip install -e '.[cutedsl]'): its functions cannot be compiled")
@pytest.mark.parametrize("mode", ["smem", "gmem"])
def test_the_reuse_kernel_has_its_fences(monkeypatch, mode):
    """With the DSL installed (no GPU needed), the reused-map kernel compiles for sm_90a in
    both update modes; its PTX has the update's release (cp_fenceproxy from shared memory,
    or the fence after an update in place) and, unless built without it, the acquire."""
    monkeypatch.setenv("CUTE_DSL_ARCH", "sm_90a")
    k = pytest.importorskip("fixtures.library_maps.cute_dsl_kernels")
    fake = SimpleNamespace(asarray=_HostArray,
                           full=lambda n, v, dtype=None: _HostArray(np.full(n, v, np.uint32)),
                           zeros=lambda n, dtype=None: _HostArray(np.zeros(n, np.uint8)),
                           uint8="uint8", uint32="uint32", cuda=SimpleNamespace(
                               get_current_stream=lambda: SimpleNamespace(ptr=0, synchronize=lambda: None)))
    real = k.cute.compile

    class Built:
        def __init__(self, *a, **kw):
            self.__ptx__ = real(*a, **kw).__ptx__

        def __call__(self, *a):
            pass

    monkeypatch.setattr(k, "cupy", fake)
    monkeypatch.setattr(k.cute, "compile", Built)
    monkeypatch.setattr(k, "_compiled", {})
    for acquire in (True, False):
        r = k.reuse_run(mode, acquire, 2, 2)
        assert r["counts"]["unwritten"] == 4          # nothing ran
        ptx = r["ptx"]
        assert ptx["replace"] >= 3 and ptx["acquire"] == int(acquire), (mode, acquire, ptx)
        assert (ptx["cp_release"], ptx["release"]) == ((1, 0) if mode == "smem" else (0, 1))
