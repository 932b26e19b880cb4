"""``python -m reports merge RUN_DIR...``: the fleet view of many nodes' runs.

One row per node (its host name; ``host (folder)`` when a host appears twice): its
verdict, counts, duration, the versions that matter (driver, GPU, NVRTC, CCCL) and,
per suite, the counts passed/failed/known issue/skipped/could not build.

A node is **flagged** (it differs from the fleet) when

- its case ids differ from the reference set (``coverage``): the set of case ids that
  more than half of the nodes ran exactly, else (two nodes, a split fleet) the union
  of every node's case ids; a node is flagged for the reference's cases it did not run
  (``missing``) and for cases it ran beyond them (``extra``), with counts and examples;
- its settings differ from the majority's: sweep, ``--arch``, the options that select
  cases (``-k``, ``-m``, ``--deselect``, ...), the known-issues file (sha256);
- a case it ran is in another state than most of the nodes that ran it;
- a version differs from the majority's;
- its GPUs differ: it ran its cases on another number of GPUs than most nodes
  (``settings``: ``gpus``), or its own GPUs ran different numbers of cases (``uneven
  GPUs``: each GPU of a run runs every case).

Each node lists its GPUs (ordinal, UUID, PCI bus id) with the states of the cases each
ran; a node whose verdict is FAIL names the GPUs that failed.

A folder that holds no readable report (a node that crashed before writing one, a run
stopped by a setup error) is a node with the verdict NO REPORT, named by its folder, with
what the folder holds (``unreadable_node``): flagged and not passing, the other nodes
merged as ever.

A node **does not pass** when its verdict is not PASS (``node_verdict``: the verdict the
run recorded when it is not PASS, e.g. a kind this tool does not know such as GPU LOST,
else ``model.run_verdict``; a pytest exit status other than 0 is never PASS).
Output: Markdown, standalone HTML and JSON (schema ``tmac-fleet/1``). Exit status: 1
when a node is flagged or does not pass (a folder without a readable report included),
or fewer nodes came than ``--expect-nodes``, 0 otherwise (one node: 0 when it passes), 2
on a path that does not exist, the same folder or run id given twice (``duplicates``),
or output that cannot be written. The ``--out``
folder and folders holding only a merge's output are never read as runs
(``run_inputs``).
"""
from __future__ import annotations

import json
from pathlib import Path
from collections import Counter, defaultdict

from .fingerprint import gpu_lines, props_of
from .model import (FAILED, HARNESS, NOBUILD, STATES, Run, gpu_counts, gpu_label, once_per_node, run_gpus, run_verdict,
                    skipped_apart)
from .render import Cell, Document, Section, Table, to_html, to_markdown

SCHEMA = "tmac-fleet/1"
VERSION_KEYS = [
    ("driver", "tmac.driver.kernel_module_version"),
    ("CUDA driver", "tmac.driver.cuda_driver_version"),
    ("NVRTC", "tmac.nvrtc.version"),
    ("CCCL", "tmac.cccl.version"),
    ("runtime", "tmac.cuda_runtime.version"),
]
SHORT = {"passed": "P", "failed": "F", "known-issue": "K", "skipped": "S", "could-not-build": "B",
         "harness-error": "H"}
EXAMPLES = 10          # example case ids per node in fleet.json (missing, extra)
HELD = 10              # entries named of a folder without a readable report
NO_REPORT = "NO REPORT"
# The pytest options that change which cases run (compared between nodes); the others
# (-n, --report-dir, --junitxml, --prom-file, -q, ...) are per node or change nothing.
SELECT_OPTS = {"-k": True, "-m": True, "--deselect": True, "--ignore": True, "--ignore-glob": True,
               "--maxfail": True, "--require-gpus": True, "-x": False, "--exitfirst": False,
               "--lf": False, "--last-failed": False, "--ff": False, "--failed-first": False,
               "--sw": False, "--stepwise": False}
SETTING_LABELS = ("sweep", "arch", "options", "known issues", "gpus")


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


