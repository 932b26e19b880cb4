"""TMA reductions (cp.reduce.async.bulk.tensor) against the NumPy reference model,
bit-exactly, over every byte of a guarded global buffer.

Cases come from fixtures/tma_store/reduce_cases.py: every (.redOp, map data type) pair
the PTX ISA's table allows (fixtures/tma_store/reduce_model.py ALLOWED), each through
store geometries of its data type (swizzles, interleaves, ranks, element strides, boxes
inside, straddling, negative, outside). The operands of every element the reduction
combines come from the pair's operand list (edge values against edge values, the
operation's own boundaries, random pairs); the rest of the tensor is random. Each case
is its own test id; batches run as in suites/test_tma_store.py (``tma_write_batch``:
the source into shared memory, the reduction, commit_group, wait_group 0). After it,
each element inside the tensor and the box must hold reduce_model.reduce(op, type, old,
val) and every other byte of the case's span its old value. One case per op and variant
runs through a device-built map or with its box loaded back (test_tma_reduce_variant), a
few at negative coordinates alone (a known issue on the H100), and the toolchain shows
that the element type comes from the map (a typed spelling does not build). Reductions in
.im2col_no_offs mode (test_tma_reduce_im2col: one per im2col store map of
suites/test_tma_store.py, the op spread over those its type allows) must equal the im2col
load run backwards, each element reduced.
"""
from __future__ import annotations

import pytest

import fixtures.tma_store as ts
from fixtures import engine
from fixtures.cuda_layer import build
from fixtures.rules.registry import check


def im2col_reductions(level):
    return [c for c in ts.generate_im2col_writes(level) if c.op != "store"]


def data_cases(level):
    """The sweep's reductions, and the placement reductions at a multiple of 128 bytes."""
    return [c for c in ts.generate_reduce(level) + ts.reduce_placement_cases(level)
            if c.expect == "data"]


def misplaced_cases(level):
    """The placement reductions off 128 bytes (ts.reduce_placement_cases)."""
    return [c for c in ts.reduce_placement_cases(level) if c.expect == "trap"]


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "reduce_case", data_cases)
    engine.parametrize(metafunc, "reduce_misplaced", misplaced_cases)
    engine.parametrize(metafunc, "reduce_trap", ts.reduce_trap_cases)
    engine.parametrize(metafunc, "reduce_variant", ts.reduce_variant_cases)
    engine.parametrize(metafunc, "im2col_reduce", im2col_reductions)
    engine.parametrize(metafunc, "reduce_negative", ts.reduce_negative_cases)


reduce_batches = engine.batch_fixture("reduce_batches", "reduce_case", data_cases, ts.WRITES)
reduce_variant_batches = engine.batch_fixture("reduce_variant_batches", "reduce_variant",
                                              ts.reduce_variant_cases, ts.WRITES)
im2col_reduce_batches = engine.batch_fixture("im2col_reduce_batches", "im2col_reduce",
                                             im2col_reductions, ts.WRITES)


def test_tma_reduce(reduce_case, reduce_batches):
    """Each element inside the tensor and the box holds the model's reduction of its old
    value with the source element; every other byte of the span is unchanged."""
    ts.check_write(reduce_case, reduce_batches.result(reduce_case), f".{reduce_case.op} reduction")


def test_tma_reduce_variant(reduce_variant, reduce_variant_batches):
    """Each operation through a map built on the device gives the model's bytes, as through
    the host map; a reduction whose box is loaded back through the same map (same thread
    after wait_group 0 and fence.proxy.async.global, or the next kernel) is seen by that load."""
    ts.check_write(reduce_variant, reduce_variant_batches.result(reduce_variant),
                   f".{reduce_variant.op} reduction")


def test_tma_reduce_im2col(im2col_reduce, im2col_reduce_batches):
    """Each element the im2col load through the same map reads from inside the tensor
    holds the model's reduction of its old value with the source element the load puts
    there; every other byte of the span is unchanged."""
    ts.check_write(im2col_reduce, im2col_reduce_batches.result(im2col_reduce),
                   f"im2col .{im2col_reduce.op} reduction")


@pytest.mark.isolated
@engine.runs_alone(ts.WRITES, "reduce_trap")
def test_tma_reduce_trap(reduce_trap, gpu, kernels):
    """A reduction whose innermost coordinate's byte offset is not a multiple of 16 must
    trap with CUDA_ERROR_ILLEGAL_INSTRUCTION, as the load and the store do (measured); it
    runs alone in the isolated child."""
    engine.expect_trap(reduce_trap, ts.WRITES, gpu, kernels, rule=reduce_trap.rule,
                       reason=ts.trap_reason(reduce_trap.store))


@pytest.mark.isolated
@pytest.mark.rule(ts.REDUCE_MISALIGNED_RULE)
@engine.runs_alone(ts.WRITES, "reduce_misplaced")
def test_tma_reduce_smem_misaligned(reduce_misplaced, gpu, kernels):
    """A reduction whose shared-memory source is 16..112 bytes past a 128-byte boundary,
    which the Programming Guide forbids, must trap with CUDA_ERROR_MISALIGNED_ADDRESS, as
    the load and the store do (measured); it runs alone in the isolated child."""
    engine.expect_misaligned_trap(reduce_misplaced, ts.WRITES, gpu, kernels,
                                  rule=ts.REDUCE_MISALIGNED_RULE,
                                  smem_offset=reduce_misplaced.store.smem_offset)


@pytest.mark.isolated
@engine.runs_alone(ts.WRITES, "reduce_negative")
def test_tma_reduce_negative_coordinates(reduce_negative, gpu, kernels):
    """A reduction whose box starts at a negative coordinate is handled as one crossing
    the high edge (PTX ISA 5.5.3.3). Run alone in the isolated child (on the H100 it
    traps, as a store does: known_issues.toml)."""
    ts.check_write_alone(reduce_negative, gpu, kernels, ".add reduction")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.rule("tma-reduce.type-from-map")
def test_the_element_type_comes_from_the_map(kernels, arch):
    """PTX ISA cp.reduce.async.bulk.tensor: "The type of each tensor data element in the
    source and the destination tensor is specified in Tensor-map." The untyped instruction
    builds; the same with a .f32 qualifier is refused, so a pair the ISA's table leaves out
    cannot be a build error (what the GPU does with one: reduce_model.EVIDENCE)."""
    rule, cid = "tma-reduce.type-from-map", f"reduce_typed.cu-{arch}"
    b = kernels.build("reduce_typed.cu", arch=arch)
    check(b.cubin[:4] == b"\x7fELF", rule, cid, "the untyped reduction did not build to a cubin")
    with pytest.raises(build.BuildError) as info:
        kernels.build("reduce_typed.cu", arch=arch, defines={"TYPED": 1})
    check("cp.reduce.async.bulk.tensor" in info.value.log, rule, cid,
          "the typed spelling failed to build, but not at the reduction:\n" + info.value.log[-800:])
