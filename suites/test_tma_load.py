"""Tiled TMA loads against the NumPy reference model (fixtures/tma_box/tiled.py), bit-exactly.

Cases come from fixtures/tma_box/tiled_cases.py: data type x swizzle x interleave x OOB fill x
rank, with element strides and coordinate sets (interior, straddling each edge,
negative, fully outside).  Each case is its own test id, but the GPU work runs in
batches: the first test of a batch (up to 512 cases of one rank and one bucket of
fixtures.engine.units, which the xdist scheduler keeps on one worker) launches
``tma_load_batch`` once for all of them (one block per case), in the worker's isolated
child, and the results are kept for the others.  A batch that traps is run again one
case at a time until the trapping case is found: it fails, naming the trap, and the
rest of the batch runs on (fixtures.engine.batches.run_contained).  Each test then
compares its own shared-memory bytes with the model.

Cases that must trap (rule tma-load.trap, measured: unaligned inner coordinate) run one by one in a
child process (fixtures.cuda_layer.isolation) and must raise CUDA_ERROR_ILLEGAL_INSTRUCTION.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import fixtures.tma_load as tl
from fixtures import engine
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.cuda_layer import status as st, trap_lane
from fixtures.rules.registry import check, fail, fail_all
from fixtures.tensormap.enums import DataType, Interleave, OobFill, Swizzle
from fixtures.tensormap.params import TiledBox
from fixtures.tensormap import sweep
from fixtures.tma_box import tiled, tiled_cases, tiled_validity


def data_cases(level):
    """The sweep's data cases, and the placement cases at a multiple of 128 bytes."""
    return [c for c in tiled_cases.generate(level) + tiled_cases.placement_cases(level)
            if c.expect == "data"]


def trap_cases(level):
    """The sweep's trap cases, and the innermost residues through host maps
    (tiled_cases.residue_cases) and maps the device builds (device_residue_cases)."""
    return [c for c in tiled_cases.generate(level) if c.expect == "trap"] + \
        list(tiled_cases.residue_cases(level)) + list(tiled_cases.device_residue_cases(level))


def misplaced_cases(level):
    """The placement cases off 128 bytes (tiled_cases.placement_cases)."""
    return [c for c in tiled_cases.placement_cases(level) if c.expect == "trap"]


def memory_cases(level):
    return list(tiled_cases.memory_cases(level))


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "memory_case", memory_cases)
    engine.parametrize(metafunc, "load_case", data_cases)
    engine.parametrize(metafunc, "trap_case", trap_cases)
    engine.parametrize(metafunc, "misplaced_case", misplaced_cases)
    engine.parametrize(metafunc, "guard_case", tl.guard_cases)


tma_batches = engine.batch_fixture("tma_batches", "load_case", data_cases, tl.TILED)


def mismatch_message(case, got: bytes, want: bytes) -> str:
    p = case.load
    return engine.byte_mismatch(
        got, want, f"box bytes {tiled.smem_bytes(p)}, counts {tiled.box_counts(p)}, "
        f"coords {p.coords}, dims {p.global_dim}, strides {p.global_strides}, "
        f"element strides {p.element_strides}, dst offset {p.smem_offset}",
        lambda off: tiled.describe_offset(p, off), tiled.footprint(p), esize=p.esize)


@pytest.mark.rule("tma-load.model")
def test_tma_load(load_case, tma_batches):
    """The box a tiled TMA load puts in shared memory equals the model's, bit for bit."""
    run = tma_batches.result(load_case)
    cid = load_case.id
    check(run.encode_status == "CUDA_SUCCESS", "tma-load.model", cid,
          f"cuTensorMapEncodeTiled returned {run.encode_status} for a map the documented rules "
          f"(seed 004) allow")
    check(run.status == st.OK, "tma-load.model", cid, f"kernel status {st.describe(run.status)}")
    check(run.global_intact, "tma-load.model", cid,
          f"the load changed global memory: {run.global_note}")
    want = engine.pool.memo(load_case, "model_load", lambda c: tiled.load(c.load, tl.TILED.tensor(c), 0))
    check(want.kind == "data", "tma-model", cid, f"the model answers {want.kind} for a data case")
    if run.image != want.data:
        fail("tma-load.model", cid, mismatch_message(load_case, run.image, want.data))


_SEED004 = {c.id: c for c in tiled_cases.seed004_count_cases()}
_SEED004_EXTRA = 4096