def duplicates(paths: list[str], runs: list[Run] | None = None) -> str | None:
    """One line when the same folder (resolved path) or, once read, the same run id is
    given twice: a node counted twice is no fleet (exit status 2); else None."""
    seen: dict[Path, str] = {}
    for p in paths:
        rp = Path(p).resolve()
        key = rp.parent if rp.is_file() and rp.name == "results.json" else rp
        if key in seen:
            return f"the same run folder given twice: {seen[key]} and {p} (resolve to {key})"
        seen[key] = p
    if runs is not None:
        ids: dict[str, str] = {}
        for p, r in zip(paths, runs):
            rid = run_id_of(r)
            if rid and rid in ids:
                return f"the same run given twice: {ids[rid]} and {p} have run id {rid}"
            if rid:
                ids[rid] = p
    return None


def run_id_of(r: Run) -> str | None:
    rid = r.meta.get("run_id") or (r.env.get("run_id") if isinstance(r.env, dict) else None) \
        or r.env_props.get("tmac.run_id")
    return str(rid) if rid not in (None, "", "None") else None


def selection_options(args: list[str]) -> str:
    """The options of a pytest command line that change which cases run (``SELECT_OPTS``),
    in a stable order; '' when none."""
    out, i = [], 0
    while i < len(args):
        a = str(args[i])
        name, eq, value = a.partition("=")
        if name in SELECT_OPTS and name.startswith("--"):
            if SELECT_OPTS[name] and not eq and i + 1 < len(args):
                value, i = str(args[i + 1]), i + 1
            out.append(f"{name}={value}" if SELECT_OPTS[name] else name)
        elif a[:2] in SELECT_OPTS and not a.startswith("--"):
            short = a[:2]
            if SELECT_OPTS[short]:
                value = a[2:]
                if not value and i + 1 < len(args):
                    value, i = str(args[i + 1]), i + 1
                out.append(f"{short} {value}")
            else:
                out.append(short)
        i += 1
    return " ".join(sorted(out))


def settings_of(r: Run, props: dict) -> dict[str, str]:
    """What a node was asked to run: sweep, --arch, the selecting options, known issues."""
    cmd = r.env.get("command") if isinstance(r.env, dict) else None
    if isinstance(cmd, dict) and isinstance(cmd.get("invocation_args"), list):
        opts = selection_options(cmd["invocation_args"])
    elif "tmac.command" in props:
        opts = selection_options(props["tmac.command"].split())
    else:
        opts = "?"
    arch = props.get("tmac.arch_option", "-")
    ran = run_gpus(r)
    return {"sweep": props.get("tmac.sweep", "-"), "arch": "-" if arch in ("None", "") else arch,
            "options": opts or "-", "known issues": props.get("tmac.known_issues.sha256", "-")[:12],
            "gpus": str(len(ran)) if ran else "-"}


def gpus_of(r: Run) -> list[dict]:
    """The GPUs a node ran its cases on, each with the states of its cases there, and how
    many of them ran there alone (``once``: a trap case runs once per node, on one of its
    GPUs)."""
    counts, once = gpu_counts(r), once_per_node(r)
    return [{"gpu": gpu_label(g), "ordinal": g["ordinal"], "uuid": g.get("uuid"),
             "counts": {s: n for s, n in counts.get(int(g["ordinal"]), {}).items() if n},
             "cases": sum(counts.get(int(g["ordinal"]), {}).values()),
             "once": once.get(int(g["ordinal"]), 0)} for g in run_gpus(r)]


def uneven(gpus: list[dict], apart: dict | None = None) -> str:
    """"" when every GPU of a node ran as many cases (those it ran alone, the trap cases
    dealt over the node's GPUs, aside), and none skipped a case another ran (``apart``:
    model.skipped_apart), else which did what."""
    parts = []
    if len({g["cases"] - g.get("once", 0) for g in gpus}) > 1:
        parts.append(", ".join(f"GPU {g['ordinal']} ran {g['cases']}" for g in gpus))
    if apart:
        parts.append(", ".join(f"GPU {k} skipped {n} another ran" for k, n in sorted(apart.items())))
    return "; ".join(parts)


def node_verdict(r: Run) -> dict:
    """The node's verdict: ``run_verdict``'s, unless the run recorded another that is not
    PASS (a kind this tool may not know, e.g. GPU LOST), or pytest exited non-zero while
    the cases read PASS. Only PASS passes; any other status, known or not, does not."""
    v = run_verdict(r)
    status, text = v.status, v.text
    recorded = r.meta.get("verdict") or r.env_props.get("tmac.verdict")
    if isinstance(recorded, str) and recorded.strip():
        rs = recorded.split(":", 1)[0].strip()
        if rs != "PASS" and rs != status:
            status, text = rs, recorded.strip()
    code = r.meta.get("exitstatus")
    if status == "PASS" and isinstance(code, int) and code != 0:
        status, text = f"EXIT {code}", f"pytest exit status {code} although the cases read PASS ({text})"
    return {"status": status, "text": text, "passed": status == "PASS"}


