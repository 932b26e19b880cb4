"""The result model shared by the pytest plugin and the report tools.

A case is one pytest node id. Its *state* is exactly one of ``STATES``:

- ``passed``
- ``failed``            (assertion, error in setup/teardown, collection error,
                         a strict known issue that passed: "XPASS(strict)")
- ``known-issue``       (an xfail, strict, or a known-issue entry in skip mode)
- ``skipped``           (with a reason and a ``skip_kind``: ``no-gpu``,
                         ``needs-2-gpus``, ``arch-lacks-feature``, ``gpu-lost``,
                         ``environment``, ``unproven``, ``other``)
- ``could-not-build``   (a ``BuildError`` raised while preparing or running it)
- ``harness-error``     (the harness's own step failed: an allocation, a copy, a memset
                         on the wrong GPU; no documented rule was judged)

A case of a run on several GPUs ran on each of them: ``gpus`` holds its state on each
(ordinal -> state, ``"0": "passed"``), its own state is the worst of them, and the run's
GPUs (ordinal, name, UUID, PCI bus id) are in ``results.json``'s ``gpu.run``.

A run is read either from ``results.json`` (written by ``fixtures.plugins.run_control.controller``
through :func:`results_data`; schema ``tmac-results/2``, and the previous
``tmac-results/1``, which fleets of older nodes still write) or from a pytest JUnit XML
file (any family): the plugin writes its JUnit so that the same states come back out of
it (message prefixes ``could-not-build:`` and ``known-issue <id>:``, skipped
``type="pytest.xfail"``; a long skip or xfail reason shared by many cases is written once,
as the testsuite property ``tmac.reason.N``, and each such ``<skipped>`` message is its
short form ``<head>: … [tmac.reason.N]``, :func:`short_reason`).
"""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, fields
from pathlib import Path

RESULTS_SCHEMA = "tmac-results/2"
RESULTS_SCHEMA_1 = "tmac-results/1"     # the previous version, still read (read_results_json)
ENV_SCHEMA = "tmac-environment/4"

PASSED, FAILED, KNOWN, SKIPPED, NOBUILD = "passed", "failed", "known-issue", "skipped", "could-not-build"
HARNESS = "harness-error"
STATES = (PASSED, FAILED, KNOWN, SKIPPED, NOBUILD, HARNESS)
STATE_LABELS = {PASSED: "passed", FAILED: "failed", KNOWN: "known issue",
                SKIPPED: "skipped", NOBUILD: "could not build", HARNESS: "harness error"}
BAD = (FAILED, NOBUILD, HARNESS)         # the states that keep a run from passing
# Worse first; used when a case has several phases (setup, call, teardown) or
# several rows (JUnit written with teardown errors) to keep the worst, and for the
# worst of a case's GPUs. A broken rule outranks a harness error.
_SEVERITY = {NOBUILD: 6, FAILED: 5, HARNESS: 4, KNOWN: 3, SKIPPED: 2, PASSED: 1}


NOBUILD_PREFIX = "could-not-build: "
HARNESS_PREFIX = "harness-error: "
KNOWN_PREFIX = "known-issue "
XPASS_STRICT = "[XPASS(strict)]"

SKIP_KINDS = ("no-gpu", "needs-2-gpus", "arch-lacks-feature", "gpu-lost", "environment", "unproven",
              "other")
# A case whose code the node's driver cannot load (PTX newer than it knows: the driver
# older than the toolchain) is skipped with a reason that starts with this (its kind:
# environment): the stack's setup, not a broken rule (fixtures/engine/batches.py).
ENVIRONMENT_PREFIX = "environment, not a rule:"
# A case that records what a stack does where no documented rule decides it ends as a
# skip whose reason starts with this (its kind: observation): never a pass.
OBSERVATION_PREFIX = "observation:"

_SKIP_PATTERNS = [
    ("observation", re.compile(r"^" + re.escape(OBSERVATION_PREFIX))),
    ("environment", re.compile(r"^" + re.escape(ENVIRONMENT_PREFIX))),
    # a case new in its version, not yet run on a GPU node (the marker unproven;
    # fixtures/plugins/run_control/options.py UNPROVEN): run with --unproven
    ("unproven", re.compile(r"^unproven: ")),
    # first: its reason quotes the probe ("a fresh process sees no GPU 0: ...")
    ("gpu-lost", re.compile(r"\bGPU lost\b")),
    ("needs-2-gpus", re.compile(r"needs? (?:at least )?(?:2|two) GPUs|multi[- ]GPU", re.I)),
    ("no-gpu", re.compile(r"no (?:CUDA )?(?:GPU|driver|device)|libcuda|CUDA_ERROR_NO_DEVICE|"
                          r"no CUDA-capable|driver (?:not|is not) (?:found|available|loadable)", re.I)),
    ("arch-lacks-feature", re.compile(r"architecture|\bsm_\d+|compute capability|\bcc ?\d|"
                                      r"not supported (?:on|by) (?:this|the) (?:GPU|device|arch)", re.I)),
]

