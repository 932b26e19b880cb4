"""``python -m reports diff OLD NEW``: what changed between two runs.

OLD and NEW are run folders (``results.json``, else the JUnit in it, plus
``environment.json`` and ``map_layout.json`` when there) or JUnit XML files, or
``results.json`` files. Output: Markdown (a CI comment) and JSON (schema
``tmac-diff/2``).

A regression is any loss of verdict, in one of ``CLASSES``: ``failed`` (a case now
failed that was not, or a new failed case), ``could-not-build`` (likewise),
``harness-error`` (likewise), ``known-issue`` (passed -> known issue), ``skipped``
(passed or known issue -> skipped), ``vanished`` (in OLD, not in NEW),
``collection-error`` (a suite file that no longer collects), ``known-issue-moved`` (a
known issue in both, of another entry in NEW), ``known-issue-changed`` (a known-issue
entry of both runs whose pattern, mode, signature or conditions changed: it may absorb
other failures now), and, per GPU (runs whose cases name their GPUs: ``gpus``, compared
by ordinal), ``failed-on-gpu`` (a case now failed, could not build or met a harness
error on a GPU where it had not, and is no regression of another class) and
``gpu-missing`` (a GPU OLD ran its cases on that NEW did not run any on).
The harness each run ran with (environment.json's ``harness``: package versions,
the digest of the harness's sources, the constraints file) is compared too
(``harness_drift``); ``--strict`` makes a different or unknown harness exit 1.
The driver (``driver_change``: environment.json's ``driver``, or JUnit's
``tmac.driver.*``) comes first, in the Markdown and in the JSON (after ``schema``); the
rest of the environment (``environment``: the flat properties of
``reports.fingerprint.flatten``, the user's environment variables ``tmac.env.NAME`` among
them) is listed, grouped, near the end. Neither is a regression: a changed driver or
variable sets no exit status of its own.
Exit status: 1 when there is a regression in a class not accepted (``--accept
CLASS``) or, with ``--strict``, the harnesses differ or are unknown, 0 when nothing
got worse, 2 on unreadable input or output that cannot be written.
"""
from __future__ import annotations

import json
import re
from collections import Counter

from . import axes
from .fingerprint import (cuda_version, ENV_VAR, ENV_VARS, is_unavailable, props_of, unavailable,
                          variables_recorded)
from .model import (rule_of_message, BAD, CaseResult, FAILED, HARNESS, KNOWN, NOBUILD, PASSED, SKIPPED,
                    STATE_LABELS, STATES, Run, gpu_label, run_gpus)
from .render import Cell, Document, Section, Table, to_markdown

SCHEMA = "tmac-diff/2"
COLLECT = "collect"         # CaseResult.phase of a collection error (id: the file's node id)
CLASSES = ("failed", "could-not-build", "harness-error", "known-issue", "skipped", "vanished",
           "collection-error", "known-issue-moved", "known-issue-changed", "failed-on-gpu", "gpu-missing")
CLASS_WHAT = {
    "failed": "now failed and was not (passed, skipped, known issue, could not build), or a new failed case",
    "could-not-build": "now could not build and was not, or a new case that could not build",
    "harness-error": "now met a harness error and did not (the harness failed: no rule was judged), "
                     "or a new case that did",
    "known-issue": "passed -> known issue",
    "skipped": "passed or known issue -> skipped: coverage lost",
    "vanished": "in OLD, not in NEW",
    "collection-error": "a suite file no longer collects (its cases are listed as vanished)",
    "known-issue-moved": "a known issue in OLD and NEW, of another known-issue entry in NEW",
    "known-issue-changed": "a known-issue entry of OLD and NEW whose pattern, mode, signature (rule, match) "
                           "or conditions changed: it may absorb other failures now",
    "failed-on-gpu": "now failed, could not build or met a harness error on a GPU where it had not "
                     "(compared by ordinal), and no regression of another class",
    "gpu-missing": "a GPU OLD ran its cases on that NEW ran none on: its coverage lost",
}
ENTRY_CLASSES = ("known-issue-changed", "gpu-missing")   # their rows are not cases
# The fields of a known-issue entry (results.json meta known_issues.entries, the file's
# fields) that decide which cases and failures it absorbs; reason and evidence do not.
KI_FIELDS = ("pattern", "mode", "rule", "facts", "match", "driver_min", "driver_max", "compute_capability", "arch",
             "sweeps", "packages")