def _majority(vals: list) -> object:
    v, n = Counter(vals).most_common(1)[0]
    return v if n * 2 > len(vals) else None


def unreadable_node(path: str, why: str, name: str) -> dict:
    """The fleet's node for a folder (or file) without a readable report: verdict NO
    REPORT, flagged, not passing; ``no_report`` says why and what the folder holds."""
    p = Path(path)
    try:
        held = sorted(x.name for x in p.iterdir()) if p.is_dir() else [p.name]
    except OSError as e:
        held = [f"(not listed: {e.strerror or e})"]
    holds = (", ".join(held[:HELD]) + (f" and {len(held) - HELD} more" if len(held) > HELD else "")) \
        if held else "nothing"
    text = f"no readable report ({why}); the folder holds: {holds}"
    return {"node": name, "source": str(path), "run_id": None, "no_report": text,
            "versions": {}, "settings": {}, "verdict": {"status": NO_REPORT, "text": text},
            "counts": {}, "cases": 0, "duration_s": None, "suites": {},
            "missing_cases": 0, "missing_examples": [], "extra_cases": 0, "extra_examples": [],
            "differs_from_majority": [], "versions_differ": {}, "settings_differ": {},
            "gpus": [], "uneven_gpus": "", "flagged": True, "failing": True}


def merge_runs(runs: list[Run], expect_nodes: int | None = None,
               unreadable: list[tuple[str, str]] = ()) -> dict:
    """The fleet of ``runs``, and a NO REPORT node for each (path, why) of ``unreadable``."""
    m = _merge_read(runs, expect_nodes) if runs else {
        "schema": SCHEMA, "nodes": [], "suites": [], "version_majority": {},
        "settings_majority": {k: None for k in SETTING_LABELS},
        "case_reference": {"basis": "none", "cases": 0}, "expect_nodes": expect_nodes,
        "cases_with_majority": 0, "cases_total": 0}
    taken = {n["node"] for n in m["nodes"]}
    for path, why in unreadable:
        name = Path(path).name or str(path)
        if name in taken:
            name = f"{name} ({path})"
        taken.add(name)
        m["nodes"].append(unreadable_node(path, why, name))
    return m


def _merge_read(runs: list[Run], expect_nodes: int | None = None) -> dict:
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
    # coverage: the reference case set (the one most nodes ran exactly, else the union)
    idsets = [frozenset(r.cases) for r in runs]
    common, n_common = Counter(idsets).most_common(1)[0]
    if n_nodes == 1 or n_common * 2 > n_nodes:
        reference, basis = common, "majority" if n_nodes > 1 else "single node"
    else:
        reference, basis = frozenset().union(*idsets), "union"
    # majority state per case, over the nodes that ran it
    states: dict[str, Counter] = defaultdict(Counter)
    for r in runs:
        for cid, c in r.cases.items():
            states[cid][c.state] += 1
    majority = {}
    for cid, cnt in states.items():
        st, k = cnt.most_common(1)[0]
        if k * 2 > sum(cnt.values()):
            majority[cid] = st
    props = [props_of(r) for r in runs]
    versions = {}
    for label, key in VERSION_KEYS + [("GPU", "gpu")]:
        versions[label] = [_gpu_summary(p) if key == "gpu" else p.get(key, "-") for p in props]
    version_majority = {label: _majority(vals) for label, vals in versions.items()}
    settings = [settings_of(r, p) for r, p in zip(runs, props)]
    settings_majority = {k: _majority([s[k] for s in settings]) for k in SETTING_LABELS}
    suites = sorted({c.suite for r in runs for c in r.cases.values()})
    nodes = []
    for i, r in enumerate(runs):
        per_suite: dict[str, Counter] = defaultdict(Counter)
        for c in r.cases.values():
            per_suite[c.suite][c.state] += 1
        differs = [{"id": cid, "node": c.state, "majority": majority[cid]}
                   for cid, c in sorted(r.cases.items()) if cid in majority and c.state != majority[cid]]
        missing = sorted(reference - idsets[i])
        extra = sorted(idsets[i] - reference)
        many = n_nodes > 1
        vdiff = {label: versions[label][i] for label in versions
                 if many and versions[label][i] != version_majority[label]}
        sdiff = {k: settings[i][k] for k in SETTING_LABELS if many and settings[i][k] != settings_majority[k]}
        v = node_verdict(r)
        gpus = gpus_of(r)
        odd_gpus = uneven(gpus, skipped_apart(r))
        nodes.append({
            "node": names[i], "source": r.source, "run_id": run_id_of(r),
            "versions": {label: versions[label][i] for label in versions},
            "settings": settings[i],
            "verdict": {"status": v["status"], "text": v["text"]},
            "counts": r.counts(),
            "cases": len(r.cases),
            "duration_s": r.meta.get("duration_s"),
            "suites": {s: dict(per_suite[s]) for s in suites},
            "missing_cases": len(missing), "missing_examples": missing[:EXAMPLES],
            "extra_cases": len(extra), "extra_examples": extra[:EXAMPLES],
            "differs_from_majority": differs,
            "versions_differ": vdiff,
            "settings_differ": sdiff,
            "gpus": gpus,
            "uneven_gpus": odd_gpus,
            "flagged": bool(many and (differs or vdiff or sdiff or missing or extra)) or bool(odd_gpus),
            "failing": not v["passed"],
        })
    return {"schema": SCHEMA, "nodes": nodes, "suites": suites, "version_majority": version_majority,
            "settings_majority": settings_majority,
            "case_reference": {"basis": basis, "cases": len(reference)},
            "expect_nodes": expect_nodes,
            "cases_with_majority": len(majority), "cases_total": len(states)}


