"""Self-tests of fixtures/device_encode (CPU only): case coverage, ids, PTX
operand values from fixtures.tensormap.enums, memory safety of the loads, and the kernel
source's field codes and builds."""
from __future__ import annotations

import re

import pytest

from fixtures import device_encode as de
from fixtures.cuda_layer import build
from fixtures.device_encode import field_sweep
from fixtures.engine import device_maps as dm
from fixtures.tensormap import replace as rp
from fixtures.tensormap.enums import DataType, DTYPES, Interleave, OobFill, PTX_SWIZZLE, Swizzle

from lane_helpers import in_a_real_child


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
    ops = {(o.field, o.ord): o.value for o in rp.full_program(t)}
    assert ops[("elemtype", 0)] == DTYPES[DataType.BFLOAT16].ptx_elemtype == 10
    assert ops[("rank", 0)] == 2          # seed 003: rank - 1
    assert ops[("interleave_layout", 0)] == 2
    assert ops[("swizzle_mode", 0)] == 1
    assert ops[("fill_mode", 0)] == 1
    assert ops[("global_stride", 1)] == 192        # bytes (triton#5408)
    assert ("swizzle_atomicity", 0) not in ops
    t100 = t.with_(swizzle=Swizzle.B128_ATOM_64B)
    ops100 = {(o.field, o.ord): o.value for o in rp.full_program(t100, sm=100)}
    assert ops100[("swizzle_mode", 0)] == 3 and ops100[("swizzle_atomicity", 0)] == PTX_SWIZZLE[Swizzle.B128_ATOM_64B][1]
    alias = {o.field for o in rp.full_program(t, style="ptxwrap-elemsize")}
    assert "element_size" in alias and "element_stride" not in alias


def test_single_field_programs(cases):
    f, _ = cases
    for c in f:
        if c.template is not None and c.key not in ("rank", "swizzle_atomicity") and c.min_sm == 90:
            assert len(c.ops) == 1, c.id
            # the template differs from the target in that parameter only
            assert c.template.with_(**{"address": c.target.address}) != c.target or c.key == "global_address"
        assert len(c.ops) <= dm.MAX_OPS


def test_loads_stay_inside_the_pool(cases):
    f, w = cases
    n = 0
    for c in f + w:
        for co in c.loads:
            n += 1
            assert c.target.address + de.reach(c.target, co) <= dm.POOL_BYTES, c.id
    assert n > 3000


def test_targets_are_valid_for_the_model(cases):
    from fixtures.tma_box import tiled_validity
    f, w = cases
    for c in f + w:
        if c.min_sm > 90:
            continue
        assert not tiled_validity.rule_violations(dm.to_tiled_load(c.target, (0,) * c.target.rank)), c.id
        for co in c.loads:
            assert tiled_validity.trap_reason(dm.to_tiled_load(c.target, co)) is None, c.id


def test_field_codes_match_kernel():
    src = (build.KERNEL_DIR / dm.KERNEL_SOURCE).read_text()
    for name, code in rp.FIELD_CODES.items():
        assert re.search(rf"FIELD_{name.upper()} = {code}\b", src), name
    assert re.search(rf"MAPS_PER_BLOCK = {dm.MAPS_PER_BLOCK}\b", src)
    assert re.search(rf"NPARAM = {dm.NPARAM}\b", src)
    assert rp.OP_DTYPE.itemsize == 16


def test_value_ids():
    assert field_sweep._num(1 << 32) == "2^32" and field_sweep._num((1 << 32) - 1) == "2^32-1"
    assert field_sweep._num((1 << 40) - 16) == "2^40-16" and field_sweep._num(48) == "48"


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_kernel_builds(arch, tmp_path):
    b = build.compile_kernel(dm.KERNEL_SOURCE, arch=arch, cache_dir=tmp_path)
    assert b.cubin[:4] == b"\x7fELF"


def test_atomicity_is_a_build_error_on_sm90a(tmp_path):
    with pytest.raises(build.BuildError, match="swizzle_atomicity"):
        build.compile_kernel(dm.KERNEL_SOURCE, arch="sm_90a", defines={"TMAC_DE_PROBE": 1},
                             cache_dir=tmp_path)


TRAP = "CUDA_ERROR_ILLEGAL_INSTRUCTION"


class _Kernels:
    def __init__(self):
        self.cache_dir, self.built = "/kc", []

    def build(self, source, arch):
        self.built.append((source, arch))


