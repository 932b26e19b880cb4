"""Host encoding conformance: the four driver encoders against the documented rules.

Every case of ``fixtures.host_encode.cases`` (each documented rule of ``fixtures.host_encode.rules``,
just inside, just outside and far outside its boundary, on valid bases spanning every
data type, rank, interleave, swizzle, L2 promotion and fill) goes through the driver;
its accept / reject must be the rules model's. A disagreement fails with the rule
id(s), the quoted sentence(s), the parameters and both answers.

Then: every valid tiled combination encodes; encoding is deterministic;
cuTensorMapReplaceAddress equals a fresh encode and changes only address bits;
cuda.core's encoder gives the same bytes; and edge cases from the field
(measured on the GPUs, public bug reports), including encode in a context poisoned by a trap.

Set ``TMAC_ENCODE_LOG=<dir>`` to get one JSON line per rule case (model, driver).
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

import pytest

import fixtures.host_encode as he
from fixtures.tensormap import params as tp, sweep
from fixtures import engine
from fixtures.host_encode import DOCUMENTED_STATUSES, RuleDisagreement
from fixtures.tensormap.enums import (DTYPES, NUMPY_NAMES_IT, DataType, Interleave,
                                      L2Promotion, OobFill, Swizzle, short)
from fixtures.cuda_layer.isolation import run_isolated
from fixtures.rules.registry import RuleError, check, fail_all
from reports.model import OBSERVATION_PREFIX

ALLOC_BYTES = he.ALLOC_BYTES
WIDE_ARCH = he.WIDE_ARCH
SMEM_OPTIN_H200 = 232448     # cudaDevAttrMaxSharedMemoryPerBlockOptin on an H200
_ignore = he.ignored_rules


@functools.lru_cache(maxsize=None)
def _valid_sample(level: str) -> tuple:
    """Valid bases (tiled + im2col) for the byte-level checks, a fixed sample."""
    n = {"smoke": 4, "standard": 24, "full": 96}[level]
    out = []
    for kind in (tp.TILED, tp.IM2COL):
        pool = [p for p in he.base_pool(kind) if not he.is_extra(p)]
        step = max(1, len(pool) // n)
        out += pool[::step][:n]
    return tuple(out)


PEER_SWIZZLES = (Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128)


@functools.lru_cache(maxsize=None)
def _peer_cases(level: str) -> tuple:
    """(id, TiledParams) for the cuda.core comparison: 13 dtypes x ranks, non-interleaved."""
    ranks = {"smoke": (2,), "standard": (1, 2, 3, 5), "full": (1, 2, 3, 4, 5)}[level]
    out = []
    for i, dt in enumerate(d for d in DataType if not DTYPES[d].is_packed):
        for rank in ranks:
            swz = PEER_SWIZZLES[(i + rank) % 4]
            l2 = L2Promotion((i + 2 * rank) % 4)
            fill = OobFill.NAN_REQUEST_ZERO_FMA if DTYPES[dt].is_float and (i + rank) % 2 else OobFill.NONE
            p = he.make_tiled(dt, rank, Interleave.NONE, swz, l2, fill, pick=rank)
            if p is not None:
                out.append((he.base_id(p), p))
    return tuple(out)


def _marked(value, case_id, needs):
    """A parameter with what it needs of the node as capability markers."""
    return pytest.param(value, id=case_id,
                        marks=[getattr(pytest.mark, name)(arg, why=why) for name, arg, why in needs])


def pytest_generate_tests(metafunc):
    level = sweep.level(metafunc.config)
    if "encode_case" in metafunc.fixturenames:
        metafunc.parametrize("encode_case", [_marked(c, c.id, he.needs(c))
                                             for c in he.rule_cases(level)])
    if "valid_group" in metafunc.fixturenames:
        metafunc.parametrize("valid_group", [_marked((short(dt), rank), f"{short(dt)}-r{rank}",
                                                     he.group_needs(dt))
                                             for dt in DataType for rank in range(1, 6)])
    if "valid_params" in metafunc.fixturenames:
        ps = _valid_sample(level)
        metafunc.parametrize("valid_params", ps, ids=[he.base_id(p) for p in ps])
    if "peer_case" in metafunc.fixturenames:
        pcs = _peer_cases(level)
        metafunc.parametrize("peer_case", [p for _, p in pcs], ids=[i for i, _ in pcs])
    if "field_case" in metafunc.fixturenames:
        fcs = he.field_cases()
        metafunc.parametrize("field_case", fcs, ids=[f[0] for f in fcs])
    if "route_case" in metafunc.fixturenames:
        metafunc.parametrize("route_case", he.route_cases(level))
    if "lookup_case" in metafunc.fixturenames:
        metafunc.parametrize("lookup_case", [pytest.param(c, id=c[0], marks=pytest.mark.rule(c[4]))
                                             for c in he.lookup_cases(level)])


# --------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def driver(gpu) -> he.Driver:
    """The suite's driver calls, made in an isolated child (the worker opens no context
    for them: fixtures/host_encode/runner.py)."""
    return he.Driver(gpu)


@pytest.fixture(scope="session")
def rule_encodes(request, gpu) -> he.RuleEncodes:
    """The rule cases this session runs, encoded per batch in an isolated child."""
    selected = engine.selected_ids(request.session.items, ("encode_case",), __file__, gpu=gpu)
    return he.RuleEncodes(gpu, [c for c in he.rule_cases(sweep.level(request.config)) if c.id in selected])


@pytest.fixture(scope="session")
def encode_log(gpu):
    d = os.environ.get("TMAC_ENCODE_LOG")
    if not d:
        yield None
        return
    Path(d).mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(Path(d) / f"encode-{worker}.jsonl", "a") as f:
        yield f


def _params_text(p) -> str:
    return json.dumps(p.as_dict(), default=str)


def _answer(accept: bool) -> str:
    return "accept" if accept else "reject"


def _disagreement(what, p, verdict, status_name, cc, extra="", target=None) -> RuleDisagreement:
    """``what``: the case id (and, for field cases, what the case is about)."""
    if target and (verdict.accept or target in verdict.ids):
        rid = target
    else:
        rid = verdict.ids[0] if verdict.ids else "accepts-valid"
    lines = ["the driver and the documented rules disagree",
             f"  driver: {status_name}",
             f"  rules (cc {cc[0]}.{cc[1]}): {verdict.explain()}",
             f"  params: {_params_text(p)}"]
    if verdict.accept:
        lines.append("  (no documented rule forbids these parameters: a conforming driver "
                     "accepts them)")
        if target in he.RULES_BY_ID:
            lines.append("  probing (inside): " + he.RULES_BY_ID[target].describe())
    if extra:
        lines.append("  " + extra)
    return RuleDisagreement(what, rid, "\n".join(lines), {"outcome": "status", "status": status_name})


def check_against_rules(p, result_status: str, ok: bool, cc, what: str, target=None):
    verdict = he.evaluate(p, cc, _ignore(p, cc))
    if ok != verdict.accept:
        raise _disagreement(what, p, verdict, result_status, cc, target=target)
    if not ok and result_status != "CUDA_ERROR_INVALID_VALUE":
        raise _disagreement(what, p, verdict, result_status, cc,
                            "the rejection must be CUDA_ERROR_INVALID_VALUE (the only parameter "
                            "error the text lists)", target=target)
    return verdict


# --------------------------------------------------------------------- rule cases
def test_rule_case(encode_case, gpu, rule_encodes, encode_log):
    """The driver's accept/reject equals the rules model's for one boundary case."""
    p, cc = encode_case.params, gpu.cc
    verdict = he.evaluate(p, cc, _ignore(p, cc))
    if isinstance(p, tp.ReplaceParams):
        out = rule_encodes.result(encode_case)
        if encode_log:
            encode_log.write(json.dumps({"id": encode_case.id, "rule": encode_case.rule,
                                         "side": encode_case.side, "model": verdict.accept,
                                         "violated": verdict.ids,
                                         "base_status": out.base.status_name,
                                         "status": out.replaced.status_name if out.replaced else None}) + "\n")
        base_verdict = he.evaluate(p.base, cc, _ignore(p, cc))
        if not out.base.ok and not base_verdict.accept:
            pytest.skip(f"the base map cannot be encoded on compute capability {cc[0]}.{cc[1]} "
                        f"(rules {base_verdict.ids}; the driver agrees: {out.base.status_name})")
        if not out.base.ok:
            raise _disagreement(f"{encode_case.id} (the base map to replace into)", p.base,
                                base_verdict, out.base.status_name, cc)
        check_against_rules(p, out.replaced.status_name, out.replaced.ok, cc, encode_case.id,
                            target=encode_case.rule)
        return
    res = rule_encodes.result(encode_case)
    if encode_log:
        encode_log.write(json.dumps({"id": encode_case.id, "rule": encode_case.rule,
                                     "side": encode_case.side, "model": verdict.accept,
                                     "violated": verdict.ids, "status": res.status_name}) + "\n")
    check_against_rules(p, res.status_name, res.ok, cc, encode_case.id, target=encode_case.rule)


@pytest.mark.rule(WIDE_ARCH)
@pytest.mark.requires_driver_api(he.WIDE_API)
def test_im2col_wide_rejected_below_cc100(gpu, driver):
    """\"This API is only supported on devices of compute capability 10.0 or higher.\"
    A valid im2col-wide map must be rejected below 10.0 (and accepted from 10.0)."""
    p = he.make_wide(DataType.FLOAT16, 3, Interleave.NONE, Swizzle.B128, L2Promotion.NONE,
                     OobFill.NONE, 0)
    res = driver.encode(p, WIDE_ARCH, "valid im2col-wide map")
    check_against_rules(p, res.status_name, res.ok, gpu.cc, "valid im2col-wide map",
                        target=WIDE_ARCH) if gpu.cc >= (10, 0) else None
    if gpu.cc < (10, 0):
        verdict = he.evaluate(p, gpu.cc)
        assert verdict.ids == [WIDE_ARCH]
        if res.ok or res.status_name != "CUDA_ERROR_INVALID_VALUE":
            raise _disagreement("valid im2col-wide map", p, verdict, res.status_name, gpu.cc,
                                target=WIDE_ARCH)


# --------------------------------------------------------------------- valid maps
@pytest.mark.rule("accepts-valid")
def test_every_valid_tiled_combination_encodes(valid_group, gpu, driver):
    """dtype x rank: every interleave x swizzle x L2 x fill the rules allow encodes."""
    dshort, rank = valid_group
    dt = DataType[[d.name for d in DataType if short(d) == dshort][0]]
    combos = [p for p in he.valid_tiled_combinations(gpu.sm) if p.dtype == dt and p.rank == rank]
    assert combos, f"no valid combination generated for {dshort} rank {rank}"
    for p in combos:
        v = he.evaluate(p, gpu.cc)
        assert v.accept, f"generator bug: {he.base_id(p)} breaks {v.ids}"
    answers = driver.run([he.Step("encode", p) for p in combos], "accepts-valid", f"{dshort}-r{rank}")
    bad = []
    for p, res in zip(combos, answers):
        if not res.ok:
            bad.append(f"{he.base_id(p)}: {res.status_name}  params={_params_text(p)}")
    check(not bad, "accepts-valid", f"{dshort}-r{rank}",
          f"{len(bad)} of {len(combos)} valid combinations were rejected (no documented rule "
          f"forbids them):\n" + "\n".join(bad[:40]))


@pytest.mark.rule("encode.deterministic")
def test_encode_is_deterministic(valid_params, gpu, driver, request):
    cid = request.node.callspec.id
    # seed 004: "tensorMap address must be aligned to 64 bytes": 64 is, and the map's own
    # address is not one of its parameters (the third encode, at offset 64)
    a, b, *c = driver.run([he.Step("encode", valid_params)] * 2
                          + ([he.Step("encode", valid_params, 64)] if valid_params.map_offset == 0 else []),
                          "encode.deterministic", cid)
    check(a.ok, "accepts-valid", cid,
          f"valid map rejected: {a.status_name} {_params_text(valid_params)}")
    assert b.ok and a.map_bytes == b.map_bytes, (
        f"two encodes of the same parameters differ:\n  {a.map_bytes.hex()}\n  "
        f"{b.map_bytes.hex() if b.map_bytes else b.status_name}")
    if c:
        c = c[0]
        check(c.ok, "map.align64", cid, f"a valid map written at a 64-byte aligned address "
                                         f"(offset 64) was rejected: {c.status_name} "
                                         f"{_params_text(valid_params)}")
        assert c.map_bytes == a.map_bytes, "the map's own address changed its bytes"


def _address_bits(p, ref, others) -> int:
    """Bits of the map that change when only globalAddress changes (single-bit flips):
    ``ref`` encoded at its own offset, ``others`` at each of :func:`_flips`."""
    mask = 0
    for bit, other in zip(_flips(p), others):
        assert other.ok, f"encode at offset {bit} failed: {other.status_name}"
        mask |= int.from_bytes(ref.map_bytes, "little") ^ int.from_bytes(other.map_bytes, "little")
    return mask


def _flips(p) -> list[int]:
    """The address offsets of :func:`_address_bits`: each power of two from the address
    alignment up to the allocation's size."""
    out, bit = [], he.address_align(p)
    while bit < ALLOC_BYTES:
        out.append(bit)
        bit <<= 1
    return out


