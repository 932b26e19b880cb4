"""JAX's Mosaic GPU maps (fixtures/library_maps/mosaic.py) on a CPU: the arguments the
suite gives mosaic_gpu_init_tma_desc (worked out by hand from runtime.cc's conventions:
row-major, strides in elements, swizzle bytes with 16 for none, sub-byte tensors with
their innermost dimension, window and outer strides in 4- or 2-bit elements), which maps
Mosaic can express, the cases of a level, the verdict on a map that differs, and the skip
without the plugin."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fixtures import library_maps as lm
from fixtures.library_maps import mosaic
from fixtures.plugins.reporting.case_rules import measured_of_item
from fixtures.tensormap.enums import DataType, Interleave, OobFill, Swizzle
from fixtures.tensormap.params import TiledBox


def _load(dtype=DataType.UINT16, dims=(40, 6, 3), strides=(96, 576), box=(16, 2, 3),
          es=(1, 1, 1), swizzle=Swizzle.B32, fill=OobFill.NONE, il=Interleave.NONE):
    return TiledBox(dtype, len(dims), dims, strides, box, es, il, swizzle, fill, (0,) * len(dims))


def test_arguments_are_row_major_in_elements():
    # u16: strides 96 and 576 bytes are 48 and 288 elements; reversed, innermost stride 1
    c = mosaic.MosaicCase("x", _load())
    assert mosaic.arguments(c) == (2, [3, 6, 40], [288, 48, 1], 32, [3, 2, 16])
    c = mosaic.MosaicCase("x", _load(dtype=DataType.BFLOAT16, swizzle=Swizzle.NONE))
    assert mosaic.arguments(c)[0] == 7 and mosaic.arguments(c)[3] == 16   # no swizzle: 16


def test_sub_byte_arguments_count_4_and_2_bit_elements():
    p = _load(dtype=DataType.UINT8, dims=(45, 15), strides=(48,), box=(32, 12), swizzle=Swizzle.NONE)
    # int4: 90 elements a row of 45 bytes, 96 elements a stride of 48 bytes, window 64
    assert mosaic.arguments(mosaic.MosaicCase("x", p, bits=4)) == (0, [15, 90], [96, 1], 16, [12, 64])
    assert mosaic.arguments(mosaic.MosaicCase("x", p, bits=2)) == (8, [15, 180], [192, 1], 16, [12, 128])


@pytest.mark.parametrize("change,why", [
    (dict(dtype=DataType.FLOAT64), "no f64"),
    (dict(il=Interleave.B16), "never interleaved"),
    (dict(es=(1, 2, 1)), "element strides 1"),
    (dict(fill=OobFill.NAN_REQUEST_ZERO_FMA), "no NaN fill"),
    (dict(strides=(97, 576)), "strides count elements"),
    (dict(box=(4, 2, 3)), "multiple of 16 bytes"),
])
def test_what_mosaic_cannot_express(change, why):
    assert mosaic.expresses(_load()) == ""
    assert why in mosaic.expresses(_load(**change))


def test_the_cases_of_a_level():
    cs = lm.mosaic_cases("smoke")
    ids = [c.id for c in cs]
    assert len(ids) == len(set(ids))
    maps = [c for c in cs if not c.refusal and not c.bits]
    assert maps and all(mosaic.expresses(c.load) == "" for c in maps)
    assert len({c.load.map() for c in maps}) == len(maps)      # one per distinct map
    packed = [c for c in cs if c.bits]
    assert packed and all(c.load.dtype == DataType.UINT8 and c.id.endswith(f"-int{c.bits}")
                          and c.rule == "library.mosaic.sub-byte" for c in packed)
    assert [c.id for c in cs if c.refusal] == [
        "u8-r2-mosaic-refuses-window-257", "u8-r2-mosaic-refuses-window-inner-8-bytes",
        "u8-r2-mosaic-refuses-stride-8-bytes"]
    assert len(lm.mosaic_cases("standard")) > 100


def test_the_verdict_names_a_differing_bit():
    c = mosaic.MosaicCase("x", _load())
    same = {"mosaic": bytes(range(128)), "driver": bytes(range(128)),
            "driver_status": "CUDA_SUCCESS", "address": 1 << 20}
    assert lm.mosaic_verdict(c, same).errors == []
    other = dict(same, mosaic=bytes([1]) + bytes(range(1, 128)))
    (rule, message), = lm.mosaic_verdict(c, other).errors
    assert rule == "library.mosaic.map" and "Mosaic's arguments: elem_type 2" in message
    refused = dict(same, driver_status="CUDA_ERROR_INVALID_VALUE", driver=None)
    (rule, message), = lm.mosaic_verdict(c, refused).errors
    assert "cuTensorMapEncodeTiled refused" in message


def test_a_mosaic_case_rests_on_no_box_model_reading():
    p = _load(dtype=DataType.UINT8, dims=(45, 15), strides=(48,), box=(32, 12), swizzle=Swizzle.NONE)
    item = SimpleNamespace(callspec=SimpleNamespace(params={"mosaic_case": mosaic.MosaicCase("x", p)}),
                           user_properties=[], iter_markers=lambda name=None: iter(()),
                           get_closest_marker=lambda name: None)
    assert measured_of_item(item) == ()


def test_without_the_plugin_the_cases_skip_naming_the_install(monkeypatch):
    monkeypatch.setattr(mosaic, "runtime_path", lambda: None)
    assert "pip install 'jax[cuda13]'" in mosaic.missing()
