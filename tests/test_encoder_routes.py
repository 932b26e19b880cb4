"""The routes to the encoders (fixtures/host_encode/routes.py) without a GPU: the documented
answer of each lookup, the judgement of a route case, the ids and the argument sets. The
lookups and encodes themselves run on a GPU node (suites/test_host_encode.py
test_encoder_route, test_encoder_lookup)."""
from __future__ import annotations

import pytest

import fixtures.host_encode as he
from fixtures.host_encode import routes
from fixtures.tensormap.encode import EncodeResult

DRIVER = 13000
MAP = bytes(range(128))


def _found(version=12000, status="CUDA_SUCCESS"):
    return routes.Lookup(status, 0x7F00_0000_1000, routes.SUCCESS, version)


@pytest.mark.parametrize("api, version, introduced, known, want", [
    ("proc", 12000, 12000, True, ("entry.found", "CUDA_SUCCESS", True, 0)),
    ("proc", 13000, 12080, True, ("entry.found", "CUDA_SUCCESS", True, 0)),
    ("proc", 11080, 12000, True, ("entry.below-introduction", "CUDA_SUCCESS", False, 2)),
    ("proc", 12000, 12080, True, ("entry.below-introduction", "CUDA_SUCCESS", False, 2)),
    ("proc", 13010, 12000, True, ("entry.above-driver", "CUDA_ERROR_INVALID_VALUE", False, None)),
    ("proc", 13000, 12000, False, ("entry.unknown-symbol", "CUDA_SUCCESS", False, 1)),
    ("runtime", 12000, 12000, True, ("entry.found", "cudaSuccess", True, 0)),
    ("runtime", 13010, 12000, True, ("entry.above-driver", "cudaErrorInvalidValue", False, None)),
])
def test_the_documented_answer_of_each_lookup(api, version, introduced, known, want):
    assert routes.expected(api, version, introduced, DRIVER, known) == want


def test_a_lookup_that_answers_as_documented_has_no_error_and_one_that_does_not_names_its_rule():
    assert routes.lookup_errors("proc", _found(), 12000, DRIVER) == []
    null = routes.Lookup("CUDA_SUCCESS", 0, routes.NOT_FOUND, 12000)
    (err,) = routes.lookup_errors("proc", null, 12000, DRIVER)
    assert err.rule == "entry.found" and "NULL" in err.text
    above = routes.Lookup("CUDA_SUCCESS", 0x1000, routes.SUCCESS, 13010)
    (err,) = routes.lookup_errors("proc", above, 12000, DRIVER)
    assert err.rule == "entry.above-driver" and err.facts == {"outcome": "status", "status": "CUDA_SUCCESS"}
    below = routes.Lookup("CUDA_SUCCESS", 0, routes.NOT_SUFFICIENT, 11080)
    assert routes.lookup_errors("proc", below, 12000, DRIVER) == []


def _answer(results, reference, lookup=None, runtime=13050):
    return routes.RouteAnswer(lookup=lookup or _found(), results=results, reference=reference,
                              driver=DRIVER, runtime=runtime)


def test_a_route_that_encodes_other_bytes_than_the_exported_symbol_fails_routes_agree():
    same = EncodeResult(0, "CUDA_SUCCESS", MAP)
    other = EncodeResult(0, "CUDA_SUCCESS", MAP[:-1] + b"\xff")
    assert he.judge_route("tiled", "proc-12000", _answer([same], [same])) == ([], "")
    errors, seen = he.judge_route("tiled", "proc-12000", _answer([other], [same]))
    assert [e.rule for e in errors] == ["entry.routes-agree"] and not seen
    refused = EncodeResult(1, "CUDA_ERROR_INVALID_VALUE", None)
    errors, _ = he.judge_route("tiled", "binding", routes.RouteAnswer(results=[refused], reference=[same]))
    assert errors[0].facts["status"] == "CUDA_ERROR_INVALID_VALUE"
    errors, _ = he.judge_route("tiled", "binding", routes.RouteAnswer(results=[], reference=[same]))
    assert [e.rule for e in errors] == ["entry.routes-agree"]


