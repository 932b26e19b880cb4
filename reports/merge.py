"""``python -m reports merge RUN_DIR...``: the fleet view of many nodes' runs.

One row per node (its host name; ``host#run`` when a host appears twice): the
versions that matter (driver, GPU, NVRTC, CCCL) and, per suite, the counts
passed/failed/known issue/skipped/could not build, and its run verdict
(``model.run_verdict``). A node is flagged when its results differ from the
majority (per case: the state most nodes have) or a version differs from the
majority's; it fails when its verdict is not PASS (FAIL, NOT MEASURED,
INTERRUPTED, TIMED OUT, INCOMPLETE, ...). Output: Markdown, standalone HTML and
JSON (schema ``tmac-fleet/1``). Exit status: 1 when a node is flagged or fails,
0 otherwise (one node: 0 when it passes), 2 on unreadable input or output that
cannot be written. The ``--out`` folder and folders holding only a merge's output
are never read as runs (``run_inputs``).
"""
from __future__ import annotations

import json
from pathlib import Path
from collections import Counter, defaultdict

from .fingerprint import gpu_lines, props_of
from .model import FAILED, NOBUILD, STATES, Run, run_verdict
from .render import Cell, Document, Section, Table, to_html, to_markdown

SCHEMA = "tmac-fleet/1"
VERSION_KEYS = [
    ("driver", "tmac.driver.kernel_module_version"),
    ("CUDA driver", "tmac.driver.cuda_driver_version"),
    ("NVRTC", "tmac.nvrtc.version"),
    ("CCCL", "tmac.cccl.version"),
    ("runtime", "tmac.cuda_runtime.version"),
]
SHORT = {"passed": "P", "failed": "F", "known-issue": "K", "skipped": "S", "could-not-build": "B"}


def _short(v: str, n: int = 48) -> str:
    v = str(v)
    return v if len(v) <= n else v[: n - 1] + "…"


def _gpu_summary(props: dict) -> str:
    if props.get("tmac.gpu_count", "0") in ("0", "-"):
        return "none (" + _short(props.get("tmac.gpus", "-")) + ")"
    names = Counter(line.split(",")[0].split(": ", 1)[-1] for line in gpu_lines(props))
    return ", ".join(f"{n} x {k}" for k, n in names.items())


def run_inputs(paths: list[str], out: str | None) -> tuple[list[str], list[str]]:
    """(the paths to read as runs, one line per path left out): the ``--out`` folder and
    what lies in it (a glob such as ``DATE/*`` matches it on a second merge), and a
    folder that holds a merge's output (fleet.json) but no results.json or JUnit."""
    out_dir = Path(out).resolve() if out else None
    keep, notes = [], []
    for p in paths:
        rp = Path(p).resolve()
        if out_dir and (rp == out_dir or out_dir in rp.parents):
            notes.append(f"left out {p}: it is the --out folder" if rp == out_dir else
                         f"left out {p}: it lies in the --out folder {out}")
        elif rp.is_dir() and (rp / "fleet.json").is_file() and not (rp / "results.json").is_file() \
                and not any(rp.glob("*.xml")):
            notes.append(f"left out {p}: it holds a merge's output (fleet.json), not a run")
        else:
            keep.append(p)
    return keep, notes


def merge_runs(runs: list[Run]) -> dict:
    names: list[str] = []
    seen = Counter(r.node for r in runs)
    for r in runs:
        src = Path(r.source)
        folder = src.parent.name if src.suffix in (".json", ".xml") else src.name
        name = r.node if seen[r.node] == 1 else f"{r.node} ({folder or len(names) + 1})"
        if name in names:
            name = f"{name} #{len(names) + 1}"
        names.append(name)
    n_nodes = len(runs)
    # majority state per case (over the nodes that ran it)
    states: dict[str, Counter] = defaultdict(Counter)
    for r in runs:
        for cid, c in r.cases.items():
            states[cid][c.state] += 1
    for cnt in states.values():  # a node that did not run a case counts as "missing"
        if sum(cnt.values()) < n_nodes:
            cnt["missing"] += n_nodes - sum(cnt.values())
    majority = {cid: cnt.most_common(1)[0][0] for cid, cnt in states.items()
                if cnt.most_common(1)[0][1] * 2 > n_nodes}
    versions = {}
    for label, key in VERSION_KEYS + [("GPU", "gpu")]:
        vals = []
        for r in runs:
            p = props_of(r)
            vals.append(_gpu_summary(p) if key == "gpu" else p.get(key, "-"))
        versions[label] = vals
    version_majority = {}
    for label, vals in versions.items():
        v, n = Counter(vals).most_common(1)[0]
        version_majority[label] = v if n * 2 > len(vals) else None
    suites = sorted({c.suite for r in runs for c in r.cases.values()})
    nodes = []
    for i, r in enumerate(runs):
        per_suite: dict[str, Counter] = defaultdict(Counter)
        for c in r.cases.values():
            per_suite[c.suite][c.state] += 1
        differs = []
        for cid, maj in majority.items():
            own = r.cases.get(cid)
            own_state = own.state if own else "missing"
            if own_state != maj:
                differs.append({"id": cid, "node": own_state, "majority": maj})
        vdiff = {label: versions[label][i] for label in versions
                 if n_nodes > 1 and versions[label][i] != version_majority[label]}
        counts = r.counts()
        v = run_verdict(r)
        nodes.append({
            "node": names[i], "source": r.source, "run_id": r.meta.get("run_id"),
            "versions": {label: versions[label][i] for label in versions},
            "verdict": {"status": v.status, "text": v.text},
            "counts": counts,
            "suites": {s: dict(per_suite[s]) for s in suites},
            "differs_from_majority": differs,
            "versions_differ": vdiff,
            "flagged": bool(n_nodes > 1 and (differs or vdiff)),
            "failing": not v.passed,
        })
    return {"schema": SCHEMA, "nodes": nodes, "suites": suites, "version_majority": version_majority,
            "cases_with_majority": len(majority), "cases_total": len(states)}


