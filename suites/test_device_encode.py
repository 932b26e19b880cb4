"""Device-side encoding and modification of tensor maps vs host encoding (issue 5).

Seed 000 (CUDA Programming Guide 10.30.1) describes encoding a tiled tensor map on
the device: copy a template (or, on sm_90a, 128 zero bytes) into shared memory,
change fields with ``tensormap.replace`` (seed 003), publish with
``tensormap.cp_fenceproxy``; or modify a map in global memory in place and publish
it with a release fence that the consumer acquires (seed 001).

How it is checked (fixtures/device_encode/, kernels/device_encode.cu):
* the field footprints are learned from the driver in this run
  (fixtures/tensormap/map_layout.py: pairs of host maps differing in one parameter) and
  written to ``map_layout.json`` in ``--report-dir``;
* every field x ordinal x value x state space x writing style, from a template and
  from zeros, plus >= 1,000 random whole maps, are encoded on the device (one warp
  per map, one launch per kernel) and compared with cuTensorMapEncodeTiled of the
  same parameters on every bit a replaceable field owns; the remaining differing
  bits are classified and reported by word (test_differing_bits_are_explained);
* every loadable device map is used for TMA loads next to the host map
  (``device_map_load``): the tiles must be identical, and equal the NumPy model
  (fixtures/tma_box/tiled.py);
* raw PTX and cuda::ptx agree, shared and global-in-place agree, device
  global_address replacement equals cuTensorMapReplaceAddress, nvcc and NVRTC
  builds give the same maps, the global_stride operand is in bytes
  (triton#5408), and target mismatches are build errors with a log.
The maps are encoded in an isolated child, one launch per kernel, per batch (one xdist
bucket of cases) when a check first reads one; the loads run per batch in an isolated
child too, so a map that traps fails its own case and the rest of the batch still runs.
The worker opens no context for any of it.
"""
from __future__ import annotations

import functools
import warnings

import pytest

from fixtures import device_encode as de, engine
from fixtures.cuda_layer import build, placement, status as st
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.engine.device_maps import KERNEL_SOURCE
from fixtures.plugins.reporting.case_rules import rests_on
from fixtures.plugins.reporting.run_reports import write_artifact
from fixtures.tensormap import map_layout as ml, sweep
from fixtures.tensormap.params import map_to_json
from fixtures.rules.registry import check, fail, fail_all

DRIVER_ONLY_WORDS = de.DRIVER_ONLY_WORDS


@functools.lru_cache(maxsize=None)
def _cases(level: str, sm: int):
    return (tuple(de.field_cases(level, sm)), tuple(de.whole_cases(level, sm)),
            tuple(de.tf32_flag_cases(sm)))


def _collect_sm(config) -> int:
    return placement.target_sm(config.getoption("arch", default=None))


def _param(c):
    if c.min_sm > 90:
        return pytest.param(c, id=c.id, marks=pytest.mark.requires_sm(c.min_sm, why=(
            f"seed 003: .swizzle_atomicity and .elemtype 13..15 are sm_{c.min_sm}a features; "
            f"the sm_100a build is checked by test_builds_for_sm100a")))
    return pytest.param(c, id=c.id)


def pytest_generate_tests(metafunc):
    level = sweep.level(metafunc.config)
    if not {"field_case", "whole_case", "tf32_case", "address_case", "stride_case",
            "style_group", "footprint_key"} & set(metafunc.fixturenames):
        return
    sm = _collect_sm(metafunc.config)
    fields, wholes, tf32s = _cases(level, sm)
    if "tf32_case" in metafunc.fixturenames:
        metafunc.parametrize("tf32_case", [_param(c) for c in tf32s])
    if "field_case" in metafunc.fixturenames:
        metafunc.parametrize("field_case", [_param(c) for c in fields])
    if "whole_case" in metafunc.fixturenames:
        metafunc.parametrize("whole_case", [_param(c) for c in wholes])
    if "address_case" in metafunc.fixturenames:
        cs = [c for c in fields if c.key == "global_address" and c.template is not None]
        metafunc.parametrize("address_case", [_param(c) for c in cs])
    if "stride_case" in metafunc.fixturenames:
        cs = [c for c in fields if c.key.startswith("global_stride") and c.template is not None
              and c.space == "shared"]
        metafunc.parametrize("stride_case", [_param(c) for c in cs])
    if "style_group" in metafunc.fixturenames:
        groups = sorted({c.key.split("[")[0] for c in fields})
        metafunc.parametrize("style_group", groups)
    if "footprint_key" in metafunc.fixturenames:
        metafunc.parametrize("footprint_key", list(ml.REPLACEABLE))


