"""Time to verdict: where a conformance run's time goes.

    python -m reports bench [--sweeps smoke,standard,full] [--caches cold,warm]
                            [--workers 8,12,16] [--scale-sweep standard]
                            [--peer FILE [--peer-workers 8]] [--out DIR] [SUITE ...]

Runs the suite in child pytest processes and measures: the wall time of each sweep
under ``-n auto``, from empty kernel, case and bytecode caches (cold) and again with them filled
(warm), with where each run's wall went (``reports.timeline``: start-up, suites, the
tail, the controller, unattributed; a picture of the workers over time,
``timeline-SWEEP-CACHE.html``); NVRTC compile time of every kernel, cold and warm;
worker scaling; one GPU against all GPUs when there are several; and, with ``--peer``,
another project's pytest file run with ``-n --peer-workers`` in the same call, per case
against the largest sweep. Prints a table, writes ``bench.json`` and ``bench.md`` into
the output folder.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from . import model, timeline

ROOT = Path(__file__).resolve().parent.parent
CASE_CACHE_ENV = "TMA_CASE_CACHE"     # fixtures/cuda_layer/paths.py: the generated case lists
PYCACHE_ENV = "TMA_PYCACHE"           # and the bytecode cache (where Python's own is off)
SCHEMA = 2


def _caches(folder) -> dict:
    """The environment of runs whose case and bytecode caches live in ``folder``."""
    return {CASE_CACHE_ENV: str(Path(folder) / "cases"), PYCACHE_ENV: str(Path(folder) / "pycache")}


def _pytest(args: list[str], env: dict | None = None, timeout: float = 560, cwd=ROOT,
            ours: bool = True, picture: Path | None = None, keep: Path | None = None) -> dict:
    """One pytest run in a child process: wall time, exit code, JUnit counts per suite,
    and (``ours``: a run of this suite) where its wall went, from its results.json;
    ``picture``: write the workers over time there."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        report = ["--report-dir", str(Path(tmp) / "report")] if ours else []
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *report, *args]
        t0, spawn = time.perf_counter(), time.time()
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                                  env={**os.environ, **(env or {})})
            out, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, code = f"{e.stdout or ''}{e.stderr or ''}\nbench: timed out after {timeout:g} s", None
        wall, ended = time.perf_counter() - t0, time.time()
        suites = _junit_suites(junit) if junit.exists() else {}
        analysis = None
        results = Path(tmp) / "report" / "results.json"
        if ours and results.exists():
            written = [p.stat().st_mtime for p in (results, junit, results.with_name("matrix.html"))
                       if p.exists()]
            try:
                run = model.read_results_json(results)
                analysis = timeline.analyze(run, outside={"spawn": spawn, "exit": ended, "written": written})
                if picture is not None:
                    timeline.write(run, analysis, html_path=picture)
                if keep is not None:
                    shutil.copyfile(results, keep)
            except model.ReportInputError as e:
                analysis = {"error": str(e)}
    lines = [ln for ln in out.strip().splitlines() if " in " in ln and ("passed" in ln or "failed" in ln)]
    return {"args": args, "wall_s": round(wall, 2), "exit": code,
            "summary": lines[-1] if lines else (out.strip().splitlines() or [""])[-1],
            "suites": suites, "cases": sum(s["cases"] for s in suites.values()),
            "timeline": analysis, "output_tail": out[-4000:]}