# The one failure shape (fixtures/rules/registry.py): a JUnit message starts
# "[rule R] [case id]" (after "could-not-build: " for a case that could not build).
_SHAPE_RE = re.compile(r"^(?:could-not-build: |harness-error: )?\[rule (\S+)\] \[case ")
_KNOWN_RE = re.compile(r"known-issue (\S+?):\s*(.*?)(?:\s*\[evidence: (.*)\])?\s*$", re.S)


class ReportInputError(Exception):
    """Input the report tools cannot read (exit status 2)."""


def classify_skip(reason: str | None) -> str:
    for kind, rx in _SKIP_PATTERNS:
        if reason and rx.search(reason):
            return kind
    return "other"


def rule_of_message(message: str | None) -> str | None:
    """The rule of a JUnit failure message in the one shape, for JUnit files without a
    results.json beside them (results.json carries the rule itself)."""
    m = _SHAPE_RE.match(message or "")
    return m.group(1) if m else None


def parse_known(text: str | None) -> dict | None:
    """``known-issue KI-1: reason [evidence: link]`` -> dict, else None."""
    if not text:
        return None
    i = text.find(KNOWN_PREFIX)
    if i < 0:
        return None
    m = _KNOWN_RE.match(text[i:])
    if not m:
        return None
    return {"id": m.group(1), "reason": m.group(2).strip(), "evidence": (m.group(3) or "").strip()}


def known_text(entry_id: str, reason: str, evidence: str) -> str:
    return f"{KNOWN_PREFIX}{entry_id}: {reason} [evidence: {evidence}]"


