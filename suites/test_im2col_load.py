"""im2col TMA loads against the NumPy reference model (fixtures/tma_load/im2col_model.py),
bit-exactly.

Cases come from fixtures/tma_load/im2col_cases.py: data type x rank 3..5 x every swizzle
the pixel fits x OOB fill, each load with its own map (channels per pixel, pixels per
column, corners, element strides) and positions (inside, straddling each spatial edge,
channel runs past dimension 0, a box outside the image, image 0, image 1, past the last
image), the documented limits (channelsPerPixel 256, pixelsPerColumn 1024), and one load
in 16 through its map copied on the device (``-dev-copy``); and loads through interleaved
maps (16B interleave under every swizzle, 32B with 32B swizzle: the NC/8HWC8 layout, one
16/32-byte chunk per pixel, ``-il16-`` / ``-il32-``). Each case is its own test id;
the GPU work runs in batches of one bucket (fixtures.cuda_layer.batching) launched by
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
from fixtures.cuda_layer import status as st
from fixtures.cuda_layer.batching import selected_ids
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.tensormap import sweep
from fixtures.tensormap.registry import check, fail

KERNEL = "im2col_load.cu"


def pytest_generate_tests(metafunc):
    _wide_generate_tests(metafunc)
    if "im2col_case" in metafunc.fixturenames:
        cases = [c for c in tl.generate_im2col(sweep.level(metafunc.config)) if c.expect == "data"]
        metafunc.parametrize("im2col_case", cases, ids=[c.id for c in cases])
    if "im2col_trap" in metafunc.fixturenames:
        cases = [c for c in tl.generate_im2col(sweep.level(metafunc.config)) if c.expect == "trap"]
        metafunc.parametrize("im2col_trap", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def im2col_batches(request, gpu, kernels):
    # only the cases this session collected (-k, --deselect)
    selected = selected_ids(request.session.items, ("im2col_case",))
    return tl.Im2colBatches(gpu, kernels, [c for c in tl.generate_im2col(sweep.level(request.config))
                                           if c.expect == "data" and c.id in selected])


def _mismatch_message(case, got: bytes, want: bytes) -> str:
    """Which pixels and channels differ: the first few bytes, each with the pixel's
    tensor position and channel (fixtures.tma_load.im2col_model.describe_offset)."""
    p = case.load
    return tl.mismatch_message(
        got, want, f"{tl.im2col.summary_of(p)}; filter-base bounds per W, H, D {tl.im2col.bounds(p)}",
        lambda off: tl.im2col.describe_offset(p, off), tl.im2col.footprint(p), esize=p.esize,
        past="its footprint")


def test_im2col_load(im2col_case, im2col_batches):
    """The pixels an im2col TMA load puts in shared memory equal the model's, bit for bit
    (through the host map, or through its copy made on the device)."""
    case, rule, cid = im2col_case, im2col_case.rule, im2col_case.id
    run = im2col_batches.result(case, rule)
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"cuTensorMapEncodeIm2col returned {run.encode_status} for a map the documented rules "
          f"(seed 004: CUDA Driver API 6.30) allow")
    check(run.status == st.OK, rule, cid,
          f"kernel status {st.describe(run.status)} (expected byte count "
          f"{tl.im2col.tx_bytes(case.load)} = pixelsPerColumn x channelsPerPixel x element size)")
    check(run.global_intact, rule, cid, f"the load changed global memory: {run.global_note}")
    want = tl.im2col.load(case.load, tl.im2col_global_bytes(case), 0)
    check(want.kind == "data", "tma-model", cid, f"the model answers {want.kind} for a data case")
    if run.image != want.data:
        fail(rule, cid, _mismatch_message(case, run.image, want.data))


@pytest.mark.isolated
def test_im2col_load_trap(im2col_trap, gpu, kernels):
    """An unaligned channel coordinate (measured on the H100) must trap with
    CUDA_ERROR_ILLEGAL_INSTRUCTION; it runs alone in a child process."""
    case = im2col_trap
    why = tl.im2col.trap_reason(case.load)
    check(why, "tma-model", case.id, "the model does not call this case a trap")
    kernels.build(KERNEL, arch=gpu.arch)          # a build failure is "could not build"
    out = run_isolated("fixtures.tma_load.im2col_runner:trap_target", case.params(), gpu.arch,
                       str(kernels.cache_dir), device=gpu.ordinal, timeout=120)
    check(out.kind == "cuda_error", case.rule, case.id,
          f"({why}): expected a trap, got {out} "
          f"{out.value if out.kind == 'returned' else out.detail}")
    check(out.error == tl.TRAP_ERROR, case.rule, case.id,
          f"trapped with {out.error}, the model says {tl.TRAP_ERROR}")


# ---------------------------------------------------------------- im2col-wide (sm_100)
WIDE_MIN_CC = (10, 0)


def _wide_generate_tests(metafunc):
    if "wide_case" in metafunc.fixturenames:
        cases = tl.wide_cases(sweep.level(metafunc.config))
        metafunc.parametrize("wide_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def wide_batches(request, gpu, kernels):
    selected = selected_ids(request.session.items, ("wide_case",))
    return tl.WideBatches(gpu, kernels, [c for c in tl.wide_cases(sweep.level(request.config))
                                         if c.id in selected])


def _wide_mismatch(case, got: bytes, want) -> str:
    p = case.load
    return tl.mismatch_message(
        got, want.data,
        f"mode {p.mode.name}, rows {want.details['rows']}, row pitch "
        f"{want.details['row_pitch']}, box W {want.details['box_w']}, tx bytes {tl.wide_smem_bytes(p)}, coords {p.coords}, wHalo {p.w_halo}, "
        f"wOffset {p.w_offset}, dims {p.global_dim}, corners W {p.lower_w}/{p.upper_w}, "
        f"element strides {p.element_strides}",
        lambda off: tl.wide_describe_offset(p, off), tl.wide_footprint(p), poison="the poison",
        past="the rows' footprint",
        extra=["  the model's open readings (fixtures/tma_load/im2col_wide_model.py "
               "UNVERIFIED_READINGS) are the first suspects: " + ", ".join(tl.UNVERIFIED_READINGS)])


@pytest.mark.rule("tma-load.im2col-wide")
def test_im2col_wide_load(wide_case, gpu, request):
    """The rows an im2col-wide load puts in shared memory equal the model's, bit for bit."""
    if tuple(gpu.cc) < WIDE_MIN_CC:
        pytest.skip(f"im2col-wide needs sm_100: GPU {gpu.ordinal} is compute capability "
                    f"{gpu.cc[0]}.{gpu.cc[1]}; {tl.WIDE_TARGET_DOCUMENT}: "
                    f"\"{tl.WIDE_TARGET_SENTENCE}\"")
    batches = request.getfixturevalue("wide_batches")
    run = batches.result(wide_case)
    rule, cid = "tma-load.im2col-wide", wide_case.id
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"cuTensorMapEncodeIm2colWide returned {run.encode_status} for a map the documented "
          f"rules (seed 004) allow")
    check(run.status == st.OK, rule, cid, f"kernel status {st.describe(run.status)}")
    check(run.global_intact, rule, cid, f"the load changed global memory: {run.global_note}")
    want = tl.wide_load(wide_case.load, tl.wide_global_bytes(wide_case), 0)
    if run.image != want.data:
        fail(rule, cid, _wide_mismatch(wide_case, run.image, want))
