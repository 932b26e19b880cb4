"""Toolchain conformance: the installation's NVRTC and CCCL build every kernel for
the arch-specific targets, refuse ``tensormap.replace`` on the plain target, and a
host-encoded map TMA-loads bit-exactly (GPU smoke test, trap and timeout contained), each
in an isolated child.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fixtures import engine
from fixtures.cuda_layer import build, status
from fixtures.toolchain import smoke
from fixtures.tma_box import tiled
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.rules.registry import check

KERNELS = sorted(p.name for p in build.KERNEL_DIR.glob("*.cu")
                 if p.name != "replace_sm90a_only.cu")
# Seed 003 (PTX ISA, tensormap.replace): "Supported on following architectures:
# sm_90a, sm_100a, ..."; seed 000: "marked as specific to sm_90a".
TARGETS = ["sm_90a", "sm_100a"]


def pytest_generate_tests(metafunc):
    """Every kernel builds for sm_90a and sm_100a, and for ``--arch`` when it names
    another target (``--arch sm_120a`` on a machine without a GPU builds them all for
    sm_120a)."""
    if metafunc.definition.originalname == "test_kernel_builds":
        arch = metafunc.config.getoption("arch")
        metafunc.parametrize("source", KERNELS + ["replace_sm90a_only.cu"])
        metafunc.parametrize("arch", TARGETS + ([arch] if arch and arch not in TARGETS else []))


@pytest.mark.rule("toolchain.builds")
def test_kernel_builds(kernels, source, arch):
    b = kernels.build(source, arch=arch)
    assert b.cubin[:4] == b"\x7fELF", f"{source} for {arch}: NVRTC output is not a cubin"
    assert Path(b.cccl_include, "cuda", "ptx").is_file()


@pytest.mark.rule("toolchain.replace-needs-sm90a")
def test_tensormap_replace_rejected_for_plain_sm_90(kernels):
    """Seed 000: "the cuda::ptx::tensormap_replace functions and corresponding
    tensormap.replace.tile PTX instructions are marked as specific to sm_90a"."""
    with pytest.raises(build.BuildError) as info:
        kernels.build("replace_sm90a_only.cu", arch="sm_90")
    assert "tensormap" in info.value.log, (
        "the sm_90 build failed, but not because of tensormap.replace:\n" + info.value.log)


SMOKE_SHAPE = (100, 72)          # rows (dim 1), columns (dim 0): 288-byte rows
SMOKE_BOX = (32, 8)              # 128 inner bytes: a multiple of 16
SMOKE_COORDS = [(0, 0), (32, 8), (0, 92), (64, 96), (-32, -8), (-4, 40), (96, 0), (64, 200)]


def _smoke_id(c):
    return f"box-at-x{c[0]}-y{c[1]}"


def _load(gpu, kernels, host, coords, rule: str, case: str):
    """The smoke loads of ``host`` at ``coords`` in an isolated child (the worker opens no
    context for them): (tiles, status words). A refused encode fails the test; a load that
    does not complete fails ``rule`` naming why."""
    out = run_isolated(smoke.isolated_load, host, SMOKE_BOX, coords, gpu.arch, str(kernels.cache_dir),
                       device=gpu.ordinal, timeout=120)
    tiles, st, refused = engine.value_of(out, rule, case, "the smoke load")
    assert not refused, f"cuTensorMapEncodeTiled of the smoke map returned {refused}"
    return tiles, st


@pytest.mark.rule("toolchain.smoke-load")
def test_smoke_tile_loads_bit_exact(gpu, kernels):
    """Box loads at aligned coordinates, interior, straddling the edges, negative and
    fully outside, equal the CuPy slice with zero fill, bit for bit."""
    rng = np.random.default_rng(20261121)
    host = rng.standard_normal(SMOKE_SHAPE).astype(np.float32)
    tiles, st = _load(gpu, kernels, host, SMOKE_COORDS, "toolchain.smoke-load", "smoke")
    status.check_status(st, [_smoke_id(c) for c in SMOKE_COORDS])
    for tile, (x, y) in zip(tiles, SMOKE_COORDS):
        want = tiled.plane_box(host, x, y, *SMOKE_BOX)
        diff = np.flatnonzero(tile.view(np.uint32) != want.view(np.uint32))
        assert diff.size == 0, (
            f"box at ({x}, {y}): {diff.size} elements differ, first at flat index {diff[0]}: "
            f"got {tile.ravel()[diff[0]]!r}, want {want.ravel()[diff[0]]!r}")


