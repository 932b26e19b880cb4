"""The library-map feature without a GPU: its cases, its explanations of map differences,
its load check, the reused-map bookkeeping, the PTX reader and the skip reasons."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fixtures import library_maps as lm
from fixtures.library_maps import checks, reuse, runner, triton_run
from fixtures.library_maps.cases import padding, TRITON_DTYPES
from fixtures.rules.registry import known
from fixtures.tensormap import map_layout as ml
from fixtures.tensormap.enums import DataType, Interleave, OobFill
from fixtures.tma_box import tiled, tiled_cases


# ------------------------------------------------------------------ cases
@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_triton_cases_are_what_triton_accepts(level):
    cs = lm.triton_cases(level)
    assert len({c.id for c in cs}) == len(cs)
    for c in cs:
        p = c.load
        assert lm.triton_expresses(p) == "", c.id
        assert p.dtype in TRITON_DTYPES and p.interleave == Interleave.NONE
        assert all(b & (b - 1) == 0 for b in c.block()) and c.block()[-1] * p.esize >= 16
        assert c.strides_elems()[-1] == 1 and all(s * p.esize % 16 == 0 for s in c.strides_elems()[:-1])
        assert padding(p) == "zero" or p.dtype in (DataType.FLOAT16, DataType.BFLOAT16,
                                                    DataType.FLOAT32, DataType.FLOAT64)


def test_standard_has_the_cases_the_issue_asks_for():
    tri, cc = lm.triton_cases("standard"), lm.cuda_core_cases("standard")
    # four tests per Triton case (host map, host load, device map, device load), one per cuda.core
    assert 4 * len(tri) + len(cc) >= 1000
    assert set(lm.summary(tri)["dtype"]) == {"u8", "u16", "u32", "s32", "u64", "s64", "f16",
                                             "bf16", "f32", "f64"}
    assert len(lm.summary(cc)["dtype"]) == 13
    assert set(lm.summary(tri)["rank"]) == {1, 2, 3, 4, 5}


def test_case_ids_are_the_tiled_sweeps():
    tiled = {c.id: c for c in tiled_cases.generate("standard")}
    for c in lm.triton_cases("standard") + lm.cuda_core_cases("standard"):
        assert tiled[c.id].load == c.load and tiled[c.id].expect == "data"


def test_what_triton_cannot_express_is_said():
    c = lm.triton_cases("standard")[0]
    p = c.load
    assert "element strides" in lm.triton_expresses(dataclasses.replace(p, element_strides=(2,) * p.rank))
    assert "interleaved" in lm.triton_expresses(dataclasses.replace(p, interleave=Interleave.B16))
    assert "tensor-map type" in lm.triton_expresses(dataclasses.replace(p, dtype=DataType.TFLOAT32))
    assert "powers of two" in lm.triton_expresses(dataclasses.replace(p, box_dim=(3,) + p.box_dim[1:]))
    ints = dataclasses.replace(p, dtype=DataType.UINT32, oob_fill=OobFill.NAN_REQUEST_ZERO_FMA)
    assert "floating-point" in lm.triton_expresses(ints)


# ------------------------------------------------------------------ map comparisons
def _map(*words):
    out = bytearray(128)
    for w, v in words:
        out[8 * w:8 * w + 8] = v.to_bytes(8, "little")
    return bytes(out)


PLAIN = _map((0, 0x1000), (1, 0x0020_0000), (8, 0x400), (9, 0x10))
L2 = _map((0, 0x1000), (1, 0x0120_0000), (8, 0x400), (9, 0x10))


def test_a_fixed_explanation_is_applied_and_named():
    e = checks.Explanation("library.triton.l2-128b", "L2 promotion 128B", L2)
    v = checks.compare_map(L2, PLAIN, [e], rule="library.triton.host-map", who="x", params="p")
    assert v.errors == [] and v.explained == [("library.triton.l2-128b", "L2 promotion 128B",
                                               ["w1[24:25]"])]
    # the library without the difference its source states: that is a difference too
    v = checks.compare_map(PLAIN, PLAIN, [e], rule="library.triton.host-map", who="x", params="p")
    assert v.errors and v.errors[0][0] == "library.triton.host-map" and "w1[24:25]" in v.errors[0][1]


def test_an_optional_explanation_holds_only_bit_for_bit():
    zeroed = checks.zero_words(PLAIN)
    e = checks.Explanation("library.triton.device-zero-words", "words 8 and 9", zeroed, fixed=False)
    v = checks.compare_map(zeroed, PLAIN, [e], rule="library.triton.device-map", who="x", params="p")
    assert v.errors == [] and v.explained[0][0] == "library.triton.device-zero-words"
    half = checks.zero_words(PLAIN, (8,))          # one word zeroed, the other not: unexplained
    v = checks.compare_map(half, PLAIN, [e], rule="library.triton.device-map", who="x", params="p")
    assert v.errors and "w8" in v.errors[0][1] and v.explained == []
    other = _map((0, 0x1000), (1, 0x0020_0000), (3, 0x77))
    v = checks.compare_map(other, PLAIN, [e], rule="library.triton.device-map", who="x", params="p")
    assert v.errors and "w3" in v.errors[0][1]


def test_bit85_alone_names_the_known_workaround():
    lib = (ml.as_int(PLAIN) ^ checks.BIT85).to_bytes(128, "little")
    v = checks.compare_map(lib, PLAIN, [], rule="library.cuda-core.map", who="x", params="p")
    assert "nvbug 5736804" in v.errors[0][1] and "w1[21:22]" in v.errors[0][1]
    lib2 = (ml.as_int(lib) ^ 1).to_bytes(128, "little")
    v = checks.compare_map(lib2, PLAIN, [], rule="library.cuda-core.map", who="x", params="p")
    assert "nvbug" not in v.errors[0][1]


def test_every_rule_the_checks_name_is_registered():
    for r in ("library.triton.host-map", "library.triton.l2-128b", "library.triton.device-map",
              "library.triton.device-zeros", "library.triton.device-zero-words",
              "library.triton.device-fence", "library.triton.load",
              "library.cuda-core.map", "library.cccl.element-stride0", "library.sources",
              "library.triton.fence-sensitivity", "library.triton.box",
              "library.cute.device-fence", "library.cute.fence-sensitivity",
              "library.pallas.copy", "library.pallas.unaligned"):
        assert known(r), r
    for r in list(lm.SOURCE_QUOTES) + list(lm.PTX_QUOTES):
        assert known(r), r


def test_triton_box_is_the_block_cut_to_the_swizzle_width():
    c = next(c for c in lm.triton_cases("full") if c.id.startswith("u8-r3-box256x8x8"))
    assert c.block() == [8, 8, 256]
    box, errors = lm.triton_box(c, [8, 8, 128], 3)          # 128B swizzle: two 128-byte pieces
    assert box == (128, 8, 8) and errors == []
    assert lm.triton_box(c, [8, 8, 256], 0) == ((256, 8, 8), [])
    _, errors = lm.triton_box(c, [8, 8, 64], 3)
    assert errors and errors[0][0] == "library.triton.box" and "[8, 8, 128]" in errors[0][1]


# ------------------------------------------------------------------ loads
def test_the_model_block_and_a_wrong_element():
    c = next(c for c in lm.triton_cases("standard") if "straddle-hi" in c.id and c.rank == 2)
    want = checks.expected_block(c)
    assert len(want) == int(np.prod(c.block())) * c.load.esize
    assert checks.check_block(c, want, "x") == []
    bad = bytearray(want)
    bad[-1] ^= 0xFF
    (rule, text), = checks.check_block(c, bytes(bad), "Triton's host map")
    assert rule == "library.triton.load" and "1 of" in text and "through Triton's host map" in text
    assert checks.check_block(c, None, "x")[0][1].startswith("no block came back")


# ------------------------------------------------------------------ maps over time
def test_reuse_bookkeeping_tells_ok_stale_other_and_unwritten():
    plan = reuse.Plan(programs=2, iters=3)
    out = np.stack([reuse.expected(v) for v in range(plan.versions)])
    assert reuse.classify(plan, out).counts == {"ok": 6, "stale": 0, "other": 0, "unwritten": 0}
    out[1] = reuse.expected(0)            # program 0, iteration 1 saw iteration 0's map
    out[2] = reuse.expected(0)            # iteration 2 saw the first map too (the H100's way)
    out[4] = reuse.expected(5)            # a later version is not stale: other
    out[5] = reuse.OUT_POISON
    c = reuse.classify(plan, out)
    assert c.counts == {"ok": 2, "stale": 2, "other": 1, "unwritten": 1}, c.counts
    assert "program 0 iteration 1: stale (saw the map of iteration(s) [0])" in c.examples
    pool, table = plan.pool(), plan.table()
    offs, _ = plan.layout()
    for v in range(plan.versions):
        o, rows, stride = table[v, :3]
        assert o == offs[v] and stride * 4 % 16 == 0
        block = pool[o:o + reuse.H * stride].reshape(reuse.H, stride)[:, :reuse.W].reshape(-1)
        assert np.array_equal(block, reuse.expected(v))


# ------------------------------------------------------------------ PTX and skips
PTX = """
.version 8.7
	@%p1 st.shared.b32 [ %r1 + 0 ], %r11;
	@%p2 tensormap.replace.tile.global_address.shared::cta.b1024.b64 [ %rd13 + 0 ], %rd14;
	@%p2 tensormap.replace.tile.rank.shared::cta.b1024.b32 [ %rd13 + 0 ], 0x1;
	@%p2 tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [ %rd13 + 0 ], 0x0, %r2;
	@%p2 tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [ %rd13 + 0 ], 0x3;
	@%p1 tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [ %rd16 + 0 ], [ %rd13 + 0 ], 0x80;
	@%p1 fence.proxy.tensormap::generic.acquire.gpu [ %rd16 + 0 ], 0x80;