@pytest.mark.rule("replace.equals-fresh-encode")
def test_replace_address_equals_fresh_encode(valid_params, gpu, driver, request):
    p = valid_params
    align = he.address_align(p)
    cid = request.node.callspec.id
    flips, offsets = _flips(p), (align, 7 * align, 1 << 12, (1 << 21) + align)
    steps = [he.Step("encode", p)] + [he.Step("encode", p.with_(address_offset=bit)) for bit in flips]
    for off in offsets:          # the first map's address replaced, and a fresh encode there
        steps += [he.Step("replace", of=0, offset=off), he.Step("encode", p.with_(address_offset=off))]
    answers = driver.run(steps, "replace.equals-fresh-encode", cid)
    first, others, pairs = answers[0], answers[1:1 + len(flips)], answers[1 + len(flips):]
    check(first.ok, "accepts-valid", cid, f"{first.status_name} {_params_text(p)}")
    mask = _address_bits(p, first, others)
    assert bin(mask).count("1") >= 8, f"only {bin(mask).count('1')} map bits follow the address"
    for off, rep, fresh in zip(offsets, pairs[0::2], pairs[1::2]):
        check(rep.ok, "replace.address.align16", cid,
              f"ReplaceAddress(allocation + {off:#x}) -> {rep.status_name}")
        assert fresh.ok
        assert rep.map_bytes == fresh.map_bytes, (
            f"ReplaceAddress(+{off}) differs from a fresh encode at that address:\n"
            f"  replaced {rep.map_bytes.hex()}\n  fresh    {fresh.map_bytes.hex()}")
        diff = int.from_bytes(first.map_bytes, "little") ^ int.from_bytes(rep.map_bytes, "little")
        assert diff & ~mask == 0, (
            f"ReplaceAddress changed bits outside the address field: {diff & ~mask:#x}")
        assert diff != 0, "ReplaceAddress to a different address left the map unchanged"