def suite_of(nodeid: str) -> str:
    """``suites/test_host_encode.py::x`` -> ``host_encode``; ``tests/test_a.py`` -> ``tests/a``."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    stem = parts[-1]
    if stem.endswith(".py"):
        stem = stem[:-3]
    if stem.startswith("test_"):
        stem = stem[5:]
    elif stem.endswith("_test"):
        stem = stem[:-5]
    if len(parts) > 1 and parts[0] not in ("suites",):
        return f"{parts[0]}/{stem}"
    return stem


def nodeid_from_junit(classname: str, name: str, file: str | None = None) -> str:
    """Best-effort inverse of pytest's ``mangle_test_address``.

    ``suites.test_x.TestA`` + ``test_b[p]`` -> ``suites/test_x.py::TestA::test_b[p]``.
    The module/class boundary is the first component starting with an upper-case
    letter (pytest's class naming); the xunit1 ``file`` attribute wins if present.
    """
    parts = classname.split(".") if classname else []
    if classname + "::" == NODE_PREFIX:       # the node's own case, as suites before test_node.py named it
        return NODE_CASE if NODE_PREFIX + name == LEGACY_NODE_CASE else NODE_PREFIX + name
    if file and file.endswith(".py"):
        mod_parts = file[:-3].replace(os.sep, "/").split("/")
        if parts[:len(mod_parts)] == mod_parts:
            rest = parts[len(mod_parts):]
            return "::".join([file.replace(os.sep, "/")] + rest + [name])
    cut = len(parts)
    for i, p in enumerate(parts):
        if i > 0 and p[:1].isupper():
            cut = i
            break
    module = "/".join(parts[:cut]) + ".py" if cut else ""
    return "::".join([x for x in [module] + parts[cut:] + [name] if x])


@dataclass
class CaseResult:
    id: str                       # pytest node id (the stable case id)
    state: str
    message: str = ""             # failure message / skip reason / xfail reason (first lines)
    rule: str | None = None
    skip_kind: str | None = None
    known_issue: dict | None = None   # {"id", "reason", "evidence", "mode"}
    duration: float = 0.0
    phase: str | None = None      # where it failed: setup, call, teardown, collect
    worker: str | None = None
    gpus: dict | None = None      # its state on each GPU it ran on: {"0": "passed", ...}
    # the timeline (fixtures/plugins/reporting/timeline.py): seconds since the session started
    start: float | None = None    # its setup began
    end: float | None = None      # its teardown ended
    setup_s: float | None = None
    call_s: float | None = None
    teardown_s: float | None = None
    measured: list | None = None  # what its expectation takes from a measurement, not a
                                  # document: a measured rule, the model's measured readings
    ran_again: str | None = None  # why it was judged on a second run of its batch or call
                                  # (fixtures/engine/batches.py, fixtures/cuda_layer/gpu_service.py)

    @property
    def suite(self) -> str:
        return suite_of(self.id)

    def to_json(self) -> dict:
        """The case as one JSON object: every field that is set, and its suite (a case of
        results.json schema 1; schema 2 writes each distinct text once: ``results_data``)."""
        # asdict's deep, recursive copy was most of results.json's writing time (40,000
        # cases at the end of a full run); the fields are flat (known_issue: a dict of str).
        # One pass over the instance's own dict, the empty fields left out (64,642 cases:
        # 0.18 s -> 0.1 s)
        own = self.__dict__
        d = {k: v for k in _CASE_FIELDS if (v := own[k]) is not None and v != ""}
        if "known_issue" in d:
            d["known_issue"] = dict(d["known_issue"])
        if "gpus" in d:
            d["gpus"] = dict(d["gpus"])
        suite = self.suite
        if suite:
            d["suite"] = suite
        return d


_CASE_FIELDS = tuple(f.name for f in fields(CaseResult))


# results.json, schema 2 (tmac-results/2): every distinct text once. A full sweep on a
# node without a GPU skips ~70,000 cases with one reason; schema 1 wrote it, and each
# case's suite, skip kind and phase, once per case (40 MB). Here:
#   messages            every distinct case message (skip or xfail reason, failure), once
#   case_known_issues   every distinct known issue of a case ({"id", "reason", ...}), once
#   case_defaults       the most common value of each of SHARED_FIELDS over the run's cases
#   cases               per case: its id, and each field of SHARED_FIELDS whose value is not
#                       the default (null where the case has none and the default is set);
#                       ``message`` and ``known_issue`` are indexes into the two lists above;
#                       ``duration`` (to the microsecond, absent when 0); ``t``: its timeline
#                       [start, end, setup_s, call_s, teardown_s] (absent when it has none);
#                       ``measured``: an index into case_measured (absent: documented);
#                       ``ran_again``: an index into messages (absent: its batch ran once)
#   case_measured       every distinct list of what a case's expectation takes from a
#                       measurement rather than a document (CaseResult.measured), once
# A case is ``case_defaults`` updated with its row (jq: ``.case_defaults + .cases[i]``);
# its suite is its id's (``suite_of``).
SHARED_FIELDS = ("state", "message", "rule", "skip_kind", "known_issue", "phase", "worker", "gpus")
CASE_TABLES = ("messages", "case_known_issues", "case_measured", "case_defaults")   # not run meta
TIME_FIELDS = ("start", "end", "setup_s", "call_s", "teardown_s")


def _hashable(v):
    return tuple(sorted(v.items())) if isinstance(v, dict) else v


def results_data(meta: dict, cases) -> dict:
    """The content of results.json (schema ``RESULTS_SCHEMA``): ``meta``'s keys, then the
    cases (CaseResult), each distinct text once (see above)."""
    messages: dict[str, int] = {}
    known: dict[tuple, int] = {}
    known_rows: list[dict] = []
    measured: dict[tuple, int] = {}
    counts: dict[str, dict] = {k: {} for k in SHARED_FIELDS}
    signatures: dict[tuple, int] = {}
    rows = []
    for c in cases:
        own = c.__dict__
        row = {"id": c.id, "state": c.state}
        if c.message:
            row["message"] = messages.setdefault(c.message, len(messages))
        for k in ("rule", "skip_kind", "phase", "worker"):
            v = own[k]
            if v is not None and v != "":
                row[k] = v
        if c.known_issue:
            key = _hashable(c.known_issue)
            i = known.get(key)
            if i is None:
                i = known[key] = len(known_rows)
                known_rows.append(dict(c.known_issue))
            row["known_issue"] = i
        if c.gpus:
            row["gpus"] = dict(c.gpus)
        if c.duration:
            row["duration"] = round(c.duration, 6)
        if c.measured:
            row["measured"] = measured.setdefault(tuple(c.measured), len(measured))
        if c.ran_again:
            row["ran_again"] = messages.setdefault(c.ran_again, len(messages))
        t = [own[k] for k in TIME_FIELDS]
        if t != [None, None, None, None, None]:
            row["t"] = t
        get = row.get
        sig = (get("state"), get("message"), get("rule"), get("skip_kind"), get("known_issue"), get("phase"),
               get("worker"), _hashable(c.gpus) if c.gpus else None)       # SHARED_FIELDS' order
        signatures[sig] = signatures.get(sig, 0) + 1
        rows.append((row, sig))
    for sig, n in signatures.items():       # a few distinct ones: each field's counts from them
        for k, v in zip(SHARED_FIELDS, sig):
            counts[k][v] = counts[k].get(v, 0) + n
    best = {k: max(seen.items(), key=lambda kv: kv[1])[0] for k, seen in counts.items() if seen}
    defaults = {k: dict(v) if isinstance(v, tuple) else v for k, v in best.items() if v is not None}
    plans = {}      # per signature: the fields its rows leave to the defaults, and those they have not
    for sig in signatures:
        pairs = [(k, v) for k, v in zip(SHARED_FIELDS, sig) if k in defaults]
        plans[sig] = ([k for k, v in pairs if v is not None and v == best[k]], [k for k, v in pairs if v is None])
    for row, sig in rows:
        same, unset = plans[sig]
        for k in same:
            del row[k]
        for k in unset:
            row[k] = None                   # no value, where the default has one
    out = {k: v for k, v in meta.items() if k != "cases"}
    out["schema"] = RESULTS_SCHEMA
    out.update(messages=list(messages), case_known_issues=known_rows,
               case_measured=[list(m) for m in measured], case_defaults=defaults,
               cases=[row for row, _ in rows])
    return out


def cases_of(data: dict, source: str = "results.json") -> list[CaseResult]:
    """The cases of a results.json's content (schema 1 or 2), as CaseResults; a row that
    cannot be read raises ReportInputError naming ``source`` and the case."""
    version = data.get("schema")
    raw = data.get("cases", [])
    if not isinstance(raw, list):
        raise ReportInputError(f"{source}: 'cases' is not a list")
    out = []
    if version == RESULTS_SCHEMA_1:
        names = set(_CASE_FIELDS)
        try:
            for c in raw:
                out.append(CaseResult(**{k: v for k, v in c.items() if k in names}))
                if out[-1].id == LEGACY_NODE_CASE:      # the node's case, by the id it had then
                    out[-1].id = NODE_CASE
        except (TypeError, AttributeError) as e:
            raise ReportInputError(f"{source}: malformed case entry ({e})") from None
        return out
    messages, known = data.get("messages", []), data.get("case_known_issues", [])
    defaults, measured = data.get("case_defaults", {}), data.get("case_measured", [])
    if not (isinstance(messages, list) and isinstance(known, list) and isinstance(defaults, dict)
            and isinstance(measured, list)):
        raise ReportInputError(f"{source}: 'messages', 'case_known_issues', 'case_measured' or "
                               f"'case_defaults' is malformed")
    for row in raw:
        try:
            c = dict(defaults)
            c.update(row)
            msg, ki, t = c.get("message"), c.get("known_issue"), c.get("t") or (None,) * len(TIME_FIELDS)
            mi, ra = c.get("measured"), c.get("ran_again")
            if any(i is not None and (type(i) is not int or i < 0) for i in (msg, ki, mi, ra)):
                raise IndexError(f"message {msg!r}, known_issue {ki!r}, measured {mi!r}, ran_again {ra!r}: "
                                 f"not an index")
            gpus = c.get("gpus")
            start, end, setup_s, call_s, teardown_s = t
            out.append(CaseResult(
                id=NODE_CASE if c["id"] == LEGACY_NODE_CASE else c["id"], state=c["state"],
                message=messages[msg] if msg is not None else "", rule=c.get("rule"),
                skip_kind=c.get("skip_kind"), known_issue=dict(known[ki]) if ki is not None else None,
                duration=float(c.get("duration") or 0.0), phase=c.get("phase"), worker=c.get("worker"),
                gpus=dict(gpus) if gpus else None, start=start, end=end, setup_s=setup_s,
                call_s=call_s, teardown_s=teardown_s,
                measured=list(measured[mi]) if mi is not None else None,
                ran_again=messages[ra] if ra is not None else None))
        except (TypeError, KeyError, IndexError, ValueError, AttributeError) as e:
            what = row.get("id") if isinstance(row, dict) else row
            raise ReportInputError(f"{source}: malformed case entry {what!r} "
                                   f"({type(e).__name__}: {e})") from None
    return out


# JUnit: a skip or xfail reason of REASON_MIN characters or more is written once, as the
# testsuite property tmac.reason.N, and each <skipped> of it says its short form (the
# reason's head, up to its first ": " within SHORT_HEAD characters, else its first
# SHORT_HEAD characters, and the reference): "no GPU: … [tmac.reason.1]".
REASON_PROPERTY = "tmac.reason."
REASON_MIN = 64
SHORT_HEAD = 40
_REASON_REF = re.compile(r" … \[tmac\.reason\.(\d+)\]\Z")


def short_reason(text: str, n: int) -> str:
    """The short form of reason ``text``, written once as ``tmac.reason.<n>``."""
    i = text.find(": ", 1, SHORT_HEAD)
    head = text[:i + 1] if i > 0 else text[:SHORT_HEAD].rstrip()
    return f"{head} … [{REASON_PROPERTY}{n}]"


def full_reason(message: str, reasons: dict[str, str]) -> str:
    """A JUnit <skipped> message with its short form resolved (``reasons``: the suite's
    tmac.reason.N properties by N); any other message as it is."""
    m = _REASON_REF.search(message)
    if m is None:
        return message
    full = reasons.get(m.group(1))
    return full if full is not None and full.startswith(message[:m.start()]) else message


@dataclass(frozen=True)
class Verdict:
    """What a run says about the node, first line of the matrix and the terminal summary.

    ``status`` is one of ``VERDICTS``; only ``PASS`` qualifies a node."""
    status: str
    text: str
    css: str          # ok | warn | bad (render classes)

    @property
    def passed(self) -> bool:
        return self.status == "PASS"


VERDICTS = ("PASS", "FAIL", "NOT MEASURED", "INTERRUPTED", "TIMED OUT", "INCOMPLETE",
            "INTERNAL ERROR", "NO CASES RAN", "NOTHING PASSED", "GPU LOST", "HARNESS ERROR")
EXIT_INTERRUPTED, EXIT_INTERNAL = 2, 3      # pytest's ExitCode values
EXIT_HARNESS = 3                            # HARNESS ERROR: the harness failed, no rule judged
EXIT_GPU_LOST = 6                           # ours: the GPU stopped answering mid-run
# The node's own case (fixtures.plugins.run_control.harness.node_check), not a conformance case: a test
# of its own, so that its id reruns as ``pytest ID`` (suites/test_node.py). Reports of
# suite versions before it name it LEGACY_NODE_CASE: the readers give it this id.
NODE_CASE = "suites/test_node.py::test_usable_gpus"
LEGACY_NODE_CASE = "node::usable-gpus"
NODE_PREFIX = "node::"


def is_node_case(case_id: str) -> bool:
    return case_id == NODE_CASE or case_id.startswith(NODE_PREFIX)


RUNNING_SHOWN = 3       # the running cases a stopped run's verdict names; the rest counted


def running_text(end: dict) -> str:
    """What a stopped run's verdict says of the cases that were running as it was asked to
    stop (results.json ``end.running``, ``end.gpus``): "; running: ID, ID and 2 more (each on
    GPUs 0, 1)", "; no case was running", or "" where the run did not record them."""
    ids = end.get("running")
    if not isinstance(ids, list):
        return ""
    if not ids:
        return "; no case was running"
    shown = ", ".join(ids[:RUNNING_SHOWN]) + (f" and {len(ids) - RUNNING_SHOWN} more"
                                              if len(ids) > RUNNING_SHOWN else "")
    gpus = end.get("gpus") or []
    return f"; running: {shown}" + (f" (each on {ordinals(gpus)})" if gpus else "")


