"""Self-tests of fixtures/device_encode (CPU only): case coverage, ids, PTX
operand values from fixtures.tensormap.enums, memory safety of the loads, and the kernel
source's field codes and builds."""
from __future__ import annotations

import re

import pytest

from fixtures.cuda_layer import build
from fixtures import device_encode as de
from fixtures.device_encode import field_sweep
from fixtures.tensormap.enums import DTYPES, PTX_SWIZZLE, DataType, Interleave, OobFill, Swizzle


@pytest.fixture(scope="module")
def cases():
    return de.field_cases("standard", 90), de.whole_cases("standard", 90)


def test_ids_unique_and_readable(cases):
    f, w = cases
    ids = [c.id for c in f + w]
    assert len(ids) == len(set(ids))
    assert "replace-elemtype=bf16-from-zeros-shared-ptxwrap" in ids
    assert "replace-element_stride[0]=3-from-template-global-ptxwrap-elemsize" in ids
    assert all(re.fullmatch(r"[A-Za-z0-9_\[\]=+\-.^]+", i) for i in ids), \
        [i for i in ids if not re.fullmatch(r"[A-Za-z0-9_\[\]=+\-.^]+", i)][:5]


def test_every_field_ordinal_value_space_style(cases):
    f, _ = cases
    seen = {(c.key, c.value_id, c.space, c.style, c.source) for c in f}
    for key in ["box_dim", "global_dim", "element_stride"]:
        for i in range(5):
            assert any(k == f"{key}[{i}]" for k, *_ in seen)
    for i in range(4):
        assert any(k == f"global_stride[{i}]" for k, *_ in seen)
    for v in ("u8", "u16", "u32", "s32", "u64", "s64", "f16", "f32", "f32ftz", "f64", "bf16",
              "tf32", "tf32ftz"):
        for space in de.SPACES:
            for style in de.STYLES:
                for source in de.SOURCES:
                    assert ("elemtype", v, space, style, source) in seen
    assert {c.value_id for c in f if c.key == "interleave"} == {"il0", "il16", "il32"}
    assert {c.value_id for c in f if c.key == "swizzle"} == {"swz0", "swz32", "swz64", "swz128"}
    assert {c.value_id for c in f if c.key == "fill"} == {"zerofill", "nanfill"}
    assert {c.value_id for c in f if c.key == "rank"} == {"1", "2", "3", "4", "5"}
    assert {c.value_id for c in f if c.key == "swizzle_atomicity"} == {"16B", "32B", "32B-flip8B", "64B"}
    assert {c.value_id for c in f if c.key == "element_stride[2]"} == {str(v) for v in range(1, 9)}
    sm100 = [c for c in f if c.min_sm > 90]
    assert sm100 and all(c.key in ("elemtype", "swizzle_atomicity") for c in sm100)


def test_whole_maps_at_least_1000(cases):
    _, w = cases
    assert len(w) >= 1000
    kinds = {c.template_kind for c in w}
    assert kinds == set(de.WHOLE_TEMPLATES)
    assert {c.style for c in w} == {"raw", "ptxwrap", "ptxwrap-elemsize"}
    assert {c.space for c in w} == set(de.SPACES)
    assert all(c.template is None for c in w if c.template_kind == "zeros")


def test_ptx_values_come_from_the_enum_table():
    t = de.make_map(3, (32, 3, 3), (32, 2, 2), il=Interleave.B32, swz=Swizzle.B32,
                    dtype=DataType.BFLOAT16, fill=OobFill.NAN_REQUEST_ZERO_FMA, strides=(64, 192))
    ops = {(o.field, o.ord): o.value for o in de.full_program(t)}
    assert ops[("elemtype", 0)] == DTYPES[DataType.BFLOAT16].ptx_elemtype == 10
    assert ops[("rank", 0)] == 2          # seed 003: rank - 1
    assert ops[("interleave_layout", 0)] == 2
    assert ops[("swizzle_mode", 0)] == 1
    assert ops[("fill_mode", 0)] == 1
    assert ops[("global_stride", 1)] == 192        # bytes (triton#5408)
    assert ("swizzle_atomicity", 0) not in ops
    t100 = t.with_(swizzle=Swizzle.B128_ATOM_64B)
    ops100 = {(o.field, o.ord): o.value for o in de.full_program(t100, sm=100)}
    assert ops100[("swizzle_mode", 0)] == 3 and ops100[("swizzle_atomicity", 0)] == PTX_SWIZZLE[Swizzle.B128_ATOM_64B][1]
    alias = {o.field for o in de.full_program(t, style="ptxwrap-elemsize")}
    assert "element_size" in alias and "element_stride" not in alias


