"""Where a run's wall time went, from the timeline its ``results.json`` records
(fixtures/plugins/reporting/timeline.py):

    python -m reports timeline RESULTS [--html FILE] [--json FILE] [--wall SECONDS]

The wall is cut into what happened one after the other: the controller's start-up
(interpreter, imports, plugins), the workers' start-up (until the first case starts),
the cases (first start to last end), and the end (from the last case to the reports).
The cases' span is then split by what each worker did: cases per suite, pytest's report
hooks inside a case, the time between two cases (reports sent, the next case awaited),
the time before its first case and after its last one (the tail). ``--wall`` is the
wall time measured outside the run (``python -m reports bench`` gives it): what the
timeline does not cover of it is *unattributed*. ``--html`` draws the workers over time.
"""
from __future__ import annotations

import html
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from statistics import median

from .model import ReportInputError, Run

LONG_CASE_S = 0.5          # a case this long is listed and drawn on its own
TARGETS_SHOWN = 8     # the targets the GPU service's children spent most in, shown
WAIT_GAP_S = 0.05          # a gap between two cases this long: the worker waited for work
STALL_CASE_S = 3.0         # a stall: every worker inside a case this long ...
STALL_S = 2.0              # ... for this long at once (on an H100 a trap whose recovery
#                            timed out, Xid 109, held every process 5.1-5.4 s:
#                            docs/performance.md, 2026-12-07, fourth session)


def _span(cases) -> tuple[float, float]:
    return min(c.start for c in cases), max(c.end for c in cases)


# the step under "collection": its main thread's CPU time (the rest it waited: for the
# GIL, which a thread importing a library holds, or for the disk)
COLLECTION_CPU = "  of it, the main thread on a CPU"
# and when the worker's CuPy import (by the thread that opened its GPU ahead) began, counted
# from the collection's end (negative: during the collection, which it slows), and how long
CUPY_BEGAN = "  CuPy's import began, from its end"
CUPY_TOOK = "  CuPy's import took"


def _epoch(text) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


def stalls(by_worker: dict, traps, t0) -> list[dict]:
    """The moments every worker (two or more) was inside a case of ``STALL_CASE_S`` or more
    at once, for ``STALL_S`` or more: the run held up as a whole (on a GPU, a trap whose
    recovery timed out holds every process up), with the trap cases whose call
    (results.json 'traps', epoch times against the timeline's ``t0``) overlaps it. Strict:
    a worker that was between cases, past its last one, or whose long case ended inside
    the stall (its next one short) hides or shortens it."""
    if len(by_worker) < 2:
        return []
    common = None
    for cs in by_worker.values():
        long_ = sorted((c.start, c.end) for c in cs if c.end - c.start >= STALL_CASE_S)
        if common is None:
            common = long_
            continue
        common = [(max(a, c), min(b, d)) for a, b in common for c, d in long_ if max(a, c) < min(b, d)]
        if not common:
            return []
    windows = []
    for t in traps or []:
        start, stop = (_epoch(t.get("start")), _epoch(t.get("stop"))) if isinstance(t, dict) else (None, None)
        if start is not None and stop is not None and isinstance(t0, (int, float)):
            windows.append((start - t0, stop - t0, t.get("id")))
    out = []
    for a, b in sorted(common or []):
        if b - a >= STALL_S:
            out.append({"at": round(a, 3), "seconds": round(b - a, 3), "workers": len(by_worker),
                        "traps": [i for s, e, i in windows if s < b and e > a]})
    return out