def run_verdict(run: "Run") -> Verdict:
    """The one verdict of a run, worst first: an interrupted, timed-out, incomplete or
    crashed run is never PASS; a run whose GPU stopped answering mid-run is GPU LOST
    (worse than FAIL); a run in which no GPU case could run (no usable GPU) is NOT
    MEASURED, never PASS; failures and could-not-build make it FAIL, naming the GPUs
    they were on when the run had several; harness errors alone make it HARNESS ERROR
    (no documented rule was judged broken)."""
    c = run.counts()
    total = sum(c.values())
    bad = c[FAILED] + c[NOBUILD]
    conformance = sum(1 for cid in run.cases if not is_node_case(cid))
    meta = run.meta or {}
    end = meta.get("end") or {}
    missing = int(meta.get("not_reported") or 0)
    tally = f"{c[PASSED]} passed, {bad} failed or could not build, {total} cases reported"
    if c[HARNESS]:
        tally += f", {c[HARNESS]} harness errors"
    if missing:
        tally += f", {missing} never reported"
    status = meta.get("exitstatus")
    if end.get("kind") == "timed-out":
        return Verdict("TIMED OUT", f"TIMED OUT: {end.get('why', '')}{running_text(end)} ({tally})", "bad")
    if end.get("kind") == "interrupted" or status == EXIT_INTERRUPTED:
        uncollected = sum(1 for r in run.cases.values() if r.phase == "collect")
        why = end.get("why") or (f"pytest stopped at {uncollected} collection error(s)" if uncollected
                                 else "the run was interrupted")
        return Verdict("INTERRUPTED", f"INTERRUPTED: {why}{running_text(end)} ({tally})", "bad")
    if status == EXIT_INTERNAL and not c[HARNESS]:
        return Verdict("INTERNAL ERROR", f"INTERNAL ERROR: pytest exit status 3 ({tally})", "bad")
    lost = gpu_lost_verdict(run, tally)
    if lost is not None:
        return lost
    node_failed = [r for cid, r in run.cases.items() if is_node_case(cid) and r.state == FAILED]
    if conformance == 0 and node_failed:
        return Verdict("FAIL", f"FAIL: {node_failed[0].message} (no case ran)", "bad")
    if conformance == 0 and not meta.get("collected"):
        # nothing selected (the node's case, reported whatever the selection, aside); a run
        # that selected the node's case alone (pytest suites/test_node.py) is judged by it
        return Verdict("NO CASES RAN", "NO CASES RAN" + (f" ({tally})" if total else ""), "bad")
    if missing:
        return Verdict("INCOMPLETE", f"INCOMPLETE: {missing} collected case(s) never reported a "
                       f"result ({tally})", "bad")
    per_gpu = gpu_text(run)
    if bad:
        head = per_gpu or f"{c[FAILED]} failed, {c[NOBUILD]} could not build"
        tail = f", {c[HARNESS]} harness errors" if c[HARNESS] else ""
        return Verdict("FAIL", f"FAIL: {head}{tail} (of {total})", "bad")
    if c[HARNESS]:
        first = next(r for r in run.cases.values() if r.state == HARNESS)
        head = per_gpu or f"{c[HARNESS]} case(s) could not be judged"
        return Verdict("HARNESS ERROR", f"HARNESS ERROR: {head}: the harness itself failed, no "
                       f"documented rule was judged for them (first: {first.id}) (of {total})", "bad")
    extra = []
    if c[KNOWN]:
        extra.append(f"{c[KNOWN]} known issues")
    if c[SKIPPED]:
        extra.append(f"{c[SKIPPED]} skipped")
    no_gpu = [r for r in run.cases.values() if r.state == SKIPPED and r.skip_kind == "no-gpu"]
    gpu = meta.get("gpu") or {}
    if no_gpu or gpu.get("usable") == 0:
        why = gpu.get("reason") or (no_gpu[0].message if no_gpu else "")
        gpu_cases = sum(1 for r in no_gpu if not is_node_case(r.id))
        did = (f"{gpu_cases} GPU case(s) did not run" if gpu_cases
               else "the run selected no GPU case")      # the self-tests: host-side only
        return Verdict("NOT MEASURED", f"NOT MEASURED: no usable GPU ({why}): {did}; "
                       f"{c[PASSED]} host-side cases passed"
                       + (f" ({', '.join(extra)})" if extra else ""), "warn")
    if c[PASSED] == 0:
        return Verdict("NOTHING PASSED", "NOTHING PASSED: " + ", ".join(extra), "warn")
    ran = run_gpus(run)
    listed = ", ".join(str(g["ordinal"]) for g in ran)
    on = f" on each of {len(ran)} GPUs ({listed})" if len(ran) > 1 else ""
    once = sum(once_per_node(run).values())
    if once:        # the trap cases, dealt over the GPUs (fixtures/plugins/run_control/every_gpu.py)
        on = (f" on {len(ran)} GPUs ({listed}): each ran every case but the {once} trap case(s), "
              f"each run on one of them")
    apart = skipped_apart(run)
    if apart:
        on += "; " + "; ".join(f"GPU {k} skipped {n} case(s) another GPU ran" for k, n in sorted(apart.items()))
    return Verdict("PASS", f"PASS: {c[PASSED]} passed" + (f" ({', '.join(extra)})" if extra else "") + on,
                   "ok")