# --------------------------------------------------------------------- peer encoder


@pytest.mark.rule("encode.peer-agrees")
def test_cuda_core_matches_encode_tiled(peer_case, gpu, driver, request):
    p = peer_case
    dt = DataType(p.dtype)
    options = (("element_strides", "", tuple(reversed(p.element_strides))),
               ("swizzle", "TensorMapSwizzle", int(p.swizzle)),
               ("l2_promotion", "TensorMapL2Promotion", int(p.l2_promotion)),
               ("oob_fill", "TensorMapOOBFill", int(p.oob_fill)),
               ("interleave", "TensorMapInterleave", int(p.interleave)))
    if dt not in NUMPY_NAMES_IT:
        options += (("data_type", "TensorMapDataType", int(dt)),)
    peer = driver.run([he.Step("peer", p, box=tuple(reversed(p.box_dim)), options=options)],
                      "encode.peer-agrees", request.node.callspec.id)[0]
    if peer.unavailable:
        pytest.skip(f"cuda.core cannot make tensor maps here: {peer.unavailable} (pip install -e '.[cu13]')")
    q, ours = peer.params, peer.ours
    check(ours.ok, "accepts-valid", request.node.callspec.id,
          f"encode_tiled rejected {ours.status_name} {_params_text(q)}")
    if peer.refused:     # cuda.core's refusal: the finding (other errors: the harness's)
        pytest.fail(f"cuda.core refused a map the driver encodes: {peer.refused}\n"
                    f"  params: {_params_text(q)}")
    assert peer.theirs == ours.map_bytes, (
        f"cuda.core and cuTensorMapEncodeTiled give different bytes for {_params_text(q)}\n"
        f"  encode_tiled {ours.map_bytes.hex()}\n  cuda.core    {peer.theirs.hex()}")


