"""The tensor maps people launch with: Triton's and cuda.core's, against the driver's,
byte by byte and load by load.

For the tiled sweep's geometries each library can express (``fixtures.library_maps.cases``;
ids are the tiled cases'):

* ``test_triton_host_map``: the host map Triton makes for a ``TensorDescriptor``
  (``fill_tma_descriptor``, with the case's swizzle) equals ``cuTensorMapEncodeTiled`` of
  the same parameters once the choices Triton's source states are applied;
* ``test_triton_host_load``: a Triton kernel's ``desc.load`` through the map its launcher
  made (bytes checked the same way) returns the tiled model's block, fill included;
* ``test_triton_device_map`` / ``test_triton_device_load``: the map a Triton kernel builds
  with ``tl.make_tensor_descriptor`` (read from the scratch our ``triton.set_allocator``
  hands out) against the driver's, and the block it loads through it;
* ``test_triton_host_store`` / ``test_triton_device_store``: ``desc.store`` through either
  map (the cases at non-negative coordinates), every byte of the tensor and a guard after it;
* ``test_triton_device_map_reused``: a device map rebuilt in a loop, with Triton's fence and
  with its acquire deleted (stale maps must show);
* ``test_triton_view_host`` / ``test_triton_view_device``: the same over a PyTorch view
  that starts inside a larger tensor (``TensorDescriptor.from_tensor``, or the view's
  pointer, shape and strides to ``tl.make_tensor_descriptor``): the map at the view's first
  byte, the block of the view (its edges filled, though the parent goes on);
* ``test_cuda_core_map``: ``StridedMemoryView.as_tensor_map`` against the driver's;
  ``test_cuda_core_map_memory_kind`` over pools, managed and host memory;
  ``test_cuda_core_view`` over a CuPy view, read through DLPack or the CUDA Array Interface;
* ``test_cute_tensormap_map``: CUTLASS's CuTe DSL, ``create_tensor_map_tiled`` (its host
  code calls the driver), against ``cuTensorMapEncodeTiled`` of the same parameters;
  ``test_cute_atom_map``: ``make_tiled_tma_atom`` (its host code writes the words itself)
  against the driver's map of the tensor and box the atom declares, with the choices its
  generated code fixes; ``test_cute_atom_load`` / ``test_cute_atom_store``: a DSL kernel's
  load through that atom, and store through a store atom of the same box, against the
  tiled models; ``test_cute_device_map_reused``: a DSL kernel that rewrites its map every
  iteration with the DSL's TensorMapManager, with its fences and without the acquire;
* ``test_pallas_copy``: a JAX Pallas kernel's copy_gmem_to_smem then copy_smem_to_gmem
  (plain and swizzled buffers, edges, negative offsets) against the tiled models;
  ``test_pallas_unaligned``: jax-ml/jax#34102's offsets, refused or copied right;
* ``test_library_sources_say_what_the_rules_quote``: every explanation quotes the
  installed library's source.

Every differing bit is explained by a rule quoting the library (``fixtures.library_maps.
rules``), or the case fails naming the bits. Without Triton its cases skip naming what to
install; the library versions are in environment.json and each case's properties.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from fixtures import engine, library_maps as lm
from fixtures.cuda_layer import memory_kinds
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.cuda_layer.toolchain_choice import dist_version
from fixtures.tensormap import sweep
from fixtures.rules import registry
from fixtures.tensormap.enums import DTYPES, OobFill, Swizzle
from fixtures.cuda_layer.faults import HarnessError
from fixtures.plugins.reporting.case_rules import rests_on
from fixtures.rules.registry import check, fail, fail_all
from reports.model import OBSERVATION_PREFIX

# What a quoted module's package is installed as, and how (where it is not Triton's)
DISTRIBUTIONS = {"cutlass": lm.cute_dsl.DISTRIBUTION}
INSTALLS = {"cutlass": lm.cute_dsl.INSTALL, "jax": lm.mosaic.INSTALL}
UNREADABLE = "is not driver.c's PyCUtensorMapObject"


def pytest_generate_tests(metafunc):
    engine.parametrize(metafunc, "triton_case", lm.triton_cases)
    engine.parametrize(metafunc, "triton_store_case", lm.triton_store_cases)
    engine.parametrize(metafunc, "cuda_core_case", lm.cuda_core_cases)
    engine.parametrize(metafunc, "triton_view_case", lm.triton_view_cases)
    engine.parametrize(metafunc, "cuda_core_view_case", lm.cuda_core_view_cases)
    engine.parametrize(metafunc, "mosaic_case",
                       lambda level: [c for c in lm.mosaic_cases(level) if not c.refusal])
    engine.parametrize(metafunc, "mosaic_refusal",
                       lambda level: [c for c in lm.mosaic_cases(level) if c.refusal])
    if "replace_case" in metafunc.fixturenames:
        metafunc.parametrize("replace_case", [
            pytest.param(c, marks=pytest.mark.rule(r)) for c, r in lm.REPLACE_CASES.items()
            if sweep.level(metafunc.config) != "smoke" or c == "new-tensor"])
    if "large_case" in metafunc.fixturenames:       # 4 GiB each: not in the smoke sweep
        metafunc.parametrize("large_case", [c for c in lm.LARGE_CASES
                                            if sweep.level(metafunc.config) != "smoke"])
    engine.parametrize(metafunc, "cute_tensormap_case",
                       lambda level: [c for c in lm.cute_cases(level) if c.path == "tensormap"])
    engine.parametrize(metafunc, "cute_atom_case",
                       lambda level: [c for c in lm.cute_cases(level) if c.path == "atom"])
    engine.parametrize(metafunc, "cute_atom_load_case", lm.cute_atom_load_cases)
    engine.parametrize(metafunc, "cute_atom_store_case", lm.cute_atom_store_cases)
    engine.parametrize(metafunc, "pallas_case", lm.pallas_cases)
    engine.parametrize(metafunc, "pallas_unaligned_case", lm.pallas_unaligned_cases)
    if "quoted_rule" in metafunc.fixturenames:
        metafunc.parametrize("quoted_rule", [_quoted(r) for r in sorted(lm.SOURCE_QUOTES)])


# --------------------------------------------------------------------- fixtures
# Without Triton its cases skip naming what to install (before the GPU's own skip: a
# node without Triton says so whether or not it has a GPU).
TRITON_MISSING = lm.triton_missing()
needs_triton = pytest.mark.skipif(bool(TRITON_MISSING), reason=TRITON_MISSING or "Triton is here")


MOSAIC_MISSING = lm.mosaic_missing()
needs_mosaic = pytest.mark.skipif(bool(MOSAIC_MISSING), reason=MOSAIC_MISSING or "Mosaic is here")


@pytest.fixture(scope="session")
def mosaic_runs(request, gpu, kernels):
    selected = engine.selected_ids(request.session.items, ("mosaic_case",))
    return lm.MosaicBatches(gpu, kernels, [c for c in lm.mosaic_cases(sweep.level(request.config))
                                           if c.id in selected and not c.refusal])


CUTE_MISSING = lm.cute_missing()
needs_cute = pytest.mark.skipif(bool(CUTE_MISSING), reason=CUTE_MISSING or "the CuTe DSL is here")


@pytest.fixture(scope="session")
def cute_runs(request, gpu, kernels):
    selected = engine.selected_ids(request.session.items, ("cute_tensormap_case", "cute_atom_case",
                                                    "cute_atom_load_case", "cute_atom_store_case"))
    return lm.CuteBatches(gpu, kernels, [c for c in lm.cute_cases(sweep.level(request.config))
                                         if c.id in selected])


PALLAS_MISSING = lm.pallas_missing()
needs_pallas = pytest.mark.skipif(bool(PALLAS_MISSING), reason=PALLAS_MISSING or "Pallas is here")


@pytest.fixture(scope="session")
def pallas_runs(request, gpu, kernels):
    selected = engine.selected_ids(request.session.items, ("pallas_case", "pallas_unaligned_case"))
    level = sweep.level(request.config)
    return lm.PallasBatches(gpu, kernels, [c for c in lm.pallas_cases(level)
                                           + lm.pallas_unaligned_cases(level) if c.id in selected])


@pytest.fixture(scope="session")
def triton_runs(request, gpu, kernels):
    selected = engine.selected_ids(request.session.items, ("triton_case",))
    return lm.TritonBatches(gpu, kernels, [c for c in lm.triton_cases(sweep.level(request.config))
                                           if c.id in selected])


@pytest.fixture(scope="session")
def triton_store_runs(request, gpu, kernels):
    """The store cases' own batches: their ids are the map cases' (a Batches keys by id)."""
    selected = engine.selected_ids(request.session.items, ("triton_store_case",))
    return lm.TritonBatches(gpu, kernels, [c for c in lm.triton_store_cases(sweep.level(
        request.config)) if c.id in selected])


@pytest.fixture(scope="session")
def triton_view_runs(request, gpu, kernels):
    selected = engine.selected_ids(request.session.items, ("triton_view_case",))
    return lm.TritonBatches(gpu, kernels, [c for c in lm.triton_view_cases(sweep.level(
        request.config)) if c.id in selected])


def _result(triton_runs, case, request):
    """The case's result; skips where the child could not run it, naming what to install
    (the result's own ``install``, else Triton's)."""
    r = triton_runs.result(case)
    if "unavailable" in r:
        pytest.skip(f"{r['unavailable']}: {r.get('install', lm.INSTALL)}")
    request.node.user_properties.append(("triton", r["triton"]))
    return r


def _explained(request, verdict):
    """The differences the library's rules explained, as the case's user properties; one
    a measured rule explained makes the case rest on that measurement."""
    for rule, what, bits in verdict.explained:
        request.node.user_properties.append(("explained", f"{rule}: {what} ({', '.join(bits)})"))
        if registry.measured(rule):
            rests_on(request.node, rule)


def _device_result(runs, c, rule: str, request) -> dict:
    """The case's result, failing it under ``rule`` where the kernel that builds its map on
    the device did not compile."""
    r = _result(runs, c, request)
    if "device_error" in r:
        fail(rule, c.id, f"Triton could not compile a kernel making this descriptor on the "
             f"device: {r['device_error']}")
    return r


def _at(c, r, check):
    """``check(address)`` at the case's map address; for a view, through ``view_verdict``
    (which names a dropped offset)."""
    if c.view:
        return lm.view_verdict(check, c, r["address"], r["parent"])
    return check(r.get("launched_address", r["address"]))


def _launched_map(c, r, rule: str, verb: str, request, references,
                  map_rule: str = "library.triton.host-map") -> list:
    """The map Triton's launcher made for the case's TensorDescriptor argument (with the
    kernel's metadata) against the driver's: [(rule, message)]. A kernel that did not
    compile, or a descriptor Triton refused, fails the case under ``rule``."""
    if "host_error" in r:
        fail(rule, c.id, f"Triton could not compile a kernel {verb} this descriptor's block "
             f"{c.block()}: {r['host_error']}")
    if "refused" in r:
        fail(rule, c.id, f"Triton refused a descriptor within its documented limits: {r['refused']}")
    meta = r["meta"]
    box, errors = lm.triton_box(c, meta["block_size"], meta["swizzle"])
    if not errors:
        v = _at(c, r, lambda address: lm.triton_host(
            c, r["launched"], address, Swizzle(meta["swizzle"]), box, f"The map Triton's "
            f"launcher made (make_tensordesc_arg with the kernel's metadata {meta})", map_rule,
            references))
        _explained(request, v)
        errors += v.errors
    return errors


@pytest.fixture(scope="session")
def references(gpu) -> lm.References:
    """The driver's maps the Triton checks compare with, made in an isolated child (the
    worker opens no context for them) and kept."""
    return lm.References(gpu)


# --------------------------------------------------------------------- Triton, host
@pytest.mark.rule("library.triton.host-map")
@needs_triton
def test_triton_host_map(triton_case, triton_runs, references, request):
    r = _result(triton_runs, triton_case, request)
    if "fill_error" in r:
        if UNREADABLE in r["fill_error"]:
            pytest.skip(f"cannot read this Triton's host map bytes: {r['fill_error']}")
        fail("library.triton.host-map", triton_case.id,
             f"Triton's fill_tma_descriptor refused a map the driver encodes: {r['fill_error']}")
    v = lm.triton_host(triton_case, r["fill"], r["address"], triton_case.load.swizzle,
                       triton_case.load.box_dim, "Triton's host map (fill_tma_descriptor)",
                       driver=references)
    _explained(request, v)
    fail_all(triton_case.id, v.errors)


@pytest.mark.rule("library.triton.load")
@needs_triton
def test_triton_host_load(triton_case, triton_runs, references, request):
    c = triton_case
    r = _result(triton_runs, c, request)
    errors = _launched_map(c, r, "library.triton.load", "loading", request, references)
    errors += lm.check_block(c, r.get("host_block"), "Triton's host map (a TensorDescriptor "
                             "argument)")
    fail_all(c.id, errors)


# --------------------------------------------------------------------- Triton, device
_NEEDED_FIELDS = tuple(re.findall(r"tensormap\.replace\.tile\.(\w+)",
                                  lm.PTX_QUOTES["library.triton.device-zeros"]))


def _ptx_errors(c, ptx) -> tuple[list, Swizzle | None]:
    """What the PTX Triton emitted says of the map, against the case: [(rule, message)]
    and the swizzle it writes."""
    f, errors = ptx["fields"], []
    missing = [k for k in _NEEDED_FIELDS if k not in f and (k != "global_stride" or c.rank > 1)]
    if missing:
        errors.append(("library.triton.device-map", f"the PTX writes no {missing} "
                       f"(it writes {sorted(f)}): the rule's reading no longer holds"))
    if not (ptx["release"] and ptx["acquire"]):
        errors.append(("library.triton.device-fence", f"the PTX lacks the "
                       f"{'release (tensormap.cp_fenceproxy ... release.gpu)' if not ptx['release'] else ''}"
                       f"{'acquire (fence.proxy.tensormap::generic.acquire.gpu)' if not ptx['acquire'] else ''}"
                       " around the device-built map (triton-lang/triton PR #7293 was this race)"))
    want = {"elemtype": hex(DTYPES[c.load.dtype].ptx_elemtype),
            "fill_mode": hex(int(c.load.oob_fill == OobFill.NAN_REQUEST_ZERO_FMA)),
            "interleave_layout": "0x0"}
    for k, v in want.items():
        if f.get(k) and f[k] != [v]:
            errors.append(("library.triton.device-map", f"the PTX writes {k} {f[k]}, the case "
                           f"needs {v} ({DTYPES[c.load.dtype].short}, {c.load.oob_fill.name})"))
    swz = f.get("swizzle_mode", [None])
    swizzle = Swizzle(int(swz[0], 16)) if swz[0] and swz[0].startswith("0x") and len(swz) == 1 else None
    return errors, swizzle


@pytest.mark.rule("library.triton.device-map")
@needs_triton
def test_triton_device_map(triton_case, triton_runs, references, request):
    c = triton_case
    r = _device_result(triton_runs, c, "library.triton.device-map", request)
    fail_all(c.id, _device_map_errors(c, r, request, references))


def _device_map_errors(c, r, request, references, map_rule: str = "library.triton.device-map") -> list:
    """The map Triton's kernel built on the device against the driver's, with what its PTX
    says: [(rule, message)]."""
    errors, swizzle = _ptx_errors(c, r["ptx"])
    meta = r.get("meta")
    if swizzle is None:
        errors.append(("library.triton.device-map", f"the PTX's swizzle_mode is not one "
                       f"immediate: {r['ptx']['fields'].get('swizzle_mode')}"))
    elif meta is None:
        errors.append(("library.triton.device-map", "no host kernel of this block compiled, so "
                       f"the device map's box is unknown: {r.get('host_error')}"))
    else:
        box, box_errors = lm.triton_box(c, meta["block_size"], swizzle)
        errors += box_errors
        if swizzle != Swizzle(meta["swizzle"]):
            errors.append(("library.triton.device-map", f"the device kernel's PTX writes "
                           f"{swizzle.name}, the host kernel of the same block has "
                           f"{Swizzle(meta['swizzle']).name}"))
        if not errors:
            v = _at(c, r, lambda address: lm.triton_device(c, r["device_map"], address, swizzle,
                                                          box, map_rule, references))
            _explained(request, v)
            errors += v.errors
    return errors


@pytest.mark.rule("library.triton.load")
@needs_triton
def test_triton_device_load(triton_case, triton_runs, request):
    c = triton_case
    r = _device_result(triton_runs, c, "library.triton.load", request)
    fail_all(c.id, lm.check_block(c, r.get("device_block"), "the map Triton's kernel built on "
                                  "the device (tl.make_tensor_descriptor)"))


# --------------------------------------------------------------------- Triton, views
@pytest.mark.rule("library.triton.view")
@needs_triton
def test_triton_view_host(triton_view_case, triton_view_runs, references, request):
    """A TensorDescriptor made from a PyTorch view inside a larger tensor
    (``from_tensor``): the map Triton's launcher made against the driver's at the view's
    first byte, and the block a kernel loaded through it against the model of the view."""
    c = triton_view_case
    r = _view_result(triton_view_runs, c, request)
    errors = _launched_map(c, r, "library.triton.view", "loading", request, references,
                           "library.triton.view")
    errors += lm.check_block(c, r.get("host_block"), "Triton's host map of a view (a "
                             "TensorDescriptor.from_tensor argument)", rule="library.triton.view")
    fail_all(c.id, errors)


@pytest.mark.rule("library.triton.view")
@needs_triton
def test_triton_view_device(triton_view_case, triton_view_runs, references, request):
    """tl.make_tensor_descriptor over a PyTorch view's pointer, shape and strides: the map
    against the driver's at the view's first byte, and the block loaded through it."""
    c = triton_view_case
    r = _view_result(triton_view_runs, c, request)
    if "device_error" in r:
        fail("library.triton.view", c.id, f"Triton could not compile a kernel making this "
             f"descriptor on the device: {r['device_error']}")
    errors = _device_map_errors(c, r, request, references, "library.triton.view")
    errors += lm.check_block(c, r.get("device_block"), "the map Triton's kernel built on the "
                             "device over a view (tl.make_tensor_descriptor)",
                             rule="library.triton.view")
    fail_all(c.id, errors)


def _view_result(runs, c, request) -> dict:
    """The view case's result (its PyTorch and where its view starts as user properties);
    skips naming PyTorch where the child has none (``_result``)."""
    r = _result(runs, c, request)
    request.node.user_properties.append(("torch", r["torch"]))
    request.node.user_properties.append(("view", f"{c.view} elements into its parent, "
                                                 f"{r['address'] - r['parent']} bytes"))
    if r["data_ptr"] != r["address"]:
        fail("library.triton.view", c.id, f"PyTorch's view starts at {r['data_ptr']:#x}, "
             f"{r['data_ptr'] - r['parent']} bytes into its parent; it starts "
             f"{r['address'] - r['parent']} bytes in (the harness's view is wrong, or "
             f"PyTorch's slicing is)")
    return r


# --------------------------------------------------------------------- Triton, stores
@needs_triton
@pytest.mark.rule("library.triton.store")
def test_triton_host_store(triton_store_case, triton_store_runs, references, request):
    """desc.store through the map Triton's launcher made for a TensorDescriptor argument:
    that map against the driver's, and the tensor and its guard after the store against
    the model."""
    c = triton_store_case
    r = _result(triton_store_runs, c, request)
    errors = _launched_map(c, r, "library.triton.store", "storing", request, references)
    errors += lm.check_store(c, r.get("host_after"), "Triton's host map (a TensorDescriptor "
                             "argument)")
    fail_all(c.id, errors)


@needs_triton
@pytest.mark.rule("library.triton.store")
def test_triton_device_store(triton_store_case, triton_store_runs, request):
    """desc.store through a map the kernel built with tl.make_tensor_descriptor."""
    c = triton_store_case
    r = _device_result(triton_store_runs, c, "library.triton.store", request)
    fail_all(c.id, lm.check_store(c, r.get("device_after"), "the map Triton's kernel built on "
                                  "the device (tl.make_tensor_descriptor)"))


# --------------------------------------------------------------------- Triton, over time
REUSE_TARGET = "fixtures.library_maps.triton_run:run_reused"
REUSE_PROGRAMS = 132


@needs_triton
@pytest.mark.isolated
@pytest.mark.rule("library.triton.device-fence")
@pytest.mark.parametrize("variant", ["fenced", "no-acquire"])
def test_triton_device_map_reused(variant, gpu, request):
    """A Triton kernel rebuilds its map in the same scratch slot every iteration of a loop
    (each iteration a new tensor: address, rows, row stride) and loads through it
    (fixtures/library_maps/reuse.py). As Triton compiled it (``fenced``), every load sees
    its own version. With the acquire deleted from its PTX (``no-acquire``, the
    triton-lang/triton PR #7293 scenario) stale maps must be seen: the proof that the
    fenced run could have failed (measured, library.triton.fence-sensitivity)."""
    iters = sweep.pick(request.config, smoke=8, standard=32, full=128)
    cid = f"{variant}-p{REUSE_PROGRAMS}-i{iters}"
    out = run_isolated(REUSE_TARGET, gpu.sm, gpu.ordinal, variant, REUSE_PROGRAMS, iters,
                       device=gpu.ordinal, timeout=240)   # the batches' child: Triton is loaded there
    out.raise_if_harness(f"the {variant} run in the isolated child")
    if out.kind != "returned":
        fail("library.triton.device-fence", cid, f"the {variant} run did not complete: "
             f"{out.kind} {out.error or ''} {out.detail[-1500:]}")
    r = out.value
    if "unavailable" in r:
        pytest.skip(r["unavailable"])
    for k in ("counts", "removed", "ptx_version", "triton"):
        request.node.user_properties.append((k, str(r[k])))
    line = ", ".join(f"{k} {v}" for k, v in r["counts"].items())
    print(f"{cid}: {line}; acquire lines removed {r['removed']}; " + "; ".join(r["examples"]))
    loads = sum(r["counts"].values())
    if variant == "fenced":
        check(r["release"] and r["acquire"], "library.triton.device-fence", cid,
              f"Triton's PTX lacks its release or acquire: release {r['release']}, acquire "
              f"{r['acquire']}")
        check(r["counts"]["ok"] == loads, "library.triton.device-fence", cid,
              f"loads through Triton's fenced device-built maps saw other versions than their "
              f"own: {line}. {'; '.join(r['examples'])}")
    else:
        check(r["removed"] >= 1, "library.triton.device-fence", cid,
              "the PTX had no fence.proxy.tensormap::generic.acquire.gpu to delete")
        check(r["counts"]["unwritten"] == 0, "library.triton.device-fence", cid,
              f"loads without the acquire left blocks unwritten: {line}")
        check(r["counts"]["stale"] > 0, "library.triton.fence-sensitivity", cid,
              f"with the acquire deleted, no load saw an earlier iteration's map ({line}): this "
              f"node does not show what the fence prevents, so the fenced run's pass proves less "
              f"here than on the H100")


# --------------------------------------------------------------------- cuda.core
@pytest.fixture(scope="session")
def cuda_core_runs(request, gpu, kernels):
    """The session's cuda.core cases (cudaMalloc's memory), made per batch in an isolated
    child with the driver's references (fixtures/library_maps/cuda_core_run.py)."""
    selected = engine.selected_ids(request.session.items, ("cuda_core_case",), __file__, gpu=gpu)
    return lm.CudaCoreBatches(gpu, kernels, [c for c in lm.cuda_core_cases(sweep.level(request.config))
                                             if c.id in selected])