def _load_batches(monkeypatch, cases, make_child):
    """LoadBatches of ``cases`` (sm 90), the ids of its first batch of at least 10 cases,
    and the calls of the isolated child, replaced by ``make_child(those ids)``."""
    from types import SimpleNamespace
    import fixtures.device_encode.runner as runner
    calls = []

    def fake_run_isolated(target, sm, arch, cache_dir, cs, *, device, timeout):
        assert (target, sm, arch, cache_dir) == (
            runner.isolated_loads, 90, "sm_90a", "/kc")
        ids = [c.id for c in cs]
        calls.append(ids)
        return child(ids)

    monkeypatch.setattr(runner, "run_isolated", fake_run_isolated)
    f, w = cases
    b = de.LoadBatches(90, SimpleNamespace(arch="sm_90a", sm=90, ordinal=0), _Kernels(), f + w,
                       None)
    ids = next(m for m in b.members.values() if len(m) >= 10)
    child = make_child(ids)
    return b, ids, calls


def _stopping_child(bad):
    """An isolated_loads stand-in: runs ids in order and stops at the first bad one, as
    load_cases does (the loads before it kept, its trap named through trap_why: the
    context is poisoned, so the outcome is cuda_error with the value kept)."""
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine.batches import Stopped
    from fixtures.device_encode.runner import trap_why

    def child(ids):
        done = {}
        for i in ids:
            if i in bad:
                return Outcome("cuda_error", Stopped(done, i, trap_why(bad[i], TRAP)),
                               error=TRAP, poisoned=True)
            done[i] = [f"run-{i}"]
        return Outcome("returned", done)
    return child


def test_a_trapping_load_fails_its_own_case_and_the_batch_goes_on(cases, monkeypatch):
    """Two traps in a batch (c2's device map, c7's host map): three calls of the child,
    the second starting after c2 and the third after c7; each trapping case names its map;
    every other case has its loads."""
    b, ids, calls = _load_batches(
        monkeypatch, cases, lambda ids: _stopping_child({ids[2]: "device", ids[7]: "host"}))
    case = {c: b.by_id[c] for c in ids}
    assert b.of(case[ids[0]]) == ([f"run-{ids[0]}"], "")
    assert calls == [ids, ids[3:], ids[8:]]
    assert b.kernels.built == [("device_encode.cu", "sm_90a")]
    runs, why = b.of(case[ids[2]])
    assert runs is None and f"the load through the DEVICE-encoded map trapped the context ({TRAP})" in why
    runs, why = b.of(case[ids[7]])
    assert runs is None and f"the load through the HOST map (cuTensorMapEncodeTiled of the target) " \
                            f"trapped the context ({TRAP})" in why
    for i in ids:
        if i not in (ids[2], ids[7]):
            assert b.of(case[i]) == ([f"run-{i}"], ""), i
    assert len(calls) == 3


def test_traps_are_bounded_and_a_crash_is_named(cases, monkeypatch):
    """Every device map traps: the first 8 (run_contained's max_faults) each name their
    trap, the rest of the batch is not run and says why; a child that dies on every call
    fails each case it ran alone with the crash, and the rest the same way."""
    b, ids, calls = _load_batches(monkeypatch, cases,
                                  lambda ids: _stopping_child({i: "device" for i in ids}))
    whys = [b.of(b.by_id[i]) for i in ids]
    assert all(runs is None for runs, _ in whys)
    assert all("DEVICE-encoded map trapped" in w for _, w in whys[:8])
    assert all(w == f"not run: 8 cases of its batch faulted already (last: {ids[7]})"
               for _, w in whys[8:])
    assert calls == [ids[k:] for k in range(8)]
    from fixtures.cuda_layer.isolation import Outcome
    crashed = Outcome("crashed", error="child exited with status 3", poisoned=True)
    b, ids, calls = _load_batches(monkeypatch, cases, lambda ids: lambda i: crashed)
    whys = [b.of(b.by_id[i])[1] for i in ids]
    # the batch, then each case alone until one dies alone: the first, every time
    assert calls[:3] == [ids, ids[:1], ids[1:]]
    assert whys[0] == (f"the isolated child died: child exited with status 3 (run alone in the "
                       f"isolated child, after its batch of {len(ids)} faulted)")
    assert all("the isolated child died" in w for w in whys[:8])
    assert all(w.startswith("not run: 8 cases of its batch faulted already") for w in whys[8:])


