"""Measured apart from documented (CPU only): every rule is true to its kind (a documented
rule quotes its sentence, a measured one carries the GPU, driver, date and what was seen),
a case whose expectation rests on a measured reading says so and is counted apart, a
report-only run is an observation, never a pass, and nothing in the suite cites a
document it does not ship."""
from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import fixtures.device_encode  # noqa: F401  (each feature registers its rules)
import fixtures.fences  # noqa: F401
import fixtures.host_encode  # noqa: F401
import fixtures.library_maps  # noqa: F401
import fixtures.tma_load  # noqa: F401
import fixtures.tma_store  # noqa: F401
import fixtures.toolchain  # noqa: F401
from fixtures.plugins.reporting.case_rules import measured_of_item, rests_on
from fixtures.rules.registry import all_rules, Evidence, measured, register, Rule
from fixtures.tensormap.enums import Interleave, Swizzle
from fixtures.tma_box import tiled, tiled_cases
from reports import model

ROOT = Path(__file__).resolve().parent.parent
MEASURED_RULES = {"tma-load.trap", "tma-load.im2col-trap", "tma-prefetch.trap", "tma-store.trap",
                  "tma-reduce.disallowed-pair", "library.triton.fence-sensitivity",
                  "library.cute.fence-sensitivity",
                  "device-encode.driver-only-words", "library.triton.device-zero-words",
                  "tma-load.smem-misaligned", "tma-store.smem-misaligned",
                  "tma-reduce.smem-misaligned", "tma-reduce.trap"}


def test_every_rule_is_true_to_its_kind():
    rules = all_rules()
    assert rules and all(not r.problems() for r in rules.values()), \
        {r.id: r.problems() for r in rules.values() if r.problems()}
    assert {r.id for r in rules.values() if r.kind == "measured"} == MEASURED_RULES
    for rid in MEASURED_RULES:
        r = rules[rid]
        assert measured(rid) and not r.quote and r.evidence and "measured on" in str(r)
    assert all(r.quote.strip() for r in rules.values() if r.kind == "documented")


@pytest.mark.parametrize("rule, why", [
    (Rule("x.documented-without-quote", "seed 004", ""), "quotes its sentence"),
    (Rule("x.measured-without-evidence", "measured", "", kind="measured"), "carries its evidence"),
    (Rule("x.measured-no-date", "measured", "", kind="measured",
          evidence=(Evidence("H100", "580", "", "what"),)), "carries its evidence"),
    (Rule("x.measured-with-quote", "measured", "a sentence", kind="measured",
          evidence=(Evidence("H100", "580", "2026-11-28", "what"),)), "quotes no document"),
    (Rule("x.odd-kind", "d", "q", kind="rumoured"), "is not one of"),
])
def test_a_rule_untrue_to_its_kind_cannot_be_registered(rule, why):
    with pytest.raises(ValueError, match=why):
        register(rule)


def _item(rule=None, **params):
    marker = SimpleNamespace(args=(rule,)) if rule else None
    return SimpleNamespace(callspec=SimpleNamespace(params=params), user_properties=[],
                           get_closest_marker=lambda name: marker if name == "rule" else None)


def test_a_check_that_applies_a_measured_rule_makes_its_case_measured():
    """The words only the driver writes (device-encoding and Triton's device maps) are a
    measurement: a case whose check applied them lists that rule, once; one that did not
    stays documented; only a registered measured rule can be rested on."""
    item = _item("library.triton.device-map")
    assert measured_of_item(item) == ()
    rests_on(item, "library.triton.device-zero-words")
    rests_on(item, "library.triton.device-zero-words")
    assert measured_of_item(item) == ("rule library.triton.device-zero-words",)
    with pytest.raises(ValueError, match="not a measured rule"):
        rests_on(item, "library.triton.device-zeros")
    with pytest.raises(KeyError):
        rests_on(item, "no.such-rule")
    text = (ROOT / "suites" / "test_device_encode.py").read_text()
    for name in ("test_device_footprint", "test_differing_bits_are_explained"):
        body = text[text.index(f"def {name}("):]
        assert "rests_on(request.node, de.DRIVER_ONLY_RULE)" in body[:body.index("\n\n\n")], name