@pytest.mark.rule("library.cuda-core.map")
def test_cuda_core_map(cuda_core_case, cuda_core_runs, request):
    _cuda_core_map(cuda_core_case, cuda_core_runs.result(cuda_core_case), request)


@pytest.mark.rule("library.cuda-core.map")
@pytest.mark.parametrize("memory", [k for k in memory_kinds.KINDS if k != "device"])
def test_cuda_core_map_memory_kind(memory, gpu, request):
    """cuda.core's map over a tensor in each kind of memory but cudaMalloc's
    (NVIDIA/cccl#10511: a managed pool's pointers refused by CCCL's encoder) equals the
    driver's, as over cudaMalloc's (test_cuda_core_map), for the first cuda.core case."""
    c = lm.cuda_core_cases(sweep.level(request.config))[0]
    _cuda_core_map(c, lm.cuda_core_call(c, gpu, "library.cuda-core.map", memory=memory), request,
                   f" over {memory} memory")


def _unavailable(r: dict) -> None:
    if "unavailable" in r:
        pytest.skip(f"cuda.core cannot make tensor maps here: {r['unavailable']} (pip install -e '.[cu13]')")


def _cuda_core_map(c, r: dict, request, where: str = ""):
    """cuda.core's map of case ``c`` (``r``: made in the isolated child) against the
    driver's (library.cuda-core.map)."""
    _unavailable(r)
    request.node.user_properties.append(("cuda-core", dist_version("cuda-core")))
    if "refused" in r:   # cuda.core's refusal: the finding (other errors: the harness's)
        fail("library.cuda-core.map", c.id, f"cuda.core refused a map the driver encodes{where}: {r['refused']}")
    v = lm.cuda_core(c, r["lib"], r["address"], refs=r["refs"])
    _explained(request, v)
    fail_all(c.id, v.errors)


