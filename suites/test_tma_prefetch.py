"""TMA prefetches (cp.async.bulk.prefetch.tensor .tile and .im2col) through the load
suites' maps.

Cases come from fixtures/tma_load/prefetch.py: tiled and im2col load cases (every data
type, swizzles, interleaves, ranks, positions inside and across every edge), the same
map and coordinates. A prefetch has no destination and no completion mechanism: each
must complete (the kernel ends with the block's status word written) and change no byte
of global memory (the tensor, its padding and the guards around it). Batches run as in
the load suites (one bucket per launch, in the worker's isolated child). A load case
that must trap is a prefetch case that must trap, alone in the isolated child.
"""
from __future__ import annotations

import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer import status as st
from fixtures.cuda_layer.batching import selected_ids
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.tensormap import sweep
from fixtures.tensormap.registry import check


def pytest_generate_tests(metafunc):
    for name, expect in (("prefetch_case", "done"), ("prefetch_trap", "trap")):
        if name in metafunc.fixturenames:
            cases = [c for c in tl.prefetch.generate(sweep.level(metafunc.config))
                     if c.expect == expect]
            metafunc.parametrize(name, cases, ids=[c.id for c in cases])


@pytest.fixture(scope="session")
def prefetch_batches(request, gpu, kernels):
    selected = selected_ids(request.session.items, ("prefetch_case",))
    return tl.PrefetchBatches(gpu, kernels, [c for c in tl.prefetch.generate(
        sweep.level(request.config)) if c.expect == "done" and c.id in selected])


def test_tma_prefetch(prefetch_case, prefetch_batches):
    """The prefetch completes and leaves global memory exactly as it was."""
    run = prefetch_batches.result(prefetch_case)
    rule, cid = prefetch_case.rule, prefetch_case.id
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"the map's encode returned {run.encode_status} (its load case encodes)")
    check(run.status == st.OK, rule, cid, f"kernel status {st.describe(run.status)}")
    check(run.global_intact, rule, cid, f"the prefetch changed global memory: {run.global_note}")


@pytest.mark.isolated
def test_tma_prefetch_trap(prefetch_trap, gpu, kernels):
    """A prefetch at coordinates where a load through the same map traps must trap the same
    way; it runs alone in the isolated child."""
    kernels.build(tl.prefetch.KERNEL_SOURCE, arch=gpu.arch)
    out = run_isolated("fixtures.tma_load.prefetch:trap_target", prefetch_trap.params(), gpu.arch,
                       str(kernels.cache_dir), device=gpu.ordinal, timeout=120)
    rule, cid = prefetch_trap.rule, prefetch_trap.id
    check(out.kind == "cuda_error", rule, cid,
          f"a load through this map at these coordinates traps; the prefetch gave {out} "
          f"{out.value if out.kind == 'returned' else out.detail}")
    check(out.error == tl.TRAP_ERROR, rule, cid,
          f"trapped with {out.error}; the load traps with {tl.TRAP_ERROR}")