def too_few(m: dict) -> bool:
    return bool(m.get("expect_nodes")) and len(m["nodes"]) < m["expect_nodes"]


def exit_status(m: dict) -> int:
    return 1 if too_few(m) or any(n["flagged"] or n["failing"] for n in m["nodes"]) else 0


def _suite_cell(c: dict) -> Cell:
    text = " ".join(f"{c.get(s, 0)}{SHORT[s]}" for s in STATES if c.get(s, 0)) or "-"
    cls = "st-could-not-build" if c.get(NOBUILD) else "st-failed" if c.get(FAILED) else \
        "st-harness-error" if c.get(HARNESS) else "st-passed" if c.get("passed") else "st-skipped" if c else ""
    return Cell(text, cls)


def _why_flagged(n: dict) -> list[tuple[str, str]]:
    """(category, text) for each way a node differs from the fleet."""
    if n.get("no_report"):
        return [("no report", "no readable report")]
    parts = []
    if n["missing_cases"]:
        parts.append(("missing cases", f"{n['missing_cases']} case(s) missing"))
    if n["extra_cases"]:
        parts.append(("extra cases", f"{n['extra_cases']} extra case(s)"))
    if n["settings_differ"]:
        parts.append(("other settings", "settings: " + ", ".join(n["settings_differ"])))
    if n["differs_from_majority"]:
        parts.append(("case states", f"{len(n['differs_from_majority'])} case state(s)"))
    if n["versions_differ"]:
        parts.append(("versions", "versions: " + ", ".join(n["versions_differ"])))
    if n.get("uneven_gpus"):
        parts.append(("uneven GPUs", f"its GPUs ran different numbers of cases ({n['uneven_gpus']})"))
    return parts


def verdict(m: dict) -> tuple[str, str]:
    """The fleet's verdict line and its css class."""
    nodes = m["nodes"]
    failing = [n for n in nodes if n["failing"]]
    statuses = ", ".join(f"{k} {s}" for s, k in Counter(n["verdict"]["status"] for n in failing).items())
    few = ""
    if m.get("expect_nodes"):
        if too_few(m):
            few = f"{len(nodes)} of {m['expect_nodes']} expected nodes came; "
        elif len(nodes) > m["expect_nodes"]:
            few = f"{len(nodes)} nodes, more than the {m['expect_nodes']} expected; "
    if len(nodes) == 1:
        text = few + "1 node only: nothing to compare it with"
        if failing:
            return f"{text}; it does not pass ({statuses})", "bad"
        return text, "bad" if too_few(m) else "warn"
    flagged = [n for n in nodes if n["flagged"]]
    if flagged or failing or too_few(m):
        why = Counter(cat for n in flagged for cat, _ in _why_flagged(n))
        detail = f" ({', '.join(f'{k} {w}' for w, k in why.items())})" if why else ""
        return (f"{few}{len(nodes)} nodes: {len(flagged)} differ from the fleet{detail}, "
                f"{len(failing)} do not pass" + (f" ({statuses})" if failing else ""), "bad")
    return f"{few}{len(nodes)} nodes, all alike and passing", "ok"