@pytest.mark.rule("library.cuda-core.view")
@pytest.mark.parametrize("interface", ["dlpack", "cuda_array_interface"])
def test_cuda_core_view(cuda_core_view_case, interface, gpu, request):
    """StridedMemoryView.as_tensor_map of a CuPy view inside a larger tensor, the view read
    through DLPack or the CUDA Array Interface: its map against the driver's at the view's
    first byte (the parent's address plus the view's offset, reckoned in the child)."""
    c, rule = cuda_core_view_case, "library.cuda-core.view"
    r = lm.cuda_core_call(c, gpu, rule, interface=interface)
    _unavailable(r)
    request.node.user_properties.append(("cuda-core", dist_version("cuda-core")))
    if "refused" in r:
        fail(rule, c.id, f"cuda.core refused a map of a view the driver encodes: {r['refused']}")
    address, base = r["address"], r["address"] - lm.view_offset(c)
    v = lm.view_verdict(lambda at: lm.cuda_core(c, r["lib"], at, rule, refs=r["refs"]), c, address, base)
    _explained(request, v)
    fail_all(c.id, v.errors)


@pytest.mark.unproven       # not yet run on a GPU node (issue 58)
def test_cuda_core_replace_address(replace_case, gpu, kernels, request):
    """cuda.core's TensorMapDescriptor.replace_address (cuda-python#1687), where the installed
    cuda.core has it (fixtures/library_maps/cuda_core_replace.py): given a new tensor, the
    descriptor is the driver's map over it and the load through it reads it; given a
    misaligned or a host address, it refuses and stays the old map."""
    rule = lm.REPLACE_CASES[replace_case]
    out = run_isolated(lm.run_replace, replace_case, gpu.ordinal, gpu.arch, str(kernels.cache_dir),
                       device=gpu.ordinal, timeout=120)
    r = engine.value_of(out, rule, replace_case, "replace_address")
    _unavailable(r)
    request.node.user_properties.append(("cuda-core", dist_version("cuda-core")))
    errors, seen = lm.judge_replace(replace_case, r)
    fail_all(replace_case, errors)
    if seen:
        pytest.skip(f"{OBSERVATION_PREFIX} not a pass (the documentation asks for device-accessible "
                    f"memory, which pageable memory is on this node): {seen}")