# ----------------------------------------------------------------- fixture
@pytest.fixture(scope="session")
def ctx(request, gpu, kernels) -> de.Ctx:
    """The session's layout, footprints and encodes, each made in an isolated child (the
    worker opens no context for them: fixtures/device_encode/runner.py)."""
    level = sweep.level(request.config)
    kernels.build(KERNEL_SOURCE, arch=gpu.arch)      # here, once: the children load it
    out = run_isolated(de.session_setup, gpu.sm, gpu.arch, str(kernels.cache_dir), device=gpu.ordinal,
                       timeout=240, once=True)     # every worker measures the same: once per GPU
    layout, dev_fps, fp_rows = engine.value_of(out, "map-layout.footprint", "device-encode-setup",
                                               "the layout measure and the device footprints")
    writable = 0
    for m in dev_fps.values():
        writable |= m
    sm = _collect_sm(request.config)
    fields, wholes, tf32s = _cases(level, sm)
    everything = list(fields) + list(wholes) + list(tf32s)
    # A map is encoded when a check first reads it, with its batch, one launch per kernel
    # (encoding does not trap); the loads, which can, run per batch in the isolated child
    # (de.LoadBatches).
    encodes = de.Encodes(gpu, kernels.cache_dir, everything, sm=gpu.sm)
    selected = engine.selected_ids(request.session.items, ("field_case", "whole_case", "tf32_case"),
                                   __file__, gpu=gpu)
    loads = de.LoadBatches(sm, gpu, kernels, everything, selected)
    return de.Ctx(gpu.sm, layout, dev_fps, fp_rows, writable, encodes, fields, wholes, loads)


def _fail(case, errs):
    fail_all(case.id, errs)


# ------------------------------------------------------------------- tests
@pytest.mark.rule("map-layout.footprint")
def test_field_footprints_learned(ctx):
    """Every tensormap.replace field has a footprint the driver shows (host pairs
    differing in one parameter); L2 promotion, which has no replace field, too."""
    empty = [k for k in ml.all_keys() if not ctx.layout.footprints.get(k)]
    check(not empty, "map-layout.footprint", "field-footprints",
          f"no bit moved for {empty} across "
          f"{sum(ctx.layout.accepted.values())} accepted host encodes: the layout measure "
          f"cannot say which bits these fields own (accepted per key: {ctx.layout.accepted})")


@pytest.mark.rule("device-encode.footprint")
def test_device_footprint(ctx, footprint_key, request):
    """tensormap.replace of one field writes only bits the driver associates with that
    field (seed 003: "replaces the field, specified by .field qualifier"), and on every
    bit both touch the single-field device map equals the host map. Bits the driver
    moves but replace never writes are allowed only in words 8/9 (measured:
    de.DRIVER_ONLY_RULE)."""
    rests_on(request.node, de.DRIVER_ONLY_RULE)
    key = footprint_key
    host_fp = ctx.layout.footprints.get(key, 0)
    dev_fp = ctx.dev_fps.get(key, 0)
    if not host_fp:
        fail("map-layout.footprint", key, "no host footprint learned")
    errs = []
    extra = dev_fp & ~host_fp
    # A rank change adds/drops whole dimensions: the rank's host footprint excludes
    # per-dimension bits, so allow the device rank op to touch those too.
    if key == "rank":
        extra &= ~ctx.layout.owned([k for k in ml.all_keys() if "[" in k])
    if extra:
        errs.append(("device-encode.footprint", f"replace of {key} wrote bits outside the "
                    f"field's host footprint: {de.bits_text(ctx, extra)} ({de.SEED003})"))
    host_only = host_fp & ~dev_fp
    outside = host_only & ~sum(ml.WORD_MASK << (64 * w) for w in DRIVER_ONLY_WORDS)
    if outside:
        errs.append(("device-encode.footprint", f"the driver moves bits for {key} that "
                    f"tensormap.replace never writes, outside words {DRIVER_ONLY_WORDS} (where "
                    f"{de.DRIVER_ONLY_RULE} measured the driver's own bits): "
                    f"{de.bits_text(ctx, outside)}"))
    bad = []
    for v, mb, code, space, style in ctx.fp_rows:
        if v.key != key:
            continue
        if code != st.OK:
            bad.append(f"{key}={v.value!r} base {v.base_index} {space}/{style}: status {st.describe(code)}")
            continue
        # only the field's own bits: a rank variant also adds/drops dimensions on the host
        d = (ml.as_int(mb) ^ ml.as_int(v.map_bytes)) & host_fp & dev_fp
        if d:
            bad.append(f"{key}={v.value!r} base {v.base_index} {space}/{style}: "
                       f"{de.bits_text(ctx, d, 4)}")
    if bad:
        errs.append(("device-encode.field-bits", f"single-field replaces that differ from the "
                    f"host encode of the same change ({len(bad)}): " + "; ".join(bad[:8])))
    fail_all(key, errs)