# --------------------------------------------------------------------- field edge cases
@pytest.mark.rule("accepts-valid")
def test_field_case(field_case, gpu, driver):
    name, p, source = field_case
    res = driver.encode(p, "accepts-valid", f"{name} ({source})")
    check_against_rules(p, res.status_name, res.ok, gpu.cc, f"{name} ({source})")


@pytest.mark.rule("global_strides.mult16")
def test_rank1_null_and_empty_strides_agree(gpu, driver):
    """Rank 1 reads no stride: NULL, [] and a one-element list must give one answer."""
    f16 = tp.TiledParams(dtype=6, rank=1, global_dim=(256,), global_strides=(), box_dim=(64,),
                        element_strides=(1,))
    labels = (("empty", ()), ("null", None), ("one", (512,)))
    got = driver.run([he.Step("encode", f16.with_(global_strides=s)) for _, s in labels],
                     "global_strides.mult16", "rank1-strides")
    answers = {label: (r.status_name, r.map_bytes) for (label, _), r in zip(labels, got)}
    names = {k: v[0] for k, v in answers.items()}
    check(len({v[0] for v in answers.values()}) == 1, "global_strides.mult16", "rank1-strides",
          f"rank 1 answers depend on an array of rank - 1 = 0 elements: {names}",
          {"outcome": "status", "status": " ".join(f"{k}={v}" for k, v in names.items())})
    maps = {v[1] for v in answers.values() if v[1]}
    assert len(maps) <= 1, "rank-1 maps differ with the (unread) strides array"