"""


def test_ptx_fields_and_the_deleted_acquire():
    f = triton_run.ptx_fields(PTX)
    assert f["fields"]["swizzle_mode"] == ["0x3"] and f["fields"]["box_dim"] == ["0x0, %r2"]
    assert f["release"] and f["acquire"] and f["ptx_version"] == "8.7"
    cut, n = triton_run.ACQUIRE.subn("", PTX)
    assert n == 1 and not triton_run.ptx_fields(cut)["acquire"] and triton_run.ptx_fields(cut)["release"]


def test_triton_missing_names_what_to_install(monkeypatch):
    real = runner.importlib.util.find_spec
    monkeypatch.setattr(runner.importlib.util, "find_spec",
                        lambda name, *a: None if name == "triton" else real(name, *a))
    assert runner.triton_missing() == f"Triton is not installed: {runner.INSTALL}"
    monkeypatch.setattr(runner.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else object())
    assert runner.triton_missing() == ""          # no torch needed: CupyCudaDriver


def test_an_unreadable_triton_map_object_is_said():
    class NotIt:
        pass
    with pytest.raises(ValueError, match="is not driver.c's PyCUtensorMapObject"):
        triton_run.map_bytes(NotIt())


# ------------------------------------------------------------------ stores
def test_store_cases_and_the_h100s_row_chunk():
    cs = lm.triton_store_cases("standard")
    assert cs and all(min(c.load.coords) >= 0 and c.kind == "store" for c in cs)
    tail = [c for c in cs if c.id.endswith("-tail16")]
    assert tail and all(c.id.removesuffix("-tail16") in {t.id for t in lm.triton_cases("standard")}
                        for c in tail)
    c = tail[0]
    doc, chunk = lm.store_expected(c), lm.store_expected(c, chunk=True)
    assert doc != chunk and len(doc) == c.tensor_bytes + 64
    assert lm.check_store(c, doc, "x") == []
    (rule, text, facts), = lm.check_store(c, chunk, "Triton's host map")
    assert rule == "library.triton.store" and checks.PAST_ROW in text and "triton#11583" in text
    assert facts == {"outcome": "bytes", "equals": tiled.WITH_DIM0_CHUNK}
    other = bytearray(doc)
    other[-1] ^= 1                             # the guard's last byte: not the row's chunk
    (rule, text, facts), = lm.check_store(c, bytes(other), "x")
    assert checks.PAST_ROW not in text and "(guard)" in text and facts == {"outcome": "bytes"}
    plain = next(c for c in cs if not c.id.endswith("-tail16"))
    assert not tiled.tail_elements(plain.load)
    assert lm.store_expected(plain) == lm.store_expected(plain, chunk=True)


# ------------------------------------------------------------------ the Triton the suite covers
def _launcher(version: str):
    """Triton's ``triton.backends.nvidia.driver`` and its CUDA utils as far as the suite
    reads them, per version (read from the wheels: 3.6.0's driver.py ``make_tensordesc_arg
    (arg, metadata)`` and ``CudaUtils.fill_tma_descriptor``; 3.9.0's ``make_tensordesc_arg
    (arg, metadata, _)``, ``fill_tma_descriptor_tiled`` and ``fill_tma_descriptor_im2col``)."""
    from types import SimpleNamespace

    def fill(*args):
        return None

    if version == "3.6.0":
        def make_tensordesc_arg(arg, metadata):
            return [arg]
        return SimpleNamespace(make_tensordesc_arg=make_tensordesc_arg), SimpleNamespace(fill_tma_descriptor=fill)

    def make_tensordesc_arg(arg, metadata, _):      # noqa: F811  3.9.0's
        return [arg]
    return (SimpleNamespace(make_tensordesc_arg=make_tensordesc_arg),
            SimpleNamespace(fill_tma_descriptor_tiled=fill, fill_tma_descriptor_im2col=fill))


def test_a_triton_whose_launcher_api_differs_skips_naming_its_version():
    """Triton 3.9's launcher (the version constraints/triton.txt pinned, never run on a GPU)
    is not read as 3.6's: its cases skip naming the version, what differs and the im2col
    encoder the suite does not cover, instead of an AttributeError read as a failure."""
    assert triton_run.api_gap(*_launcher("3.6.0"), "3.6.0") == ""
    why = triton_run.api_gap(*_launcher("3.9.0"), "3.9.0")
    assert why.startswith("Triton 3.9.0 is not covered: its CUDA utils have no fill_tma_descriptor "
                          "(they have fill_tma_descriptor_im2col, fill_tma_descriptor_tiled); its "
                          "make_tensordesc_arg is (arg, metadata, _), not (arg, metadata).")
    assert "proven with 3.6.0" in why and "im2col descriptors" in why and "not covered" in why


def test_the_pinned_triton_is_one_a_gpu_run_passed_with():
    """constraints/triton.txt pins a Triton of triton_run.PROVEN, inside the range of
    pyproject's extra "triton"; every proven version is inside it too."""
    import re
    import tomllib
    from pathlib import Path

    from packaging.specifiers import SpecifierSet
    root = Path(__file__).resolve().parents[1]
    pin = re.search(r"^triton==(\S+)$", (root / "constraints/triton.txt").read_text(), re.M)[1]
    assert pin in triton_run.PROVEN
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["triton"]
    spec = SpecifierSet(next(d for d in extra if d.startswith("triton"))[len("triton"):])
    assert pin in spec and all(v in spec for v in triton_run.PROVEN)