@pytest.mark.rule("device-encode.field-bits")
def test_replace_field(ctx, field_case):
    """One field x ordinal x value, from a template differing in that field (or from
    zeros with the whole program), in one state space and writing style: the bytes
    on the field bits equal the host encode, and loads equal the host map's."""
    _fail(field_case, de.check_map(ctx, field_case) + de.check_loads(ctx, field_case))


@pytest.mark.rule("device-encode.field-bits")
def test_whole_map(ctx, whole_case):
    """A random valid map encoded on the device with every field replaced (seed 000's
    kernel), from zeros or a template with the same box or another box / data type /
    swizzle / rank, against cuTensorMapEncodeTiled and by loads."""
    _fail(whole_case, de.check_map(ctx, whole_case) + de.check_loads(ctx, whole_case))


@pytest.mark.rule("device-encode.field-bits")
def test_elemtype_replace_from_tf32_template(ctx, tf32_case):
    """Replacing the element type of a TFLOAT32 / TFLOAT32_FTZ template (seed 000's
    template path) gives the host map of the new type: every elemtype bit the driver
    writes, including the flag it sets only for the TF32 types, and the same loads."""
    _fail(tf32_case, de.check_map(ctx, tf32_case) + de.check_loads(ctx, tf32_case))


@pytest.mark.rule("device-encode.replace-address")
def test_replace_address_matches_driver(ctx, address_case):
    """Device global_address replacement on a host template equals
    cuTensorMapReplaceAddress of the same template, on all 128 bytes."""
    r = ctx.result(address_case)
    assert r.template is not None and r.device is not None and r.device_status == st.OK, (
        f"case {address_case.id}: no device map ({st.describe(r.device_status)}, template "
        f"{r.template_status})")
    # cuTensorMapReplaceAddress made where the device map was (fixtures/device_encode/runner.py)
    assert r.replaced_status == "CUDA_SUCCESS", (
        f"cuTensorMapReplaceAddress returned {r.replaced_status} for {r.target.address:#x}")
    if r.replaced != r.device:
        d = ml.as_int(r.replaced) ^ ml.as_int(r.device)
        fail("device-encode.replace-address", address_case.id,
             f"tensormap.replace.global_address gives other bytes than cuTensorMapReplaceAddress "
             f"(seed 004: \"Modifies the descriptor ... with an updated globalAddress\"): "
             f"{de.bits_text(ctx, d)}; {ml.words_text(r.device, r.replaced, ml.words_of(d))}")


