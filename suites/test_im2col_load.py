"""im2col TMA loads against the NumPy reference model (fixtures/tma_box/im2col.py),
bit-exactly.

Cases come from fixtures/tma_box/im2col_cases.py: data type x rank 3..5 x every swizzle
the pixel fits x OOB fill, each load with its own map (channels per pixel, pixels per
column, corners, element strides) and positions (inside, straddling each spatial edge,
channel runs past dimension 0, a box outside the image, image 0, image 1, past the last
image), the documented limits (channelsPerPixel 256, pixelsPerColumn 1024), and one load
in 16 through its map copied on the device (``-dev-copy``); and loads through interleaved
maps (16B interleave under every swizzle, 32B with 32B swizzle: the NC/8HWC8 layout, one
16/32-byte chunk per pixel, ``-il16-`` / ``-il32-``). Each case is its own test id;
the GPU work runs in batches of one bucket (fixtures.engine.units) launched by
the batch's first test in the worker's isolated child (``im2col_load_batch``, one block
per case). Each test compares its own shared-memory bytes with the model.

Cases that must trap (an unaligned channel coordinate; a filter base outside the box of
an interleaved map: both measured on the H100) run one by one in the isolated child and
must raise CUDA_ERROR_ILLEGAL_INSTRUCTION.

im2col-wide TMA loads (``test_im2col_wide_load``: cp.async.bulk.tensor .im2col::w /
.im2col::w::128) against fixtures/tma_load/im2col_wide_model.py, bit-exactly. Cases come
from fixtures/tma_load/im2col_wide_cases.py: data type x wide mode x swizzle x
OOB fill, each with walk variants (inside the box, first element left of it, past its
upper end, channels past globalDim[0], wHalo and wOffset). The GPU work runs in batches
(one launch of ``im2col_wide_load_batch`` per bucket and rank, one block per case) in the
worker's isolated child, as in suites/test_tma_load.py; each case compares its own
shared-memory bytes with the model.

The wide loads need sm_100: below it every case is skipped with the PTX ISA's target
requirement (the kernel still builds for sm_90a, without the wide instructions:
suites/test_toolchain.py).
"""
from __future__ import annotations

import pytest

import fixtures.tma_load as tl
from fixtures import engine
from fixtures.cuda_layer import status as st
from fixtures.rules.registry import check, fail
from fixtures.tma_box import im2col, im2col_cases


def data_cases(level):
    """The sweep's im2col loads, and the placement cases at a multiple of 128 bytes."""
    return [c for c in im2col_cases.generate(level) + im2col_cases.placement_cases(level)
            if c.expect == "data"]


def trap_cases(level):
    return [c for c in im2col_cases.generate(level) if c.expect == "trap"]


def misplaced_cases(level):
    """The placement cases off 128 bytes (im2col_cases.placement_cases)."""
    return [c for c in im2col_cases.placement_cases(level) if c.expect == "trap"]


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "im2col_case", data_cases)
    engine.parametrize(metafunc, "im2col_trap", trap_cases)
    engine.parametrize(metafunc, "im2col_misplaced", misplaced_cases)
    engine.parametrize(metafunc, "wide_case", tl.wide_cases)


im2col_batches = engine.batch_fixture("im2col_batches", "im2col_case", data_cases, tl.IM2COL)
wide_batches = engine.batch_fixture("wide_batches", "wide_case", tl.wide_cases, tl.WIDE)


def mismatch_message(case, got: bytes, want: bytes) -> str:
    """Which pixels and channels differ: the first few bytes, each with the pixel's
    tensor position and channel (fixtures.tma_box.im2col.describe_offset)."""
    p = case.load
    return engine.byte_mismatch(
        got, want, f"{im2col.summary_of(p)}; filter-base bounds per W, H, D {im2col.bounds(p)}",
        lambda off: im2col.describe_offset(p, off), im2col.footprint(p), esize=p.esize,
        past="its footprint")