SUITE_XFAIL = "(xfail in the suite)"
MAX_LIST = 100
# by_axis: the changed cases counted per parameter axis (reports.axes) and value.
AXIS_COUNTS = ("regressions", "fixes", "new", "removed")
AXIS_COUNT_WHAT = {
    "regressions": "losses of verdict of cases in NEW (every regression class but vanished)",
    "fixes": "now passing (the fixes list)",
    "new": "cases only in NEW (the new_cases list, whatever their state)",
    "removed": "cases only in OLD (regressions.vanished)",
}
DRIVER_FIELDS = ("kernel_module_version", "cuda_driver_version")   # environment.json's driver
_IGNORED_ENV = {"tmac.run_id", "tmac.command",
                f"{ENV_VAR}CUDA_VISIBLE_DEVICES"}   # shown as tmac.cuda_visible_devices (GPU)
_ENV_GROUPS = [
    ("environment variables", re.compile(r"^tmac\.env(\.|$)")),
    ("driver", re.compile(r"^tmac\.driver\.")),
    ("toolkit", re.compile(r"^tmac\.(cuda_runtime|nvrtc|cccl|cuda_headers|nvcc|package)")),
    ("GPU", re.compile(r"^tmac\.(gpu|gpus|gpu_count|peer_access|cuda_visible_devices)")),
    ("map layout", re.compile(r"^tmac\.map_layout")),
    ("system", re.compile(r"^tmac\.(os|python|host)")),
    ("run settings", re.compile(r"^tmac\.(sweep|arch_option|known_issues|environment_schema)")),
]


def junit_key(case_id: str) -> str:
    """The id as JUnit spells it (classname.name): comparable across both sources."""
    path, bracket, params = case_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names)


def _env_group(key: str) -> str:
    for name, rx in _ENV_GROUPS:
        if rx.match(key):
            return name
    return "other"