def test_the_unversioned_runtime_lookup_without_a_pointer_is_an_observation_not_a_failure():
    none = routes.Lookup("cudaErrorInvalidValue", 0, routes.NO_STATUS, None)
    errors, seen = he.judge_route("tiled", "runtime-unversioned", _answer([], [], none))
    assert errors == [] and "cudaErrorInvalidValue (CUDA runtime 13050" in seen
    found = routes.Lookup("cudaSuccess", 0x1000, 0, None)
    same = EncodeResult(0, "CUDA_SUCCESS", MAP)
    assert he.judge_route("tiled", "runtime-unversioned", _answer([same], [same], found)) == ([], "")


def test_a_lookup_case_of_an_unknown_name_wants_symbol_not_found():
    wrong = routes.RouteAnswer(lookup=routes.Lookup("CUDA_SUCCESS", 0, routes.NOT_SUFFICIENT, DRIVER),
                               driver=DRIVER)
    errors, seen = he.judge_lookup("proc", None, wrong)
    assert [e.rule for e in errors] == ["entry.unknown-symbol"] and not seen
    right = routes.RouteAnswer(lookup=routes.Lookup("CUDA_SUCCESS", 0, routes.NOT_FOUND, DRIVER), driver=DRIVER)
    assert he.judge_lookup("proc", None, right) == ([], "")


def test_above_a_driver_older_than_13_0_a_lookup_is_an_observation_not_a_rule():
    """CUDA 12.9's text lacks "If the specified CUDA version is greater than the driver
    version, the API will return CUDA_ERROR_INVALID_VALUE.": on a 12.x driver, a lookup
    above it decides nothing."""
    assert routes.expected("proc", 13000, 12000, 12080) is None
    given = routes.Lookup("CUDA_SUCCESS", 0x1000, routes.SUCCESS, 12090)
    errors, seen = he.judge_lookup("proc", "tiled", routes.RouteAnswer(lookup=given, driver=12080))
    assert errors == [] and "above the driver's 12080" in seen and "a pointer" in seen
    same = EncodeResult(0, "CUDA_SUCCESS", MAP)
    answer = routes.RouteAnswer(lookup=routes.Lookup("CUDA_SUCCESS", 0x1000, 0, 13000), results=[same],
                                reference=[same], driver=12080)
    errors, seen = he.judge_route("tiled", "proc-13000", answer)
    assert errors == [] and "say nothing" in seen
    assert he.judge_lookup("proc", "tiled", routes.RouteAnswer(lookup=given, driver=DRIVER))[1] == ""


@pytest.mark.parametrize("level", ["smoke", "standard", "full"])
def test_the_route_ids_are_unique_and_each_names_its_function_and_route(level):
    ids = he.route_cases(level)
    assert ids and len(ids) == len(set(ids))
    for cid in ids:
        short, route = he.split_route(cid)
        assert short in routes.FUNCTIONS and route in routes.ROUTES and route != "export"
        assert f"{short}-{route}" == cid
    lookups = [c[0] for c in he.lookup_cases(level)]
    assert lookups and len(set(lookups) | set(ids)) == len(lookups) + len(ids)
    with pytest.raises(ValueError):
        he.split_route("tiled-export-twice")


def test_the_argument_sets_are_valid_maps_but_one_the_stride_rule_rejects():
    for short in routes.FUNCTIONS:
        args = routes.arguments(short)
        cc = (10, 0) if short == "im2col-wide" else (9, 0)
        assert he.evaluate(args[0], cc).accept, (short, he.evaluate(args[0], cc).ids)
    bad = routes.arguments("tiled")[1]
    assert he.evaluate(bad, (9, 0)).ids == ["global_strides.mult16"]