def test_box0_values_have_valid_host_geometry(cases):
    f, _ = cases
    for c in f:
        if c.key == "box_dim[0]":
            assert (c.target.box_dim[0] * DTYPES[c.target.dtype].size) % 16 == 0, c.id
            assert (c.template.box_dim[0] * DTYPES[c.template.dtype].size) % 16 == 0 if c.template else True


def test_encodes_are_made_per_batch_when_first_read(cases, monkeypatch):
    """The session's encodes (runner.Encodes), each call made in an isolated child: a
    case's first read encodes its batch (its kind and bucket, the cases one worker runs
    together) and nothing else; a set read at once encodes only what it lacks; nothing is
    encoded twice; a call that does not return fails the cases it encoded."""
    from types import SimpleNamespace
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.device_encode import runner
    from fixtures.rules.registry import RuleFailure
    calls = []

    def fake_run_isolated(target, sm, arch, cache_dir, cs, *, device, timeout):
        assert (target, sm, arch, cache_dir, device) == (runner.encode_cases, 90, "sm_90a", "/kc", 0)
        calls.append([c.id for c in cs])
        return Outcome("returned", {c.id: f"result of {c.id} in call {len(calls)}" for c in cs})

    monkeypatch.setattr(runner, "run_isolated", fake_run_isolated)
    f, w = cases
    everything = list(f[:300]) + list(w[:100])
    gpu = SimpleNamespace(arch="sm_90a", ordinal=0)
    enc = de.Encodes(gpu, "/kc", everything, sm=90)
    assert calls == [] and enc.pool.nbytes > 0
    one = everything[5]
    assert enc.result(one) == f"result of {one.id} in call 1"
    group = [c.id for c in everything if runner.batch_key(c) == runner.batch_key(one)]
    assert calls == [group]
    assert enc.result(everything[[c.id for c in everything].index(group[-1])]) and len(calls) == 1
    got = enc.of(everything)
    assert got == [enc.results[c.id] for c in everything]
    assert len(calls) == 2 and sorted(calls[1]) == sorted(set(c.id for c in everything) - set(group))
    enc.of(everything[:50])
    assert len(calls) == 2 and enc.calls == 2
    monkeypatch.setattr(runner, "run_isolated", lambda *a, **k: Outcome("timeout", error="no answer in 240 s"))
    fresh = de.Encodes(gpu, "/kc", everything, sm=90)
    with pytest.raises(RuleFailure, match=r"\[rule device-encode.field-bits\] .* the device encodes did not "
                                          r"complete: it hung"):
        fresh.result(one)


def test_the_targets_resolve_in_a_real_child(monkeypatch):
    """The device-encoding suite's isolation targets, each resolved by name in a real
    isolated child (host_maps of nothing runs: no GPU needed)."""
    from fixtures.cuda_layer import isolation
    from fixtures.cuda_layer.isolated_child import resolve_target
    from fixtures.device_encode import runner
    for fn in (runner.session_setup, runner.encode_cases, runner.nvcc_maps, runner.load_refusal,
               runner.host_maps, runner.isolated_loads):
        assert resolve_target(isolation.target_name(fn)) is fn
    out = in_a_real_child(monkeypatch, runner.host_maps, [])
    assert (out.kind, out.value) == ("returned", []), out


def test_every_call_encodes_at_one_address(cases, monkeypatch):
    """The session's encodes point at ENCODE_BASE in whichever child makes them (maps of
    different calls compare as one pool's), the targets and the device programs alike;
    no device pool is made for them."""
    from fixtures.device_encode import runner
    from fixtures.engine.device_maps import KERNEL_SOURCE
    from fixtures.repro import record
    f, _ = cases
    picked = [c for c in f if not c.abs_address][:20]
    seen = []
    monkeypatch.setattr(runner, "load_kernel", lambda source, arch, cache_dir: record.FakeModule(KERNEL_SOURCE))
    monkeypatch.setattr(runner, "device_pool", lambda: seen.append("pool"))
    real = runner.encode_all

    def encode_all(module, cs, *, sm=90, pool=None, base=None):
        seen.append(base)
        return real(module, cs, sm=sm, pool=pool, base=base)
    monkeypatch.setattr(runner, "encode_all", encode_all)
    with record.recording():
        got = runner.encode_cases(90, "sm_90a", "/kc", picked)
    assert seen == [runner.ENCODE_BASE]
    for c in picked:
        assert got[c.id].target.address == runner.ENCODE_BASE + c.target.address
        ops = runner.resolved_ops(c, runner.ENCODE_BASE)
        assert all(op.value - runner.ENCODE_BASE == o.value for op, o in zip(ops, c.ops)
                   if op.field == "global_address")