# --------------------------------------------------------------------- routes to the encoders
ROUTE_TIMEOUT_S = 60.0


@pytest.mark.rule("entry.routes-agree")
def test_encoder_route(route_case, gpu):
    """One encoder reached by one route (fixtures/host_encode/routes.py: cuGetProcAddress at
    a CUDA version, the runtime's lookups, cuda-python's wrapper): the lookup answers as
    the Driver API says, and the function it gives encodes the same arguments to the same
    status and 128 bytes as the driver library's exported symbol, in the same child. The
    deprecated unversioned runtime lookup giving no pointer is an observation (meta-pytorch/
    torchcomms#2879, pytorch/ao#4653: cudaErrorInvalidValue with the CUDA 13.1 and 13.2
    runtimes, where the lookup by version worked)."""
    short, route = he.split_route(route_case)
    answer = engine.value_of(run_isolated(he.route_answer, short, route, device=gpu.ordinal,
                                          timeout=ROUTE_TIMEOUT_S),
                             "entry.routes-agree", route_case, "the route's lookup and encodes")
    if answer.unavailable:
        pytest.skip(answer.unavailable)
    errors, seen = he.judge_route(short, route, answer)
    fail_all(route_case, errors)
    if seen:
        pytest.skip(f"{OBSERVATION_PREFIX} not a pass (no document says what this lookup gives here): "
                    f"{seen}")


def test_encoder_lookup(lookup_case, gpu):
    """A lookup whose answer is the case: below the version that introduced the function,
    above the driver's version, a name the driver does not have (CUDA Driver API 6.33,
    cuGetProcAddress; the runtime's cudaGetDriverEntryPointByVersion)."""
    cid, api, short, spec, rule = lookup_case
    answer = engine.value_of(run_isolated(he.lookup_answer, api, short, spec, device=gpu.ordinal,
                                          timeout=ROUTE_TIMEOUT_S),
                             rule, cid, "the lookup")
    if answer.unavailable:
        pytest.skip(answer.unavailable)
    errors, seen = he.judge_lookup(api, short, answer)
    fail_all(cid, errors)
    if seen:
        pytest.skip(f"{OBSERVATION_PREFIX} not a pass: {seen}")


@pytest.mark.trap       # traps on purpose (fixtures/plugins/run_control/trap_marks.py)
@pytest.mark.isolated
@pytest.mark.rule("encode.documented-status")
def test_encode_in_poisoned_context(gpu):
    """After a trap kills the context, encode must still answer with a documented code,
    and if it succeeds, with the same bytes as before the trap."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "facts.json")
        outcome = run_isolated("fixtures.host_encode.probes:encode_after_trap", path,
                               device=gpu.ordinal, timeout=120, alone=True)
        assert os.path.exists(path), f"the probe wrote nothing: {outcome} {outcome.detail[-2000:]}"
        facts = json.load(open(path))
    assert facts["before"]["status"] == "CUDA_SUCCESS", facts
    assert facts["trap"] != "no error", f"the trap kernel did not trap: {facts}"
    errors = []            # every answer is checked: a known issue of one hides no other
    after = facts["after"]["status"]
    if after not in DOCUMENTED_STATUSES:
        errors.append(("encode.documented-status",
                       f"cuTensorMapEncodeTiled in a poisoned context returned {after}, which the "
                       f"driver text does not list for it (it lists {DOCUMENTED_STATUSES})",
                       {"outcome": "status", "status": after}))
    elif after == "CUDA_SUCCESS" and facts["after"]["bytes"] != facts["before"]["bytes"]:
        errors.append(("encode.deterministic",
                       "cuTensorMapEncodeTiled in a poisoned context succeeded with other bytes "
                       "than before the trap"))
    rep = facts["replace_after"]["status"]
    if rep not in DOCUMENTED_STATUSES:
        errors.append(("encode.documented-status",
                       f"cuTensorMapReplaceAddress in a poisoned context returned {rep}, which "
                       f"the driver text does not list for it (it lists {DOCUMENTED_STATUSES})",
                       {"outcome": "status", "status": rep}))
    fail_all("poisoned-context", [RuleError(e[0], f"{e[1]}\n  facts: {facts}", *e[2:]) for e in errors])