@pytest.mark.unproven       # not yet run on a GPU node (issue 58)
@pytest.mark.rule("library.cuda-core.large")
def test_cuda_core_large(large_case, gpu, kernels, request):
    """cuda.core's map of a tensor of more than 2^31 elements, and of one whose row stride is
    more than 2^31 bytes (fixtures/library_maps/cuda_core_large.py; flashinfer#3391,
    cutlass#2312): the driver's map, and a load at the far corner exact."""
    out = run_isolated(lm.run_large, large_case, gpu.ordinal, gpu.arch, str(kernels.cache_dir),
                       device=gpu.ordinal, timeout=180)
    r = engine.value_of(out, "library.cuda-core.large", large_case, "the large tensor's map and load")
    _unavailable(r)
    request.node.user_properties.append(("cuda-core", dist_version("cuda-core")))
    fail_all(large_case, lm.judge_large(large_case, r))


# --------------------------------------------------------------------- JAX's Mosaic GPU
@pytest.mark.rule("library.mosaic.map")
@needs_mosaic
def test_mosaic_map(mosaic_case, mosaic_runs, request):
    """The map Mosaic GPU's runtime encodes (mosaic_gpu_init_tma_desc, called as its
    kernels' host code calls it) against cuTensorMapEncodeTiled of the same tensor and box,
    every bit; a tensor of 4-bit or 2-bit elements against the UINT8 map of its bytes."""
    r = mosaic_runs.result(mosaic_case)
    request.node.user_properties.append(("mosaic", r["version"]))
    fail_all(mosaic_case.id, lm.mosaic_verdict(mosaic_case, r).errors)