def analyze(run: Run, wall: float | None = None, outside: dict | None = None) -> dict:
    """The breakdown of one run (seconds). ReportInputError when it has no timeline.

    ``wall``: the run's wall time measured outside it. ``outside`` (what ``python -m
    reports bench`` measures, epoch seconds): ``spawn`` and ``exit`` of the pytest process
    and the ``written`` times of its report files; the controller's start-up is then
    measured from the spawn, and the reports' writing and the exit are parts of the wall."""
    tl = run.meta.get("timeline") or {}
    cases = [c for c in run.cases.values() if c.start is not None and c.end is not None]
    if not tl or not cases:
        raise ReportInputError(f"{run.source}: no timeline (results.json of a run before the "
                               f"timeline was recorded, or a run without cases)")
    ctl = tl.get("controller") or {}
    before = -ctl["process_start"] if ctl.get("process_start") is not None else 0.0
    written = ctl.get("results_write") or max(c.end for c in cases)
    first, last = _span(cases)
    by_worker: dict[str, list] = defaultdict(list)
    for c in cases:
        by_worker[c.worker or "main"].append(c)
    n = len(by_worker)
    body = last - first

    # the cases' span, per worker
    suites: dict[str, dict] = defaultdict(lambda: {"cases": 0, "setup": 0.0, "call": 0.0, "teardown": 0.0,
                                                   "longest": 0.0, "longest_id": ""})
    hooks = between = waited = stagger = tail = 0.0
    per_worker = {}
    for wid, cs in sorted(by_worker.items()):
        cs.sort(key=lambda c: c.start)
        w_first, w_last = cs[0].start, max(c.end for c in cs)
        stagger += w_first - first
        tail += last - w_last
        busy = w_hooks = w_between = 0.0
        prev_end = None
        for c in cs:
            s = suites[c.suite]
            s["cases"] += 1
            phases = 0.0
            for p in ("setup", "call", "teardown"):
                v = getattr(c, f"{p}_s") or 0.0
                s[p] += v
                phases += v
            if c.end - c.start > s["longest"]:
                s["longest"], s["longest_id"] = c.end - c.start, c.id
            busy += phases
            w_hooks += max(0.0, (c.end - c.start) - phases)
            if prev_end is not None:
                gap = max(0.0, c.start - prev_end)
                w_between += gap
                if gap >= WAIT_GAP_S:
                    waited += gap
            prev_end = max(prev_end or c.end, c.end)
        hooks += w_hooks
        between += w_between
        per_worker[wid] = {"cases": len(cs), "first": round(w_first, 3), "last": round(w_last, 3),
                           "in_cases": round(busy, 3), "between": round(w_between, 3)}
    in_cases = sum(s["setup"] + s["call"] + s["teardown"] for s in suites.values())
    covered = in_cases + hooks + between + stagger + tail
    # what overlaps (a worker's cases should not) or is missing shows as the difference
    body_unexplained = n * body - covered

    # the workers' start-up, the median over the workers of each step
    # each worker's times, with the session's start (0) and its first case's start
    times = {wid: {**w, "t0": 0.0, "first": per_worker.get(wid, {}).get("first")}
             for wid, w in (tl.get("workers") or {}).items() if isinstance(w, dict)}
    steps = {}
    for name, a, b in (("process start", "t0", "process_start"),
                       ("interpreter, imports, plugins", "process_start", "configured"),
                       ("collection", "collection_start", "collected"),
                       (CUPY_BEGAN, "collected", "cupy_import_start"),
                       (CUPY_TOOK, "cupy_import_start", "cupy_imported"),
                       ("waiting for every worker's collection", "collection_sent", "first")):
        vals = [t[b] - t[a] for t in times.values()
                if isinstance(t.get(a), (int, float)) and isinstance(t.get(b), (int, float))]
        if vals:
            steps[name] = round(median(vals), 3)
        if name == "collection":
            cpu = [t["collection_cpu_s"] for t in times.values()
                   if isinstance(t.get("collection_cpu_s"), (int, float))]
            if cpu:
                steps[COLLECTION_CPU] = round(median(cpu), 3)
    first_setups = sorted(cs[0].setup_s or 0.0 for cs in by_worker.values())
    if first_setups:
        steps["first case's setup (session fixtures)"] = round(median(first_setups), 3)

    wall_parts = {"controller start-up": before, "workers' start-up": first, "cases": body,
                  "end (last case to the reports)": max(0.0, written - last)}
    t0 = tl.get("t0")
    if outside and t0 is not None and outside.get("spawn") and outside.get("exit"):
        wall_parts["controller start-up"] = max(0.0, t0 - outside["spawn"])
        files = max([t - t0 for t in outside.get("written") or [] if t] or [written])
        wall_parts["the report files written"] = max(0.0, files - written)
        wall_parts["process exit"] = max(0.0, outside["exit"] - t0 - max(files, written))
        wall = outside["exit"] - outside["spawn"]
    internal = sum(wall_parts.values())
    total = wall if wall is not None else internal
    unattributed = max(0.0, total - internal) + max(0.0, body_unexplained) / max(n, 1)
    long_cases = sorted((c for c in cases if c.end - c.start >= LONG_CASE_S), key=lambda c: -(c.end - c.start))
    trap_ids = {t.get("id") for t in run.meta.get("traps") or [] if isinstance(t, dict)}
    trapped = [c for c in cases if c.id in trap_ids]
    tail_from = min(w["last"] for w in per_worker.values())
    return {
        "source": run.source,
        "wall_s": round(total, 3),
        "workers": n,
        "cases": len(cases),
        "wall": {k: round(v, 3) for k, v in wall_parts.items()},
        "unattributed_s": round(unattributed, 3),
        "unattributed_pct": round(100 * unattributed / total, 1) if total else 0.0,
        "startup_steps": steps,
        "worker_seconds": {
            "in cases": round(in_cases, 3),
            "report hooks inside a case": round(hooks, 3),
            "between cases": round(between, 3),
            "  of which gaps >= 50 ms (waiting for work)": round(waited, 3),
            "before the worker's first case": round(stagger, 3),
            "after the worker's last case (tail)": round(tail, 3),
        },
        "tail": {"first_worker_done": round(tail_from, 3), "last_case_end": round(last, 3),
                 "seconds": round(last - tail_from, 3),
                 "cases_in_it": [c.id for c in long_cases if c.end > tail_from][:10]},
        "controller": {"cpu_s": ctl.get("cpu_s"),
                       "busy_pct": round(100 * ctl["cpu_s"] / written, 1) if ctl.get("cpu_s") and written else None},
        "suites": {k: {"cases": v["cases"], "seconds": round(v["setup"] + v["call"] + v["teardown"], 3),
                       "setup": round(v["setup"], 3), "call": round(v["call"], 3),
                       "teardown": round(v["teardown"], 3),
                       "ms_per_case": round(1000 * (v["setup"] + v["call"] + v["teardown"]) / v["cases"], 3),
                       "longest_s": round(v["longest"], 3), "longest": v["longest_id"]}
                   for k, v in sorted(suites.items(), key=lambda kv: -(kv[1]["setup"] + kv[1]["call"] + kv[1]["teardown"]))},
        "trap_cases": {"count": len(trapped), "seconds": round(sum(c.end - c.start for c in trapped), 3)},
        "long_cases": {"count": len(long_cases), "seconds": round(sum(c.end - c.start for c in long_cases), 3),
                       "top": [{"id": c.id, "s": round(c.end - c.start, 3), "worker": c.worker,
                                "start": c.start} for c in long_cases[:15]]},
        "per_worker": per_worker,
        "precompile": tl.get("precompile") or [],
        "lane": tl.get("lane") or None,
        "contexts": tl.get("contexts") or None,
        "gpu_service_given_up": tl.get("gpu_service_given_up") or None,
        "stalls": stalls(by_worker, run.meta.get("traps"), tl.get("t0")),
    }