def once_per_node(run: "Run") -> dict[int, int]:
    """Per GPU of a run over several, the cases it ran alone (the trap cases, dealt over the
    node's GPUs: fixtures/plugins/run_control/every_gpu.py); {} for a run on one GPU."""
    out: dict[int, int] = {}
    if len(run_gpus(run)) > 1:
        for r in run.cases.values():
            g = [int(k) for k in (r.gpus or {}) if str(k).isdigit()]
            if len(g) == 1:
                out[g[0]] = out.get(g[0], 0) + 1
    return out


def skipped_apart(run: "Run") -> dict[int, int]:
    """Per GPU, the cases it skipped that another GPU of the run ran: the GPUs of a run share
    one compute capability, so such a skip says a GPU was checked less (its reason is the
    case's message)."""
    out: dict[int, int] = {}
    for r in run.cases.values():
        g = r.gpus or {}
        if SKIPPED in g.values() and any(s != SKIPPED for s in g.values()):
            for k, s in g.items():
                if s == SKIPPED and str(k).isdigit():
                    out[int(k)] = out.get(int(k), 0) + 1
    return out


def run_gpus(run: "Run") -> list[dict]:
    """The GPUs the run ran its cases on ({"ordinal", "name", "uuid", "pci_bus_id"}):
    results.json's ``gpu.run``, else the ordinals its cases name."""
    ran = ((run.meta or {}).get("gpu") or {}).get("run")
    if isinstance(ran, list) and all(isinstance(g, dict) and "ordinal" in g for g in ran):
        return ran
    seen = sorted({int(k) for r in run.cases.values() for k in (r.gpus or {}) if str(k).isdigit()})
    return [{"ordinal": k} for k in seen]