@pytest.mark.isolated
@pytest.mark.rule("library.mosaic.refusal")
@needs_mosaic
def test_mosaic_refusal(mosaic_refusal, gpu):
    """Arguments past a limit seed 004 documents: Mosaic prints its reason and aborts before
    it encodes (the isolated child dies), and the driver refuses the same parameters."""
    c, rule = mosaic_refusal, "library.mosaic.refusal"
    driver = lm.References(gpu)(c.load, 1 << 20)        # made in an isolated child
    if driver.ok:
        raise HarnessError(f"harness: cuTensorMapEncodeTiled encodes the parameters of "
                           f"{c.id}: the suite's case is not past a documented limit")
    out = lm.mosaic_refusal_call(c, gpu)
    if out.kind not in ("crashed", "returned"):
        raise HarnessError(f"harness: the isolated call of {c.id} did not run: {out}")
    check(out.kind == "crashed", rule, c.id,
          f"Mosaic GPU's runtime encoded arguments past a documented limit ({c.refusal}) "
          f"instead of aborting (the driver refuses them: {driver.status_name})")
    check(c.refusal in out.detail, rule, c.id,
          f"the child died, but not saying Mosaic's reason {c.refusal!r}: {out.detail[-500:]}")


# --------------------------------------------------------------------- CUTLASS's CuTe DSL
def _cute(case, cute_runs, request):
    r = cute_runs.result(case)
    request.node.user_properties.append(("cute_dsl", r["version"]))
    v = lm.cute_verdict(case, r)
    _explained(request, v)
    fail_all(case.id, v.errors)