def _junit_suites(path: Path) -> dict:
    """Per suite file: cases, outcomes, and the summed test time JUnit records."""
    out: dict = defaultdict(lambda: {"cases": 0, "passed": 0, "failed": 0, "skipped": 0,
                                     "time_s": 0.0})
    for case in ET.parse(path).getroot().iter("testcase"):
        suite = (case.get("classname") or "?").split(".")
        name = next((p for p in suite if p.startswith("test_")), suite[-1])
        s = out[name]
        s["cases"] += 1
        s["time_s"] += float(case.get("time") or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            s["failed"] += 1
        elif case.find("skipped") is not None:
            s["skipped"] += 1
        else:
            s["passed"] += 1
    return {k: {**v, "time_s": round(v["time_s"], 2)} for k, v in sorted(out.items())}


def compile_times(arch: str | None) -> list[dict]:
    """Every kernel's NVRTC build, into an empty cache (cold) and again (warm)."""
    sys.path.insert(0, str(ROOT))
    from fixtures.cuda_layer import build, cuda_env, placement as gpu  # lazy: reports/ imports nothing of fixtures at import time
    if arch is None:
        state = cuda_env.probe()
        arch = gpu.arch_for(gpu.first_device(state).cc) if state.available else "sm_90a"
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for src in sorted(p.name for p in build.KERNEL_DIR.glob("*.cu")):
            if src == "replace_sm90a_only.cu":
                continue
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                try:
                    build.compile_kernel(src, arch=arch, cache_dir=cache)
                except build.BuildError as exc:
                    times.append(f"error: {exc.result}")
                    break
                times.append(round(time.perf_counter() - t0, 3))
            rows.append({"kernel": src, "arch": arch, "cold_s": times[0],
                         "warm_s": times[1] if len(times) > 1 else None})
    return rows


def gpu_count() -> int:
    sys.path.insert(0, str(ROOT))
    from fixtures.cuda_layer import cuda_env  # lazy: reports/ imports nothing of fixtures at import time
    state = cuda_env.probe()
    return len(state.tma_devices) if state.available else 0


def startup_costs(samples: int = 3) -> list[dict]:
    """``python -m reports.startup`` a few times: imports, cuInit, context, isolated child."""
    rows = []
    for _ in range(samples):
        p = subprocess.run([sys.executable, "-m", "reports.startup"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        try:
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            rows.append({"error": (p.stderr or p.stdout)[-500:]})
    return rows


def collection_time(sweep: str, extra) -> float:
    """Wall time of collecting the whole sweep in one process (what each worker repeats)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                    f"--sweep={sweep}", *extra], cwd=ROOT, capture_output=True, timeout=300)
    return round(time.perf_counter() - t0, 2)


def _where(r: dict) -> str:
    """One line: where a run's wall went."""
    a = r.get("timeline") or {}
    if not a or "error" in a:
        return f"    (no timeline: {a.get('error', 'no results.json')})" if a else ""
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in a["wall"].items())
    stalls = a.get("stalls") or []
    held = (f"; {len(stalls)} stall(s) of every worker, {sum(x['seconds'] for x in stalls):.1f} s"
            if stalls else "")
    return (f"    {parts}; unattributed {a['unattributed_s']:.1f} s ({a['unattributed_pct']}%); "
            f"tail {a['tail']['seconds']:.1f} s{held}")


def run(sweeps, caches, workers, scale_sweep, extra, arch, out: Path, peer=None, peer_workers=8,
        keep: bool = False, parts: bool = True) -> dict:
    result: dict = {"schema": SCHEMA, "gpus": gpu_count(), "cpus": os.cpu_count(),
                    "compile": compile_times(arch) if parts else [], "sweeps": [], "scaling": [],
                    "gpu_split": [], "peer": None}
    result["startup"] = startup_costs() if result["gpus"] and parts else []
    result["collection_s"] = {s: collection_time(s, extra) for s in sweeps} if parts else {}
    for sweep in sweeps:                       # -n auto: empty caches, then filled
        with tempfile.TemporaryDirectory() as cache:
            env = _caches(cache)
            for kind in caches:
                r = _pytest(["-n", "auto", f"--sweep={sweep}", f"--kernel-cache={Path(cache) / 'kernels'}",
                             *extra], env=env, picture=out / f"timeline-{sweep}-{kind}.html",
                            keep=out / f"results-{sweep}-{kind}.json" if keep else None)
                result["sweeps"].append({"sweep": sweep, "cache": kind, **r})
                print(f"sweep {sweep:8s} {kind}: {r['wall_s']:7.1f} s  {r['cases']:6d} cases  {r['summary']}",
                      flush=True)
                print(_where(r), flush=True)
    with tempfile.TemporaryDirectory() as cache:   # warm the caches once, then scale workers
        env = _caches(cache)
        kc = f"--kernel-cache={Path(cache) / 'kernels'}"
        if workers:
            _pytest(["-n", "auto", f"--sweep={scale_sweep}", kc, *extra], env=env)
        for n in workers:
            r = _pytest(["-n", str(n), f"--sweep={scale_sweep}", kc, *extra], env=env,
                        picture=out / f"timeline-{scale_sweep}-workers{n}.html")
            result["scaling"].append({"workers": n, "sweep": scale_sweep, "cache": "warm", **r})
            print(f"workers {n!s:>4} ({scale_sweep}, warm): {r['wall_s']:7.1f} s  {r['summary']}", flush=True)
            print(_where(r), flush=True)
        if result["gpus"] >= 2 and workers:
            for visible in ("0", ",".join(str(i) for i in range(result["gpus"]))):
                r = _pytest(["-n", "auto", f"--sweep={scale_sweep}", kc, *extra],
                            env={**env, "CUDA_VISIBLE_DEVICES": visible})
                result["gpu_split"].append({"visible": visible, "sweep": scale_sweep, **r})
    if peer:
        p = Path(peer).resolve()
        r = _pytest(["-n", str(peer_workers), str(p)], cwd=p.parent if p.is_file() else p, ours=False)
        result["peer"] = {"path": str(p), "workers": peer_workers, **r}
        print(f"peer {p.name} (-n {peer_workers}): {r['wall_s']:7.1f} s  {r['cases']} cases  {r['summary']}",
              flush=True)
    return result


def per_case_ratio(result: dict) -> dict | None:
    """The peer's wall per case against the largest sweep's (cold, else any)."""
    peer = result.get("peer")
    runs = [r for r in result["sweeps"] if r["cases"]]
    if not peer or not peer.get("cases") or not runs:
        return None
    ours = max(runs, key=lambda r: (r["cases"], r["cache"] == "cold"))
    a, b = ours["wall_s"] / ours["cases"], peer["wall_s"] / peer["cases"]
    return {"ours": f"{ours['sweep']} {ours['cache']}", "ours_ms_per_case": round(1000 * a, 3),
            "peer_ms_per_case": round(1000 * b, 3), "times_faster": round(b / a, 1)}


def table(result: dict) -> str:
    lines = [f"GPUs: {result['gpus']}  CPUs: {result['cpus']}", "",
             "| sweep | cache | workers | cases | wall s | cases/s | unattributed | tail s | summary |",
             "|---|---|---|---|---|---|---|---|---|"]

    def row(r, cache, workers):
        rate = r["cases"] / r["wall_s"] if r["wall_s"] else 0
        a = r.get("timeline") or {}
        un = f"{a['unattributed_pct']}%" if "unattributed_pct" in a else "-"
        tail = a["tail"]["seconds"] if "tail" in a else "-"
        return (f"| {r['sweep']} | {cache} | {workers} | {r['cases']} | {r['wall_s']} | {rate:.0f} | {un} | "
                f"{tail} | {r['summary']} |")
    for r in result["sweeps"]:
        lines.append(row(r, r["cache"], "auto"))
    for r in result["scaling"]:
        lines.append(row(r, "warm", r["workers"]))
    for r in result["gpu_split"]:
        lines.append(row({**r, "sweep": f"{r.get('sweep', '')} on GPUs {r['visible']}"}, "warm", "auto"))
    ratio = per_case_ratio(result)
    if result.get("peer"):
        p = result["peer"]
        lines += ["", f"peer: {p['path']} with -n {p['workers']}: {p['cases']} cases in {p['wall_s']} s "
                      f"({p['summary']})"]
        if ratio:
            lines.append(f"per case: {ratio['ours']} {ratio['ours_ms_per_case']} ms, the peer "
                         f"{ratio['peer_ms_per_case']} ms: {ratio['times_faster']}x")
    for r in result["sweeps"]:
        a = r.get("timeline") or {}
        if "wall" in a:
            lines += ["", f"### {r['sweep']} ({r['cache']})", "", "```", timeline.text(a), "```"]
    lines += ["", "| sweep | collection in one process s |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result.get("collection_s", {}).items()]
    if result.get("startup"):
        keys = [k for k in result["startup"][0] if k != "error"]
        lines += ["", "| start-up (per worker) | " + " | ".join(keys) + " |",
                  "|---|" + "---|" * len(keys)]
        for i, row in enumerate(result["startup"]):
            lines.append(f"| sample {i + 1} | " + " | ".join(str(row.get(k)) for k in keys) + " |")
    lines += ["", "| suite (largest sweep) | cases | summed test time s |", "|---|---|---|"]
    if result["sweeps"]:
        for name, s in result["sweeps"][-1]["suites"].items():
            lines.append(f"| {name} | {s['cases']} | {s['time_s']} |")
    lines += ["", "| kernel | arch | NVRTC cold s | warm (cache hit) s |", "|---|---|---|---|"]
    for c in result["compile"]:
        lines.append(f"| {c['kernel']} | {c['arch']} | {c['cold_s']} | {c['warm_s']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m reports bench") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--sweeps", default="smoke,standard,full")
    p.add_argument("--caches", default="cold,warm",
                   help="each sweep from empty kernel, case and bytecode caches (cold), then again (warm)")
    p.add_argument("--workers", default="8,12,16", help="worker counts to time ('' for none)")
    p.add_argument("--scale-sweep", default="standard", help="the sweep the worker counts run")
    p.add_argument("--peer", default=None, metavar="FILE",
                   help="another project's pytest file (or folder) to time in the same call")
    p.add_argument("--peer-workers", type=int, default=8)
    p.add_argument("--no-parts", action="store_true",
                   help="time the runs only, not each kernel's compile, the start-up and the collection")
    p.add_argument("--keep-results", action="store_true",
                   help="copy each sweep run's results.json into the output folder")
    p.add_argument("--out", default=str(ROOT / "reports" / "out" / "bench"))
    p.add_argument("--arch", default=None)
    p.add_argument("suites", nargs="*", help="suite paths (default: all, per tox.ini)")
    a = p.parse_args(argv)
    sweeps = [s for s in a.sweeps.split(",") if s]
    bad = [s for s in sweeps + [a.scale_sweep] if s not in ("smoke", "standard", "full")]
    if bad:
        p.error(f"unknown sweep(s): {', '.join(bad)}")
    caches = [c for c in a.caches.split(",") if c]
    if not caches or any(c not in ("cold", "warm") for c in caches) or caches[0] != "cold":
        p.error(f"--caches: cold, or cold,warm: {a.caches}")
    if a.peer and not Path(a.peer).exists():
        p.error(f"--peer: no such file or folder: {a.peer}")
    if a.peer_workers < 1:
        p.error(f"--peer-workers: 1 or more: {a.peer_workers}")
    workers = [w for w in a.workers.split(",") if w]
    if any(w != "auto" and not w.isdigit() for w in workers):
        p.error(f"--workers takes numbers or 'auto': {a.workers}")
    from fixtures.cuda_layer.paths import writable_folder  # lazy: reports/ imports nothing of fixtures at import time
    try:
        out = writable_folder(a.out)          # before the minutes of runs, not after
    except ValueError as e:
        print(f"{prog}: cannot write into --out: {e}", file=sys.stderr)
        return 2
    result = run(sweeps, caches, workers, a.scale_sweep, a.suites, a.arch, out, a.peer, a.peer_workers,
                 a.keep_results, not a.no_parts)
    text = table(result)
    try:
        (out / "bench.json").write_text(json.dumps(result, indent=2))
        (out / "bench.md").write_text(text + "\n")
    except OSError as e:
        print(text)
        print(f"{prog}: cannot write into {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