def gpu_counts(run: "Run") -> dict[int, dict[str, int]]:
    """Per GPU of the run (by ordinal): its cases' states there."""
    out: dict[int, dict[str, int]] = {int(g["ordinal"]): {s: 0 for s in STATES} for g in run_gpus(run)}
    for r in run.cases.values():
        for k, state in (r.gpus or {}).items():
            if state in STATES and str(k).isdigit():
                out.setdefault(int(k), {s: 0 for s in STATES})[state] += 1
    return out


def gpu_label(g: dict) -> str:
    """"GPU 2 (GPU-a90d..., 0000:9a:00.0)" from a ``run_gpus`` entry."""
    who = ", ".join(str(g[k]) for k in ("uuid", "pci_bus_id") if g.get(k))
    return f"GPU {g['ordinal']}" + (f" ({who})" if who else "")


def ordinals(ks) -> str:
    """"GPU 2" or "GPUs 0, 1, 3": how a message names a set of GPUs by ordinal."""
    ks = sorted(ks)
    return ("GPU " if len(ks) == 1 else "GPUs ") + ", ".join(map(str, ks))


def gpu_text(run: "Run") -> str | None:
    """Which of a run's several GPUs failed, and what: "GPU 2 (GPU-a90d..., ...) 3 failed;
    GPUs 0, 1, 3 passed" (with the failures on no GPU: host-side cases, a case's setup);
    None for a run on one GPU or none."""
    ran = run_gpus(run)
    if len(ran) < 2:
        return None
    counts = gpu_counts(run)
    parts, fine = [], []
    for g in ran:
        k = int(g["ordinal"])
        cnt = counts.get(k, {})
        bits = [f"{cnt[s]} {STATE_LABELS[s]}" for s in BAD if cnt.get(s)]
        if bits:
            parts.append(f"{gpu_label(g)} {', '.join(bits)}")
        else:
            fine.append(k)
    off = {s: sum(1 for r in run.cases.values() if r.state == s and not r.gpus) for s in BAD}
    if any(off.values()):
        parts.append(", ".join(f"{n} {STATE_LABELS[s]}" for s, n in off.items() if n) + " on no GPU "
                     "(host-side, or before the case reached its GPUs)")
    if fine:
        parts.append(f"{ordinals(fine)} passed")
    return "; ".join(parts)