@pytest.mark.rule("library.cute.tensormap")
@needs_cute
def test_cute_tensormap_map(cute_tensormap_case, cute_runs, request):
    """The map CuTe DSL's create_tensor_map_tiled builds (read back by a DSL kernel from its
    __grid_constant__ parameter) against cuTensorMapEncodeTiled of the same parameters,
    every bit."""
    _cute(cute_tensormap_case, cute_runs, request)


@pytest.mark.rule("library.cute.atom-map")
@needs_cute
def test_cute_atom_map(cute_atom_case, cute_runs, request):
    """The map CuTe DSL's make_tiled_tma_atom writes itself (bytes 0-63, by
    copy_tensormap) against cuTensorMapEncodeTiled of the tensor and box the atom declares,
    with the DSL's fixed choices applied; bit 85 by the tensor's span."""
    _cute(cute_atom_case, cute_runs, request)


@pytest.mark.rule("library.cute.atom-load")
@needs_cute
def test_cute_atom_load(cute_atom_load_case, cute_runs, request):
    """A DSL kernel's TMA load through the atom (its own partition and swizzled layout)
    against the tiled model's box at the case's coordinates, every byte of shared memory."""
    r = cute_runs.result(cute_atom_load_case)
    request.node.user_properties.append(("cute_dsl", r["version"]))
    fail_all(cute_atom_load_case.id, lm.cute_load_verdict(cute_atom_load_case, r))


