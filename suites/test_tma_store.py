"""Tiled TMA stores against the NumPy reference model (fixtures/tma_store/model.py),
bit-exactly, over every byte of a guarded global buffer.

Cases come from fixtures/tma_store/cases.py: the tiled load's geometries (every data
type, swizzle, interleave and rank, element strides, boxes inside, straddling each
edge, negative and fully outside, sources off the swizzle repeat). Each case is its own
test id; the GPU work runs in batches of one bucket, ranks mixed (fixtures.engine.units)
launched by the batch's first test in the worker's isolated child: ``tma_write_batch``
(kernels/tma_store.cu, one block per case) copies the source into shared memory, stores
it with cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group, commits the bulk
async-group and waits for it (PTX ISA 9.7.9.25.6.2; the wait has no bounded form, so the
isolated child's deadline bounds it). Before the store the tensor's bytes (elements and
row padding) hold GLOBAL_POISON between guard bytes; after it, every byte of the case's
span must equal the model's: the box inside the tensor written from where a load
through the same map puts each element, everything else untouched.

A sample runs twice more (test_tma_store_variant): through maps built on the device
(tensormap.replace of every field, from zeros or a template of another tensor), and with
the box loaded back through the same map after the store (same thread after wait_group 0
and fence.proxy.async.global; or the next kernel), the load seeing the written bytes.

Stores at negative coordinates (a box crossing the low edge) are not in the sweep: on the
H100 each traps, which would end its batch; a few run alone (test_tma_store_negative_
coordinates, rule tma-store.negative-coordinates, a known issue there).

Cases whose innermost coordinate is not 16-byte aligned must trap as the load does;
they run alone in the isolated child.

Stores in .im2col_no_offs mode (test_tma_store_im2col; ranks 3-5 through im2col maps,
fixtures/tma_store/im2col_writes.py) must equal the im2col load through the same map run
backwards, batched the same way; writes through a map whose bounding box leaves the
tensor's spatial extent (a negative lower or positive upper corner) run alone
(test_tma_im2col_write_corner_outside, stores and reductions: a known issue on the H100).
"""
from __future__ import annotations

import pytest

import fixtures.tma_store as ts
from fixtures import engine


def data_cases(level):
    """The sweep's stores, and the placement stores at a multiple of 128 bytes."""
    return [c for c in ts.generate(level) + ts.placement_cases(level) if c.expect == "data"]


def trap_cases(level):
    """The sweep's trap stores, and the innermost residues (ts.residue_cases: host and
    device-built maps)."""
    return [c for c in ts.generate(level) if c.expect == "trap"] + list(ts.residue_cases(level))


def misplaced_cases(level):
    """The placement stores off 128 bytes (ts.placement_cases)."""
    return [c for c in ts.placement_cases(level) if c.expect == "trap"]


def im2col_stores(level):
    return [c for c in ts.generate_im2col_writes(level) if c.op == "store"]


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "store_case", data_cases)
    engine.parametrize(metafunc, "store_misplaced", misplaced_cases)
    engine.parametrize(metafunc, "store_variant", ts.variant_cases)
    engine.parametrize(metafunc, "store_negative", ts.negative_cases)
    engine.parametrize(metafunc, "im2col_store", im2col_stores)
    engine.parametrize(metafunc, "im2col_corner", ts.im2col_corner_cases)
    engine.parametrize(metafunc, "store_trap", trap_cases)


store_batches = engine.batch_fixture("store_batches", "store_case", data_cases, ts.WRITES)
store_variant_batches = engine.batch_fixture("store_variant_batches", "store_variant",
                                             ts.variant_cases, ts.WRITES)
im2col_store_batches = engine.batch_fixture("im2col_store_batches", "im2col_store",
                                            im2col_stores, ts.WRITES)


def test_tma_store(store_case, store_batches):
    """The global span after a tiled TMA store equals the model's, bit for bit."""
    ts.check_write(store_case, store_batches.result(store_case), "store")


def test_tma_store_variant(store_variant, store_variant_batches):
    """A store through a map built on the device (``-dev-zeros``, ``-dev-template``) leaves
    the model's bytes, as through the host map; a store whose box is loaded back through the
    same map (``-load-after-wait``: same thread, after wait_group 0 and
    fence.proxy.async.global; ``-load-next-kernel``) is seen by that load."""
    ts.check_write(store_variant, store_variant_batches.result(store_variant), "store")


@pytest.mark.isolated
@engine.runs_alone(ts.WRITES, "store_negative")
def test_tma_store_negative_coordinates(store_negative, gpu, kernels):
    """A store whose box starts at a negative coordinate is handled as one crossing the
    high edge (PTX ISA 5.5.3.3): the elements inside the tensor written, nothing else.
    Run alone in the isolated child (on the H100 it traps: known_issues.toml)."""
    ts.check_write_alone(store_negative, gpu, kernels, "store")


def test_tma_store_im2col(im2col_store, im2col_store_batches):
    """The global span after a store in .im2col_no_offs mode equals the im2col load through
    the same map run backwards, bit for bit."""
    ts.check_write(im2col_store, im2col_store_batches.result(im2col_store), "im2col store")


@pytest.mark.isolated
@engine.runs_alone(ts.WRITES, "im2col_corner")
def test_tma_im2col_write_corner_outside(im2col_corner, gpu, kernels):
    """A store or reduction through an im2col map whose bounding box leaves the spatial
    extent (pixelBoxLowerCorner < 0, or pixelBoxUpperCorner > 0) writes the elements inside
    the tensor as any im2col write does. Run alone in the isolated child (on the H100 it
    traps: known_issues.toml)."""
    what = "im2col store" if im2col_corner.op == "store" else f"im2col .{im2col_corner.op} reduction"
    ts.check_write_alone(im2col_corner, gpu, kernels, what)


@pytest.mark.isolated
@pytest.mark.rule(ts.MISALIGNED_RULE)
@engine.runs_alone(ts.WRITES, "store_misplaced")
def test_tma_store_smem_misaligned(store_misplaced, gpu, kernels):
    """A store whose shared-memory source is 16..112 bytes past a 128-byte boundary, which
    the Programming Guide forbids, must trap with CUDA_ERROR_MISALIGNED_ADDRESS, as the
    load does (measured); it runs alone in the isolated child."""
    engine.expect_misaligned_trap(store_misplaced, ts.WRITES, gpu, kernels, rule=ts.MISALIGNED_RULE,
                                  smem_offset=store_misplaced.store.smem_offset)


@pytest.mark.isolated
@engine.runs_alone(ts.WRITES, "store_trap")
def test_tma_store_trap(store_trap, gpu, kernels):
    """An innermost coordinate whose byte offset is not a multiple of 16 traps, as the
    load does (measured for loads, and for stores on the H100: model.EVIDENCE['trap']); run
    alone in the isolated child, the trap must raise CUDA_ERROR_ILLEGAL_INSTRUCTION."""
    engine.expect_trap(store_trap, ts.WRITES, gpu, kernels, rule=store_trap.rule,
                       reason=ts.trap_reason(store_trap.store))