@pytest.fixture(scope="session")
def seed004_runs(gpu, kernels) -> engine.Batches:
    """The seed-004 cases' loads, run to completion (their wait is told a byte count no
    load reaches), in one batch."""
    return engine.Batches(gpu, kernels, list(_SEED004.values()), replace(
        tl.TILED, rule="tma-load.box-elements", tx_override=(1 << 20) - 1,
        timeout_ns=5_000_000, extra_copy=_SEED004_EXTRA))


@pytest.mark.parametrize("case_id", list(_SEED004))
@pytest.mark.rule("tma-load.box-elements")
def test_box_per_seed_004(case_id, seed004_runs):
    """Seed 004: boxDim is the "number of elements to be traversed along each of
    the tensorRank dimensions", TMA "loads ceil(boxDim[i] / elementStrides[i])
    number of elements along i-th dimension" (dimension 0's stride ignored
    without interleave).  The load (run to completion: its wait is told a byte
    count no load reaches) must put exactly those elements in shared memory,
    rows dense.  Non-interleaved controls must pass; interleaved boxes on the
    H200 do not (fixtures/tma_box/tiled.py INTERLEAVE_EVIDENCE; their known issues
    absorb only bytes equal to that measured box)."""
    case, run = _SEED004[case_id], seed004_runs.result(_SEED004[case_id])
    check(run.encode_status == "CUDA_SUCCESS", "tma-load.box-elements", case_id,
          f"encode {run.encode_status}")
    check(run.status == st.TIMEOUT, "tma-load.box-elements", case_id,
          "the unreachable byte count was reached?")
    error = tl.checks.box_per_seed_004(case.load, tl.TILED.tensor(case), run.image)
    fail_all(case_id, [error] if error is not None else [])


@pytest.mark.isolated
@pytest.mark.rule("tma-load.trap")
@engine.runs_alone(tl.TILED, "trap_case")
def test_tma_load_trap(trap_case, gpu, kernels):
    """An unaligned inner coordinate (measured on the H200) must trap with
    CUDA_ERROR_ILLEGAL_INSTRUCTION; it runs alone in a child process."""
    engine.expect_trap(trap_case, tl.TILED, gpu, kernels, rule="tma-load.trap",
                       reason=tiled_validity.trap_reason(trap_case.load))


@pytest.mark.rule("tma-load.memory-kind")
def test_tma_load_memory_kind(memory_case, gpu, kernels):
    """A map over a tensor in memory other than cudaMalloc's (a stream-ordered pool,
    managed memory, a managed pool, pinned or registered host memory) encodes and loads
    the model's box (seed 004 asks of the address only its alignment)."""
    op = replace(tl.TILED, memory=memory_case.memory)
    run = engine.Batches(gpu, kernels, [memory_case], op).result(memory_case)
    cid = memory_case.id
    check(run.encode_status == "CUDA_SUCCESS", "tma-load.memory-kind", cid,
          f"cuTensorMapEncodeTiled refused a map over {memory_case.memory} memory: "
          f"{run.encode_status}")
    check(run.status == st.OK, "tma-load.memory-kind", cid,
          f"the load over {memory_case.memory} memory did not complete: status {run.status}")
    want = tiled.load(memory_case.load, tl.TILED.tensor(memory_case), 0)
    if run.image != want.data:
        fail("tma-load.memory-kind", cid, f"over {memory_case.memory} memory: "
             + mismatch_message(memory_case, run.image, want.data))


@pytest.mark.isolated
@pytest.mark.rule("tma-load.smem-misaligned")
@engine.runs_alone(tl.TILED, "misplaced_case")
def test_tma_load_smem_misaligned(misplaced_case, gpu, kernels):
    """A load whose shared-memory destination is 16..112 bytes past a 128-byte boundary,
    which the Programming Guide forbids (tiled_validity.SMEM_ALIGN_QUOTE), must trap with
    CUDA_ERROR_MISALIGNED_ADDRESS (measured); it runs alone in a child process."""
    engine.expect_misaligned_trap(misplaced_case, tl.TILED, gpu, kernels, rule="tma-load.smem-misaligned",
                                  smem_offset=misplaced_case.load.smem_offset)