@pytest.mark.rule("library.cute.atom-store")
@needs_cute
def test_cute_atom_store(cute_atom_store_case, cute_runs, request):
    """A DSL kernel's TMA store through a store atom of the same box (at non-negative
    coordinates) against the tiled store model, every byte of the tensor and after it."""
    r = cute_runs.result(cute_atom_store_case)
    request.node.user_properties.append(("cute_dsl", r["version"]))
    fail_all(cute_atom_store_case.id, lm.cute_store_verdict(cute_atom_store_case, r))


REUSE_CUTE_TARGET = "fixtures.library_maps.cute_dsl_kernels:reuse_run"
CUTE_REUSE = [(m, v) for m in ("smem", "gmem") for v in ("fenced", "no-acquire")]


@needs_cute
@pytest.mark.isolated
@pytest.mark.rule("library.cute.device-fence")
@pytest.mark.parametrize("mode,variant", CUTE_REUSE, ids=[f"u32-{m}-{v}" for m, v in CUTE_REUSE])
def test_cute_device_map_reused(mode, variant, gpu, request):
    """A DSL kernel rewrites its map in one global slot per CTA every iteration of a
    loop with the DSL's TensorMapManager (``mode``: in shared memory, copied out with
    cp_fence_tma_desc_release, or in the slot, then fence_tma_desc_release), each time
    for a new tensor (address, rows, row stride: fixtures/library_maps/reuse.py), and loads
    an 8 x 32 block through it. With the manager's acquire (``fenced``) every load sees
    its own tensor; without it (``no-acquire``) stale maps must be seen: the proof that the
    fenced run could have failed (measured, library.cute.fence-sensitivity). The ids
    start with the block's type, u32, so that the cases join that type's scheduling unit
    (whose child has imported the DSL)."""
    iters = sweep.pick(request.config, smoke=8, standard=32, full=128)
    cid = f"u32-{mode}-{variant}-p{REUSE_PROGRAMS}-i{iters}"
    rule = "library.cute.device-fence"
    out = run_isolated(REUSE_CUTE_TARGET, mode, variant == "fenced", REUSE_PROGRAMS, iters,
                       device=gpu.ordinal, timeout=240)
    out.raise_if_harness(f"the {mode} {variant} run in the isolated child")
    if out.kind != "returned":
        fail(rule, cid, f"the {mode} {variant} run did not complete: {out.kind} "
             f"{out.error or ''} {out.detail[-1500:]}")
    r = out.value
    for k in ("counts", "ptx", "version"):
        request.node.user_properties.append((k, str(r[k])))
    line = ", ".join(f"{k} {v}" for k, v in r["counts"].items())
    print(f"{cid}: {line}; PTX {r['ptx']}; " + "; ".join(r["examples"]))
    loads = sum(r["counts"].values())
    release = r["ptx"]["cp_release" if mode == "smem" else "release"]
    check(release >= 1 and r["ptx"]["replace"] >= 1, rule, cid,
          f"the DSL's PTX lacks the {mode} update's tensormap.replace or its release: {r['ptx']}")
    if variant == "fenced":
        check(r["ptx"]["acquire"] >= 1, rule, cid,
              f"the DSL's PTX lacks fence.proxy.tensormap::generic.acquire: {r['ptx']}")
        check(r["counts"]["ok"] == loads, rule, cid,
              f"loads through the map the DSL's TensorMapManager rewrote and fenced saw other "
              f"versions than their own: {line}. {'; '.join(r['examples'])}")
    else:
        check(r["ptx"]["acquire"] == 0, rule, cid,
              f"the kernel built without fence_tensormap_update still has an acquire: {r['ptx']}")
        check(r["counts"]["unwritten"] == 0, rule, cid,
              f"loads without the acquire left blocks unwritten: {line}")
        check(r["counts"]["stale"] > 0, "library.cute.fence-sensitivity", cid,
              f"without the acquire, no load saw an earlier iteration's map ({line}): this "
              f"node does not show what the fence prevents, so the fenced run's pass proves less "
              f"here than on the H200")


