"""``python -m reports diff OLD NEW``: what changed between two runs.

OLD and NEW are run folders (``results.json``, else the JUnit in it, plus
``environment.json`` and ``map_layout.json`` when there) or JUnit XML files, or
``results.json`` files. Output: Markdown (a CI comment) and JSON (schema
``tmac-diff/1``). Exit status: 1 when there is a regression (a case that passed
and now fails or could not build), 0 otherwise (``--strict``: also 1 when
coverage was lost: passed -> skipped, or a case vanished), 2 on unreadable input.
"""
from __future__ import annotations

import json
import re
from collections import Counter

from .fingerprint import props_of
from .model import extract_rule, FAILED, KNOWN, NOBUILD, PASSED, SKIPPED, STATE_LABELS, STATES, Run
from .render import Cell, Document, Section, Table, to_markdown

SCHEMA = "tmac-diff/1"
MAX_LIST = 100
_IGNORED_ENV = {"tmac.run_id", "tmac.command"}
_ENV_GROUPS = [
    ("driver", re.compile(r"^tmac\.driver\.")),
    ("toolkit", re.compile(r"^tmac\.(cuda_runtime|nvrtc|cccl|nvcc|package)")),
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


def diff_runs(old: Run, new: Run) -> dict:
    both_nodeids = not old.meta.get("from_junit") and not new.meta.get("from_junit")
    key = (lambda i: i) if both_nodeids else junit_key
    o = {key(k): v for k, v in old.cases.items()}
    n = {key(k): v for k, v in new.cases.items()}
    out: dict = {"schema": SCHEMA,
                 "old": {"source": old.source, "node": old.node, "run_id": old.meta.get("run_id") or old.env_props.get("tmac.run_id"),
                         "counts": old.counts()},
                 "new": {"source": new.source, "node": new.node, "run_id": new.meta.get("run_id") or new.env_props.get("tmac.run_id"),
                         "counts": new.counts()},
                 "case_key": "nodeid" if both_nodeids else "junit classname.name"}
    buckets = {b: [] for b in ("regressions", "fixes", "coverage_lost", "coverage_gained",
                               "newly_known", "other_changes")}
    still = []
    for k in sorted(set(o) & set(n)):
        a, b = o[k], n[k]
        row = {"id": b.id, "old": a.state, "new": b.state}
        if b.state in (FAILED, NOBUILD):
            row.update(rule=b.rule or extract_rule(b.message), message=(b.message or "").strip().splitlines()[0][:500] if b.message else "")
        elif b.state in (SKIPPED, KNOWN):
            row.update(reason=(b.message or "").strip().splitlines()[0][:500] if b.message else "")
        if a.state == b.state:
            if b.state in (FAILED, NOBUILD):
                still.append(b.id)
            continue
        if a.state == PASSED and b.state in (FAILED, NOBUILD):
            buckets["regressions"].append(row)
        elif b.state == PASSED and a.state in (FAILED, NOBUILD, KNOWN):
            buckets["fixes"].append(row)
        elif a.state == PASSED and b.state == SKIPPED:
            buckets["coverage_lost"].append(row)
        elif a.state == SKIPPED and b.state == PASSED:
            buckets["coverage_gained"].append(row)
        elif b.state == KNOWN:
            buckets["newly_known"].append(row)
        else:
            buckets["other_changes"].append(row)
    out.update(buckets)
    out["still_failing"] = still
    out["new_cases"] = [{"id": n[k].id, "state": n[k].state} for k in sorted(set(n) - set(o))]
    out["vanished_cases"] = [{"id": o[k].id, "state": o[k].state} for k in sorted(set(o) - set(n))]

    po, pn = props_of(old), props_of(new)
    env = []
    if po and pn:
        for k in sorted(set(po) | set(pn)):
            if k in _IGNORED_ENV or k.startswith("tmac.map_layout"):
                continue
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


def exit_status(d: dict, strict: bool = False) -> int:
    if d["regressions"]:
        return 1
    if strict and (d["coverage_lost"] or d["vanished_cases"]):
        return 1
    return 0


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
            else:
                row.append(v)
        rows.append(row)
    note = f"… and {len(items) - limit} more (see the JSON)" if len(items) > limit else ""
    return rows, note


def to_doc(d: dict, strict: bool = False) -> Document:
    status = exit_status(d, strict)
    nreg = len(d["regressions"])
    verdict = (f"{nreg} regression{'s' if nreg != 1 else ''} (passed -> failed)", "bad") if nreg else \
        ("No regressions", "ok")
    doc = Document(f"Run diff: {d['old']['node']} -> {d['new']['node']}",
                   f"OLD {d['old']['source']} · NEW {d['new']['source']} · exit status {status}", verdict)
    counts = Table(["run"] + [STATE_LABELS[s] for s in STATES] + ["total"],
                   [["OLD"] + [d["old"]["counts"][s] for s in STATES] + [sum(d["old"]["counts"].values())],
                    ["NEW"] + [d["new"]["counts"][s] for s in STATES] + [sum(d["new"]["counts"].values())]])
    doc.sections.append(Section("Counts", tables=[counts]))
    specs = [
        ("regressions", "Regressions (passed -> failed / could not build)", ["id", "old", "new", "rule", "message"]),
        ("fixes", "Fixes (now passing)", ["id", "old", "new"]),
        ("coverage_lost", "Coverage lost (passed -> skipped)", ["id", "old", "new", "reason"]),
        ("newly_known", "Newly known issues", ["id", "old", "new", "reason"]),
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
    for key, title in (("new_cases", "New cases"), ("vanished_cases", "Vanished cases")):
        items = d[key]
        sec = Section(f"{title}: {len(items)}", level=3)
        if items:
            by = Counter(i["state"] for i in items)
            sec.paragraphs.append(", ".join(f"{n} {STATE_LABELS[s]}" for s, n in by.items()))
            rows, note = _rows(items, ["id", "state"], 30)
            sec.tables.append(Table(["id", "state"], rows, note))
        doc.sections.append(sec)
    if d["still_failing"]:
        doc.sections.append(Section(f"Still failing: {len(d['still_failing'])}", level=3))
    sec = Section(f"Environment changes: {len(d['environment'])}", level=3)
    if not d["environment_compared"]:
        sec.paragraphs.append("Not compared: one side has no environment (no environment.json, no JUnit properties).")
    elif d["environment"]:
        sec.tables.append(Table(["group", "key", "old", "new"],
                                [[e["group"], Cell(e["key"], "mono"), str(e["old"]), str(e["new"])]
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


def to_markdown_text(d: dict, strict: bool = False) -> str:
    return to_markdown(to_doc(d, strict))


def to_json_text(d: dict, strict: bool = False) -> str:
    return json.dumps(dict(d, exit_status=exit_status(d, strict)), indent=2) + "\n"