def gpu_lost_verdict(run: "Run", tally: str) -> Verdict | None:
    """GPU LOST: a GPU that was usable stopped answering mid-run (a fresh process could not
    see it: ``results.json``'s ``gpu_lost``, written by fixtures.plugins.run_control.harness); the GPU
    cases after it were not run (skip kind ``gpu-lost``). From a JUnit file alone, the
    skip kind says it."""
    lost = (run.meta or {}).get("gpu_lost") or {}
    skipped = [r for r in run.cases.values() if r.state == SKIPPED and r.skip_kind == "gpu-lost"]
    if not lost and not skipped:
        return None
    during = [r.id for r in skipped if r.message.startswith("GPU lost during this case")]
    case = lost.get("case") or (during[0] if during else None)
    if case is None:
        m = re.search(r"GPU lost at \S+ during (\S+)", skipped[0].message)
        case = m.group(1) if m else "?"
    not_run = sum(1 for r in skipped if r.id != case)
    where = f"at {lost['at']} during {case}" if lost.get("at") else f"during {case}"
    why = f" ({lost['why']})" if lost.get("why") else ""
    who = lost.get("gpu") or "the GPU"
    return Verdict("GPU LOST", f"GPU LOST: {who} stopped answering {where}{why}; {not_run} GPU "
                   f"case(s) not run ({tally})", "bad")


def worse(a: CaseResult | None, b: CaseResult) -> CaseResult:
    if a is None or _SEVERITY[b.state] > _SEVERITY[a.state]:
        if a is not None:
            b.duration += a.duration
            b.gpus = b.gpus or a.gpus
        return b
    a.duration += b.duration
    a.gpus = a.gpus or b.gpus
    return a


@dataclass
class Run:
    source: str                                  # what was read
    cases: dict[str, CaseResult] = field(default_factory=dict)
    env: dict = field(default_factory=dict)      # fingerprint (environment.json) or {}
    env_props: dict = field(default_factory=dict)  # flat properties (JUnit or flattened fingerprint)
    map_layout: object = None
    meta: dict = field(default_factory=dict)     # run_id, exitstatus, known_issues, ...

    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATES}
        for r in self.cases.values():
            c[r.state] += 1
        return c

    def passed_by_basis(self) -> dict[str, int]:
        """The passed cases by where their expectation comes from: a document's sentence
        throughout, or (in part) a measurement on a GPU (CaseResult.measured)."""
        passed = [r for r in self.cases.values() if r.state == PASSED]
        m = sum(1 for r in passed if r.measured)
        return {"documented": len(passed) - m, "measured": m}

    @property
    def node(self) -> str:
        for key in ("host",):
            if isinstance(self.env.get(key), str):
                return self.env[key]
        return self.env_props.get("tmac.host") or self.meta.get("host") or Path(self.source).name


# ---------------------------------------------------------------- reading

def _read_json(path: Path) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportInputError(f"{path}: not readable as JSON ({e})") from None


def read_results_json(path: Path) -> Run:
    data = _read_json(path)
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("tmac-results/"):
        raise ReportInputError(f"{path}: not a results file (expected \"schema\": \"{RESULTS_SCHEMA}\")")
    if data["schema"] not in (RESULTS_SCHEMA, RESULTS_SCHEMA_1):
        raise ReportInputError(f"{path}: schema {data['schema']!r} is not supported (this tool reads "
                               f"{RESULTS_SCHEMA} and {RESULTS_SCHEMA_1})")
    run = Run(source=str(path))
    for r in cases_of(data, str(path)):
        if r.state not in STATES:
            raise ReportInputError(f"{path}: case {r.id!r} has unknown state {r.state!r}")
        run.cases[r.id] = r
    run.meta = {k: v for k, v in data.items() if k != "cases" and k not in CASE_TABLES}
    return run


def read_junit(path: Path) -> Run:
    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError) as e:
        raise ReportInputError(f"{path}: not readable as JUnit XML ({e})") from None
    root = tree.getroot()
    if root.tag == "testsuites":
        suites = root.findall("testsuite")
    elif root.tag == "testsuite":
        suites = [root]
    else:
        raise ReportInputError(f"{path}: not JUnit XML (root element <{root.tag}>, expected <testsuites> or <testsuite>)")
    run = Run(source=str(path), meta={"from_junit": True})
    for s in suites:
        reasons: dict[str, str] = {}           # tmac.reason.N: skip and xfail reasons, once
        for p in s.findall("properties/property"):
            name = p.get("name", "")
            if name.startswith(REASON_PROPERTY):
                reasons[name[len(REASON_PROPERTY):]] = p.get("value", "")
            else:
                run.env_props[name] = p.get("value", "")
        if s.get("hostname"):
            run.meta.setdefault("host", s.get("hostname"))
        for tc in s.iter("testcase"):
            r = _case_from_testcase(tc, reasons)
            run.cases[r.id] = worse(run.cases.get(r.id), r)
    if not run.cases and not suites:
        raise ReportInputError(f"{path}: JUnit XML without any <testsuite>")
    return run


