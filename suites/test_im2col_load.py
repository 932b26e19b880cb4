"""im2col-wide TMA loads (cp.async.bulk.tensor .im2col::w / .im2col::w::128) against the
NumPy reference model (fixtures/tma_load/im2col_wide_model.py), bit-exactly.

Cases come from fixtures/tma_load/im2col_wide_cases.py: data type x wide mode x swizzle x
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

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer import status as st
from fixtures.cuda_layer.batching import selected_ids
from fixtures.tensormap import sweep
from fixtures.tensormap.registry import check, fail

WIDE_MIN_CC = (10, 0)


def pytest_generate_tests(metafunc):
    if "wide_case" in metafunc.fixturenames:
        cases = tl.wide_cases(sweep.level(metafunc.config))
        metafunc.parametrize("wide_case", cases, ids=[c.id for c in cases])


@pytest.fixture(scope="module")
def wide_batches(request, gpu, kernels):
    selected = selected_ids(request.session.items, ("wide_case",))
    return tl.WideBatches(gpu, kernels, [c for c in tl.wide_cases(sweep.level(request.config))
                                         if c.id in selected])


def _wide_mismatch(case, got: bytes, want) -> str:
    g = np.frombuffer(got, dtype=np.uint8)
    w = np.frombuffer(want.data, dtype=np.uint8)
    diff = np.flatnonzero(g != w)
    p = case.load
    lines = [f"{diff.size} of {w.size} shared-memory bytes differ from the model "
             f"(mode {p.mode.name}, rows {want.details['rows']}, row pitch "
             f"{want.details['row_pitch']}, box W {want.details['box_w']}, tx bytes {tl.wide_smem_bytes(p)}, coords {p.coords}, wHalo {p.w_halo}, "
             f"wOffset {p.w_offset}, dims {p.global_dim}, corners W {p.lower_w}/{p.upper_w}, "
             f"element strides {p.element_strides})"]
    for off in diff[:8]:
        off = int(off)
        lines.append(f"  byte {off}: hardware 0x{g[off]:02x}, model 0x{w[off]:02x}; "
                     f"{tl.wide_describe_offset(p, off)}")
    n_poison = int((g[diff] == tl.POISON).sum())
    if n_poison:
        lines.append(f"  {n_poison} differing byte(s) still hold the poison 0x{tl.POISON:02x}: "
                     f"the load did not write them")
    if (diff >= tl.wide_footprint(p)).any():
        lines.append(f"  the load wrote past the rows' footprint ({tl.wide_footprint(p)} bytes)")
    lines.append("  the model's open readings (fixtures/tma_load/im2col_wide_model.py "
                 "UNVERIFIED_READINGS) are the first suspects: " + ", ".join(tl.UNVERIFIED_READINGS))
    return "\n".join(lines)


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