@pytest.mark.trap       # traps on purpose (fixtures/plugins/run_control/trap_marks.py)
@pytest.mark.isolated
@pytest.mark.rule("toolchain.trap-contained")
def test_unaligned_inner_coordinate_trap_is_contained(gpu, kernels):
    """A load at inner coordinate 1 (4 bytes) traps (measured, rule tma-load.trap:
    CUDA_ERROR_ILLEGAL_INSTRUCTION, sticky). In a child process it is a result, and the
    run's other processes on the GPU stay usable (a load in another child is right)."""
    out = run_isolated("fixtures.toolchain.smoke:probe_trap", gpu.arch, kernels.cache_dir,
                       device=gpu.ordinal, timeout=120, alone=True)
    assert out.kind == "cuda_error", f"expected a trap, got {out}\n{out.detail}"
    assert out.poisoned, f"the trap {out.error} did not poison the child's context"
    assert out.error == "CUDA_ERROR_ILLEGAL_INSTRUCTION", (
        f"trap reported as {out.error}; on the H200 and H100 it was CUDA_ERROR_ILLEGAL_INSTRUCTION")
    host = np.ones(SMOKE_SHAPE, dtype=np.float32)
    tiles, st = _load(gpu, kernels, host, [(0, 0)], "toolchain.trap-contained", "after-the-trap")
    status.check_status(st, ["after the trap"])
    assert (tiles == 1).all(), "another child's load misbehaves after the isolated trap"
    again = run_isolated("fixtures.toolchain.smoke:probe_timeout", gpu.arch, kernels.cache_dir,
                         device=gpu.ordinal, timeout=120, alone=True)
    assert again.kind == "returned", f"the next child after the trap failed: {again}\n{again.detail}"


@pytest.mark.isolated
@pytest.mark.rule("toolchain.bounded-wait")
def test_bounded_wait_reports_timeout(gpu, kernels):
    """An mbarrier told to expect more bytes than TMA delivers never completes
    (measured on the H200: it hung forever). The bounded wait turns that into TIMEOUT in
    the status words, and the kernel exits."""
    out = run_isolated("fixtures.toolchain.smoke:probe_timeout", gpu.arch, kernels.cache_dir,
                       device=gpu.ordinal, timeout=120)
    assert out.kind == "returned", f"the timeout probe did not return: {out}\n{out.detail}"
    assert out.value == [status.TIMEOUT, status.TIMEOUT], (
        f"status words {out.value}, want both TIMEOUT ({status.TIMEOUT})")
    with pytest.raises(AssertionError, match="timeout"):
        status.check_status(out.value, ["box0", "box1"])


@pytest.mark.unproven       # not yet run on a GPU node (issue 58)
@pytest.mark.rule("toolchain.ptx-newer-than-driver")
def test_ptx_newer_than_the_driver_is_an_environment_answer(gpu):
    """A module of PTX newer than the driver knows (flashinfer#3795: PTX 9.1 on a CUDA 13.0
    driver) is the environment's answer: PTX 8.0 loads and runs through the harness's
    module path; PTX 9.9 comes back as UnsupportedToolchain naming both versions, which the
    harness turns into the skip "environment, not a rule: ...", never a broken rule."""
    rule = "toolchain.ptx-newer-than-driver"
    known = run_isolated(smoke.load_ptx, smoke.KNOWN_PTX, device=gpu.ordinal, timeout=60)
    word, driver = engine.value_of(known, rule, f"ptx-{smoke.KNOWN_PTX}", f"loading PTX {smoke.KNOWN_PTX}")
    check(word == 7, rule, f"ptx-{smoke.KNOWN_PTX}", f"the kernel of PTX {smoke.KNOWN_PTX} wrote {word}, not 7")
    newer = run_isolated(smoke.load_ptx, smoke.NEWER_PTX, device=gpu.ordinal, timeout=60)
    if newer.kind == "returned" and driver >= smoke.NEWER_PTX_DRIVER:
        pytest.skip(f"this driver (cuDriverGetVersion {driver}) may know PTX {smoke.NEWER_PTX}: it loaded it")
    case = f"ptx-{smoke.NEWER_PTX}"
    check(newer.kind == "exception" and newer.error.startswith("UnsupportedToolchain: "), rule, case,
          f"loading PTX {smoke.NEWER_PTX} came back {newer}, not UnsupportedToolchain "
          f"(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)")
    check(f"PTX {smoke.NEWER_PTX}" in newer.error and "cuDriverGetVersion" in newer.error, rule, case,
          f"the refusal does not name both versions: {newer.error}")
    with pytest.raises(pytest.skip.Exception, match=f"^{engine.ENVIRONMENT}the driver .*PTX {smoke.NEWER_PTX}"):
        engine.value_of(newer, rule, case, f"loading PTX {smoke.NEWER_PTX}")