def test_single_field_programs(cases):
    f, _ = cases
    for c in f:
        if c.template is not None and c.key not in ("rank", "swizzle_atomicity") and c.min_sm == 90:
            assert len(c.ops) == 1, c.id
            # the template differs from the target in that parameter only
            assert c.template.with_(**{"address": c.target.address}) != c.target or c.key == "global_address"
        assert len(c.ops) <= de.MAX_OPS


def test_loads_stay_inside_the_pool(cases):
    f, w = cases
    n = 0
    for c in f + w:
        for co in c.loads:
            n += 1
            assert c.target.address + de.reach(c.target, co) <= de.POOL_BYTES, c.id
    assert n > 3000


def test_targets_are_valid_for_the_model(cases):
    from fixtures.tma_box import tiled as tma_model
    f, w = cases
    for c in f + w:
        if c.min_sm > 90:
            continue
        assert not tma_model.rule_violations(de.to_tiled_load(c.target, (0,) * c.target.rank)), c.id
        for co in c.loads:
            assert tma_model.trap_reason(de.to_tiled_load(c.target, co)) is None, c.id


def test_field_codes_match_kernel():
    src = (build.KERNEL_DIR / de.KERNEL_SOURCE).read_text()
    for name, code in de.FIELD_CODES.items():
        assert re.search(rf"FIELD_{name.upper()} = {code}\b", src), name
    assert re.search(rf"MAPS_PER_BLOCK = {de.MAPS_PER_BLOCK}\b", src)
    assert re.search(rf"NPARAM = {de.NPARAM}\b", src)
    assert de.OP_DTYPE.itemsize == 16


def test_value_ids():
    assert field_sweep._num(1 << 32) == "2^32" and field_sweep._num((1 << 32) - 1) == "2^32-1"
    assert field_sweep._num((1 << 40) - 16) == "2^40-16" and field_sweep._num(48) == "48"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernel_builds(arch, tmp_path):
    b = build.compile_kernel(de.KERNEL_SOURCE, arch=arch, cache_dir=tmp_path)
    assert b.cubin[:4] == b"\x7fELF"


def test_atomicity_is_a_build_error_on_sm90a(tmp_path):
    with pytest.raises(build.BuildError, match="swizzle_atomicity"):
        build.compile_kernel(de.KERNEL_SOURCE, arch="sm_90a", defines={"TMAC_DE_PROBE": 1},
                             cache_dir=tmp_path)


class _Out:
    def __init__(self, value, kind="returned"):
        self.value, self.kind = value, kind

    def __str__(self):
        return self.kind


def _fake_child(bad, calls):
    """An isolated_loads stand-in: runs ids in order, stops at the first bad one."""
    def call(ids):
        calls.append(list(ids))
        loads = {}
        for i in ids:
            if i in bad:
                return _Out({"loads": loads, "trap": de.Trap(i, bad[i], "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
                             "base": 0}, "cuda_error")
            loads[i] = [f"run-{i}"]
        return _Out({"loads": loads, "trap": None, "base": 0})
    return call


def test_loads_with_recovery_names_each_trap_and_keeps_the_rest():
    ids = [f"c{i}" for i in range(10)]
    calls = []
    loads, why = de.loads_with_recovery(ids, _fake_child({"c2": "device", "c7": "host"}, calls))
    assert len(calls) == 3 and calls[1][0] == "c3" and calls[2][0] == "c8"
    assert set(why) == {"c2", "c7"}
    assert "DEVICE-encoded map trapped" in why["c2"] and "HOST map" in why["c7"]
    assert set(loads) == set(ids) - {"c2", "c7"}


def test_loads_with_recovery_gives_up_loudly():
    ids = [f"c{i}" for i in range(10)]
    loads, why = de.loads_with_recovery(ids, _fake_child({i: "device" for i in ids}, []),
                                        max_traps=3)
    assert set(why) == set(ids) and not loads
    assert all("trapped" in why[i] for i in ids[:3])
    assert all("given up" in why[i] for i in ids[3:])
    loads, why = de.loads_with_recovery(ids, lambda i: _Out(None, "crashed"))
    assert set(why) == set(ids) and all("crashed" in w for w in why.values())


def test_box0_values_have_valid_host_geometry(cases):
    f, _ = cases
    for c in f:
        if c.key == "box_dim[0]":
            assert (c.target.box_dim[0] * DTYPES[c.target.dtype].size) % 16 == 0, c.id
            assert (c.template.box_dim[0] * DTYPES[c.template.dtype].size) % 16 == 0 if c.template else True