@pytest.mark.rule("device-encode.global-stride-bytes")
def test_global_stride_operand_is_bytes(ctx, stride_case):
    """The global_stride operand is in bytes: the device map must not look like a host
    map of the stride times or divided by 16 (the triton#5408 class of bug)."""
    r = ctx.result(stride_case)
    assert r.device is not None and r.host is not None and r.device_status == st.OK, (
        f"case {stride_case.id}: no device map ({st.describe(r.device_status)})")
    key = stride_case.key
    fp = ctx.layout.footprints.get(key, 0) & ctx.dev_fps.get(key, 0)
    dv, hv = ml.as_int(r.device) & fp, ml.as_int(r.host) & fp
    if dv == hv:
        return
    s = r.target.value(key)
    hints = []
    alts = [(name, alt) for name, alt in (("stride / 16", s // 16), ("stride * 16", s * 16))
            if alt and alt % 16 == 0 and alt < (1 << 40)]
    for (name, alt), e in zip(alts, ctx.batch.host_maps([r.target.set(key, alt) for _, alt in alts])):
        if e.ok and (ml.as_int(e.map_bytes) & fp) == dv:
            hints.append(f"the device map holds what the host encodes for {name} = {alt}")
    fail("device-encode.global-stride-bytes", stride_case.id,
         f"{de.STRIDE_BUG}. Stride {s} bytes: device bits {de.bits_text(ctx, dv ^ hv)} differ from the "
         f"host map. {'; '.join(hints) or 'not a factor-16 confusion'}")


def _by_variant(ctx, group):
    """{(key, value, source): [(case, its result)]} of a style group's field cases, the
    missing ones encoded at once (every call's maps point at one address:
    fixtures/device_encode/runner.py ``ENCODE_BASE``)."""
    cs = [c for c in ctx.fields if c.key.split("[")[0] == group and c.min_sm <= ctx.sm]
    out = {}
    for c, r in zip(cs, ctx.results(cs)):
        out.setdefault((c.key, c.value_id, c.source), []).append((c, r))
    return out


@pytest.mark.rule("device-encode.styles")
def test_styles_agree(ctx, style_group):
    """Raw inline PTX, the cuda::ptx wrappers and the element_size alias produce the
    same 128 bytes for the same program (seed 000: the wrappers "wrap the
    tensormap.replace PTX instruction")."""
    bad = []
    for (key, vid, source), cs in _by_variant(ctx, style_group).items():
        for space in de.SPACES:
            maps = {c.style: r.device for c, r in cs if c.space == space}
            ref = maps.get("raw")
            for style, mb in maps.items():
                if mb != ref:
                    bad.append(f"{key}={vid} from {source} {space}: {style} != raw")
    check(not bad, "device-encode.styles", style_group,
          f"{len(bad)} programs give different maps by writing style: " + "; ".join(bad[:10]))


@pytest.mark.rule("device-encode.spaces")
def test_spaces_agree(ctx, style_group):
    """The same program on a map in shared memory (published with
    tensormap.cp_fenceproxy) and in place in global memory (published with
    fence.proxy.tensormap::generic.release) gives the same 128 bytes (seed 003:
    ".ss = { .global, .shared::cta }")."""
    bad = []
    for (key, vid, source), cs in _by_variant(ctx, style_group).items():
        for style in {c.style for c, _ in cs}:
            maps = {c.space: r.device for c, r in cs if c.style == style}
            if maps.get("shared") != maps.get("global"):
                bad.append(f"{key}={vid} from {source} {style}")
    check(not bad, "device-encode.spaces", style_group,
          f"{len(bad)} programs give different maps in shared and global memory: "
          + "; ".join(bad[:10]))


def _diff_summary(ctx):
    """Every device-vs-host difference of the run by class and word."""
    classes = ("strict", "derived", "inactive", "other", "ignored")
    per = {k: {} for k in classes}
    by_kind = {}
    cases_with = {k: 0 for k in classes}
    everything = list(ctx.fields) + list(ctx.wholes)
    for c, r in zip(everything, ctx.results(everything)):
        if r.device is None or r.host is None or r.device_status != st.OK:
            continue
        d = de.classify(r.device, r.host, ctx.layout, ctx.writable, r.target.rank, r.target)
        kind = c.template_kind
        for k in classes:
            m = getattr(d, k)
            if m:
                cases_with[k] += 1
                for w, bits in ml.by_word(m).items():
                    per[k][w] = per[k].get(w, 0) | bits
                    by_kind.setdefault(f"{k}/{kind}", {}).setdefault(w, 0)
                    by_kind[f"{k}/{kind}"][w] |= bits
    return per, by_kind, cases_with


@pytest.mark.rule("device-encode.remaining-bits")
def test_differing_bits_are_explained(ctx, request):
    """Reports the bits where device maps and host maps still differ, by word and by
    template kind, and why: the H200 showed word 8 (different box / dtype template)
    and words 8 and 9 (from zeros) (de.DRIVER_ONLY_RULE, measured). Fails when a
    difference is in a word that measurement did not report, unless it is a field the
    target's rank does not have."""
    rests_on(request.node, de.DRIVER_ONLY_RULE)
    per, by_kind, cases_with = _diff_summary(ctx)
    lines = []
    for k, words in per.items():
        for w, bits in sorted(words.items()):
            owners = ctx.layout.owner_of_bits(bits << (64 * w))
            lines.append(f"{k}: w{w} 0x{bits:016x} owners {sorted(owners) or 'none'}")
    summary = {"classes": {k: {f"w{w}": f"0x{b:016x}" for w, b in v.items()} for k, v in per.items()},
               "by_template_kind": {k: {f"w{w}": f"0x{b:016x}" for w, b in v.items()}
                                    for k, v in by_kind.items()},
               "cases_with": cases_with}
    _write_layout(ctx, request.config, summary)
    if lines:
        warnings.warn("device vs host maps differ (by class and word): " + " | ".join(lines))
    unexplained = {w for k in ("derived", "other") for w in per[k] if w not in DRIVER_ONLY_WORDS}
    check(not unexplained, "device-encode.remaining-bits", "all-device-maps",
          f"device and host maps differ in words {sorted(unexplained)}, which the measured "
          f"layout did not show (it saw {DRIVER_ONLY_WORDS}): " + " | ".join(lines))


def _write_layout(ctx, config, summary):
    d = config.getoption("report_dir", default=None)
    data = ctx.layout.to_json()
    data["device_footprints"] = {k: ml.ranges(m) for k, m in ctx.dev_fps.items()}
    data["host_only_bits"] = {k: ml.ranges(ctx.layout.footprints.get(k, 0) & ~ctx.dev_fps.get(k, 0))
                              for k in ml.REPLACEABLE}
    data["device_vs_host"] = summary
    data["sm"] = ctx.sm
    # Raw words 8 and 9 of host variants and of device/host pairs, to explain them.
    samples = []
    for v in ctx.layout.variants:
        b = ml.as_int(ctx.layout.bases[v.base_index][1])
        x = ml.as_int(v.map_bytes)
        if (x ^ b) & (((1 << 128) - 1) << 512):
            samples.append({"key": v.key, "base": v.base_index, "value": str(v.value),
                            "w8": f"0x{ml.word(x, 8):016x}", "w9": f"0x{ml.word(x, 9):016x}",
                            "base_w8": f"0x{ml.word(b, 8):016x}", "base_w9": f"0x{ml.word(b, 9):016x}"})
    data["word89_host_variants"] = samples[:400]
    pairs = []
    for c in list(ctx.wholes)[:240]:
        r = ctx.result(c)
        if r.device is None or r.host is None:
            continue
        x, y = ml.as_int(r.device), ml.as_int(r.host)
        pairs.append({"id": c.id, "params": map_to_json(r.target),
                      "device": [f"0x{ml.word(x, w):016x}" for w in range(16)],
                      "host": [f"0x{ml.word(y, w):016x}" for w in range(16)],
                      "template": None if r.template is None else
                      [f"0x{ml.word(ml.as_int(r.template), w):016x}" for w in range(16)]})
    data["whole_map_pairs"] = pairs
    if d:
        write_artifact(config, "map_layout.json", data)


# --------------------------------------------------------------- toolchain
@pytest.mark.requires_tool("nvcc", why="the NVRTC build alone is checked")
@pytest.mark.parametrize("style", ["raw", "ptxwrap"])
@pytest.mark.rule("device-encode.toolchain")
def test_nvcc_and_nvrtc_give_same_maps(ctx, gpu, kernels, style):
    """The same kernel file built by the installed nvcc gives the same maps as the
    NVRTC build, case by case (every field case of the style)."""
    try:
        cubin = de.nvcc_build(KERNEL_SOURCE, gpu.arch, kernels.cache_dir)
    except de.NvccError as exc:
        fail("device-encode.toolchain", style,
             f"nvcc could not build {KERNEL_SOURCE} for {gpu.arch}, NVRTC could:\n{exc.log[-3000:]}")
    mine = [c for c in ctx.fields if c.style == style and c.min_sm <= ctx.sm]
    out = run_isolated(de.nvcc_maps, gpu.sm, gpu.arch, str(kernels.cache_dir), cubin, mine,
                       device=gpu.ordinal, timeout=240)
    got = engine.value_of(out, "device-encode.toolchain", style, "the maps of both builds")
    bad = [cid for cid, nvrtc, _, nvcc, _ in got if nvcc != nvrtc]
    check(not bad, "device-encode.toolchain", style,
          f"nvcc and NVRTC builds of the same kernel give different maps for {len(bad)} of "
          f"{len(got)} cases: {bad[:10]}")


@pytest.mark.rule("device-encode.toolchain")
def test_builds_for_sm100a(kernels):
    """Seed 003: .swizzle_atomicity and .elemtype 13..15 are supported on sm_100a: the
    kernels build for sm_100a, with them (TMAC_DE_PROBE=1 forces the raw atomicity
    op in, TMAC_DE_PROBE=2 the raw elemtype 13..15); the H200 cannot run them."""
    for defines in (None, {"TMAC_DE_PROBE": 1}, {"TMAC_DE_PROBE": 2}):
        try:
            b = kernels.build(KERNEL_SOURCE, defines=defines, arch="sm_100a")
        except build.BuildError as exc:
            fail("device-encode.toolchain", f"sm_100a-{defines}",
                 f"{KERNEL_SOURCE} {defines} does not build for sm_100a:\n{exc.log[-3000:]}")
        assert b.cubin[:4] == b"\x7fELF"


MISMATCHES = [
    ("sm_90", None, "tensormap.replace", "seed 000: \"marked as specific to sm_90a\""),
    ("sm_90a", {"TMAC_DE_PROBE": 1}, "swizzle_atomicity",
     "seed 003: \"Qualifier .swizzle_atomicity is supported on following architectures: sm_100a\""),
    ("sm_90a", {"TMAC_DE_PROBE": 2}, "elemtype",
     "seed 003: \".elemtype corresponding to new_val values 13, 14 and 15 is supported on: sm_100a\""),
    ("sm_90a", {"TMAC_DE_PROBE": 3}, "swizzle_mode",
     "seed 003: \".swizzle_mode corresponding to new_val value 4 is supported on: sm_103a\""),
    ("sm_100a", {"TMAC_DE_PROBE": 3}, "swizzle_mode",
     "seed 003: \".swizzle_mode corresponding to new_val value 4 is supported on: sm_103a\""),
]


@pytest.mark.parametrize("arch,defines,word,rule", MISMATCHES,
                         ids=["tensormap-on-sm_90", "atomicity-on-sm_90a", "elemtype13-on-sm_90a",
                              "swizzle96-on-sm_90a", "swizzle96-on-sm_100a"])
@pytest.mark.parametrize("compiler", ["nvrtc", pytest.param("nvcc", marks=pytest.mark.requires_tool(
    "nvcc"))])
@pytest.mark.rule("device-encode.toolchain")
def test_target_mismatch_is_a_build_error(kernels, compiler, arch, defines, word, rule):
    """A tensormap.replace form the target does not have is a build error whose log
    names it, not a crash and not a silently different kernel."""
    if compiler == "nvrtc":
        with pytest.raises(build.BuildError) as info:
            kernels.build(KERNEL_SOURCE, defines=defines, arch=arch)
        log = info.value.log
    else:
        with pytest.raises(de.NvccError) as info:
            de.nvcc_build(KERNEL_SOURCE, arch, kernels.cache_dir, defines)
        log = info.value.log
    check("tensormap" in log and word in log, "device-encode.toolchain", f"{compiler}-{word}-on-{arch}",
          f"{rule}: the {compiler} build for {arch} {defines} failed, "
          f"but its log does not name {word!r}:\n{log[-2000:]}")


@pytest.mark.below_sm(100, why="the sm_100a build can run here")
@pytest.mark.rule("device-encode.toolchain")
def test_sm100a_cubin_is_refused_here(gpu, kernels):
    """On a GPU below sm_100 the sm_100a build is refused at load time with a CUDA
    error (a clear failure, not a crash)."""
    b = kernels.build(KERNEL_SOURCE, arch="sm_100a")
    out = run_isolated(de.load_refusal, b.cubin, device=gpu.ordinal, timeout=60)
    name = engine.value_of(out, "device-encode.toolchain", "sm100a-here", "the load of the sm_100a build")
    assert name is not None, f"the sm_100a cubin loaded on sm_{gpu.sm}"
    assert name in ("CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_IMAGE",
                    "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"), (
        f"loading an sm_100a cubin on sm_{gpu.sm} failed with {name}")