def _flatten_json(v, prefix="") -> dict[str, object]:
    out: dict[str, object] = {}
    if isinstance(v, dict):
        for k, x in v.items():
            out.update(_flatten_json(x, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out.update(_flatten_json(x, f"{prefix}[{i}]"))
    else:
        out[prefix] = v
    return out


def _first_line(message: str | None) -> str:
    lines = (message or "").strip().splitlines()
    return lines[0][:500] if lines else ""


def loss_class(a: CaseResult | None, b: CaseResult) -> str | None:
    """The regression class (one of ``CLASSES``) of a case that was ``a`` in OLD (None:
    a new case) and is ``b`` in NEW, or None when its verdict was not lost."""
    old = a.state if a else None
    if a is None and b.state == FAILED and b.phase == COLLECT:
        return "collection-error"
    if b.state in BAD and old != b.state:
        return {FAILED: "failed", NOBUILD: "could-not-build", HARNESS: "harness-error"}[b.state]
    if old == PASSED and b.state == KNOWN:
        return "known-issue"
    if old in (PASSED, KNOWN) and b.state == SKIPPED:
        return "skipped"
    return None


def diff_runs(old: Run, new: Run) -> dict:
    both_nodeids = not old.meta.get("from_junit") and not new.meta.get("from_junit")
    key = (lambda i: i) if both_nodeids else junit_key
    o = {key(k): v for k, v in old.cases.items()}
    n = {key(k): v for k, v in new.cases.items()}
    po, pn = props_of(old), props_of(new)
    out: dict = {"schema": SCHEMA,
                 "driver": driver_change(po, pn),
                 "old": {"source": old.source, "node": old.node, "run_id": old.meta.get("run_id") or old.env_props.get("tmac.run_id"),
                         "counts": old.counts()},
                 "new": {"source": new.source, "node": new.node, "run_id": new.meta.get("run_id") or new.env_props.get("tmac.run_id"),
                         "counts": new.counts()},
                 "case_key": "nodeid" if both_nodeids else "junit classname.name"}
    regressions = {c: [] for c in CLASSES}
    buckets = {b: [] for b in ("fixes", "coverage_gained", "newly_known", "other_changes")}
    still, gone = [], []
    for k in sorted(set(o) | set(n)):
        a, b = o.get(k), n.get(k)
        if b is None:
            if a.state == FAILED and a.phase == COLLECT:
                gone.append(a.id)               # the file collects again
            else:
                regressions["vanished"].append({"id": a.id, "old": a.state})
            continue
        row = {"id": b.id, "old": a.state if a else None, "new": b.state}
        if b.state in BAD:
            row.update(rule=b.rule or rule_of_message(b.message), message=_first_line(b.message))
        elif b.state in (SKIPPED, KNOWN):
            row.update(reason=_first_line(b.message))
        loss = None if a is not None and a.state == b.state else loss_class(a, b)
        if a is not None and not loss and (a.state != KNOWN or b.state != KNOWN or _ki_id(a) == _ki_id(b)):
            for g in worse_on_gpus(a, b):
                regressions["failed-on-gpu"].append(dict(row, gpu=g["gpu"], old=g["old"], new=g["new"]))
        if a is not None and a.state == b.state:
            if b.state in BAD:
                still.append(b.id)
            elif b.state == KNOWN and _ki_id(a) != _ki_id(b):
                regressions["known-issue-moved"].append(dict(row, old_known=_ki_id(a), new_known=_ki_id(b)))
            continue
        if loss:
            regressions[loss].append(row)
        elif a is None:
            continue                            # a new case, listed in new_cases
        elif b.state == PASSED and a.state in BAD + (KNOWN,):
            buckets["fixes"].append(row)
        elif a.state == SKIPPED and b.state == PASSED:
            buckets["coverage_gained"].append(row)
        elif b.state == KNOWN:
            buckets["newly_known"].append(row)
        else:
            buckets["other_changes"].append(row)
    out["regressions"] = regressions
    out.update(buckets)
    out["still_failing"] = still
    out["collection_errors_gone"] = gone
    out["new_cases"] = [{"id": n[k].id, "state": n[k].state} for k in sorted(set(n) - set(o))]
    out["known_issues"] = known_issue_changes(old, new)
    regressions["known-issue-changed"] = out["known_issues"].pop("changed", [])
    out["gpus"] = gpus_compared(old, new)
    regressions["gpu-missing"] = out["gpus"].pop("missing", [])
    out["by_axis"] = by_axis(out)
    out["harness"] = harness_drift(old, new)

    env = []
    if po and pn:
        rec_o, rec_n = variables_recorded(po), variables_recorded(pn)
        for k in sorted(set(po) | set(pn)):
            if k in _IGNORED_ENV or k.startswith("tmac.map_layout"):
                continue
            if k.startswith(ENV_VAR) and not (rec_o and rec_n):
                continue        # a variable: compared where both runs recorded the user's variables
            if k == ENV_VARS and rec_o == rec_n:
                continue        # their count; shown where one run recorded them and the other did not
            if po.get(k) != pn.get(k):
                env.append({"key": k, "group": _env_group(k), "old": po.get(k), "new": pn.get(k)})
    out["environment"] = env
    out["environment_compared"] = bool(po and pn)

    lo, ln = old.map_layout, new.map_layout
    if lo is None or ln is None:
        out["map_layout"] = {"compared": False,
                             "why": "no map layout in " + " and ".join(
                                 s for s, v in (("OLD", lo), ("NEW", ln)) if v is None)}
    else:
        fo, fn = _flatten_json(lo), _flatten_json(ln)
        changed = [{"field": k, "old": fo.get(k), "new": fn.get(k)}
                   for k in sorted(set(fo) | set(fn)) if fo.get(k) != fn.get(k)]
        out["map_layout"] = {"compared": True, "changed": changed}
    return out


def driver_of(props: dict[str, str]) -> dict:
    """``DRIVER_FIELDS`` of a run's flat properties: cuda_driver_version an int
    (cuDriverGetVersion) where it is one, each "unavailable: ..." where not recorded."""
    out = {}
    for f in DRIVER_FIELDS:
        v = props.get(f"tmac.driver.{f}")
        if v is None or v == "None":
            v = unavailable(f"not recorded (no tmac.driver.{f})" if props else
                            "not recorded (no environment.json, no JUnit properties)")
        elif f == "cuda_driver_version" and v.isdigit():
            v = int(v)
        out[f] = v
    return out


def driver_change(po: dict[str, str], pn: dict[str, str]) -> dict:
    """The driver of OLD and NEW (``driver_of`` their flat properties): ``old``, ``new``,
    ``changed`` (True: a field known in both differs; False: every field known and alike;
    None: not known, a field is "unavailable: ..." in a side), ``line`` (``Driver:
    580.95.05 -> 580.159.04 (CUDA 13.0 -> 13.0)``, ``Driver: unchanged, 580.95.05 (CUDA
    13.0)``, "unavailable" for a field not known) and ``unavailable`` (``NEW
    kernel_module_version: unavailable: ...``, each field not known)."""
    o, n = driver_of(po), driver_of(pn)
    missing = [f"{side} {f}: {d[f]}" for side, d in (("OLD", o), ("NEW", n)) for f in DRIVER_FIELDS
               if is_unavailable(d[f])]
    differs = any(o[f] != n[f] for f in DRIVER_FIELDS if not (is_unavailable(o[f]) or is_unavailable(n[f])))
    changed = True if differs else (None if missing else False)

    def show(d, f):
        v = d[f]
        if is_unavailable(v):
            return "unavailable"
        return cuda_version(v) if f == "cuda_driver_version" else str(v)
    kmv, cdv = DRIVER_FIELDS
    if changed is False:
        line = f"Driver: unchanged, {show(n, kmv)} (CUDA {show(n, cdv)})"
    elif len(missing) == 2 * len(DRIVER_FIELDS):
        line = "Driver: unavailable in OLD and NEW"
    else:
        line = f"Driver: {show(o, kmv)} -> {show(n, kmv)} (CUDA {show(o, cdv)} -> {show(n, cdv)})"
    return {"old": o, "new": n, "changed": changed, "line": line, "unavailable": missing}


def worse_on_gpus(a: CaseResult, b: CaseResult) -> list[dict]:
    """The GPUs (by ordinal) on which a case of both runs now failed, could not build or
    met a harness error, where it had not: [{"gpu", "old", "new"}]. Only GPUs both runs
    name for the case."""
    out = []
    ga, gb = a.gpus or {}, b.gpus or {}
    for k in sorted(set(ga) & set(gb), key=lambda k: int(k) if str(k).isdigit() else 0):
        if gb[k] in BAD and gb[k] != ga[k] and not (ga[k] in BAD and gb[k] == HARNESS):
            out.append({"gpu": str(k), "old": ga[k], "new": gb[k]})
    return out


def gpus_compared(old: Run, new: Run) -> dict:
    """The GPUs of each run (results.json's ``gpu.run``): ``old`` and ``new`` (labels), the
    ``missing`` ones (a GPU of OLD, by ordinal, that NEW ran no case on: the class
    gpu-missing, one row each) and ``replaced`` (an ordinal whose UUID changed)."""
    go, gn = run_gpus(old), run_gpus(new)
    bo = {str(g["ordinal"]): g for g in go}
    bn = {str(g["ordinal"]): g for g in gn}
    missing = [{"id": gpu_label(bo[k]), "gpu": k} for k in sorted(set(bo) - set(bn), key=int)]
    replaced = [{"gpu": k, "old": bo[k].get("uuid"), "new": bn[k].get("uuid")}
                for k in sorted(set(bo) & set(bn), key=int)
                if bo[k].get("uuid") and bn[k].get("uuid") and bo[k]["uuid"] != bn[k]["uuid"]]
    return {"old": [gpu_label(g) for g in go], "new": [gpu_label(g) for g in gn], "missing": missing,
            "replaced": replaced}


def _ki_id(c: CaseResult) -> str:
    return (c.known_issue or {}).get("id") or SUITE_XFAIL


def _entries(run: Run) -> list | None:
    ki = run.meta.get("known_issues")
    entries = ki.get("entries") if isinstance(ki, dict) else None
    return entries if isinstance(entries, list) else None


def known_issue_changes(old: Run, new: Run) -> dict:
    """The known-issue entries of OLD and NEW (results.json's ``known_issues.entries``):
    ``changed`` (an entry of both whose ``KI_FIELDS`` differ: the class known-issue-changed),
    ``added``, ``removed`` (ids), or ``compared`` False with ``why`` (a JUnit input keeps
    no entries)."""
    eo, en = _entries(old), _entries(new)
    if eo is None or en is None:
        return {"compared": False, "why": "no known-issue entries recorded in " + " and ".join(
            s for s, v in (("OLD", eo), ("NEW", en)) if v is None) + " (a JUnit file keeps none)",
            "changed": [], "added": [], "removed": []}
    o = {e.get("id"): e for e in eo if isinstance(e, dict)}
    n = {e.get("id"): e for e in en if isinstance(e, dict)}
    changed = []
    for i in sorted(set(o) & set(n), key=str):
        fields = [f for f in KI_FIELDS if o[i].get(f) != n[i].get(f)]
        if fields:
            changed.append({"id": i, "fields": fields,
                            "old": {f: o[i].get(f) for f in fields}, "new": {f: n[i].get(f) for f in fields},
                            "change": "; ".join(f"{f}: {o[i].get(f)!r} -> {n[i].get(f)!r}" for f in fields)})
    return {"compared": True, "changed": changed, "added": sorted(set(n) - set(o), key=str),
            "removed": sorted(set(o) - set(n), key=str)}


def _harness(run: Run) -> dict | None:
    h = run.env.get("harness") if isinstance(run.env, dict) else None
    return h if isinstance(h, dict) else None


def harness_drift(old: Run, new: Run) -> dict:
    """Did OLD and NEW run the same harness (environment.json's ``harness``: ``packages``
    {dist: version}, ``sources_sha256``, ``constraints``)? ``known`` False when a side has
    no such section (an older harness, a JUnit file); else ``packages`` (the dists whose
    version changed, came or went), ``sources`` and ``constraints`` ({"old", "new"} when
    they differ, else None) and ``differs``."""
    ho, hn = _harness(old), _harness(new)
    if ho is None or hn is None:
        return {"known": False, "differs": None, "packages": [], "sources": None, "constraints": None,
                "why": "no harness section in the environment of " + " and ".join(
                    s for s, v in (("OLD", ho), ("NEW", hn)) if v is None)}
    po = ho.get("packages") if isinstance(ho.get("packages"), dict) else {}
    pn = hn.get("packages") if isinstance(hn.get("packages"), dict) else {}
    packages = [{"name": k, "old": po.get(k), "new": pn.get(k)}
                for k in sorted(set(po) | set(pn)) if po.get(k) != pn.get(k)]
    sources = None if ho.get("sources_sha256") == hn.get("sources_sha256") else \
        {"old": ho.get("sources_sha256"), "new": hn.get("sources_sha256")}
    constraints = None if ho.get("constraints") == hn.get("constraints") else \
        {"old": ho.get("constraints"), "new": hn.get("constraints")}
    return {"known": True, "differs": bool(packages or sources or constraints), "packages": packages,
            "sources": sources, "constraints": constraints}


def harness_line(h: dict) -> str | None:
    """One line when the harnesses differ or are unknown, else None."""
    if not h["known"]:
        return f"harness unknown: {h['why']}"
    if not h["differs"]:
        return None
    parts = []
    if h["packages"]:
        parts.append("packages " + ", ".join(f"{p['name']} {p['old'] or '-'} -> {p['new'] or '-'}"
                                              for p in h["packages"]))
    if h["sources"]:
        parts.append("sources differ (sha256 {} -> {})".format(str(h["sources"]["old"])[:12],
                                                             str(h["sources"]["new"])[:12]))
    if h["constraints"]:
        parts.append(f"constraints {h['constraints']['old']!r} -> {h['constraints']['new']!r}")
    return "different harnesses: " + "; ".join(parts)


def by_axis(d: dict) -> dict[str, dict[str, dict[str, int]]]:
    """The changed cases of a diff per parameter axis and value: ``{axis: {value: {"regressions",
    "fixes", "new", "removed"}}}``, values in the matrix's order, "-" for the changed cases whose
    id names no value.  Only the axes that some changed case names."""
    groups = {"regressions": [r["id"] for c in CLASSES if c != "vanished" and c not in ENTRY_CLASSES
                              for r in d["regressions"][c]],
              "fixes": [r["id"] for r in d["fixes"]],
              "new": [r["id"] for r in d["new_cases"]],
              "removed": [r["id"] for r in d["regressions"]["vanished"]]}
    counts: dict[str, dict[str, Counter]] = {a: {} for a in axes.AXES}
    for what, ids in groups.items():
        for cid in ids:
            parsed = axes.parse(cid)
            for a in axes.AXES:
                counts[a].setdefault(parsed.get(a, "-"), Counter())[what] += 1
    out = {}
    for a in axes.AXES:
        if set(counts[a]) <= {"-"}:
            continue
        out[a] = {v: {w: counts[a][v][w] for w in AXIS_COUNTS}
                  for v in sorted(counts[a], key=lambda v: axes.sort_key(a, v))}
    return out


def exit_status(d: dict, accept=(), strict: bool = False) -> int:
    """1 when a class not in ``accept`` has a regression, or (``strict``) the harnesses
    differ or are unknown; else 0."""
    if any(d["regressions"][c] for c in CLASSES if c not in accept):
        return 1
    return 1 if strict and harness_line(d["harness"]) else 0


def verdict(d: dict, accept=(), strict: bool = False) -> tuple[str, str]:
    """("3 regressions: 1 failed, 2 vanished (accepted)", css) or ("No regressions", "ok");
    with ``strict``, "; different harnesses: ..." or "; harness unknown: ..." after it."""
    found = [(c, len(d["regressions"][c])) for c in CLASSES if d["regressions"][c]]
    harness = harness_line(d["harness"]) if strict else None
    tail = f"; {harness} (--strict)" if harness else ""
    if not found:
        return "No regressions" + tail, "bad" if harness else "ok"
    total = sum(k for _, k in found)
    parts = ", ".join(f"{k} {c}" + (" (accepted)" if c in accept else "") for c, k in found)
    return (f"{total} regression{'s' if total != 1 else ''}: {parts}{tail}",
            "bad" if exit_status(d, accept, strict) else "warn")


def _rows(items, cols, limit=MAX_LIST):
    rows = []
    for it in items[:limit]:
        row = []
        for c in cols:
            v = it.get(c)
            v = "-" if v in (None, "") else str(v)
            if c == "id":
                row.append(Cell(v, "mono"))
            elif c in ("old", "new", "state") and v in STATES:
                row.append(Cell(STATE_LABELS[v], f"st-{v}"))
            elif c == "old" and v == "-":
                row.append("(new case)")
            else:
                row.append(v)
        rows.append(row)
    note = f"… and {len(items) - limit} more (see the JSON)" if len(items) > limit else ""
    return rows, note


def to_doc(d: dict, accept=(), strict: bool = False) -> Document:
    status = exit_status(d, accept, strict)
    accepted = [c for c in CLASSES if c in accept]
    doc = Document(f"Run diff: {d['old']['node']} -> {d['new']['node']}",
                   f"OLD {d['old']['source']} · NEW {d['new']['source']} · exit status {status}"
                   + (f" · accepted: {', '.join(accepted)}" if accepted else "")
                   + (" · --strict" if strict else ""), verdict(d, accept, strict))
    doc.sections.append(_driver_section(d))      # first: a driver change explains what follows
    counts = Table(["run"] + [STATE_LABELS[s] for s in STATES] + ["total"],
                   [["OLD"] + [d["old"]["counts"][s] for s in STATES] + [sum(d["old"]["counts"].values())],
                    ["NEW"] + [d["new"]["counts"][s] for s in STATES] + [sum(d["new"]["counts"].values())]])
    doc.sections.append(Section("Counts", tables=[counts]))
    regs = d["regressions"]
    summary = [[Cell(c, "mono"), CLASS_WHAT[c],
                Cell(str(len(regs[c])), "flag" if regs[c] and c not in accept else ""),
                f"yes (--accept {c})" if c in accept else "no"] for c in CLASSES]
    doc.sections.append(Section("Regressions by class", tables=[
        Table(["class", "what", "cases", "accepted"], summary)]))
    doc.sections.append(_axis_section(d))
    for c in CLASSES:
        if not regs[c]:
            continue
        cols = {"vanished": ["id", "old"], "collection-error": ["id", "message"],
                "known-issue": ["id", "old", "new", "reason"],
                "skipped": ["id", "old", "new", "reason"],
                "known-issue-moved": ["id", "old_known", "new_known", "reason"],
                "known-issue-changed": ["id", "change"],
                "failed-on-gpu": ["id", "gpu", "old", "new", "rule", "message"],
                "gpu-missing": ["id"]}.get(c, ["id", "old", "new", "rule", "message"])
        sec = Section(f"Regressions, {c}: {len(regs[c])}", level=3)
        sec.paragraphs.append(CLASS_WHAT[c][:1].upper() + CLASS_WHAT[c][1:] + "."
                              + (f" Accepted (--accept {c}): listed, but does not set exit status 1."
                                 if c in accept else ""))
        rows, note = _rows(regs[c], cols)
        sec.tables.append(Table(cols, rows, note))
        doc.sections.append(sec)
    specs = [
        ("fixes", "Fixes (now passing)", ["id", "old", "new"]),
        ("newly_known", "Newly known issues (not from passed)", ["id", "old", "new", "reason"]),
        ("other_changes", "Other state changes", ["id", "old", "new", "rule", "message"]),
        ("coverage_gained", "Coverage gained (skipped -> passed)", ["id", "old", "new"]),
    ]
    for key, title, cols in specs:
        items = d[key]
        sec = Section(f"{title}: {len(items)}", level=3)
        if items:
            rows, note = _rows(items, cols)
            sec.tables.append(Table(cols, rows, note))
        doc.sections.append(sec)
    if d["collection_errors_gone"]:
        sec = Section(f"Collection errors gone (the file collects again): {len(d['collection_errors_gone'])}",
                      level=3)
        sec.paragraphs.append(", ".join(d["collection_errors_gone"]))
        doc.sections.append(sec)
    items = d["new_cases"]
    sec = Section(f"New cases: {len(items)}", level=3)
    if items:
        by = Counter(i["state"] for i in items)
        sec.paragraphs.append(", ".join(f"{n} {STATE_LABELS[s]}" for s, n in by.items()))
        rows, note = _rows(items, ["id", "state"], 30)
        sec.tables.append(Table(["id", "state"], rows, note))
    doc.sections.append(sec)
    if d["still_failing"]:
        doc.sections.append(Section(f"Still failing: {len(d['still_failing'])}", level=3))
    doc.sections.append(_known_entries_section(d))
    doc.sections.append(_gpus_section(d))
    doc.sections.append(_harness_section(d, strict))
    sec = Section(f"Environment changes: {len(d['environment'])}", level=3)
    if not d["environment_compared"]:
        sec.paragraphs.append("Not compared: one side has no environment (no environment.json, no JUnit properties).")
    elif d["environment"]:
        def value(e, v):
            if e["key"].startswith(ENV_VAR):    # "<set>" (a secret's) is no HTML tag to a Markdown viewer
                return "(not set)" if v is None else str(v).replace("<", "\\<")
            return "(not recorded)" if v is None and e["key"] == ENV_VARS else str(v)
        sec.tables.append(Table(["group", "key", "old", "new"],
                                [[e["group"], Cell(e["key"], "mono"), value(e, e["old"]), value(e, e["new"])]
                                 for e in d["environment"]]))
    doc.sections.append(sec)
    ml = d["map_layout"]
    sec = Section("Map layout", level=3)
    if not ml["compared"]:
        sec.paragraphs.append(f"Not compared: {ml['why']}.")
    elif not ml["changed"]:
        sec.paragraphs.append("Unchanged.")
    else:
        rows, note = _rows(ml["changed"], ["field", "old", "new"])
        sec.paragraphs.append(f"{len(ml['changed'])} field(s) changed.")
        sec.tables.append(Table(["field", "old", "new"], rows, note))
    doc.sections.append(sec)
    return doc


def _driver_section(d: dict) -> Section:
    """The driver line as a heading; each field not known under it."""
    drv = d["driver"]
    sec = Section(drv["line"])
    if drv["unavailable"]:
        sec.paragraphs.append("Not known: " + "; ".join(drv["unavailable"]) + ".")
    if drv["changed"]:
        sec.paragraphs.append("Listed only: another driver is no regression by itself (no exit status).")
    return sec


def _known_entries_section(d: dict) -> Section:
    ki = d["known_issues"]
    sec = Section("Known-issue entries", level=3)
    if not ki["compared"]:
        sec.paragraphs.append(f"Not compared: {ki['why']}.")
        return sec
    n = len(d["regressions"]["known-issue-changed"])
    sec.paragraphs.append(f"{n} changed (the class known-issue-changed), {len(ki['added'])} added"
                          + (f" ({', '.join(map(str, ki['added']))})" if ki["added"] else "")
                          + f", {len(ki['removed'])} removed"
                          + (f" ({', '.join(map(str, ki['removed']))})" if ki["removed"] else "") + ".")
    return sec


def _gpus_section(d: dict) -> Section:
    g = d.get("gpus") or {}
    sec = Section("GPUs", level=3)
    old, new = g.get("old") or [], g.get("new") or []
    if old == new:
        sec.paragraphs.append("The same GPUs: " + (", ".join(new) or "none named") + ".")
    else:
        sec.paragraphs.append("OLD ran its cases on " + (", ".join(old) or "none named") + "; NEW on "
                              + (", ".join(new) or "none named") + ".")
    for r in g.get("replaced") or []:
        sec.paragraphs.append(f"GPU {r['gpu']} is another GPU in NEW: {r['old']} -> {r['new']}.")
    return sec


def _harness_section(d: dict, strict: bool) -> Section:
    h = d["harness"]
    line = harness_line(h)
    sec = Section("Harness", level=3)
    if line is None:
        sec.paragraphs.append("The same harness: package versions, sources (sha256) and constraints alike.")
        return sec
    sec.paragraphs.append(line[:1].upper() + line[1:] + "."
                          + (" With --strict this sets exit status 1." if strict else
                             " Listed only; --strict makes it exit status 1."))
    if h["packages"]:
        sec.tables.append(Table(["package", "old", "new"],
                                [[Cell(x["name"], "mono"), str(x["old"] or "-"), str(x["new"] or "-")]
                                 for x in h["packages"]]))
    return sec


def _axis_section(d: dict) -> Section:
    ba = d["by_axis"]
    sec = Section("Changes by parameter axis", level=3)
    if not ba:
        sec.paragraphs.append("No changed case names a parameter axis." if any(
            d["regressions"][c] for c in CLASSES) or d["fixes"] or d["new_cases"] else "No changed cases.")
        return sec
    sec.paragraphs.append("The regressions, fixes, new and removed cases per value of each axis that a "
                          "changed case names (values parsed from the case ids as in the matrix; \"-\": "
                          "the id names none). " + "; ".join(f"{w}: {t}" for w, t in AXIS_COUNT_WHAT.items())
                          + ".")
    rows = [[a if i == 0 else "", Cell(v, "mono")]
            + [Cell(str(c[w]), "flag" if w in ("regressions", "removed") and c[w] else "") for w in AXIS_COUNTS]
            for a, values in ba.items() for i, (v, c) in enumerate(values.items())]
    sec.tables.append(Table(["axis", "value"] + list(AXIS_COUNTS), rows))
    return sec


def to_markdown_text(d: dict, accept=(), strict: bool = False) -> str:
    return to_markdown(to_doc(d, accept, strict))


def to_json_text(d: dict, accept=(), strict: bool = False) -> str:
    return json.dumps(dict(d, accepted=[c for c in CLASSES if c in accept], strict=strict,
                           verdict=verdict(d, accept, strict)[0],
                           exit_status=exit_status(d, accept, strict)), indent=2) + "\n"