def test_a_case_on_a_measured_reading_says_which():
    """A load through an interleaved map rests on the measured box (INTERLEAVE_EVIDENCE),
    a swizzled narrow row on the measured pitch; a plain load on the documents alone; a
    case of a measured rule names the rule."""
    cases = tiled_cases.seed004_count_cases()
    il = next(c for c in cases if c.load.interleave != Interleave.NONE)
    assert "INTERLEAVE_EVIDENCE" in measured_of_item(_item("tma-load.model", c=il))
    plain = next(c for c in tiled_cases.generate("standard")
                 if c.expect == "data" and not tiled.measured_parts(c.load))
    assert plain.load.interleave == Interleave.NONE and measured_of_item(_item("tma-load.model", c=plain)) == ()
    narrow = next((c for c in tiled_cases.generate("standard") if c.load.swizzle != Swizzle.NONE
                   and c.load.interleave == Interleave.NONE
                   and tiled.row_bytes(c.load) % 32), None)
    if narrow is not None:
        assert "ROW_PITCH_EVIDENCE" in measured_of_item(_item("tma-load.model", c=narrow))
    assert measured_of_item(_item("tma-load.trap")) == ("rule tma-load.trap",)


def test_passes_are_counted_documented_and_measured_and_an_observation_is_not_a_pass():
    run = model.Run(source="x", cases={
        "a": model.CaseResult("a", model.PASSED),
        "b": model.CaseResult("b", model.PASSED, measured=["INTERLEAVE_EVIDENCE"]),
        "c": model.CaseResult("c", model.SKIPPED, f"{model.OBSERVATION_PREFIX} not a pass: ok 3 of 3 loads",
                              skip_kind=model.classify_skip(f"{model.OBSERVATION_PREFIX} x")),
        "d": model.CaseResult("d", model.FAILED, measured=["rule tma-load.trap"]),
    })
    assert run.passed_by_basis() == {"documented": 1, "measured": 1}
    assert run.cases["c"].skip_kind == "observation"
    data = model.results_data({"schema": model.RESULTS_SCHEMA}, run.cases.values())
    assert data["case_measured"] == [["INTERLEAVE_EVIDENCE"], ["rule tma-load.trap"]]
    back = {c.id: c for c in model.cases_of(data)}
    assert back == run.cases                            # what each case rests on comes back


def test_the_report_only_fence_runs_end_as_observations():
    """The fence runs no rule decides (no acquire of their own) end as a skip of kind
    observation, never a pass, whatever their counts."""
    text = (ROOT / "suites" / "test_fence_scopes.py").read_text()
    assert "REPORT ONLY" not in text
    for name in ("test_across_blocks_no_acquire", "test_across_kernels_no_acquire"):
        body = text[text.index(f"def {name}("):]
        body = body[:body.index("\n\n\n")]
        assert "_observe(request, out," in body and "_report_outcome(request, out)" not in body, name
    helper = text[text.index("def _observe("):]
    assert "pytest.skip(f\"{OBSERVATION_PREFIX}" in helper[:helper.index("\n\n\n")]


def test_nothing_cites_a_document_the_suite_does_not_ship():
    """The suite's users have none of the notes it was built from: no file of the suite
    names them."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    bad = []
    for f in files:
        if f == "tests/test_measured.py" or f.startswith("docs/performance"):
            continue
        try:
            text = (ROOT / f).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for word in ("FINDINGS.md", "FINDINGS'", "PUBLIC_BUGS", "../shared"):
            if word in text:
                bad.append(f"{f}: {word}")
    assert not bad, bad