def exit_status(m: dict) -> int:
    return 1 if any(n["flagged"] or n["failing"] for n in m["nodes"]) else 0


def _suite_cell(c: dict) -> Cell:
    text = " ".join(f"{c.get(s, 0)}{SHORT[s]}" for s in STATES if c.get(s, 0)) or "-"
    cls = "st-could-not-build" if c.get(NOBUILD) else "st-failed" if c.get(FAILED) else \
        "st-passed" if c.get("passed") else "st-skipped" if c else ""
    return Cell(text, cls)


def verdict(m: dict) -> tuple[str, str]:
    """The fleet's verdict line and its css class."""
    nodes = m["nodes"]
    failing = [n for n in nodes if n["failing"]]
    statuses = ", ".join(f"{k} {s}" for s, k in Counter(n["verdict"]["status"] for n in failing).items())
    if len(nodes) == 1:
        text = "1 node only: nothing to compare it with"
        return (f"{text}; it does not pass ({statuses})", "bad") if failing else (text, "warn")
    flagged = [n for n in nodes if n["flagged"]]
    if flagged or failing:
        return (f"{len(nodes)} nodes: {len(flagged)} differ from the majority, {len(failing)} do not pass"
                + (f" ({statuses})" if failing else ""), "bad")
    return f"{len(nodes)} nodes, all alike and passing", "ok"


def to_doc(m: dict) -> Document:
    flagged = [n for n in m["nodes"] if n["flagged"]]
    failing = [n for n in m["nodes"] if n["failing"]]
    doc = Document("TMA conformance: fleet view", f"{len(m['nodes'])} runs · {m['cases_total']} case ids · "
                   "cells: P passed, F failed, K known issue, S skipped, B could not build", verdict(m))
    vlabels = list(m["version_majority"])
    headers = ["node", "verdict"] + vlabels + m["suites"] + ["differs from majority"]
    rows = []
    for n in m["nodes"]:
        row = [Cell(n["node"], "mono"), Cell(n["verdict"]["status"], "flag" if n["failing"] else "st-passed")]
        for label in vlabels:
            v = str(n["versions"][label])
            row.append(Cell(_short(v), "flag" if label in n["versions_differ"] else ""))
        row += [_suite_cell(n["suites"][s]) for s in m["suites"]]
        parts = []
        if n["differs_from_majority"]:
            parts.append(f"{len(n['differs_from_majority'])} case(s)")
        if n["versions_differ"]:
            parts.append("versions: " + ", ".join(n["versions_differ"]))
        row.append(Cell("; ".join(parts) or "no", "flag" if parts else ""))
        rows.append(row)
    doc.sections.append(Section("Nodes x suites", tables=[Table(headers, rows)]))
    if failing:
        doc.sections.append(Section(f"Nodes that do not pass: {len(failing)}", level=3, tables=[
            Table(["node", "verdict"], [[Cell(n["node"], "mono"), n["verdict"]["text"]] for n in failing])]))
    for n in flagged:
        d = n["differs_from_majority"]
        if not d:
            continue
        sec = Section(f"{n['node']}: {len(d)} case(s) differ from the majority", level=3)
        sec.tables.append(Table(["case", "this node", "majority"],
                                [[Cell(x["id"], "mono"), Cell(x["node"], f"st-{x['node']}"),
                                  Cell(x["majority"], f"st-{x['majority']}")] for x in d[:50]],
                                f"… and {len(d) - 50} more (see the JSON)" if len(d) > 50 else ""))
        doc.sections.append(sec)
    return doc


def outputs(m: dict) -> dict[str, str]:
    doc = to_doc(m)
    return {"fleet.md": to_markdown(doc), "fleet.html": to_html(doc),
            "fleet.json": json.dumps(dict(m, verdict=verdict(m)[0], exit_status=exit_status(m)), indent=2) + "\n"}