def test_im2col_load(im2col_case, im2col_batches):
    """The pixels an im2col TMA load puts in shared memory equal the model's, bit for bit
    (through the host map, or through its copy made on the device)."""
    case, rule, cid = im2col_case, im2col_case.rule, im2col_case.id
    run = im2col_batches.result(case)
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"cuTensorMapEncodeIm2col returned {run.encode_status} for a map the documented rules "
          f"(seed 004: CUDA Driver API 6.30) allow")
    check(run.status == st.OK, rule, cid,
          f"kernel status {st.describe(run.status)} (expected byte count "
          f"{im2col.tx_bytes(case.load)} = pixelsPerColumn x channelsPerPixel x element size)")
    check(run.global_intact, rule, cid, f"the load changed global memory: {run.global_note}")
    want = engine.pool.memo(case, "model_load", lambda c: im2col.load(c.load, tl.IM2COL.tensor(c), 0))
    check(want.kind == "data", "tma-model", cid, f"the model answers {want.kind} for a data case")
    if run.image != want.data:
        fail(rule, cid, mismatch_message(case, run.image, want.data))


@pytest.mark.isolated
@engine.runs_alone(tl.IM2COL, "im2col_trap")
def test_im2col_load_trap(im2col_trap, gpu, kernels):
    """An unaligned channel coordinate (measured on the H100) must trap with
    CUDA_ERROR_ILLEGAL_INSTRUCTION; it runs alone in a child process."""
    engine.expect_trap(im2col_trap, tl.IM2COL, gpu, kernels, rule=im2col_trap.rule,
                       reason=im2col.trap_reason(im2col_trap.load))


@pytest.mark.isolated
@pytest.mark.rule("tma-load.smem-misaligned")
@engine.runs_alone(tl.IM2COL, "im2col_misplaced")
def test_im2col_load_smem_misaligned(im2col_misplaced, gpu, kernels):
    """An im2col load whose destination is 16..112 bytes past a 128-byte boundary, which
    the Programming Guide forbids, must trap with CUDA_ERROR_MISALIGNED_ADDRESS, as the
    tiled load does (measured); it runs alone in a child process."""
    engine.expect_misaligned_trap(im2col_misplaced, tl.IM2COL, gpu, kernels, rule=im2col_misplaced.rule,
                                  smem_offset=im2col_misplaced.load.smem_offset)


# ---------------------------------------------------------------- im2col-wide (sm_100)
def _wide_mismatch(case, got: bytes, want) -> str:
    p = case.load
    return engine.byte_mismatch(
        got, want.data,
        f"mode {p.mode.name}, rows {want.details['rows']}, row pitch "
        f"{want.details['row_pitch']}, box W {want.details['box_w']}, tx bytes {tl.wide.smem_bytes(p)}, coords {p.coords}, wHalo {p.w_halo}, "
        f"wOffset {p.w_offset}, dims {p.global_dim}, corners W {p.lower_w}/{p.upper_w}, "
        f"element strides {p.element_strides}",
        lambda off: tl.wide.describe_offset(p, off), tl.wide.footprint(p), poison="the poison",
        past="the rows' footprint",
        extra=["  the model's open readings (fixtures/tma_load/im2col_wide_model.py "
               "UNVERIFIED_READINGS) are the first suspects: " + ", ".join(tl.wide.UNVERIFIED_READINGS)])


@pytest.mark.requires_sm(100, why=f"im2col-wide: {tl.wide.TARGET_DOCUMENT}: "
                                   f"\"{tl.wide.TARGET_SENTENCE}\"")
@pytest.mark.rule("tma-load.im2col-wide")
def test_im2col_wide_load(wide_case, wide_batches):
    """The rows an im2col-wide load puts in shared memory equal the model's, bit for bit."""
    run = wide_batches.result(wide_case)
    rule, cid = "tma-load.im2col-wide", wide_case.id
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"cuTensorMapEncodeIm2colWide returned {run.encode_status} for a map the documented "
          f"rules (seed 004) allow")
    check(run.status == st.OK, rule, cid, f"kernel status {st.describe(run.status)}")
    check(run.global_intact, rule, cid, f"the load changed global memory: {run.global_note}")
    want = engine.pool.memo(wide_case, "model_load", lambda c: tl.wide.load(c.load, tl.WIDE.tensor(c), 0))
    if run.image != want.data:
        fail(rule, cid, _wide_mismatch(wide_case, run.image, want))