# ------------------------------------------------------------------ cuda.core: refusal or harness
def test_only_what_cuda_core_documents_raising_is_its_refusal():
    """CudaCoreDumper.descriptor: a ValueError (cuda.core documents raising it for a map it
    refuses) or a CUDAError of the driver's encode is cuda.core's refusal (Refused: the
    cases fail their rule, naming it); any other exception of the call (a TypeError of a
    call this cuda.core does not take), or a view that cannot be made, is the harness's
    (HarnessError: the case is a harness error), where the suites read every exception
    as "cuda.core refused a map"."""
    from types import SimpleNamespace

    from fixtures.cuda_layer.cuda_core import CudaCoreDumper, Refused
    from fixtures.cuda_layer.faults import HarnessError

    class CUDAError(Exception):        # cuda.core._utils.cuda_utils.CUDAError's name
        pass

    def dumper(raises, view_fails=False):
        def as_tensor_map(box, **kw):
            raise raises

        d = object.__new__(CudaCoreDumper)
        d.view = (lambda a, i=None: (_ for _ in ()).throw(BufferError("no DLPack"))) \
            if view_fails else (lambda a, i=None: SimpleNamespace(as_tensor_map=as_tensor_map))
        return d

    for exc in (ValueError("the pointer is not 16-byte aligned"), CUDAError("CUDA_ERROR_INVALID_VALUE")):
        with pytest.raises(Refused) as info:
            dumper(exc).descriptor(None, (8, 8))
        assert str(info.value) == f"{type(exc).__name__}: {exc}" and info.value.error is exc
    with pytest.raises(HarnessError) as info:
        dumper(TypeError("as_tensor_map() got an unexpected keyword argument 'oob_fill'")).descriptor(None, (8,))
    assert str(info.value).startswith("harness: cuda.core's as_tensor_map raised TypeError: "
                                      "as_tensor_map() got an unexpected keyword argument 'oob_fill'")
    with pytest.raises(HarnessError, match="harness: make cuda.core's StridedMemoryView of the tensor "
                                           "failed: BufferError: no DLPack"):
        dumper(ValueError("unused"), view_fails=True).descriptor(None, (8,))