def _counts_text(c: dict) -> str:
    return " ".join(f"{c.get(s, 0)}{SHORT[s]}" for s in STATES if c.get(s, 0)) or "0"


def _duration(v) -> str:
    return f"{v:.0f} s" if isinstance(v, (int, float)) else "-"


def to_doc(m: dict) -> Document:
    flagged = [n for n in m["nodes"] if n["flagged"]]
    failing = [n for n in m["nodes"] if n["failing"]]
    ref = m.get("case_reference") or {}
    doc = Document("TMA conformance: fleet view", f"{len(m['nodes'])} runs · {m['cases_total']} case ids · "
                   f"reference case set: {ref.get('cases', '-')} ids ({ref.get('basis', '-')}) · "
                   "cells: P passed, F failed, K known issue, S skipped, B could not build", verdict(m))
    read = [n for n in m["nodes"] if not n.get("no_report")]
    vlabels = list(m["version_majority"])
    slabels = [k for k in SETTING_LABELS
               if k == "sweep" or len({n["settings"][k] for n in read}) > 1]
    headers = (["node", "verdict", "cases", "duration"] + vlabels + slabels + m["suites"]
               + ["differs from the fleet"])
    rows = []
    for n in m["nodes"]:
        row = [Cell(n["node"], "mono"), Cell(n["verdict"]["status"], "flag" if n["failing"] else "st-passed"),
               Cell(_counts_text(n["counts"]), "flag" if n["missing_cases"] or n["extra_cases"] else ""),
               _duration(n.get("duration_s"))]
        for label in vlabels:
            v = str(n["versions"].get(label, "-"))
            row.append(Cell(_short(v), "flag" if label in n["versions_differ"] else ""))
        for k in slabels:
            row.append(Cell(_short(n["settings"].get(k, "-")), "flag" if k in n["settings_differ"] else ""))
        row += [_suite_cell(n["suites"].get(s, {})) for s in m["suites"]]
        parts = [text for _, text in _why_flagged(n)]
        row.append(Cell("; ".join(parts) or "no", "flag" if parts else ""))
        rows.append(row)
    doc.sections.append(Section("Nodes x suites", tables=[Table(headers, rows)]))
    if failing:
        doc.sections.append(Section(f"Nodes that do not pass: {len(failing)}", level=3, tables=[
            Table(["node", "verdict"], [[Cell(n["node"], "mono"), n["verdict"]["text"]] for n in failing])]))
    gpu_rows = [[Cell(n["node"], "mono"), Cell(g["gpu"], "mono"), g["cases"],
                 Cell(_counts_text(g["counts"]), "flag" if any(g["counts"].get(s) for s in (FAILED, NOBUILD, HARNESS))
                      or n.get("uneven_gpus") else "")]
                for n in m["nodes"] for g in n.get("gpus") or []]
    if gpu_rows:
        doc.sections.append(Section("GPUs", level=3, tables=[Table(["node", "GPU", "cases", "states"], gpu_rows)],
                                    paragraphs=["Each GPU of a node ran every case of its run: the states of "
                                                "the cases on each GPU."]))
    for n in flagged:
        if n["missing_cases"] or n["extra_cases"] or n["settings_differ"]:
            sec = Section(f"{n['node']}: coverage and settings", level=3)
            if n["missing_cases"]:
                sec.paragraphs.append(
                    f"{n['missing_cases']} of the reference set's {ref.get('cases')} case ids "
                    f"({ref.get('basis')}) not run here, e.g. " + ", ".join(f"`{x}`" for x in n["missing_examples"][:5]))
            if n["extra_cases"]:
                sec.paragraphs.append(
                    f"{n['extra_cases']} case ids run here beyond the reference set, e.g. "
                    + ", ".join(f"`{x}`" for x in n["extra_examples"][:5]))
            for k, v in n["settings_differ"].items():
                sec.paragraphs.append(f"{k}: {v} (the majority: {m['settings_majority'][k] or 'none'})")
            doc.sections.append(sec)
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