_PHASE_WRAP = re.compile(r'failed on (setup|teardown) with "(.*)', re.S)


def _case_from_testcase(tc: ET.Element, reasons: dict[str, str] | None = None) -> CaseResult:
    nodeid = nodeid_from_junit(tc.get("classname", ""), tc.get("name", ""), tc.get("file"))
    dur = float(tc.get("time") or 0.0)
    gpus = parse_gpu_lines(tc.findtext("system-out"))
    fail = tc.find("failure")
    err = tc.find("error")
    skip = tc.find("skipped")
    if fail is not None or err is not None:
        el = fail if fail is not None else err
        msg = el.get("message") or ""
        wrapped = _PHASE_WRAP.match(msg)      # pytest's message of a setup or teardown error
        inner = wrapped.group(2) if wrapped else msg
        phase = "call"
        if err is not None:
            phase = wrapped.group(1) if wrapped else "collect" if msg == "collection failure" else (
                "call" if msg.startswith(HARNESS_PREFIX) else "setup")   # a call's harness error: <error>
        state = NOBUILD if NOBUILD_PREFIX.strip() in msg else HARNESS if inner.startswith(HARNESS_PREFIX) \
            else FAILED
        r = CaseResult(nodeid, state, msg, rule=rule_of_message(msg), duration=dur, phase=phase)
        r.gpus = gpus
        if XPASS_STRICT in msg:
            r.known_issue = parse_known(msg)
            r.rule = r.rule or "known-issue-no-longer-reproduces"
        return r
    if skip is not None:
        msg = full_reason(skip.get("message") or "", reasons or {})
        ki = parse_known(msg)
        if skip.get("type") == "pytest.xfail" or ki:
            if ki:
                ki["mode"] = "xfail" if skip.get("type") == "pytest.xfail" else "skip"
            return CaseResult(nodeid, KNOWN, msg, known_issue=ki, duration=dur, gpus=gpus)
        return CaseResult(nodeid, SKIPPED, msg, skip_kind=classify_skip(msg), duration=dur, gpus=gpus)
    return CaseResult(nodeid, PASSED, duration=dur, gpus=gpus)


# The GPUs of a JUnit <testcase>, in its <system-out> (fixtures/plugins/run_control/controller.py writes
# them): "GPU 0 (GPU-..., 0000:18:00.0): passed" for a run on one GPU; "GPUs 0, 1, 2, 3:
# passed" when the case had one state on all of the run's GPUs (their UUIDs and PCI bus ids
# are the testsuite's properties tmac.gpu.N.uuid, .pci_bus_id); else a line per GPU, each named in full.
_GPU_LINE = re.compile(r"^GPUs? ([\d, ]+?)(?: \([^)]*\))?: (\S+)$")


def gpu_lines(gpus: dict | None, ran: list[dict]) -> str:
    """The <system-out> text naming the GPUs a case ran on and its state on each."""
    if not gpus:
        return ""
    by = {str(g["ordinal"]): g for g in ran}
    states = set(gpus.values())
    if len(gpus) > 1 and len(states) == 1:
        return f"{ordinals(int(k) for k in gpus)}: {next(iter(states))}"
    return "\n".join(f"{gpu_label(by.get(str(k), {'ordinal': k}))}: {state}"
                     for k, state in sorted(gpus.items(), key=lambda kv: int(kv[0])))


def parse_gpu_lines(text: str | None) -> dict | None:
    """``gpu_lines`` read back: {"0": "passed", ...}, or None when the text names no GPU."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = _GPU_LINE.match(line.strip())
        if m and m.group(2) in STATES:
            for k in m.group(1).split(","):
                if k.strip().isdigit():
                    out[k.strip()] = m.group(2)
    return out or None


def load_run(path: str | os.PathLike) -> Run:
    """A run folder, a ``results.json`` or a JUnit XML file."""
    p = Path(path)
    if p.is_dir():
        res = p / "results.json"
        junits = sorted(p.glob("junit*.xml")) or sorted(p.glob("*.xml"))
        if res.is_file():
            run = read_results_json(res)
        elif junits:
            run = read_junit(junits[0])
        else:
            raise ReportInputError(f"{p}: no results.json and no JUnit XML in this folder")
        if junits and res.is_file():
            # The JUnit keeps the environment as suite properties too.
            try:
                run.env_props.update(read_junit(junits[0]).env_props)
            except ReportInputError:
                pass
        env = p / "environment.json"
        if env.is_file():
            data = _read_json(env)
            if isinstance(data, dict):
                run.env = data
        layout = p / "map_layout.json"
        if layout.is_file():
            run.map_layout = _read_json(layout)
        elif isinstance(run.env.get("map_layout"), dict):
            run.map_layout = run.env["map_layout"].get("data")
        return run
    if not p.exists():
        raise ReportInputError(f"{p}: no such file or folder")
    if p.suffix == ".json":
        return read_results_json(p)
    return read_junit(p)
