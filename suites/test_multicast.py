"""Cluster multicast TMA loads (PTX ISA, cp.async.bulk.tensor ``.multicast::cluster``),
bit-exactly against the tiled and im2col models (fixtures/tma_box/tiled.py,
fixtures/tma_box/im2col.py), and loads through maps built on the device.

Cases come from fixtures/tma_load/multicast.py: clusters of 2, 4, 8 and 16 CTAs x CTA
masks (every CTA, one, sparse subsets) x the issuing CTA (inside and outside the mask) x
tiled loads drawn from the tiled suite's cases (a quarter of them through a map built on
the device, ``-dev-template``, ``-dev-zeros``) and im2col loads drawn from the im2col
suite's cases (``im2col-...``, host maps). Each case is one cluster and its
own test id; the GPU work runs in batches, one cluster launch per cluster size
(kernels/multicast_load.cu, fixtures/tma_load/operations.py ``MULTICAST``), in the worker's
isolated child. Every CTA of the cluster is checked: a CTA of the mask holds the model's
box and saw its own mbarrier complete within the bound; a CTA outside it holds its
poison and finished.
"""
from __future__ import annotations

import pytest

import fixtures.tma_load as tl
from fixtures import engine
from fixtures.cuda_layer import status as st
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.rules.registry import check, fail_all

mc = tl.multicast


def data_cases(level):
    """The sweep's multicasts, and the placement multicasts at a multiple of 128 bytes."""
    return [c for c in mc.generate(level) + mc.placement_cases(level) if c.expect == "data"]


def misplaced_cases(level):
    """The placement multicasts off 128 bytes (mc.placement_cases)."""
    return [c for c in mc.placement_cases(level) if c.expect == "trap"]


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "mc_case", data_cases)
    engine.parametrize(metafunc, "mc_misplaced", misplaced_cases)


mc_batches = engine.batch_fixture("mc_batches", "mc_case", data_cases, tl.MULTICAST)


def _first_diff(case, got: bytes, want: bytes) -> str:
    p, model = case.load, case.model
    return engine.byte_mismatch(got, want, f"{case.mode} load",
                                lambda off: model.describe_offset(p, off), model.footprint(p),
                                esize=p.esize)


def test_multicast(mc_case, mc_batches):
    """Every CTA of the mask receives the model's box at the same offset and completes its own
    mbarrier; every CTA outside it is untouched and finishes."""
    run = mc_batches.result(mc_case)
    if run.unsupported:
        pytest.skip(run.unsupported)
    rule, cid = mc_case.rule, mc_case.id
    check(run.encode_status == "CUDA_SUCCESS", rule, cid,
          f"{'cuTensorMapEncodeIm2col' if mc_case.mode == 'im2col' else 'cuTensorMapEncodeTiled'}"
          f" returned {run.encode_status} for a map the documented rules "
          f"(seed 004) allow")
    if mc_case.built:
        if mc_case.built == "template":
            check(run.template_status == "CUDA_SUCCESS", rule, cid,
                  f"the template map's host encoding returned {run.template_status}")
        check(run.build_status == st.OK, rule, cid,
              f"building the map on the device ({mc_case.built}): status "
              f"{st.describe(run.build_status)}")
    check(run.launched, rule, cid, "the case was not launched")
    errors = []
    if not run.global_intact:
        errors.append((rule, f"the load changed global memory: {run.global_note}"))
    for r in range(mc_case.cluster):
        want = mc.expected(mc_case, r)
        got, code = run.images[r], run.statuses[r]
        role = (f"CTA {r} ({'in' if mc_case.receives(r) else 'outside'} mask "
                f"{mc.mask_id(mc_case.mask, mc_case.cluster)}"
                f"{', the issuer' if r == mc_case.src else ''})")
        if code != st.OK:
            errors.append((rule, f"{role}: status {st.describe(code)}"))
        if got != want:
            what = "the model's box" if mc_case.receives(r) else "its untouched poison"
            errors.append((rule, f"{role}: shared memory is not {what}: {_first_diff(mc_case, got, want)}"))
    if errors and not mc_case.receives(mc_case.src):
        errors.append((rule, f"the issuer is outside the mask: {mc.ISSUER_OUTSIDE_EVIDENCE}"))
    if errors and mc_case.built and run.host_map is not None and run.device_map is not None:
        same = run.host_map == run.device_map
        errors.append((rule, "the device-built map is " + ("bit-identical to" if same else
                                                           "not bit-identical to")
                       + " the host-encoded map of the same parameters"))
    fail_all(cid, errors)


@pytest.mark.isolated
@pytest.mark.rule(mc.MISALIGNED_RULE)
@engine.runs_alone(tl.MULTICAST, "mc_misplaced")
def test_multicast_smem_misaligned(mc_misplaced, gpu, kernels):
    """A multicast load whose destination (the same offset in every CTA of the mask) is
    16..112 bytes past a 128-byte boundary, which the Programming Guide forbids, must trap
    with CUDA_ERROR_MISALIGNED_ADDRESS, as the plain load does (measured); it runs alone in
    the isolated child."""
    engine.expect_misaligned_trap(mc_misplaced, tl.MULTICAST, gpu, kernels, rule=mc.MISALIGNED_RULE,
                                  smem_offset=mc_misplaced.load.smem_offset)


_SIZES = (2, 4, 8, 16)


@pytest.fixture(scope="session")
def cluster_support(gpu, kernels):
    """The multicast kernel's cuOccupancyMaxActiveClusters for each cluster size, asked
    once per GPU in its isolated child (the Outcome: ``value`` {size: (count, why)})."""
    kernels.build(tl.MULTICAST.source, arch=gpu.arch)
    return run_isolated("fixtures.tma_load.operations:multicast_support", gpu.arch,
                        str(kernels.cache_dir), device=gpu.ordinal, timeout=120)


@pytest.mark.parametrize("size", _SIZES, ids=[f"cl{n}" for n in _SIZES])
@pytest.mark.rule("cluster.portable-size")
def test_cluster_size_runs(size, cluster_support, record_property):
    """cuOccupancyMaxActiveClusters for the multicast kernel: at least one cluster of 2, 4
    and 8 CTAs (the portable size); 16 is non-portable: recorded, skipped when 0."""
    out = cluster_support
    out.raise_if_harness("the occupancy query in the isolated child")
    check(out.kind == "returned", "cluster.portable-size", f"cl{size}",
          f"the occupancy query did not return: {out}")
    count, why = out.value[size]
    record_property("max_active_clusters", count)
    if size > 8 and count == 0:
        pytest.skip(f"{why} (where it runs: {mc.CLUSTER_EVIDENCE})")
    check(count > 0, "cluster.portable-size", f"cl{size}", why)
