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
from fixtures import engine
from fixtures.cuda_layer import status as st
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.rules.registry import check, fail_all
from fixtures.tensormap import sweep
from reports.model import OBSERVATION_PREFIX


def done_cases(level):
    return [c for c in tl.prefetch.generate(level) if c.expect == "done"]


def trap_cases(level):
    return [c for c in tl.prefetch.generate(level) if c.expect == "trap"]


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "prefetch_case", done_cases)
    engine.parametrize(metafunc, "prefetch_trap", trap_cases)
    if "map_space" in metafunc.fixturenames:
        metafunc.parametrize("map_space", [
            pytest.param(c, id=c, marks=pytest.mark.rule(tl.PREFETCH_MAP_CASES[c][2]))
            for c in tl.prefetch_map_cases(sweep.level(metafunc.config))])


prefetch_batches = engine.batch_fixture("prefetch_batches", "prefetch_case", done_cases,
                                        tl.PREFETCH)


def test_tma_prefetch(prefetch_case, prefetch_batches):
    """The prefetch completes and leaves global memory exactly as it was."""
    run = prefetch_batches.result(prefetch_case)
    rule, cid = prefetch_case.rule, prefetch_case.id
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"the map's encode returned {run.encode_status} (its load case encodes)")
    check(run.status == st.OK, rule, cid, f"kernel status {st.describe(run.status)}")
    check(run.global_intact, rule, cid, f"the prefetch changed global memory: {run.global_note}")


@pytest.mark.isolated
@engine.runs_alone(tl.PREFETCH, "prefetch_trap")
def test_tma_prefetch_trap(prefetch_trap, gpu, kernels):
    """A prefetch at coordinates where a load through the same map traps must trap the same
    way; it runs alone in the isolated child."""
    why = prefetch_trap.load_trap_reason
    engine.expect_trap(prefetch_trap, tl.PREFETCH, gpu, kernels, rule=prefetch_trap.rule,
                       reason=why and f"a load through this map at these coordinates traps: {why}")


def test_prefetch_tensormap(map_space, gpu, kernels):
    """prefetch.tensormap on a map in param, const or shared memory, named with its space or
    by a generic address (fixtures/tma_load/prefetch_map.py), then a TMA load through a map:
    the kernel completes and the load reads the box exactly, as without the prefetch (the
    none-* cases; the prefetch of a map in global memory runs alone:
    test_prefetch_tensormap_of_a_global_map)."""
    rule = tl.PREFETCH_MAP_CASES[map_space][2]
    out = run_isolated(tl.run_prefetch_map, map_space, gpu.arch, str(kernels.cache_dir),
                       device=gpu.ordinal, timeout=120)
    tiles, words = engine.value_of(out, rule, map_space, "the prefetch and load")
    fail_all(map_space, tl.judge_prefetch_map(map_space, tiles, words))


@pytest.mark.trap       # trapped on an H100 (fixtures/tma_load/prefetch_map.py GLOBAL)
@pytest.mark.isolated
@pytest.mark.rule("prefetch-map.global-load")
def test_prefetch_tensormap_of_a_global_map(gpu, kernels):
    """prefetch.tensormap of a generic address in global memory, which the PTX ISA gives no
    effect (its tensormap prefetch names .const and .param maps), alone in the isolated
    child: a trap or a completed kernel is an observation; a completed kernel whose load
    through the map in global memory is not exact fails; after a trap, the next child's
    load through the map in global memory (none-global) must be exact."""
    out = run_isolated(tl.run_prefetch_map, "global-generic", gpu.arch, str(kernels.cache_dir),
                       device=gpu.ordinal, timeout=120, alone=True)
    if out.kind not in ("cuda_error", "returned"):
        engine.value_of(out, "prefetch-map.global-load", "global-generic", "the prefetch and load")
    errors, seen = tl.observe_global(out.kind, out.error, out.value)
    if out.kind == "cuda_error":
        after = run_isolated(tl.run_prefetch_map, "none-global", gpu.arch, str(kernels.cache_dir),
                             device=gpu.ordinal, timeout=120)
        tiles, words = engine.value_of(after, "prefetch-map.global-load", "global-generic",
                                       "the next child's load after the trap")
        errors = tl.judge_prefetch_map("none-global", tiles, words)
    fail_all("global-generic", errors)
    pytest.skip(f"{OBSERVATION_PREFIX} not a pass (no document gives this prefetch an effect): {seen}")