# ------------------------------------------------------------------ views
@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_a_view_is_its_parents_slice(level):
    """Read through the view's geometry from its first byte, the bytes are NumPy's slice of
    the parent at the view's start: the offset, dims and strides describe one view; every
    view starts past the parent's first element and ends before its last, in every
    dimension, and stays 16-byte aligned."""
    cases = lm.triton_view_cases(level) + lm.cuda_core_view_cases(level)
    assert cases and len({(c.lib, c.id) for c in cases}) == len(cases)
    for c in cases:
        p, es = c.load, c.load.esize
        off = lm.view_offset(c)
        assert off % 16 == 0 and off > 0 and c.id.endswith("-view"), c.id
        store = np.dtype(f"u{es}")
        parent = lm.parent_bytes(c).view(store).reshape(lm.parent_shape(c))
        want = parent[tuple(slice(a, a + d) for a, d in zip(reversed(c.view), c.shape()))]
        assert all(a > 0 and a + d < n for a, d, n in zip(reversed(c.view), c.shape(),
                                                          lm.parent_shape(c))), c.id
        flat = lm.parent_bytes(c)[off:].view(store) if off % es == 0 else None
        got = np.lib.stride_tricks.as_strided(
            flat, shape=tuple(c.shape()), strides=tuple(s * es for s in c.strides_elems()))
        assert np.array_equal(got, want), c.id
        if c.lib == lm.TRITON:
            assert lm.triton_expresses(p) == "", c.id


