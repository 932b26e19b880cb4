"""The known-issues TOML loader: good files, bad files, patterns and conditions (CPU only)."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.plugins.known_issues.entries import Context, KnownIssuesError, load, parse

GOOD = '''
schema = 1

[[issue]]
id = "KI-1"
pattern = "suites/test_host_encode.py::test_rule[tiled-rank1-*]"
reason = "rank 1 with an empty globalStrides list is rejected"
evidence = "measured on 580 / H200"
rule = "accepts-valid"
match = "driver: CUDA_ERROR_INVALID_VALUE"

[[issue]]
id = "KI-2"
pattern = "suites/test_fence.py::*scope-sys*"
reason = "hangs"
evidence = "https://github.com/example/repo/issues/1"
mode = "skip"
driver_min = 12080
driver_max = 13000
compute_capability = ["9.0", "10.0"]
arch = ["sm_90a"]
sweeps = ["full"]
'''


def test_good_file(tmp_path):
    p = tmp_path / "k.toml"
    p.write_text(GOOD)
    a, b = load(p)
    assert (a.id, a.mode, a.driver_min, a.compute_capability) == ("KI-1", "xfail", None, ())
    assert (b.mode, b.driver_min, b.driver_max, b.compute_capability, b.arch, b.sweeps) == \
        ("skip", 12080, 13000, ("9.0", "10.0"), ("sm_90a",), ("full",))
    assert a.marker_reason == ("known-issue KI-1: rank 1 with an empty globalStrides list is rejected "
                               "[evidence: measured on 580 / H200]")


def test_empty_file_with_schema_only():
    assert parse("schema = 1\n", "x.toml") == []


def test_repository_file_loads():
    root = Path(__file__).resolve().parent.parent
    load(root / "known_issues.toml")


def test_pattern_brackets_are_literal():
    (a, _) = parse(GOOD, "x")
    assert a.matches("suites/test_host_encode.py::test_rule[tiled-rank1-nostrides]")
    assert not a.matches("suites/test_host_encode.py::test_rule[tiled-rank2-nostrides]")
    assert not a.matches("suites/test_host_encode.py::test_rule")
    assert not a.matches("xsuites/test_host_encode.py::test_rule[tiled-rank1-a]")   # whole id
    (e,) = parse('schema = 1\n[[issue]]\nid="a"\npattern="t.py::x[?]"\nreason="r"\nevidence="e"\nrule="r"\n', "x")
    assert e.matches("t.py::x[1]") and not e.matches("t.py::x[12]")


def test_conditions():
    (_, b) = parse(GOOD, "x")
    assert b.applies(Context(13000, "9.0", "sm_90a")) == (True, "")
    ok, why = b.applies(Context(13010, "9.0", "sm_90a"))
    assert not ok and "driver_max" in why
    ok, why = b.applies(Context(12000, "9.0", "sm_90a"))
    assert not ok and "driver_min" in why
    ok, why = b.applies(Context(None, None, "sm_90a"))
    assert not ok and "unavailable" in why
    ok, why = b.applies(Context(13000, "8.0", "sm_90a"))
    assert not ok and "compute capability" in why
    ok, why = b.applies(Context(13000, "10.0", "sm_100a"))
    assert not ok and "arch" in why


def test_package_conditions_key_an_entry_by_a_library_version():
    """An entry of a library's behaviour applies only where that library is installed at one
    of its versions (read from the distribution's metadata)."""
    text = ('schema = 1\n[[issue]]\nid="a"\npattern="x"\nreason="r"\nevidence="e"\nrule="r"\n'
            'packages = { pytest = ["%s", "0.0.*"] }\n')
    import pytest as _pytest
    (hit,) = parse(text % _pytest.__version__, "x")
    assert hit.applies(Context(13000, "9.0", "sm_90a")) == (True, "")
    assert hit.to_json()["packages"] == {"pytest": [_pytest.__version__, "0.0.*"]}
    (miss,) = parse(text % "1.*", "x")
    ok, why = miss.applies(Context(13000, "9.0", "sm_90a"))
    assert not ok and f"pytest {_pytest.__version__} not in" in why
    (gone,) = parse(text.replace("pytest", "no-such-dist-tmac") % "1.*", "x")
    ok, why = gone.applies(Context(13000, "9.0", "sm_90a"))
    assert not ok and why == "no-such-dist-tmac is not installed"


HEAD = 'schema = 1\n[[issue]]\nid = "KI-1"\npattern = "x"\nreason = "r"\nevidence = "e"\nrule = "R"\n'


@pytest.mark.parametrize("text,problem", [
    ("schema = 1\n[[issue]\n", "not valid TOML"),
    ('[[issue]]\nid = "a"\n', "missing top-level 'schema = 1'"),
    ("schema = 2\n", "schema = 2 is not supported"),
    ('schema = "1"\n', "is not supported"),
    ("schema = 1\nextra = 3\n", "unknown top-level key"),
    (HEAD + 'sweeps = ["huge"]\n', "'sweeps' must be a list of"),
    ("schema = 1\nissue = 3\n", "array of tables"),
    ('schema = 1\n[[issue]]\nid = "a"\npattern = "x"\nreason = "r"\n', "missing required key 'evidence'"),
    ('schema = 1\n[[issue]]\nid = "a"\npattern = "x"\nreason = ""\nevidence = "e"\n', "'reason' must be a non-empty"),
    ('schema = 1\n[[issue]]\nid = "a b"\npattern = "x"\nreason = "r"\nevidence = "e"\n', "whitespace"),
    (HEAD + 'mode = "xpass"\n', "mode = 'xpass'"),
    (HEAD + 'driver_mn = 1\n', "unknown key(s) ['driver_mn']"),
    (HEAD + 'driver_min = "13.0"\n', "cuDriverGetVersion integer"),
    (HEAD + "driver_min = 13010\ndriver_max = 13000\n", "driver_min 13010 > driver_max 13000"),
    (HEAD + 'compute_capability = "9.0"\n', "list of strings like [\"9.0\"]"),
    (HEAD + 'compute_capability = ["90"]\n', "compute_capability"),
    (HEAD + 'arch = ["sm90a"]\n', "'arch' must be a list"),
    (HEAD + HEAD.replace("schema = 1\n", ""), "duplicate id 'KI-1'"),
    (HEAD.replace('rule = "R"\n', ""), "an xfail entry needs the signature of its failure"),
    (HEAD + 'match = "(unclosed"\n', "'match' must be a regular expression"),
    (HEAD.replace('rule = "R"\n', 'rule = [1]\n'), "'rule' must be a rule id or a list"),
    (HEAD + 'mode = "skip"\n', "a skip entry does not run its case"),
    (HEAD + 'packages = ["triton"]\n', "'packages' must be a table of distribution"),
    (HEAD + 'packages = { triton = "3.6.0" }\n', "'packages' must be a table of distribution"),
])
def test_bad_files_name_the_file_and_the_problem(tmp_path, text, problem):
    p = tmp_path / "bad_known.toml"
    p.write_text(text)
    with pytest.raises(KnownIssuesError) as e:
        load(p)
    msg = str(e.value)
    assert str(p) in msg
    assert problem in msg


def test_missing_file(tmp_path):
    with pytest.raises(KnownIssuesError, match="no such file"):
        load(tmp_path / "nope.toml")


def test_signature_absorbs_only_the_described_failure():
    """Every error [(rule, text)] of a failure must name one of the entry's rules and
    contain its match; a failure with another rule, another message, or one more error
    is not it. The errors come from the failure (RuleFailure.errors), never its text."""
    (e,) = parse(HEAD.replace('rule = "R"', 'rule = ["R-1", "R-2"]\nmatch = "w1\\\\[16\\\\]|trapped"'), "x")
    assert e.explains([("R-1", "bit w1[16] differs")]) == (True, "")
    assert e.explains([("R-1", "bit w1[16] differs"), ("R-2", "the device map trapped")])[0]
    ok, why = e.explains([("R-1", "bit w1[16] differs"), ("R-3", "the tile is wrong")])
    assert not ok and "rule R-3" in why
    ok, why = e.explains([("R-1", "bit w1[16] differs"), ("R-2", "the tile is wrong")])
    assert not ok and "does not" in why
    ok, why = e.explains([(None, "AssertionError: something else")])
    assert not ok and "no rule" in why
    (m,) = parse(HEAD.replace('rule = "R"', 'match = "driver: CUDA_SUCCESS"'), "x")
    assert m.explains([("map.align64", "x: the driver and the documented rules disagree\n"
                                       "  driver: CUDA_SUCCESS")])[0]
    assert not m.explains([("map.align64", "x\n  driver: CUDA_ERROR_INVALID_VALUE")])[0]


def test_facts_are_the_structured_signature():
    """An entry with ``facts`` absorbs an error only when the error carries each of them
    (one of the listed values): an error with no facts (an assertion, a crash of the
    harness), or with another value, is not it; an unknown fact is a usage error."""
    from fixtures.rules.registry import RuleError
    (e,) = parse(HEAD.replace('rule = "R"', 'rule = "R-1"\nfacts = { outcome = "trap", '
                              'status = ["CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_LAUNCH_FAILED"] }'), "x")
    trap = {"outcome": "trap", "status": "CUDA_ERROR_ILLEGAL_INSTRUCTION"}
    assert e.explains([RuleError("R-1", "any words", trap)]) == (True, "")
    assert e.explains([RuleError("R-1", "w", dict(trap, status="CUDA_ERROR_LAUNCH_FAILED"))])[0]
    ok, why = e.explains([RuleError("R-1", "w", dict(trap, status="CUDA_ERROR_MISALIGNED_ADDRESS"))])
    assert not ok and "status is CUDA_ERROR_ILLEGAL_INSTRUCTION or CUDA_ERROR_LAUNCH_FAILED" in why
    ok, why = e.explains([("R-1", "it trapped: CUDA_ERROR_ILLEGAL_INSTRUCTION")])   # words only
    assert not ok and "not known (the failure says none)" in why
    ok, why = e.explains([RuleError("R-2", "w", trap)])
    assert not ok and "rule R-2" in why
    with pytest.raises(KnownIssuesError, match="'facts' must be a table"):
        parse(HEAD + 'facts = { colour = "red" }\n', "x")
    with pytest.raises(ValueError, match="unknown fact"):
        RuleError("R-1", "w", {"colour": "red"})


def test_a_failure_the_entry_explains_is_one_line_any_other_keeps_its_traceback():
    """An explained failure becomes a known issue reported by its reason, so pytest's
    traceback of it (every file in it parsed again) is not built: its repr is the
    exception's line. A failure the entry does not explain fails the case, with the
    traceback pytest gives it."""
    from fixtures.plugins.known_issues.matching import _known_failure_repr
    (entry, _) = parse(GOOD, "x")

    class RuleFailure(Exception):       # errors_of reads ``errors``, as the registry's has
        def __init__(self, case, errors):
            super().__init__(f"[rule {errors[0][0]}] [case {case}] {errors[0][1]}")
            self.errors = errors

    class Item:
        nodeid = "suites/test_host_encode.py::test_rule[tiled-rank1-x]"
        own_markers = ()

        def get_closest_marker(self, name):
            return None

        def repr_failure(self, excinfo):
            return "the whole traceback"

    def raised(errors):
        try:
            raise RuleFailure("tiled-rank1-x", errors)
        except RuleFailure:
            return pytest.ExceptionInfo.from_current()
    item = Item()
    short = _known_failure_repr(item, entry)
    explained = raised([("accepts-valid", "driver: CUDA_ERROR_INVALID_VALUE for rank 1")])
    assert short(explained) == explained.exconly()
    assert "[rule accepts-valid]" in short(explained) and "\n" not in short(explained).strip()
    assert short(raised([("accepts-valid", "something else")])) == "the whole traceback"
    assert short(raised([("other-rule", "driver: CUDA_ERROR_INVALID_VALUE")])) == "the whole traceback"


# ------------------------------------------------------------------ the repository's entries
def _entries():
    root = Path(__file__).resolve().parent.parent
    return [e for e in load(root / "known_issues.toml") if e.mode == "xfail"]


def test_every_entry_names_the_rules_its_cases_fail():
    """Every xfail entry names its rule(s) (five im2col entries named none, so a failure of
    any rule that matched their text was absorbed); an entry on the host-encoding rule
    cases names exactly the rules of the cases its pattern matches, at every sweep (a
    case of such a test fails its own rule, fixtures.host_encode)."""
    import fixtures.host_encode as he
    entries = _entries()
    assert entries and all(e.rule for e in entries), [e.id for e in entries if not e.rule]
    cases = {c.id: c for level in ("smoke", "standard", "full") for c in he.rule_cases(level)}
    for e in entries:
        if not e.pattern.startswith("suites/test_host_encode.py::test_rule_case["):
            continue
        rules = {c.rule for cid, c in cases.items()
                 if e.matches(f"suites/test_host_encode.py::test_rule_case[{cid}]")}
        assert rules and rules <= set(e.rule), (e.id, sorted(rules), e.rule)


@pytest.mark.parametrize("kind, text", [
    ("a crash", "the load did not complete: the isolated child died: child exited with status -11"),
    ("a hang", "the write did not complete: it hung: no answer from fixtures.engine.batches:run_cases "
               "within 120 s; the child was killed"),
    ("a harness error", "harness: running this case's batch of 12 case(s) failed: RuntimeError: "
                        "dictionary changed size during iteration"),
    ("a failure of no rule", "AssertionError: something else"),
])
def test_no_entry_absorbs_a_crash_a_hang_or_a_harness_error(kind, text):
    """Fed to every xfail entry under each of its own rules (and under another rule), a
    crash, a hang, a harness error or an unexplained assertion is not the entry's failure:
    the case fails as itself."""
    for e in _entries():
        for rule in list(e.rule) + ["another.rule", None]:
            ok, _ = e.explains([(rule, text)])
            assert not ok, f"{e.id} absorbs {kind} of rule {rule}: {text!r}"


# Other failures of an entry's own cases, as the suites' checks report them: each must
# fail as itself, whatever entry its case is listed under.
OTHER_FAILURES = {
    "a crash": {"outcome": "crash"},
    "a hang": {"outcome": "hang"},
    "other bytes": {"outcome": "bytes"},
    "bytes equal to another model": {"outcome": "bytes", "equals": "another-model"},
    "a trap of another error": {"outcome": "trap", "status": "CUDA_ERROR_MISALIGNED_ADDRESS"},
    "another status": {"outcome": "status", "status": "CUDA_ERROR_NOT_SUPPORTED"},
    "other map bits": {"outcome": "map-bits", "bits": "w0[0:1]", "map-bits": "w0[0:1]"},
    "an error with no facts (an assertion, the harness's own exception)": {},
}


@pytest.mark.parametrize("entry", _entries(), ids=lambda e: e.id)
def test_each_entry_absorbs_its_own_failure_and_no_other(entry):
    """The suite's every entry has a structured signature (its rules and facts, never a
    message's words): its own failure, under each of its rules, is absorbed; the same
    failure under another rule, and every other failure (a crash, a hang, other bytes,
    another status, other map bits, an error with no facts) under its own rules, is
    not."""
    from fixtures.rules.registry import RuleError
    assert entry.rule and entry.facts and entry.match is None, entry.id
    own = {k: v[0] for k, v in entry.facts}
    for rule in entry.rule:
        assert entry.explains([RuleError(rule, "any words", own)]) == (True, ""), (entry.id, rule)
    assert not entry.explains([RuleError("another.rule", "any words", own)])[0]
    for kind, facts in OTHER_FAILURES.items():
        if all(facts.get(k) in v for k, v in entry.facts):
            continue                       # (none is: checked below)
        for rule in entry.rule:
            ok, why = entry.explains([RuleError(rule, "any words", facts)])
            assert not ok and why, f"{entry.id} absorbs {kind} of rule {rule}"
        # and its own failure beside another one is not it either
        assert not entry.explains([RuleError(entry.rule[0], "w", own),
                                   RuleError(entry.rule[0], "w", facts)])[0], (entry.id, kind)
    assert not any(all(f.get(k) in v for k, v in entry.facts) for f in OTHER_FAILURES.values()), entry.id


def test_the_checks_give_the_facts_the_entries_match():
    """The facts of the entries are what the suites' checks say of those failures: a
    seed-004 interleaved load whose bytes are the measured box, a write that equals the
    model with dimension 0's last chunk written whole (the TMA and the library checks
    alike), a trap in the isolated child."""
    import fixtures.tma_load as tl
    from fixtures.cuda_layer.isolation import Outcome
    from fixtures.engine.batches import fault_facts
    from fixtures.tma_box import tiled, tiled_cases
    by_id = {e.id: e for e in _entries()}
    il16 = next(c for c in tiled_cases.seed004_count_cases() if "-il16-" in c.id)
    p, tensor = il16.load, tl.TILED.tensor(il16)
    measured = tiled.load(p, tensor, 0).data
    err = tl.checks.box_per_seed_004(p, tensor, measured)
    assert err.facts == {"outcome": "bytes", "equals": "measured-interleave-box"}
    assert by_id["LOAD-IL16-BOX-NOT-ELEMENTS"].explains([err])[0]
    other = bytearray(measured)
    other[0] ^= 0xFF
    err = tl.checks.box_per_seed_004(p, tensor, bytes(other))
    assert err.facts == {"outcome": "bytes"} and not by_id["LOAD-IL16-BOX-NOT-ELEMENTS"].explains([err])[0]
    assert tl.checks.box_per_seed_004(p, tensor, tiled.load(tiled.documented(p), tensor, 0).data) is None
    trap = fault_facts(Outcome("cuda_error", error="CUDA_ERROR_ILLEGAL_INSTRUCTION", poisoned=True))
    assert by_id["STORE-NEGATIVE-COORD"].facts == tuple((k, (v,)) for k, v in sorted(trap.items()))
    assert fault_facts(Outcome("timeout")) == {"outcome": "hang"}
    assert fault_facts(Outcome("crashed")) == {"outcome": "crash"}
    assert fault_facts(Outcome("exception", error="RuntimeError: x")) == {}
    assert {e.facts for e in by_id.values() if e.id.endswith("DIM0-CHUNK")} == {
        (("equals", (tiled.WITH_DIM0_CHUNK,)), ("outcome", ("bytes",)))}