def contexts_lines(cx: dict | None) -> list[str]:
    """The contexts held on each GPU while the run ran (results.json timeline.contexts)."""
    if not cx:
        return []
    if cx.get("unmeasured"):
        return ["", f"contexts per GPU: not measured ({cx['unmeasured']})"]
    out = ["", f"contexts per GPU ({cx.get('source')}, sampled every {cx.get('interval_s')} s):"]
    for k, g in sorted((cx.get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        out.append(f"  GPU {k}: at most {g['max']} at {g['at']:.2f} s, median {g['median']:g} "
                   f"({g['samples']} samples)")
    if cx.get("stopped"):
        out.append(f"  sampling stopped early: {cx['stopped']}")
    return out


def stall_lines(found: list | None) -> list[str]:
    """The moments the whole run was held up (``stalls``), and the trap cases in flight."""
    if not found:
        return []
    out = ["", f"stalls: {len(found)} time(s) every worker was inside a case of {STALL_CASE_S:g} s or "
               f"more at once, for {STALL_S:g} s or more (on H100s, a trap whose recovery timed out "
               f"held up every process on its GPU for about 5 s, leaving an Xid 109 in the kernel "
               f"log: docs/running.md)"]
    for st in found:
        out.append(f"  at {st['at']:.2f} s for {st['seconds']:.2f} s; trap cases in flight: "
                   + (", ".join(st["traps"]) if st["traps"] else "none"))
    return out


def text(a: dict) -> str:
    """The breakdown as a short report."""
    w = a["wall_s"] or 1.0
    lines = [f"{a['source']}: {a['cases']} cases on {a['workers']} worker(s), wall {a['wall_s']:.2f} s", "",
             "where the wall went:"]
    for k, v in a["wall"].items():
        lines.append(f"  {k:38s} {v:8.2f} s  {100 * v / w:5.1f}%")
    lines.append(f"  {'unattributed':38s} {a['unattributed_s']:8.2f} s  {a['unattributed_pct']:5.1f}%")
    if a["startup_steps"]:
        lines += ["", "workers' start-up (median over the workers):"]
        lines += [f"  {k:46s} {v:7.2f} s" for k, v in a["startup_steps"].items()]
    body = a["wall"]["cases"] * a["workers"] or 1.0
    lines += ["", f"the cases' span, {a['wall']['cases']:.2f} s x {a['workers']} workers (worker-seconds):"]
    for k, v in a["worker_seconds"].items():
        lines.append(f"  {k:46s} {v:8.2f}  {100 * v / body:5.1f}%")
    t = a["tail"]
    lines.append(f"  tail: the first worker ran out of work at {t['first_worker_done']:.2f} s, the last case "
                 f"ended at {t['last_case_end']:.2f} s ({t['seconds']:.2f} s)")
    c = a["controller"]
    if c.get("cpu_s") is not None:
        lines.append(f"  controller: {c['cpu_s']:.2f} s of CPU, {c['busy_pct']}% of the session")
    lines += ["", "| suite | cases | worker-s | setup | call | teardown | ms/case | longest s |",
              "|---|---|---|---|---|---|---|---|"]
    for k, s in a["suites"].items():
        lines.append(f"| {k} | {s['cases']} | {s['seconds']:.2f} | {s['setup']:.2f} | {s['call']:.2f} | "
                     f"{s['teardown']:.2f} | {s['ms_per_case']:.2f} | {s['longest_s']:.2f} |")
    tc = a.get("trap_cases") or {}
    if tc.get("count"):
        why = ("most of them took their outcome from the trap lane, below" if a.get("lane") else
               "the GPU recovers from one trap at a time, more slowly the more contexts are open")
        lines += ["", f"cases that trap the GPU (results.json 'traps'): {tc['count']}, {tc['seconds']:.2f} "
                      f"worker-s, {tc['seconds'] / tc['count']:.2f} s each ({why})"]
    ln = a.get("lane")
    if ln:
        begin = ln.get("jobs_at") if ln.get("jobs_at") is not None else ln.get("start")
        span = (f"from {begin:.2f} s to {ln['end']:.2f} s ({ln['end'] - begin:.2f} s)"
                if begin is not None and ln.get("end") is not None else "")
        if ln.get("jobs_at") is not None and ln.get("start") is not None:
            span += f", the lane started at {ln['start']:.2f} s"
        if ln.get("children_at") is not None and ln.get("service"):
            span += (f", its library runtimes imported by {ln['libraries_at']:.2f} s and its children "
                     f"for the batches open at {ln['children_at']:.2f} s"
                     if ln.get("libraries_at") is not None else
                     f", its children for the batches open at {ln['children_at']:.2f} s")
        kinds = ", ".join(f"{k} {v}" for k, v in sorted((ln.get("outcomes") or {}).items()))
        lines += ["", f"trap lane: {ln.get('ran', 0)} of {ln.get('jobs', 0)} jobs run ahead {span}, "
                      f"{ln.get('children')} children in turn, {ln.get('child_starts')} started; "
                      f"outcomes: {kinds or 'none'}"
                      + (f"; {ln['calls_s']:.2f} s in calls, {ln['waited_s']:.2f} s waiting for a child"
                         if ln.get("calls_s") is not None and ln.get("waited_s") is not None else "")
                      + (f"; {ln.get('not_built')} left to their cases (kernels did not build)"
                         if ln.get("not_built") else "")
                      + (f"; stopped early: {ln['stopped']}" if ln.get("stopped") else "")]
        if ln.get("end") is not None and t.get("last_case_end") is not None:
            ahead = t["last_case_end"] - ln["end"]
            lines.append(f"  the lane ended {abs(ahead):.2f} s {'before' if ahead >= 0 else 'after'} "
                         f"the workers' last case")
        sv = ln.get("service")
        if sv:
            calls = ", ".join(f"{k} {v}" for k, v in sorted((sv.get("calls") or {}).items()))
            lines.append(f"  GPU service (--gpu-service on): calls {calls or 'none'}; {sv.get('children')} "
                         f"children, {sv.get('child_starts')} started, at most {sv.get('peak_busy')} busy; "
                         f"{sv.get('queued_s', 0):.2f} s waiting for a child; {sv.get('connections')} "
                         f"connections, {sv.get('refused', 0)} requests refused"
                         + (f"; {sv['made_again']} call(s) made again (faulted beside a call that may trap)"
                            if sv.get("made_again") else "")
                         + ("; one call that runs alone at a time (--traps-one-at-a-time)"
                            if sv.get("one_trap_at_a_time") else "")
                         + (f"; {sv['answered_once']} answered with another's call (asked once)"
                            if sv.get("answered_once") else ""))
        if sv and sv.get("busy_s"):
            busy = ", ".join(f"{k} {v:.2f}" for k, v in sorted(sv["busy_s"].items()))
            lines.append(f"  the service's children in calls (s): {busy}; the most:")
            lines += [f"    {s_:8.2f} s  {n:6d} calls  {t}"
                      for t, (n, s_) in list((sv.get("targets") or {}).items())[:TARGETS_SHOWN]]
        fk = ln.get("forks")
        if fk:
            lines.append(f"  the workers' children (--child-start fork): {fk.get('forked', 0)} forked by the "
                         f"lane, {fk.get('refused', 0)} requests refused")
    for wid, given in sorted((a.get("gpu_service_given_up") or {}).items()):
        lines.append(f"  {wid} gave the GPU service up: " + "; ".join(
            f"{name} on GPU {gpu}: {why}" for name, gpu, why in given)
            + " (its calls ran in its own children after)")
    lines += contexts_lines(a.get("contexts"))
    lines += stall_lines(a.get("stalls"))
    lc = a["long_cases"]
    lines += ["", f"cases of {LONG_CASE_S} s or more: {lc['count']}, {lc['seconds']:.2f} worker-s"]
    lines += [f"  {x['s']:6.2f} s  {x['worker']}  at {x['start']:.2f} s  {x['id']}" for x in lc["top"]]
    return "\n".join(lines)


# ---------------------------------------------------------------- the picture

_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c"]
_GAP, _STARTUP, _LANE = "#dddddd", "#999999", "#444444"


def svg(run: Run, a: dict, width: int = 1200) -> str:
    """The workers over time: a row per worker, a column per pixel coloured by the suite
    it spent most of that pixel's time in (grey: start-up; light grey: between cases);
    cases of LONG_CASE_S or more outlined, with their id as a tooltip; the trap lane's
    span on a row of its own."""
    tl = run.meta.get("timeline") or {}
    cases = [c for c in run.cases.values() if c.start is not None and c.end is not None]
    end = max(a["wall"]["end (last case to the reports)"] + max(c.end for c in cases), 1e-3)
    scale = width / end
    suites = list(a["suites"])
    color = {s: _PALETTE[i % len(_PALETTE)] for i, s in enumerate(suites)}
    by_worker: dict[str, list] = defaultdict(list)
    for c in cases:
        by_worker[c.worker or "main"].append(c)
    row_h, top, left = 18, 24, 60
    ln = a.get("lane") or {}
    rows = len(by_worker) + (1 if ln.get("start") is not None and ln.get("end") is not None else 0)
    height = top + row_h * rows + 40 + 16 * ((len(suites) + 5) // 6)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left + 10}" height="{height}" '
           f'font-family="sans-serif" font-size="11">']
    for t in range(0, int(end) + 1, max(1, int(end / 12))):
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + row_h * rows}" '
                   f'stroke="#eee"/><text x="{x:.1f}" y="{top - 8}" text-anchor="middle">{t}s</text>')
    workers = tl.get("workers") or {}
    for r, (wid, cs) in enumerate(sorted(by_worker.items())):
        y = top + r * row_h
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{html.escape(wid)}</text>')
        first = min(c.start for c in cs)
        out.append(f'<rect x="{left}" y="{y + 2}" width="{first * scale:.1f}" height="{row_h - 4}" '
                   f'fill="{_STARTUP}"><title>{html.escape(wid)}: start-up until {first:.2f} s'
                   f'{_startup_title(workers.get(wid))}</title></rect>')
        cols: dict[int, dict] = defaultdict(lambda: defaultdict(float))
        last = max(c.end for c in cs)
        for c in cs:
            lo, hi = c.start * scale, c.end * scale
            p = int(lo)
            while p < hi:
                cols[p][c.suite] += min(hi, p + 1) - max(lo, p)
                p += 1
        runs = []
        for p in range(int(first * scale), int(last * scale) + 1):
            col = cols.get(p)
            fill = color[max(col, key=col.get)] if col and sum(col.values()) >= 0.5 else _GAP
            if runs and runs[-1][2] == fill and runs[-1][1] == p:
                runs[-1][1] = p + 1
            else:
                runs.append([p, p + 1, fill])
        for lo, hi, fill in runs:
            out.append(f'<rect x="{left + lo}" y="{y + 2}" width="{hi - lo}" height="{row_h - 4}" fill="{fill}"/>')
        for c in cs:
            if c.end - c.start >= LONG_CASE_S:
                out.append(f'<rect x="{left + c.start * scale:.1f}" y="{y + 1}" width="{(c.end - c.start) * scale:.1f}" '
                           f'height="{row_h - 2}" fill="none" stroke="#000" stroke-width="0.8">'
                           f'<title>{html.escape(c.id)}: {c.end - c.start:.2f} s from {c.start:.2f} s</title></rect>')
    if rows > len(by_worker):
        y = top + len(by_worker) * row_h
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">lane</text>'
                   f'<rect x="{left + ln["start"] * scale:.1f}" y="{y + 2}" '
                   f'width="{max(1.0, (ln["end"] - ln["start"]) * scale):.1f}" height="{row_h - 4}" '
                   f'fill="{_LANE}"><title>trap lane: {ln.get("ran", 0)} jobs from {ln["start"]:.2f} s '
                   f'to {ln["end"]:.2f} s</title></rect>')
    y = top + row_h * rows + 20
    legend = [(s, color[s]) for s in suites] + [("start-up", _STARTUP), ("between cases", _GAP)]
    for i, (name, fill) in enumerate(legend):
        x, yy = left + (i % 6) * 190, y + 16 * (i // 6)
        out.append(f'<rect x="{x}" y="{yy - 9}" width="10" height="10" fill="{fill}"/>'
                   f'<text x="{x + 14}" y="{yy}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _startup_title(w: dict | None) -> str:
    if not w:
        return ""
    parts = [f"{k} {v:.2f} s" for k, v in sorted(w.items(), key=lambda kv: kv[1])
             if isinstance(v, (int, float)) and not k.endswith("_s")]     # moments, not durations
    return " (" + ", ".join(parts) + ")"


def page(run: Run, a: dict) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'><title>timeline</title></head><body>"
            f"<h3>{html.escape(a['source'])}</h3>{svg(run, a)}<pre>{html.escape(text(a))}</pre></body></html>\n")


def write(run: Run, a: dict, html_path=None, json_path=None) -> None:
    if html_path:
        Path(html_path).write_text(page(run, a), encoding="utf-8")
    if json_path:
        Path(json_path).write_text(json.dumps(a, indent=1), encoding="utf-8")
