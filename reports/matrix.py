"""The conformance matrix of one run: ``matrix.md`` and ``matrix.html``.

Per suite and per parameter axis (reports.axes): passed / failed / known issue /
skipped / could not build; the failures with their rule; the known issues with
their evidence; every skip reason with its count; the environment.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from . import axes
from .fingerprint import props_of, summary_rows
from .model import (BAD, FAILED, KNOWN, NOBUILD, SKIPPED, STATES, Run, Verdict, gpu_counts, gpu_label,
                    run_gpus, run_verdict)
from .render import (STATE_HEADERS, Cell, Document, Section, Table, link_cell, state_counts_row,
                     to_html, to_markdown)

MAX_ROWS = 300
_DASHES = ("-",) * len(axes.AXES)      # an axis the id names no value for


def _first_line(s: str, n: int = 400) -> str:
    s = (s or "").strip()
    line = s.splitlines()[0] if s else ""
    return line if len(line) <= n else line[: n - 1] + "…"


def _bad_gpus(c) -> str:
    """The GPUs a failed case failed on ("2, 3"; "-" for one that ran on none)."""
    if not c.gpus:
        return "-"
    return ", ".join(k for k, s in sorted(c.gpus.items(), key=lambda kv: int(kv[0])) if s in BAD) or "-"


def verdict(run: Run, known: Verdict | None = None) -> tuple[str, str]:
    v = known if known is not None else run_verdict(run)
    return v.text, v.css


def document(run: Run, known: Verdict | None = None) -> Document:
    """The matrix of ``run``; ``known``: its verdict where the caller has it already
    (the controller: ``run_verdict`` reads every case)."""
    props = props_of(run)
    host = run.node
    rid = run.meta.get("run_id") or props.get("tmac.run_id") or ""
    sub = [f"run {rid}" if rid else "", f"source {run.source}"]
    if "exitstatus" in run.meta:
        sub.append(f"pytest exit status {run.meta['exitstatus']}")
    if run.meta.get("duration_s") is not None:
        sub.append(f"{run.meta['duration_s']:.1f} s")
    doc = Document(f"TMA conformance matrix: {host}", " · ".join(s for s in sub if s), verdict(run, known))

    total = run.counts()
    summary = Section("Summary", tables=[Table(STATE_HEADERS, [state_counts_row(total)])])
    again = sum(1 for c in run.cases.values() if c.ran_again)
    if again:
        summary.paragraphs.append(
            f"{again} case(s) judged on a second run: their batch or call faulted first, beside a call "
            f"that may trap or with no case at fault alone, as when a trap's recovery kills another "
            f"process's context (an Xid 109 in the kernel log); each case's 'ran_again' in results.json "
            f"says why.")
    doc.sections.append(summary)
    gpu_sec = _gpu_section(run)
    if gpu_sec is not None:
        doc.sections.append(gpu_sec)

    # per suite
    per_suite: dict[str, Counter] = defaultdict(Counter)
    for c in run.cases.values():
        per_suite[c.suite][c.state] += 1
    rows = [[Cell(s, "mono")] + state_counts_row(per_suite[s]) for s in sorted(per_suite)]
    doc.sections.append(Section("Per suite", tables=[Table(["suite"] + STATE_HEADERS, rows)]))

    # per axis
    # each case's values of every axis and its state counted once, then spread over the
    # axes (far fewer combinations than cases)
    combos = Counter((tuple(map(axes.parse(c.id).get, axes.AXES, _DASHES)), c.state)
                     for c in run.cases.values())
    per_axis: dict[str, dict[str, Counter]] = {a: defaultdict(Counter) for a in axes.AXES}
    for (values, state), n in combos.items():
        for a, v in zip(axes.AXES, values):
            per_axis[a][v][state] += n
    axis_sec = Section("Per parameter axis", paragraphs=[
        "Values parsed from the case ids (reports/README.md lists the spellings); \"-\" counts the cases "
        "whose id names no value for that axis. A load suite's case (tiled, im2col, multicast) whose id "
        "names no mode takes its file's (tile, im2col), and one that names no device-built or device-copied "
        "map loads through the host map (map host). Mask: all = every CTA of the cluster, one = a single "
        "CTA, sparse = any other subset."])
    for a in axes.AXES:
        values = per_axis[a]
        if set(values) <= {"-"}:
            continue
        rows = [[Cell(v, "mono")] + state_counts_row(values[v])
                for v in sorted(values, key=lambda v: axes.sort_key(a, v))]
        axis_sec.tables.append(Table([a] + STATE_HEADERS, rows))
    if not axis_sec.tables:
        axis_sec.paragraphs.append("No case id in this run names a data type, swizzle, interleave, fill, "
                                   "rank, scope, L2, load mode, cluster size, multicast mask or map "
                                   "value, and no case is of a load suite.")
    doc.sections.append(axis_sec)

    # failures
    bad = [c for c in run.cases.values() if c.state in BAD]
    sec = Section(f"Failures ({len(bad)})")
    if bad:
        rows = [[Cell(c.id, "mono"), Cell(c.state, f"st-{c.state}"), Cell(c.rule or "-", "mono"),
                 _bad_gpus(c), c.phase or "call", _first_line(c.message)] for c in bad[:MAX_ROWS]]
        note = f"… and {len(bad) - MAX_ROWS} more (results.json lists all)" if len(bad) > MAX_ROWS else ""
        sec.tables.append(Table(["case", "state", "rule", "GPUs", "phase", "message"], rows, note))
        by_rule = Counter(c.rule or "(no rule named)" for c in bad)
        sec.tables.append(Table(["rule", "failures"], [[Cell(r, "mono"), n] for r, n in by_rule.most_common()]))
    else:
        sec.paragraphs.append("None.")
    doc.sections.append(sec)

    # known issues
    doc.sections.append(_known_section(run))

    # skips by reason
    skipped = [c for c in run.cases.values() if c.state == SKIPPED]
    sec = Section(f"Skipped, by reason ({len(skipped)})")
    if skipped:
        reasons = Counter((c.skip_kind or "other", _first_line(c.message, 300)) for c in skipped)
        sec.tables.append(Table(["kind", "reason", "cases"],
                                [[k, r, n] for (k, r), n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))]))
    else:
        sec.paragraphs.append("None.")
    doc.sections.append(sec)

    env_rows = [[k, Cell(v, "mono")] for k, v in summary_rows(props)]
    doc.sections.append(Section("Environment", tables=[Table(["", "value"], env_rows)]))
    return doc


def _gpu_section(run: Run) -> Section | None:
    """Per GPU of the run: the states of the cases it ran (a case of a run on several GPUs
    ran on each of them), and the cases that ran on none (host-side, or stopped before)."""
    ran = run_gpus(run)
    if not ran:
        return None
    counts = gpu_counts(run)
    rows = []
    for g in ran:
        c = counts.get(int(g["ordinal"]), {})
        rows.append([Cell(gpu_label(g), "mono"), g.get("name", "-")] + state_counts_row(c))
        if any(c.get(s) for s in BAD):
            rows[-1][0] = Cell(gpu_label(g), "flag")
    off = {s: 0 for s in STATES}
    for case in run.cases.values():
        if not case.gpus:
            off[case.state] += 1
    rows.append([Cell("on no GPU", "mono"), "host-side cases, cases stopped before their GPUs"]
                + state_counts_row(off))
    sec = Section("Per GPU", tables=[Table(["GPU", "name"] + STATE_HEADERS, rows)])
    if len(ran) > 1:
        sec.paragraphs.append(f"Each case ran on each of the run's {len(ran)} GPUs; its state in the "
                              "other tables is the worst of its GPUs', and results.json gives each "
                              "GPU's (a case's gpus).")
    return sec


def _known_section(run: Run) -> Section:
    cases = [c for c in run.cases.values() if c.state == KNOWN or c.known_issue]
    entries = (run.meta.get("known_issues") or {}).get("entries")
    sec = Section(f"Known issues ({sum(1 for c in cases if c.state == KNOWN)} cases)")
    if entries is None:  # from JUnit: rebuild the list from the cases' messages
        by_id: dict[str, dict] = {}
        for c in cases:
            ki = c.known_issue or {"id": "(xfail in the suite)", "reason": c.message, "evidence": ""}
            e = by_id.setdefault(ki["id"], dict(ki, cases={}))
            e["cases"][c.state] = e["cases"].get(c.state, 0) + 1
        entries = list(by_id.values())
    if not entries:
        sec.paragraphs.append("None listed." if not cases else "")
        return sec
    rows = []
    for e in entries:
        counts = e.get("cases") or {}
        shown = ", ".join(f"{n} {s}" for s, n in counts.items()) or e.get("not_applied", "-")
        if e.get("not_applied") and counts:
            shown += f" ({e['not_applied']})"
        cls = "flag" if any(s in (FAILED, NOBUILD) for s in counts) else ""
        rows.append([Cell(e.get("id", "?"), "mono"), e.get("mode", "xfail"), e.get("reason", ""),
                     link_cell(e.get("evidence", "") or "-"), Cell(e.get("pattern", "-"), "mono"), Cell(shown, cls)])
    sec.tables.append(Table(["id", "mode", "reason", "evidence", "pattern", "cases here"], rows))
    sec.paragraphs.append("A known issue whose case now passes shows as failed (strict xfail): the entry "
                          "no longer matches the stack and must be narrowed or removed. A case that fails "
                          "otherwise than its entry's signature (rule, match) describes shows as failed too: "
                          "an entry absorbs only the failure it describes.")
    return sec


def render(run: Run, known: Verdict | None = None) -> tuple[str, str]:
    doc = document(run, known)
    return to_markdown(doc), to_html(doc)


def write(run: Run, outdir: str | Path, known: Verdict | None = None) -> tuple[Path, Path]:
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    md, html = render(run, known)
    p_md, p_html = outdir / "matrix.md", outdir / "matrix.html"
    p_md.write_text(md, encoding="utf-8")
    p_html.write_text(html, encoding="utf-8")
    return p_md, p_html