# Seed 004: "globalDim array, which specifies tensor size of each of the tensorRank
# dimensions, must be non-zero and less than or equal to 2^32." Maps far larger than
# the memory behind them (TMA reads only the box), loaded at the origin. The 2^31
# cases are the controls; the ones beyond 2^31 are known to trap on the H200
# (known_issues.toml LOAD-GDIM-ABOVE-2-31).
_BIG = [
    ("u8-r1-dim0=2^31", DataType.UINT8, (1 << 31,), (), (32,)),
    ("u8-r1-dim0=2^31+16-beyond-2^31", DataType.UINT8, ((1 << 31) + 16,), (), (32,)),
    ("u8-r1-dim0=2^32-beyond-2^31", DataType.UINT8, (1 << 32,), (), (32,)),
    ("u32-r1-dim0=2^32-beyond-2^31", DataType.UINT32, (1 << 32,), (), (8,)),
    ("u8-r2-dim1=2^31", DataType.UINT8, (48, 1 << 31), (48,), (32, 2)),
    ("u8-r2-dim1=2^32-beyond-2^31", DataType.UINT8, (48, 1 << 32), (48,), (32, 2)),
]


@pytest.mark.isolated
@pytest.mark.parametrize("case_id,dtype,dims,strides,box", _BIG, ids=[b[0] for b in _BIG])
@pytest.mark.rule("tma-load.global-dim-range")
@pytest.mark.runs_alone(trap_lane.AloneCall(tl.LARGE_DIM_TARGET, tl.large_dim_args,
                                       builds=(engine.device_maps.KERNEL_SOURCE,)))
def test_large_global_dim(case_id, dtype, dims, strides, box, gpu, kernels):
    """A dimension up to 2^32 is valid (seed 004): the load at the origin must give
    the model's tile. Runs alone in a child process, since a trap kills the context
    (the run's trap lane may run it ahead)."""
    kernels.build(engine.device_maps.KERNEL_SOURCE, arch=gpu.arch)  # a build failure: "could not build"
    args = tl.large_dim_args(dict(dtype=dtype, dims=dims, strides=strides, box=box), gpu, kernels.cache_dir)
    out = trap_lane.call_alone(tl.LARGE_DIM_TARGET, *args, device=gpu.ordinal, timeout=120)
    out.raise_if_harness("the load through a large map in the isolated child")
    rule = "tma-load.global-dim-range"
    check(out.kind == "returned", rule, case_id,
          f"dims {list(dims)}: the load through the host-encoded map failed: "
          f"{out}{' (a trap: the sticky error killed the context)' if out.poisoned else ''}",
          engine.fault_facts(out))
    v = out.value
    check(v["encode"] == "CUDA_SUCCESS", rule, case_id, f"encode returned {v['encode']}")
    check(v["status"] == st.OK, rule, case_id, f"load status {st.describe(v['status'])}")
    p = TiledBox(dtype, len(dims), dims, strides, box, (1,) * len(dims),
                  Interleave.NONE, Swizzle.NONE, OobFill.NONE, (0,) * len(dims))
    want = tiled.load(p, engine.device_maps.pool_host(), 0).data
    if v["image"] != want:
        fail(rule, case_id, mismatch_message(SimpleNamespace(id=case_id, load=p), v["image"], want))


# ------------------------------------------------------------------ around the destination
@pytest.fixture(scope="session")
def guard_runs(request, gpu, kernels):
    """Every guarded load of the sweep level in one isolated call (two launches), once per
    worker and GPU (fixtures/tma_load/guard_bytes.py)."""
    level = sweep.level(request.config)
    return run_isolated(tl.run_guards, [c.id for c in tl.guard_cases(level)], level, gpu.arch,
                        str(kernels.cache_dir), device=gpu.ordinal, timeout=120)


@pytest.mark.unproven       # not yet run on a GPU node (issue 58)
@pytest.mark.rule("tma-load.destination-only")
def test_guard_bytes(guard_case, guard_runs):
    """A tiled load writes its box and nothing beside it: 128 guard bytes before the
    destination and 128 after the box come back unchanged, for each element size and
    swizzle mode, a box inside, across the far corner and at a negative corner, and in each
    CTA of a multicast (TransformerEngine#3483)."""
    runs = engine.value_of(guard_runs, "tma-load.destination-only", guard_case.id, "the guarded loads")
    region, words = runs[guard_case.id]
    fail_all(guard_case.id, tl.judge_guards(guard_case, region, words))