def test_standard_views_cover_each_element_size_and_cross_the_views_bounds():
    tri, cc = lm.triton_view_cases("standard"), lm.cuda_core_view_cases("standard")
    for cases in (tri, cc):
        assert {c.load.esize for c in cases} == {1, 2, 4, 8}
        p = [c.load for c in cases]
        assert all(any(x < 0 or x + b * e > d for x, b, e, d in zip(
            q.coords, q.box_dim, q.element_strides, q.global_dim)) for q in p)
    assert len(cc) == 20 and len(tri) >= 12


def test_the_model_of_a_view_fills_where_the_parent_goes_on():
    """The model's block of a view whose box crosses its bounds holds the fill there, not
    the parent's bytes (which a map of the parent's extent would load)."""
    c = next(c for c in lm.triton_view_cases("standard") if c.load.oob_fill == OobFill.NONE)
    block = np.frombuffer(checks.expected_block(c), dtype=np.uint8).reshape(-1, c.load.esize)
    _, inb, _ = tiled.box_elements(c.load)
    assert (~inb).any() and not block[~inb].any(), c.id


def test_a_dropped_view_offset_is_named():
    """view_verdict: a map that fails at the view's address but is the one wanted at the
    parent's says the offset was dropped; one that fails at both says only its failure."""
    def check_at(good):
        return lambda at: checks.MapVerdict([] if at == good else [("r", "differs.")], [])
    v = checks.view_verdict(check_at(0x1000), None, 0x1040, 0x1000)
    assert "the view's offset of 64 bytes was dropped" in v.errors[0][1]
    v = checks.view_verdict(check_at(0x2000), None, 0x1040, 0x1000)
    assert v.errors == [("r", "differs.")]
    assert not checks.view_verdict(check_at(0x1040), None, 0x1040, 0x1000).errors


@pytest.mark.parametrize("status,raises", [("CUDA_ERROR_INVALID_CONTEXT", "HarnessError"),
                                           ("CUDA_ERROR_NOT_INITIALIZED", "HarnessError"),
                                           ("CUDA_ERROR_DEINITIALIZED", "HarnessError"),
                                           ("CUDA_ERROR_INVALID_VALUE", "AssertionError"),
                                           ("CUDA_ERROR_NOT_SUPPORTED", "AssertionError")])
def test_a_reference_encode_the_process_could_not_make_is_the_harnesss(monkeypatch, status, raises):
    """The driver's reference map of a data case: refused for its parameters
    (CUDA_ERROR_INVALID_VALUE), the driver broke a rule the case follows; refused because
    the process had no context or no driver (a GPU worker that held no context: measured
    on an H100, driver 580.159.04), the harness could not ask, which no rule decides; any
    other status (one the documents do not list) is the driver's answer, a broken rule."""
    from fixtures.cuda_layer.faults import HarnessError
    from fixtures.tensormap.encode import EncodeResult
    from fixtures.tensormap.enums import Swizzle
    from fixtures.tensormap.params import TiledBox
    box = TiledBox(dtype=DataType.UINT32, rank=1, global_dim=(59,), global_strides=(), box_dim=(32,),
                   element_strides=(1,), interleave=Interleave.NONE, swizzle=Swizzle.NONE,
                   oob_fill=OobFill.NONE, coords=(56,), smem_offset=0)
    monkeypatch.setattr(TiledBox, "encode", lambda self, address, l2=None: EncodeResult(201, status, None))
    with pytest.raises(HarnessError if raises == "HarnessError" else AssertionError) as info:
        checks.encode(box, 1 << 20)
    assert status in str(info.value)
    assert (type(info.value) is HarnessError) == (raises == "HarnessError")
    assert str(info.value).startswith("harness:") == (raises == "HarnessError")