# --------------------------------------------------------------------- JAX Pallas on Mosaic GPU
def _pallas(case, pallas_runs, request):
    r = pallas_runs.result(case)
    request.node.user_properties.append(("jax", r["version"]))
    if r.get("refused"):
        request.node.user_properties.append(("refused", r["refused"]))
    fail_all(case.id, lm.pallas_verdict(case, r))


@pytest.mark.rule("library.pallas.copy")
@needs_pallas
def test_pallas_copy(pallas_case, pallas_runs, request):
    """A Pallas kernel's copy_gmem_to_smem of a slice into a plain or swizzled shared
    buffer, then copy_smem_to_gmem to a slice of another tensor, against the tiled load and
    store models, every byte of that tensor."""
    _pallas(pallas_case, pallas_runs, request)


@pytest.mark.rule("library.pallas.unaligned")
@needs_pallas
def test_pallas_unaligned(pallas_unaligned_case, pallas_runs, request):
    """jax-ml/jax#34102's copies (an offset into a swizzled buffer not known to be a
    multiple of its tile): refused when the kernel is built, with Mosaic GPU's words, or
    copied as the models say; a wrong copy fails."""
    _pallas(pallas_unaligned_case, pallas_runs, request)


# --------------------------------------------------------------------- the quotes
def _installed_file(dist_module: str, rel: str) -> Path | None:
    spec = importlib.util.find_spec(dist_module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent / rel


def _quoted(rule_id):
    """A quoted rule, skipped (a marker) where its library is not installed."""
    dist, rel, _ = lm.SOURCE_QUOTES[rule_id]
    missing = _installed_file(dist, rel) is None
    return pytest.param(rule_id, id=rule_id, marks=pytest.mark.skipif(
        missing, reason=f"{dist} is not installed: {INSTALLS.get(dist, lm.INSTALL)}"))


@pytest.mark.rule("library.sources")
def test_library_sources_say_what_the_rules_quote(quoted_rule):
    dist, rel, quote = lm.SOURCE_QUOTES[quoted_rule]
    path = _installed_file(dist, rel)
    dist = DISTRIBUTIONS.get(dist, dist)
    if not path.is_file():
        fail("library.sources", quoted_rule, f"{dist} {dist_version(dist)} has no {rel}: the "
             f"rule {quoted_rule} quotes a file this version does not ship")
    text = " ".join(path.read_text(errors="replace").split())
    at = 0
    for part in [" ".join(q.split()) for q in quote.split("...") if q.strip()]:
        i = text.find(part, at)
        if i < 0:
            fail("library.sources", quoted_rule, f"{dist} {dist_version(dist)}'s {rel} does not say "
                 f"{part!r}: the explanation {quoted_rule} quotes a line this version changed")
        at = i + len(part)
